"""ir/poly_terms.py: dims multiplied out on dicts give the sum sympy's `expand` gives, and
`dims._expanded` (floors held as atoms) the same expression as before it used them."""

from __future__ import annotations

import sympy

from onnxcc.ir import dims, sym
from onnxcc.ir.poly_terms import build, poly_terms

B, H, W = sym("batch"), sym("H"), sym("W")
F, C = sympy.floor, sympy.ceiling
H2, W2 = F(F(H / 2 - sympy.Rational(1, 2)) / 2), F(F(W / 2 - sympy.Rational(1, 2)) / 2)  # a detector's strided extents

EXPRS = [
    sympy.Integer(0), sympy.Integer(7), B, 3 * B * H * W + 5,
    (H + 1) * (W + 3) * B, (H - W) ** 3, B ** -1 * (B + H), sympy.Rational(1, 2) * (H + 1) * (W + 3),
    384 * B * (H2 + 1) * (W2 + 1) + 384 * B * (H2 + 3) * (W2 + 3) + 96 * B * (4 * H2 + 4) * (4 * W2 + 4),
    (H2 + 1) ** 2 - H2 ** 2 - 2 * H2, sympy.Max(H, W) * (H + 1), (F(H / 2) + C(W / 3)) * (F(H / 2) - 1),
]


def test_terms_build_what_expand_gives():
    for e in EXPRS:
        terms = poly_terms(e)
        assert terms is not None, e
        assert build(terms) == sympy.expand(e), e


def test_unhandled_nodes_answer_none():
    assert poly_terms(1 / (H + 1)) is None        # a power of a sum below 0: expand rewrites it
    assert poly_terms(sympy.Float(1.5) * H) is None
    assert poly_terms(sympy.Mod(H, 4) * W) is None


def test_expanded_matches_sympy_with_floors_held():
    # the path `_expanded` took before: each floor's argument expanded, the floors held as
    # symbols while sympy expands the polynomial around them
    def held_expand(e):
        inner = e.xreplace({a: dims._expanded_floor(a) for a in dims._outer_floors(e)})
        held = {a: sympy.Dummy() for a in dims._outer_floors(inner)}
        return sympy.expand(inner.xreplace(held)).xreplace({d: a for a, d in held.items()})

    for e in EXPRS + [64 * C((3 * B * (H2 + 1) * (W2 + 1)) / 4) + 128 * B * (H2 + 1), C((H + 3) / 2) * (W + 1)]:
        assert dims._expanded(e) == held_expand(e), e


def test_terms_are_the_expanded_sums_coefficients():
    for e in EXPRS:
        assert dims._terms(e) == dict(dims._expanded(e).as_coefficients_dict()), e
