"""A dim's expanded polynomial as {monomial: coefficient}, multiplied out on dicts.

`dims._expanded` holds each floor / ceiling / Max / Min as an atom and expands the
polynomial around them. sympy's `expand` does that by rebuilding every product and sum
(each `Mul` / `Add` flattened and sorted at every step): a detection net's memory plan
(ppocr_det_v4: offsets that are sums of twenty products of two nested-floor extents) spent
25 CPU seconds there. Here sums and products are dicts keyed by monomials (frozensets of
(atom, exponent)), and sympy builds each term once at the end; the result is the same
canonical sum `expand` gives.

    poly_terms(e) -> {monomial: coefficient} | None    (None: a node this does not multiply out)
"""

from __future__ import annotations

from typing import Any

import sympy

Monomial = frozenset  # of (atom, exponent) pairs; the empty one is the constant term

ATOMS = (sympy.Symbol, sympy.floor, sympy.ceiling, sympy.Max, sympy.Min)
"""what a monomial is a product of (the caller has expanded the floors' arguments)"""

MAX_TERMS = 4096
"""a product of more terms than this is left to sympy (None)"""


class _Unhandled(Exception):
    pass


def poly_terms(e: Any) -> dict[Monomial, Any] | None:
    """`e` multiplied out: {monomial: sympy Rational}, zero coefficients dropped; None when
    `e` holds a node other than numbers, `ATOMS`, sums, products and powers by positive
    integers (of a sum) or by nonzero integers (of an atom)."""
    try:
        return _terms(e, {})
    except _Unhandled:
        return None


def build(terms: dict[Monomial, Any]) -> Any:
    """The sympy sum of `terms` (what `sympy.expand` prints for the same polynomial)."""
    return sympy.Add(*(c * monomial(m) for m, c in terms.items()))


def monomial(m: Monomial) -> Any:
    """A monomial as a sympy product (1 for the empty one)."""
    return sympy.Mul(*(a if k == 1 else sympy.Pow(a, k) for a, k in m))


def _terms(e: Any, memo: dict) -> dict[Monomial, Any]:
    hit = memo.get(e)
    if hit is not None:
        return hit
    out: dict[Monomial, Any]
    if e.is_Rational:
        out = {frozenset(): e} if e != 0 else {}
    elif isinstance(e, ATOMS):
        out = {frozenset([(e, 1)]): sympy.Integer(1)}
    elif e.is_Add:
        out = {}
        for a in e.args:
            add_terms(out, _terms(a, memo))
    elif e.is_Mul:
        out = {frozenset(): sympy.Integer(1)}
        for a in e.args:
            out = _times(out, _terms(a, memo))
    elif e.is_Pow and e.exp.is_Integer:
        k = int(e.exp)
        if isinstance(e.base, ATOMS) and k != 0:
            out = {frozenset([(e.base, k)]): sympy.Integer(1)}
        elif k > 0 and e.base.is_Add:
            base = _terms(e.base, memo)
            out = {frozenset(): sympy.Integer(1)}
            for _ in range(k):
                out = _times(out, base)
        else:
            raise _Unhandled
    else:
        raise _Unhandled
    memo[e] = out
    return out


def add_terms(acc: dict, more: dict) -> None:
    """`acc` += `more`, in place (terms that cancel dropped)."""
    for m, c in more.items():
        v = acc.get(m, 0) + c
        if v == 0:
            acc.pop(m, None)
        else:
            acc[m] = v


def _times(x: dict, y: dict) -> dict:
    if len(x) * len(y) > MAX_TERMS:
        raise _Unhandled
    out: dict = {}
    for mx, cx in x.items():
        for my, cy in y.items():
            m = _mul_monomials(mx, my)
            v = out.get(m, 0) + cx * cy
            if v == 0:
                out.pop(m, None)
            else:
                out[m] = v
    return out


def _mul_monomials(a: Monomial, b: Monomial) -> Monomial:
    if not a:
        return b
    if not b:
        return a
    powers = dict(a)
    for atom, k in b:
        v = powers.get(atom, 0) + k
        if v == 0:
            powers.pop(atom)
        else:
            powers[atom] = v
    return frozenset(powers.items())
