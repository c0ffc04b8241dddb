"""ir/dims.py's faster expansion of sizes with nested floors (`_expanded`: each floor
expanded once and held as a symbol while the polynomial around it expands) gives exactly
what `sympy.expand` gives, integer terms pulled out of a ceiling included, so the prover
and the memory plans built on it are unchanged; `_bound_atoms` gives what it gave."""

from __future__ import annotations

import sympy

from onnxcc.ir import dims, sym

H, W, B = sym("H"), sym("W"), sym("batch")


def _halve(x, k: int):
    for _ in range(k):
        x = sympy.floor((x - 1) / 2) + 1
    return x


CASES = [
    576 * B * _halve(H, 4) * _halve(W, 4) + 64 * sympy.ceiling(9 * B * (_halve(H, 3) + 5) * (_halve(W, 3) + 6) / 2),
    64 * sympy.ceiling(3 * B * (_halve(H, 1) + 2) * (_halve(W, 1) + 2) / 4 + _halve(W, 1) / 16 + sympy.Rational(33, 8)),
    (sympy.floor((H + 2 * W) * (H - 1) / 3) + 1) ** 2 * B,
    sympy.ceiling(sympy.floor(H * (W + 1) / 2) * 3 / 4) * (B + 1) - 7 * sympy.floor(W / 5),
    16 * B * H**2 + 1024 * B * H,  # no floor at all
    sympy.Integer(4096),
]


def test_expanded_is_sympy_expand():
    for e in CASES:
        assert dims._expanded(e) == sympy.expand(e), e


def test_expanded_pulls_integer_terms_out_of_a_ceiling_as_sympy_does():
    e = 64 * sympy.ceiling(9 * B * (_halve(H, 3) + 5) * (_halve(W, 3) + 6) / 2)
    out = dims._expanded(e)
    assert out.is_Add and any(t.is_Mul and not t.has(sympy.ceiling, sympy.floor) for t in out.args)
    assert out == sympy.expand(e)


def test_bound_atoms_bounds_one_floor_per_term():
    # floor(H/2) >= H/2 - 1/2: the bound that can only make 2*floor(H/2) - H + 1 smaller
    d = 2 * sympy.floor(H / 2) - H + 1
    assert dims._bound_atoms(d) == 0
    # a term with two floors (nested) cannot be bounded this way
    assert dims._bound_atoms(sympy.expand(B * _halve(H, 2))) is None
    # a term whose coefficient has no sign cannot either
    assert dims._bound_atoms((B - H) * sympy.floor(W / 3)) is None


def test_difference_on_terms_is_the_expanded_difference():
    # (the number when y - x is one, else the bounded form, as the sympy subtraction gave)
    x = 576 * B * _halve(H, 4) * _halve(W, 4) + 64 * B
    for y, want_num in [(x + 128, 128), (x, 0), (x + H - 2 * sympy.floor(H / 2), None),
                        (x + B * _halve(H, 2), None)]:
        num, bounded = dims._difference(x, y)
        d = sympy.expand(y) - sympy.expand(x)
        assert num == (d if d.is_Number else None) and (want_num is None or num == want_num)
        if num is None:
            assert bounded == dims._bound_atoms(d)
