"""The GELU expression shapes that the expression emitter (exprs.py) computes in a cheaper
form: torch's exact x * 0.5 * (1 + erf(x / sqrt 2)) has a division by a constant inside the
erf (vmath's erf_div: no vdivps) and a sum and two products around it (one fma); in f32
with the divisor sqrt 2 (what exporters write) the whole product is vmath's `gelu`, x Phi(x)
with no erf at all (`exact_gelu`); the tanh GELU's x * 0.5 * (1 + tanh(u)) is x sigmoid(2 u)
(`tanh_gelu`), and with u = s (x + k x**3) as exporters write it, 2 u is x (2 s + 2 s k x**2):
a product, an fma and a product (`tanh_gelu_argument`); any other 1 + tanh(u) is
2 sigmoid(2 u)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from llvmlite import ir

from onnxcc.ir import DType
from onnxcc.kernel.expr import Binary, Const, Expr, Unary

if TYPE_CHECKING:
    from .exprs import ExprEmitter

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


def _half_x_times(e: Binary, inner_of) -> tuple[Expr, Expr] | None:
    """(x, inner_of(s)) where `e` is the product of x, 0.5 and s, either grouping (x * s *
    0.5, x * (0.5 * s), 0.5 x * s), any operand order, float, and inner_of(s) not None."""
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
                t = inner_of(s)
                if t is not None:
                    return x, t
    return None


def half_x_one_plus_erf(e: Binary) -> tuple[Expr, Unary] | None:
    """(x, erf(u)) where `e` is the product of x, 0.5 and 1 + erf(u), either grouping (torch's
    TorchScript export: x * (1 + erf) * 0.5; its dynamo export: x * (0.5 * (erf + 1))), any
    operand order, float."""
    return _half_x_times(e, _one_plus_erf)  # type: ignore[return-value]  # the Unary _one_plus_erf gives


#: the divisor vmath's `gelu` is fitted for: sqrt 2 rounded to f32; and the factor onnx.Gelu's
#: and com.microsoft.Gelu's lowering writes instead, 1 / sqrt 2 rounded to f32 (its product
#: with the divisor is 1 - 3.4e-8: less than the half ulp by which the graph's own f32 product
#: x * (1 / sqrt 2) may miss, so vmath's gelu is as close to that graph's exact value)
_SQRT2_F32 = np.float32(np.sqrt(2.0))
_INV_SQRT2_F32 = np.float32(1.0 / np.sqrt(2.0))


def _erf_argument_over_sqrt2(u: Expr) -> Expr | None:
    """y where `u` is y / sqrt 2 or y * (1 / sqrt 2) (either order), the constants as f32."""
    if not (isinstance(u, Binary) and u.dtype is DType.f32):
        return None
    if u.op == "div" and isinstance(u.b, Const) and np.float32(u.b.value) == _SQRT2_F32:
        return u.a
    if u.op == "mul":
        for y, k in ((u.a, u.b), (u.b, u.a)):
            if isinstance(k, Const) and np.float32(k.value) == _INV_SQRT2_F32:
                return y
    return None


def exact_gelu(e: Binary) -> Expr | None:
    """x where `e` is the f32 GELU x * 0.5 * (1 + erf(x / sqrt 2)) (any grouping and order
    `half_x_one_plus_erf` takes, erf's argument x / sqrt 2 or x * (1 / sqrt 2), the
    constants as f32, the same x in both places): what vmath's `gelu` computes."""
    if e.dtype is not DType.f32:
        return None
    found = half_x_one_plus_erf(e)
    if found is None:
        return None
    x, t = found
    return x if _erf_argument_over_sqrt2(t.a) == x else None


def one_plus_tanh(e: Binary) -> Expr | None:
    """u where `e` is 1 + tanh(u) (either order, float)."""
    if e.op != "add" or not e.dtype.is_float:
        return None
    for t, one in ((e.a, e.b), (e.b, e.a)):
        if isinstance(t, Unary) and t.op == "tanh" and isinstance(one, Const) and one.value == 1.0:
            return t.a
    return None


def tanh_gelu(e: Binary) -> tuple[Expr, Expr] | None:
    """(x, u) where `e` is the product of x, 0.5 and 1 + tanh(u) (the groupings and orders
    `half_x_one_plus_erf` takes, float)."""
    return _half_x_times(e, lambda s: one_plus_tanh(s) if isinstance(s, Binary) else None)


def _product_factors(e: Expr) -> list[Expr]:
    """The factors of a tree of float products (e itself where it is not one)."""
    if isinstance(e, Binary) and e.op == "mul":
        return _product_factors(e.a) + _product_factors(e.b)
    return [e]


def tanh_gelu_argument(u: Expr, x: Expr) -> tuple[float, float] | None:
    """(s, k) where `u` is s * (x + k * x * x * x), the tanh GELU's argument as exporters write
    it (Pow(x, 3) lowered to products; any grouping of the cube's product, any order of the
    sum and of the outer product), s and k constants."""
    if not (isinstance(u, Binary) and u.op == "mul"):
        return None
    for inner, s in ((u.a, u.b), (u.b, u.a)):
        if not (isinstance(s, Const) and isinstance(inner, Binary) and inner.op == "add"):
            continue
        for lin, cube in ((inner.a, inner.b), (inner.b, inner.a)):
            if lin != x:
                continue
            factors = _product_factors(cube)
            consts = [f for f in factors if isinstance(f, Const)]
            if len(factors) == 4 and len(consts) == 1 and all(f == x for f in factors if f is not consts[0]):
                return float(s.value), float(consts[0].value)
    return None


def emit_gelu_form(em: ExprEmitter, e: Binary) -> ir.Value | None:
    """`e` in its cheaper form where it is one of the GELU shapes above, else None."""
    x = exact_gelu(e)
    if x is not None:  # f32 x Phi(x) with no erf: vmath's gelu (31 vector ops a vector for 37)
        return em.math("gelu", em.emit(x))
    gelu = half_x_one_plus_erf(e)
    if gelu is not None:
        # x * (1 + erf) * 0.5 as h + h erf, h = x / 2 (exact but for denormal x): one fma and
        # one product instead of a sum and two products, rounded once (for erf near -1 the
        # sum 1 + erf is not rounded first), and no overflow of x * 2 near the float maximum
        h = em.b.fmul(em.emit(gelu[0]), ir.Constant(em.emit(gelu[0]).type, 0.5), name="half.x")
        return em.intr("llvm.fma", [em.emit(gelu[1]), h, h], label="gelu")
    found = tanh_gelu(e)
    if found is not None:
        # x * 0.5 * (1 + tanh(u)) = x sigmoid(2 u): the 0.5 and the 2 cancel (and x * 2 does not
        # overflow near the float maximum); 2 u = x (2 s + 2 s k x**2) where u = s (x + k x**3):
        # three ops for five (x**3's two products, the fma, s and the doubling), the constants
        # rounded once each (the graph's own u is rounded four times on the way)
        x, u = found
        xv = em.emit(x)
        sk = tanh_gelu_argument(u, x)
        if sk is None:
            w = em.b.fmul(em.emit(u), ir.Constant(xv.type, 2.0), name="twice")
        else:
            s, k = sk
            x2 = em.b.fmul(xv, xv, name="gelu.x2")
            inner = em.intr("llvm.fma", [x2, ir.Constant(xv.type, 2.0 * s * k), ir.Constant(xv.type, 2.0 * s)],
                            label="gelu.inner")
            w = em.b.fmul(xv, inner, name="gelu.twice.u")
        return em.b.fmul(xv, em.math("sigmoid", w), name="gelu.tanh")
    u = one_plus_tanh(e)
    if u is not None:
        # tanh-GELU's 1 + tanh(u) = 2 sigmoid(2 u) (the scalings exact): vmath's sigmoid is
        # about half tanh's vector ops, and for u << 0 it keeps the digits the sum cancels
        two = ir.Constant(em.emit(u).type, 2.0)
        return em.b.fmul(em.math("sigmoid", em.b.fmul(em.emit(u), two, name="twice")), two, name="one.tanh")
    return None
