"""kernel/dim_expand.py: a dim's polynomial multiplied out term by term is the expression
`sympy.expand` gives (with floors, Mod, Max, Min and Piecewise kept whole, as
kernel/expr.py `_expand` keeps them), argument for argument; what it does not handle is
left to sympy."""

from __future__ import annotations

import sympy

from onnxcc.kernel.dim_expand import expanded

H, W, N = sympy.symbols("H W N", integer=True, positive=True)


def _reference(e: sympy.Expr) -> sympy.Expr:
    """sympy.expand with every function application standing in as a symbol."""
    opaque = [a for a in sympy.preorder_traversal(e) if isinstance(a, (sympy.Function, sympy.Max, sympy.Min))]
    stand_in = {a: sympy.Dummy(integer=True) for a in opaque}
    back = {v: k for k, v in stand_in.items()}
    return sympy.expand(e.xreplace(stand_in)).xreplace(back)


def _h(k: int) -> sympy.Expr:
    """H after k stride-2 convs (pad 1, kernel 3)."""
    out = H
    for _ in range(k):
        out = sympy.floor((out - 1) / 2) + 1
    return out


CASES = [
    384 * _h(2) * sympy.floor((W - 1) / 2) + 384 * (2 * _h(3) + 2) * (2 * sympy.floor(W / 8) + 2),
    N * (_h(4) + 3) * (sympy.floor(W / 16) + 3),
    (H + 1) ** 3 - H ** 3,  # terms that cancel
    (H + W) * (H - W) + W ** 2 - H ** 2,  # all of them: zero
    sympy.Rational(1, 2) * (H + 1) * H + sympy.Rational(3, 4) * W,
    sympy.Max(H, 4 * W) * (N + 2) + sympy.Min(H, W) ** 2,
    sympy.Mod(H, 16) * (H - sympy.Mod(H, 16)) + sympy.Piecewise((H * W, H <= 64), (2 * H, True)) * N,
    H, sympy.Integer(7), sympy.Integer(0), 3 * H * W,
]


def test_same_expression_as_sympy_expand():
    for e in CASES:
        got = expanded(e)
        assert got is not None, e
        assert sympy.srepr(got) == sympy.srepr(_reference(e)), e


def test_left_to_sympy_when_not_a_polynomial():
    for e in (H / W + 1, sympy.sqrt(H) * W, sympy.Float(0.5) * H, 2 ** H * W):
        assert expanded(e) is None, e
