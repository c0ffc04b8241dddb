"""ir/periodic.py: one-symbol dims of floors / ceilings / Max / Min / Mod decided zero or
not on one period, checked against evaluating every value of the range."""

from __future__ import annotations

import pytest
import sympy

from onnxcc.ir import Prover, SymbolTable, sym
from onnxcc.ir.periodic import zero_count, zero_verdict

N = sym("n")
F, C = sympy.floor, sympy.ceiling


def _brute(e, lo, hi, k=1):
    """zero_count by evaluating every n in range (the oracle)."""
    vals = [e.xreplace({N: sympy.Integer(v)}) for v in range(lo, hi + 1) if v % k == 0]
    if all(v == 0 for v in vals):
        return "all"
    return "none" if all(v != 0 for v in vals) else "some"


CASES = [
    F((N + 3) / 4) - F((N - 1) / 4) - 1,                    # equal (simplify misses it)
    C(N / 2) + F(N / 2) - N,                                # equal
    F((N + 2) / 4) - F((N - 1) / 4) - 1,                    # differ at one residue mod 4
    F((F((N - 1) / 2) + 1 - 3) / 2) + 1 - F((N - 5) / 4) - 1,  # a conv then a pool, nested
    F(N / 2) - C(N / 2),                                    # 0 on even n only
    F(N / 3) * 3 + sympy.Mod(N, 3) - N,                     # Mod
    sympy.Max(F(N / 2), C(N / 2)) - C(N / 2),               # Max of one slope
    sympy.Min(F(N / 2), C(N / 2)) - F(N / 2),
    F(N / 2) - 5,                                           # 0 at n = 10, 11 only
    2 * F(N / 2) - N + 1,                                   # 0 on odd n only
    F(N / 2) + 1,                                           # never 0
    F(sympy.Rational(2, 3) * N) - F(N / 3) - F((N + 1) / 3),  # period 3, every residue
]


@pytest.mark.parametrize("e", CASES, ids=range(len(CASES)))
@pytest.mark.parametrize("lo,hi,k", [(1, 40, 1), (7, 7, 1), (10, 11, 1), (3, 50, 4), (12, 13, 1)])
def test_zero_count_matches_every_value(e, lo, hi, k):
    assert zero_count(e, N, lo, hi, k) == _brute(e, lo, hi, k)


def test_unbounded_range():
    assert zero_verdict(CASES[0], N, 1, None) is True
    assert zero_verdict(CASES[2], N, 1, None) is False
    assert zero_count(F(N / 2) - 5, N, 1, None) == "some"
    assert zero_count(F(N / 2) + 1, N, 1, None) == "none"
    assert zero_count(N - 3, N, 4, None) == "none"  # out of range: the zero at 3 is below lo


def test_empty_range_is_all_zero():
    assert zero_count(N + 1, N, 5, 4) == "all"
    assert zero_count(N + 1, N, 5, 7, multiple_of=8) == "all"


def test_undecidable_is_none():
    m = sym("m")
    assert zero_verdict(F(N / 2) - F(m / 2), N, 1, None) is None       # two symbols
    assert zero_verdict(N * F(N / 2) - N, N, 1, None) is None          # product of symbol terms
    assert zero_verdict(sympy.Max(N, 2 * N - 5) - N, N, 1, None) is None  # Max of two slopes
    assert zero_verdict(F(N / 8191) - F(N / 8193), N, 1, None) is None  # period above MAX_PERIOD
    assert zero_verdict(N**2 - N, N, 1, None) is None


def test_prover_eq_decides_one_symbol_floors():
    t = SymbolTable()
    t.declare("n", 1, 1000)
    p = Prover(t)
    assert p.prove_eq(F((N + 3) / 4), F((N - 1) / 4) + 1) is True
    assert p.prove_eq(F(N / 2), C(N / 2)) is None  # equal on even n only
    assert p.prove_eq(F(N / 2) + 1, F((N + 1) / 2) + 2) is False  # never equal
    t2 = SymbolTable()
    t2.declare("n", 1, 1000, multiple_of=2)
    assert Prover(t2).prove_eq(F(N / 2), C(N / 2)) is True  # n even: always equal
