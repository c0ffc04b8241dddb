"""The prover's cheap steps (ir/dims.py) answer what the sympy forms they replace answer:
the interval of `y - x` summed over the cancelled terms (`Prover._le_interval`), and the
shift of a polynomial by its symbols' lower bounds expanded by binomials
(`_shifted_coeffs`, under `_nonneg_shifted`)."""

from __future__ import annotations

import itertools

import sympy

from onnxcc.ir import SymbolTable, dims, sym
from onnxcc.ir.dims import Prover

H, W, B = sym("H"), sym("W"), sym("batch")
F = sympy.floor((H - 1) / 2) + 1
DIMS = [
    576 * B * F * (sympy.floor((W - 1) / 2) + 1),
    64 * sympy.ceiling(9 * B * F / 2) + 128,
    16 * B * H**2 + 1024 * B * H,
    B * H * W - 3 * H + sympy.Rational(1, 2) * F,
    sympy.Max(B, H) + 5,
    sympy.Integer(4096),
    H - W,
]


def _table() -> SymbolTable:
    t = SymbolTable()
    t.declare("H", 3, 4096)
    t.declare("W", 1, 512)
    t.declare("batch", 2, 64)
    return t


def test_le_interval_is_the_interval_of_the_built_difference():
    p = Prover(_table())
    for x, y in itertools.product(DIMS, DIMS):
        built = p.table.bounds(sympy.sympify(y) - sympy.sympify(x))[0] >= 0
        assert p._le_interval(x, y) == built, (x, y)


def test_shifted_coefficients_are_sympy_expand():
    lows = ((B, 2), (H, 3), (W, 1))
    polys = [B * H * W - 3 * H**2 + 7, 2 * B**3 - 20 * B, H * W - W**2 * 6 + sympy.Rational(1, 3), sympy.Integer(-1)]
    for d in polys:
        got = sorted(dims._shifted_coeffs(d, lows))
        e = sympy.expand(d.xreplace({s: s + lo for s, lo in lows}))
        assert got == sorted(e.as_coefficients_dict().values()), d
        assert dims._nonneg_shifted(d, lows) == all(c >= 0 for c in e.as_coefficients_dict().values())
    # not a sum of monomials in the given symbols: left to sympy
    assert dims._shifted_coeffs(B * sympy.floor(H / 2), lows) is None


def test_prover_answers_on_the_fast_path():
    p = Prover(_table())
    assert p.le(H, H * W)                  # W >= 1
    assert p.le(2 * B, B**2)               # batch >= 2: shift by 2 makes every coefficient >= 0
    assert not p.le(B**2, 2 * B + 100)     # false at batch = 64
    assert p.le(F, H)
    assert not p.le(H, W)


def test_le_interval_by_sides_matches_the_cancelled_terms():
    # each side's bound summed once, corrected for the terms both hold (other coefficients,
    # the same ones, opposite signs) and for a term without bounds that cancels: the
    # answer of the terms left after cancelling, pair by pair
    unbounded = sympy.Mod(H, W - 3)  # a divisor that may be <= 0: no interval
    sides = [
        3 * B * F + 2 * H,
        2 * B * F + 3 * H,
        B * F - H + 7,
        -B * F + 5 * H * W,
        unbounded + 2 * H,
        unbounded + H + 1,
        sympy.Integer(0),
    ]
    p = Prover(_table())
    answers = set()
    for x, y in itertools.product(sides, sides):
        sx, sy = sympy.sympify(x), sympy.sympify(y)
        got = p._le_interval(x, y)
        assert got == p._difference_nonneg_whole(sx, sy), (x, y)
        answers.add(got)
    assert answers == {True, False}


def test_held_terms_of_a_sum_are_the_whole_sums():
    # term by term (memoised) and rebuilt whole then multiplied out: the same dict
    G = sympy.floor((W + 3) / 4)
    sums = [576 * B * F * G + 64 * B * F + 3 * H, (F + 1) * (G + 2) + B * sympy.ceiling((H + 5) / 2) - F * G,
            sympy.Max(B, H) * F + 2 * F]
    for e in sums:
        assert e.is_Add
        assert dims._held_terms(e) == dims._held_whole(e), e
