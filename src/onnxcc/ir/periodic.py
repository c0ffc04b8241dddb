"""Exact zero tests of one-symbol dims built of floor / ceiling / Max / Min / Mod, without
sympy's `simplify`.

Such a dim, minus its linear part, is periodic in the symbol: `floor((n + 3) / 4)` is
`n / 4` plus a function of `n % 4`. When every floor's argument is itself linear plus
periodic (numbers times the symbol, sums, constant multiples, floors of those; a Max / Min
of arguments of one slope) the dim is `s * n + p(n)` with `p` of period `T`, the lcm of the
denominators met on the way. Its value on each residue class `n = r + k*T` is then linear in
`k`, so where it is 0 over a range of `n` follows from its values on one period:

    zero_verdict(floor((n + 3) / 4) - floor((n - 1) / 4) - 1, n, 1, None)   -> True

simplify took a tenth of a second to seconds per question on a detection net's chains of
strided convs and resizes; this is microseconds per residue. Anything else (a product of
two symbol terms, a Max of two slopes, a period above `MAX_PERIOD`) answers None: the
caller's slower steps decide.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import sympy

from .exact_value import NoValue, exact_value

MAX_PERIOD = 1 << 12
"""residue classes evaluated at most (a larger period answers None)"""


class _Undecided(Exception):
    pass


def zero_verdict(expr: Any, symbol: Any, lo: int, hi: int | None, multiple_of: int = 1) -> bool | None:
    """Whether `expr` (whose only free symbol is `symbol`) is 0 at every integer `n` with
    `lo <= n <= hi` (`hi` None: no upper end) and `n % multiple_of == 0`: True when it is 0
    at every such n, False when it is not 0 at some such n, None when this cannot tell
    (see the module docstring)."""
    zeros = zero_count(expr, symbol, lo, hi, multiple_of)
    if zeros is None:
        return None
    return zeros == "all"


def zero_count(expr: Any, symbol: Any, lo: int, hi: int | None, multiple_of: int = 1) -> str | None:
    """Where `expr` is 0 among the integers of the range (as `zero_verdict`): "all", "none",
    "some", or None when this cannot tell. An empty range answers "all"."""
    e = sympy.sympify(expr)
    if e.free_symbols - {symbol}:
        return None
    try:
        slope, period = _shape(e, symbol, {})
    except _Undecided:
        return None
    step = max(1, multiple_of)
    first = -(-lo // step) * step  # the first value in range
    if hi is not None and first > hi:
        return "all"
    period = _lcm(period, step)
    if period > MAX_PERIOD:
        return None
    seen_zero = seen_nonzero = False
    for r0 in range(first, first + period, step):
        if hi is not None and r0 > hi:
            break
        try:
            v0 = exact_value(e, {symbol.name: r0}, {})
        except (NoValue, ZeroDivisionError):
            return None
        # on n = r0 + k*period (k >= 0, n <= hi) the value is v0 + slope*period*k
        kmax = None if hi is None else (hi - r0) // period
        rise = slope * period
        if rise == 0:
            zero_here, nonzero_here = v0 == 0, v0 != 0
        else:
            k = -v0 / rise  # the one k where the line crosses 0
            zero_here = k.denominator == 1 and k >= 0 and (kmax is None or k <= kmax)
            nonzero_here = kmax is None or kmax > 0 or not zero_here
        seen_zero |= zero_here
        seen_nonzero |= nonzero_here
    if seen_zero and seen_nonzero:
        return "some"
    return "all" if not seen_nonzero else "none"


def _lcm(a: int, b: int) -> int:
    return a * b // math.gcd(a, b)


def _shape(e: Any, n: Any, memo: dict) -> tuple[Fraction, int]:
    """(slope, period) of `e` as `slope * n + p(n)`, `p` of that period; raises
    `_Undecided` for anything that is not of that form."""
    hit = memo.get(e)
    if hit is not None:
        return hit
    out: tuple[Fraction, int]
    if e.is_Rational:
        out = (Fraction(0), 1)
    elif e == n:
        out = (Fraction(1), 1)
    elif e.is_Add:
        slope, period = Fraction(0), 1
        for a in e.args:
            s, t = _shape(a, n, memo)
            slope, period = slope + s, _lcm(period, t)
        out = (slope, period)
    elif e.is_Mul:
        coeff, rest = e.as_coeff_Mul()
        if not coeff.is_Rational or rest.is_Mul:
            raise _Undecided  # a product of two terms with the symbol (or a float)
        s, t = _shape(rest, n, memo)
        out = (s * Fraction(int(coeff.p), int(coeff.q)), t)
    elif isinstance(e, (sympy.floor, sympy.ceiling)):
        # floor(s*n + p(n)) = s*n + q(n), q of the period that makes s*period an integer
        s, t = _shape(e.args[0], n, memo)
        out = (s, _lcm(t, s.denominator))
    elif isinstance(e, (sympy.Max, sympy.Min)):
        shapes = [_shape(a, n, memo) for a in e.args]
        if len({s for s, _ in shapes}) != 1:
            raise _Undecided  # arguments of different slopes: eventually one of them
        period = 1
        for _, t in shapes:
            period = _lcm(period, t)
        out = (shapes[0][0], period)
    elif isinstance(e, sympy.Mod):
        a, m = e.args
        if not (isinstance(m, sympy.Integer) and m != 0):
            raise _Undecided
        # Mod(x, m) = x - m*floor(x/m): slope 0
        s, t = _shape(a, n, memo)
        out = (Fraction(0), _lcm(t, (s / int(m)).denominator))
    else:
        raise _Undecided
    memo[e] = out
    return out


