"""ir/dims.py `identical`: a - b is 0 for every value of the symbols, the answer
`sympy.simplify(a - b) == 0` gives (what the kernel verifier and Reshape's view test asked
before), on the sizes conv and pooling nets make."""

from __future__ import annotations

import sympy

from onnxcc.ir import identical, sym

H, W, B = sym("H"), sym("W"), sym("batch")
POOLED = sympy.floor((sympy.floor((H - 1) / 2) + 1 - 3) / 2) + 1  # a conv then a pool on H
PAIRS = [
    (3, 3), (3, 4), (H, H), (H, W), (2 * H, H + H), (H * W * 64, 64 * W * H),
    (POOLED * W * 64, 64 * W * POOLED), (POOLED * (W + 1), POOLED * W + POOLED),
    (POOLED, sympy.floor((H - 1) / 2) + 1), (sympy.floor(H / 2) * 2, H),
    (B * POOLED * 16, B * 16 * POOLED + 0), (sympy.Max(H, W), sympy.Max(W, H)), (sympy.Max(H, W), H),
    (sympy.floor((H + 3) / 4), sympy.floor((H - 1) / 4) + 1),
]


# equal, but sympy's simplify leaves their difference nonzero: one symbol, decided on one
# period of the floors (ir/periodic.py)
BEYOND_SIMPLIFY = [(sympy.floor((H + 3) / 4), sympy.floor((H - 1) / 4) + 1)]


def test_identical_answers_as_simplify_does():
    for a, b in PAIRS:
        want = sympy.simplify(sympy.sympify(a) - sympy.sympify(b)) == 0
        if (a, b) in BEYOND_SIMPLIFY:
            assert identical(a, b) and not want, (a, b)
            continue
        assert identical(a, b) == want, (a, b)


def test_identical_decides_one_symbol_floors_exactly():
    assert identical(sympy.floor((H + 3) / 4), sympy.floor((H - 1) / 4) + 1)
    assert identical(sympy.ceiling(H / 2) + sympy.floor(H / 2), H)
    # equal at every H but one residue mod 4: not identical
    assert not identical(sympy.floor((H + 2) / 4), sympy.floor((H - 1) / 4) + 1)
    assert not identical(sympy.Max(sympy.floor(H / 2), sympy.ceiling(H / 2)), sympy.floor(H / 2))


def test_identical_proves_the_pooled_sizes_equal():
    assert identical(POOLED * W * 64, 64 * W * POOLED)
    assert identical(sympy.Integer(12), 12)
    assert not identical(POOLED * W, POOLED * (W + 1))
