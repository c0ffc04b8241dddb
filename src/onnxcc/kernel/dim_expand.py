"""A dim's polynomial expanded without `sympy.expand`: the sums, products and positive integer
powers multiplied out term by term, every other node (a symbol, floor, Mod, Max, ...) kept
whole as a factor, and the sum built once, in sympy's canonical form.

`sympy.expand` walks the tree through its hint machinery and rebuilds every intermediate
sum on the way: the OCR detector's 400 distinct workspace offsets (products of nested
floors of its two dynamic dims) took 0.3-0.5 s of its LLVM emission, five times what
multiplying out the terms here costs. The result is the same expression (sympy orders the
arguments of a sum or product canonically whatever order they are given in); anything this
does not handle (a negative or fractional power, a float) is left to `sympy.expand`."""

from __future__ import annotations

import sympy

_ONE = sympy.Integer(1)

#: a product of factors: factor -> power (order-free)
Monomial = frozenset


class _NotPolynomial(Exception):
    pass


def expanded(e: sympy.Expr) -> sympy.Expr | None:
    """`e` multiplied out, treating every node other than a sum, product, positive integer
    power or rational number as one opaque factor; None when `e` holds something else."""
    try:
        terms = _terms(e)
    except _NotPolynomial:
        return None
    return sympy.Add(*[sympy.Mul(c, *[f if k == 1 else sympy.Pow(f, k) for f, k in m]) for m, c in terms.items()])


def _terms(e: sympy.Expr) -> dict[Monomial, sympy.Rational]:
    """`e` as {monomial: its nonzero rational coefficient}."""
    if e.is_Rational:
        return {Monomial(): e} if e != 0 else {}
    if e.is_Add:
        out: dict[Monomial, sympy.Rational] = {}
        for a in e.args:
            for m, c in _terms(a).items():
                out[m] = out.get(m, 0) + c
        return {m: c for m, c in out.items() if c != 0}
    if e.is_Mul:
        out = {Monomial(): _ONE}
        for a in e.args:
            out = _times(out, _terms(a))
        return out
    if e.is_Pow:
        if not (e.exp.is_Integer and e.exp > 0):
            raise _NotPolynomial(e)
        base = _terms(e.base)
        out = base
        for _ in range(int(e.exp) - 1):
            out = _times(out, base)
        return out
    if e.is_Number or not (e.is_Atom or isinstance(e, (sympy.Function, sympy.Max, sympy.Min))):
        raise _NotPolynomial(e)  # a float, an infinity; a node sympy.expand would go into
    return {Monomial({(e, 1)}): _ONE}


def _times(p: dict[Monomial, sympy.Rational], q: dict[Monomial, sympy.Rational]) -> dict[Monomial, sympy.Rational]:
    out: dict[Monomial, sympy.Rational] = {}
    for m1, c1 in p.items():
        for m2, c2 in q.items():
            powers = dict(m1)
            for f, k in m2:
                powers[f] = powers.get(f, 0) + k
            m = Monomial(powers.items())
            out[m] = out.get(m, 0) + c1 * c2
    return {m: c for m, c in out.items() if c != 0}
