"""ir/rounding.py: floor_of / ceiling_of build the very expression sympy's floor / ceiling
build (same tree, same printed form), including where sympy's bound proof succeeds."""

from __future__ import annotations

import sympy

from onnxcc.ir import sym
from onnxcc.ir.rounding import ceiling_of, floor_of

B, H, W = sym("batch"), sym("H"), sym("W")
F = sympy.floor
H4 = F((F((H - 1) / 2) + 1 - 3) / 2) + 1
ARGS = [
    H / 64, (3 * B * H * W + 5) / 64, 64 * B * H + W / 2 + sympy.Rational(3, 2),  # integer terms pulled out
    (B * H4 * (F((W - 1) / 2) + 1) * 96 + 17) / 64, -H / 2 - 7, 2 * B + 3 * H,   # an integer: itself
    sympy.Max(H, W) / 4 + 1, H4 / 3, -F(H / 2),                                # -arg a floor
    1 / (H + 1), 1 / (H + 1) + 1, sympy.Rational(1, 2) * (1 / H),              # sympy proves these
    sympy.Integer(5) / 3, sympy.Rational(-7, 2),
    sym("x") * sympy.Symbol("y") + 9,                                          # a symbol of unknown sign
]


def test_same_expression_as_sympy():
    for a in ARGS:
        for mine, theirs in ((floor_of, sympy.floor), (ceiling_of, sympy.ceiling)):
            got, want = mine(a), theirs(a)
            assert sympy.srepr(got) == sympy.srepr(want), (theirs.__name__, a, got, want)
            assert str(got) == str(want)


def test_bound_proofs_kept_where_they_hold():
    # sympy proves 1 < 1/(H + 1) + 1 <= 2 (a sum: the fast path is asked): the point test
    # must leave that to it
    assert ceiling_of(1 / (H + 1) + 1) == 2
    assert floor_of(1 / (H + 1) + 1) == 1
    assert ceiling_of(-1 / (H + 1) - 1) == -1
