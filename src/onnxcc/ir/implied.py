"""Lower bounds the module's constraints imply, for proofs that the symbols' ranges alone
cannot make.

A conv records `floor(L/5) - 1 >= 1` (its input holds at least one window); the dispatcher
checks it before anything runs, so every later computation may assume L >= 10, and with
it that `floor(L/10) - 1`, a length the exporter computed from L, is never negative. The
symbol table keeps the ranges the user and the inputs gave (the dispatcher's range guard,
whose message must stay the constraint's); `implied_table` is a copy with each symbol's
lower bound raised by the constraints over that symbol alone whose left side is monotone in
it, found by bisection. Only lower bounds: a bucketed version computes on a padded value,
which is at least the true one, so a raised lower bound holds there too; an upper bound
would not.

Soundness rests on the constraint staying in the module: the rule that recorded it proves
with the plain table (never this one), so it records it again on every re-inference.
"""

from __future__ import annotations

import functools
from typing import Any, cast

import sympy

from .dims import INT_MAX, Dim, Prover, SymbolTable


def _combine(signs: list[int | None]) -> int | None:
    if any(s is None for s in signs):
        return None
    nz = {s for s in signs if s}
    if len(nz) > 1:
        return None
    return nz.pop() if nz else 0


def _monotone(e: Any, s: sympy.Symbol) -> int | None:
    """+1: e never decreases as s grows (all else fixed); -1: never increases; 0: does not
    depend on s; None: cannot tell (or another symbol appears)."""
    if e.is_Number:
        return 0
    if e.is_Symbol:
        return 1 if e == s else None
    if e.is_Add or isinstance(e, (sympy.Max, sympy.Min)):
        return _combine([_monotone(a, s) for a in e.args])
    if e.is_Mul:
        coeff, rest = e.as_coeff_Mul()
        if not coeff.is_Number or rest.is_Mul:  # a product of two terms in s: not handled
            return None
        m = _monotone(rest, s)
        return None if m is None else m * (1 if coeff > 0 else -1 if coeff < 0 else 0)
    if isinstance(e, (sympy.floor, sympy.ceiling)):
        return _monotone(e.args[0], s)
    return None


def _gap(expr: Any) -> tuple[Any, bool] | None:
    """A relation as (g, strict): it holds iff g >= 0 (g > 0 when strict)."""
    if not isinstance(expr, (sympy.GreaterThan, sympy.StrictGreaterThan, sympy.LessThan, sympy.StrictLessThan)):
        return None
    lhs, rhs = cast(Any, expr.lhs), cast(Any, expr.rhs)
    greater = isinstance(expr, (sympy.GreaterThan, sympy.StrictGreaterThan))
    strict = isinstance(expr, (sympy.StrictGreaterThan, sympy.StrictLessThan))
    return (lhs - rhs if greater else rhs - lhs), strict


@functools.lru_cache(maxsize=1024)
def implied_lo(expr: Any, name: str, lo: int, hi: int) -> int:
    """The least value in [lo, hi] of symbol `name` for which constraint `expr` (over that
    symbol alone) can hold, when its gap is non-decreasing in it; else `lo` unchanged."""
    gap = _gap(expr)
    free = getattr(expr, "free_symbols", set())
    if gap is None or len(free) != 1:
        return lo
    s = next(iter(free))
    g, strict = gap
    if s.name != name or _monotone(g, s) != 1:
        return lo

    def holds(v: int) -> bool:
        x = g.xreplace({s: v})
        return bool(x > 0) if strict else bool(x >= 0)

    if holds(lo) or not holds(hi):  # nothing to raise, or it never holds (reported elsewhere)
        return lo
    a, b = lo, hi  # holds(a) is False, holds(b) is True
    while b - a > 1:
        m = (a + b) // 2
        if holds(m):
            b = m
        else:
            a = m
    return b


def implied_table(table: SymbolTable, constraints) -> SymbolTable:
    """A copy of `table` whose lower bounds are raised by the single-symbol constraints
    (`constraints`: the module's, objects with `.expr`); `table` itself when none raises one."""
    out = None
    for c in constraints:
        free = getattr(c.expr, "free_symbols", set())
        if len(free) != 1:
            continue
        name = next(iter(free)).name
        info = (out or table).infos.get(name)
        if info is None:
            continue
        new = implied_lo(c.expr, name, info.lo, info.hi if info.hi < INT_MAX else INT_MAX)
        if new > info.lo:
            out = out or table.copy()
            out.infos[name].lo = new
    return out or table


def prove_le_implied(table: SymbolTable, a: Dim, b: Dim, constraints) -> bool | None:
    """`Prover.prove_le` over the ranges the constraints imply: for value and shape rules
    that may assume the model's checked constraints; never for deciding whether to record one."""
    p = table.prove_le(a, b)
    if p is not None or not constraints:
        return p
    narrowed = implied_table(table, constraints)
    return None if narrowed is table else Prover(narrowed).prove_le(a, b)


__all__ = ["implied_lo", "implied_table", "prove_le_implied"]
