"""The interval arithmetic that bounds a dim by its symbols' ranges: one rule per operation.

Two walkers apply these rules: `dims._interval` to sympy dims (the symbol table's `bounds`,
the prover's interval step) and `codegen/llvm/int_bounds.py` to the kernel expressions
those dims are lowered to (a conv's output size `(W - 1) // 2 + 1`), so what the compiler
proves about a size and what the backend assumes of it when it emits the division cannot
drift apart.

An interval is a pair (lo, hi) of exact ends, ints or Fractions. An end may be None, open
(-inf below, +inf above): the kernel walker knows only the lower ends of its symbols, and
nothing of a loop var or a load. The dims walker never passes an open end; where a rule
cannot bound its result at all (a power of a base that may be negative, a modulo by a
divisor that may not be positive) it returns None and the walker gives up.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from fractions import Fraction

End = int | Fraction | None
Interval = tuple[End, End]

UNBOUNDED: Interval = (None, None)


def point(v: int | Fraction) -> Interval:
    return v, v


def add(x: Interval, y: Interval) -> Interval:
    return (None if x[0] is None or y[0] is None else x[0] + y[0],
            None if x[1] is None or y[1] is None else x[1] + y[1])


def neg(x: Interval) -> Interval:
    return (None if x[1] is None else -x[1], None if x[0] is None else -x[0])


def mul(x: Interval, y: Interval) -> Interval:
    lo, hi = x
    l2, h2 = y
    if lo is not None and hi is not None and l2 is not None and h2 is not None:
        cands = [a * b for a in (lo, hi) for b in (l2, h2)]
        return min(cands), max(cands)
    # open ends as infinities; a zero end times an infinite one is 0 (the values are finite)
    inf = math.inf
    ends = [_times(a, b) for a in (-inf if lo is None else lo, inf if hi is None else hi)
            for b in (-inf if l2 is None else l2, inf if h2 is None else h2)]
    low, high = min(ends), max(ends)  # a float end is an infinity: finite ends stay exact
    return (None if isinstance(low, float) else low, None if isinstance(high, float) else high)


def _times(a: int | Fraction | float, b: int | Fraction | float) -> int | Fraction | float:
    return 0 if a == 0 or b == 0 else a * b


def power(x: Interval, k: int) -> Interval | None:
    """x ** k for a positive integer k, where x >= 0 (None where the base may be negative)."""
    lo, hi = x
    if lo is None or lo < 0:
        return None
    return lo ** k, None if hi is None else hi ** k


def floor(x: Interval) -> Interval:
    return (None if x[0] is None else math.floor(x[0]), None if x[1] is None else math.floor(x[1]))


def ceiling(x: Interval) -> Interval:
    return (None if x[0] is None else math.ceil(x[0]), None if x[1] is None else math.ceil(x[1]))


def floor_div(x: Interval, d: int) -> Interval:
    """floor(x / d) for a positive constant d: what a dim's floor(x / d) is bounded by."""
    return floor(mul(x, point(Fraction(1, d))))


def maximum(ivs: Iterable[Interval]) -> Interval:
    """An open lower end of one argument does not open the maximum's: the others bound it."""
    ivs = list(ivs)
    lows = [i[0] for i in ivs if i[0] is not None]
    highs = [i[1] for i in ivs if i[1] is not None]
    return (max(lows) if lows else None, max(highs) if len(highs) == len(ivs) else None)


def minimum(ivs: Iterable[Interval]) -> Interval:
    ivs = list(ivs)
    lows = [i[0] for i in ivs if i[0] is not None]
    highs = [i[1] for i in ivs if i[1] is not None]
    return (min(lows) if len(lows) == len(ivs) else None, min(highs) if highs else None)


def floor_mod(divisor: Interval) -> Interval | None:
    """x mod m with floor semantics (the sign of the divisor), for any x: in [0, m - 1] where
    m is provably positive (e.g. Mod(-2, N), a roll's split point); None otherwise."""
    lo, hi = divisor
    if lo is None or lo <= 0:
        return None
    return 0, None if hi is None else hi - 1
