"""ir/dims.py: the proof steps memoised across provers (`_difference`, `_nonneg_shifted`,
the per-prover interval memo) never carry one table's ranges into another's answer."""

from __future__ import annotations

import sympy

from onnxcc.ir.dims import Prover, SymbolTable, sym


def _table(lo: int, hi: int) -> SymbolTable:
    t = SymbolTable()
    t.declare("H", lo=lo, hi=hi)
    return t


def test_same_pair_answered_per_range_after_the_cache_is_warm():
    h = sym("H")
    a = 2 * sympy.floor((h - 3) / 2) + 4  # nested floors: the planner's kind of size
    b = h + 2
    wide, narrow = Prover(_table(1, 1000)), Prover(_table(3, 1000))
    # a <= b everywhere in range; the floor bound needs nothing from the ranges
    assert wide.le(a, b) and narrow.le(a, b)
    # 3 <= H - 0 only when H starts at 3: the shifted check must use each table's lows
    assert not wide.le(3, h)
    assert narrow.le(3, h)
    assert not Prover(_table(1, 1000)).le(3, h)  # asked again after the narrow prover
    assert Prover(_table(3, 5)).le(h, 5) and not Prover(_table(3, 6)).le(h, 5)


def test_bounds_memo_is_per_prover():
    h = sym("H")
    e = sympy.floor((h - 1) / 2)
    assert _table(1, 9).bounds(e) == (0, 4)
    assert _table(5, 21).bounds(e) == (2, 10)
    p, q = Prover(_table(1, 9)), Prover(_table(5, 21))
    assert p.prove_le(e, 4) is True and q.prove_le(e, 4) is None
