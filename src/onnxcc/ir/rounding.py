"""`floor(x)` / `ceiling(x)` of a symbolic dim: what sympy's own constructors give, faster.

sympy's floor and ceiling first try to prove that their argument lies in (0, 1], (1, 2], ...
(`_eval_const_number`: the argument over a common denominator, then `is_le` of numerator
and denominator through the assumptions system), which on a memory plan's sizes, sums of
products of nested floors, takes tens of milliseconds per call and never succeeds: a size
at one point of the symbols' ranges is far above 2. Here that step answers "no" when one
point where every symbol is a positive integer (as every dim symbol is declared) puts the
argument's magnitude above 2, which no such proof can then hold; everything else is sympy's
own evaluation (integer terms pulled out, numbers folded), so the result is the same
expression.

    ceiling_of(x)  == sympy.ceiling(x)      floor_of(x) == sympy.floor(x)
"""

from __future__ import annotations

from typing import Any

import sympy

from .exact_value import NoValue, exact_value

_POINTS = (7, 1000)
"""values every symbol takes (one point each) where the argument's magnitude is looked at"""


def ceiling_of(x: Any) -> Any:
    """`sympy.ceiling(x)`, without its bound proofs where a point refutes them."""
    return _rounded(sympy.ceiling, _QuickCeiling, sympy.sympify(x))


def floor_of(x: Any) -> Any:
    """`sympy.floor(x)`, without its bound proofs where a point refutes them."""
    return _rounded(sympy.floor, _QuickFloor, sympy.sympify(x))


def _rounded(func: Any, quick: Any, x: Any) -> Any:
    if x.is_Number or not (x.is_Add or x.is_Mul) or not _far_from_zero(x):
        return func(x)
    out = quick.eval(x)  # sympy's evaluation, with the refuted proofs skipped
    if out is None:
        return func(x, evaluate=False)
    # the evaluation builds what it leaves unevaluated with its own class: the real one
    # instead (the sums around it re-sorted by its name, as sympy's own build sorts them)
    return out.xreplace({q: func(q.args[0], evaluate=False) for q in out.atoms(quick)})


class _QuickCeiling(sympy.ceiling):
    @classmethod
    def _eval_const_number(cls, arg):
        return None  # only asked after `_far_from_zero(arg)`


class _QuickFloor(sympy.floor):
    @classmethod
    def _eval_const_number(cls, arg):
        return None  # only asked after `_far_from_zero(arg)`


def _far_from_zero(x: Any) -> bool:
    """|x| > 2 at a point where every symbol is a positive integer: then sympy cannot prove
    x is 0 or in (-2, 2] (symbols declared otherwise answer False: no point is known valid)."""
    if not all(s.is_integer and s.is_positive for s in x.free_symbols):
        return False
    for v in _POINTS:
        try:
            val = exact_value(x, {s.name: v for s in x.free_symbols}, {})
        except (NoValue, ZeroDivisionError):
            return False
        if abs(val) > 2:
            return True
    return False


