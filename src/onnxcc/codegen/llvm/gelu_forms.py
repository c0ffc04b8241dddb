"""The GELU expression shapes that the expression emitter (exprs.py) computes in a cheaper
form: torch's exact x * 0.5 * (1 + erf(x / sqrt 2)) has a division by a constant inside the
erf (vmath's erf_div: no vdivps) and a sum and two products around it (one fma); the tanh
GELU's 1 + tanh(u) is 2 sigmoid(2 u)."""

from __future__ import annotations

from onnxcc.kernel.expr import Binary, Const, Expr, Unary

#: divisors erf_div takes (x times 1/c is then finite wherever x / c is, or both overflow)
ERF_DIV_RANGE = (0.0625, 16.0)


def erf_of_constant_quotient(e: Unary) -> tuple[Expr, Const] | None:
    """(x, c) where `e` is erf(x / c), c a float constant in ERF_DIV_RANGE."""
    d = e.a
    if e.op != "erf" or not (isinstance(d, Binary) and d.op == "div" and d.dtype.is_float):
        return None
    if not isinstance(d.b, Const) or not ERF_DIV_RANGE[0] <= abs(float(d.b.value)) <= ERF_DIV_RANGE[1]:
        return None
    return d.a, d.b


def _one_plus_erf(s: Expr) -> Unary | None:
    if isinstance(s, Binary) and s.op == "add":
        for t, one in ((s.a, s.b), (s.b, s.a)):
            if isinstance(t, Unary) and t.op == "erf" and isinstance(one, Const) and one.value == 1.0:
                return t
    return None


def half_x_one_plus_erf(e: Binary) -> tuple[Expr, Unary] | None:
    """(x, erf(u)) where `e` is the product of x, 0.5 and 1 + erf(u), either grouping (torch's
    TorchScript export: x * (1 + erf) * 0.5; its dynamo export: x * (0.5 * (erf + 1))), any
    operand order, float."""
    if e.op != "mul" or not e.dtype.is_float:
        return None
    for inner, outer in ((e.a, e.b), (e.b, e.a)):
        if not (isinstance(inner, Binary) and inner.op == "mul"):
            continue
        factors = (inner.a, inner.b, outer)
        for k in range(3):
            half, rest = factors[k], factors[:k] + factors[k + 1:]
            if not (isinstance(half, Const) and half.value == 0.5):
                continue
            for x, s in (rest, rest[::-1]):
                t = _one_plus_erf(s)
                if t is not None:
                    return x, t
    return None


def one_plus_tanh(e: Binary) -> Expr | None:
    """u where `e` is 1 + tanh(u) (either order, float)."""
    if e.op != "add" or not e.dtype.is_float:
        return None
    for t, one in ((e.a, e.b), (e.b, e.a)):
        if isinstance(t, Unary) and t.op == "tanh" and isinstance(one, Const) and one.value == 1.0:
            return t.a
    return None
