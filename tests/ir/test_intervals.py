"""ir/intervals.py: the interval rules dims and the backend's index bounds share. Exact ends
stay exact; an open end (None) is an infinity that a zero factor, a maximum's other lower
end or a minimum's other upper end still bounds; the rules that cannot bound answer None."""

from __future__ import annotations

from fractions import Fraction

import sympy

from onnxcc.ir import intervals as iv
from onnxcc.ir.dims import SymbolTable, sym


def test_closed_ends_stay_exact():
    assert iv.add((1, 4), (-2, 3)) == (-1, 7)
    assert iv.neg((1, 4)) == (-4, -1)
    assert iv.mul((-2, 3), (4, 5)) == (-10, 15)
    third = iv.mul((1, 7), iv.point(Fraction(1, 3)))
    assert third == (Fraction(1, 3), Fraction(7, 3)) and isinstance(third[0], Fraction)
    assert iv.floor(third) == (0, 2) and iv.ceiling(third) == (1, 3)
    assert iv.floor_div((-3, 10), 2) == (-2, 5)
    assert iv.power((2, 3), 3) == (8, 27) and iv.power((-1, 3), 2) is None
    assert iv.maximum([(1, 4), (-5, 9)]) == (1, 9) and iv.minimum([(1, 4), (-5, 9)]) == (-5, 4)
    assert iv.floor_mod((4, 4)) == (0, 3) and iv.floor_mod((2, 9)) == (0, 8)
    assert iv.floor_mod((0, 9)) is None  # the divisor may be 0


def test_open_ends():
    n = (1, None)  # a symbol of the backend: its upper end is not declared
    assert iv.add(n, iv.point(-3)) == (-2, None)
    assert iv.add(n, iv.neg(n)) == (None, None)  # N - M
    assert iv.mul(n, n) == (1, None)
    assert iv.mul((0, None), (2, None)) == (0, None)  # 0 * inf is 0: the values are finite
    assert iv.mul((-3, None), iv.point(2)) == (-6, None)
    assert iv.mul(n, iv.point(-2)) == (None, -2)
    assert iv.mul(n, iv.point(0)) == (0, 0)
    assert iv.mul((-3, None), (2, None)) == (None, None)
    assert iv.maximum([(None, None), (0, 0)]) == (0, None)  # max(x, 0) >= 0 whatever x is
    assert iv.minimum([(None, None), (0, 0)]) == (None, 0)
    assert iv.floor_mod((1, None)) == (0, None)  # x mod N, N >= 1
    assert iv.floor_div((None, 7), 2) == (None, 3)
    assert iv.power((0, None), 2) == (0, None)


def test_symbol_table_bounds_follow_the_rules():
    t = SymbolTable()
    t.declare("H", lo=3, hi=100)
    t.declare("W", lo=1, hi=50)
    H, W = sym("H"), sym("W")
    assert t.bounds(sympy.floor((H - 3) / 2) + 1) == (1, 49)
    assert t.bounds(sympy.Max(H - W, 0)) == (0, 99)
    assert t.bounds(sympy.Min(H, W) * 2) == (2, 100)
    assert t.bounds(sympy.Mod(-2, W)) == (0, 49)
    assert t.bounds(sympy.ceiling(H / 4)) == (1, 25)
    assert t.bounds(H ** 2 - W) == (-41, 9999)
