"""codegen/llvm/gelu_forms: which GELU spellings go to vmath's `gelu` (x Phi(x) fitted for
the divisor sqrt 2 rounded to f32) and which keep the general h + h erf(x / c) form."""

from __future__ import annotations

import math

from onnxcc.codegen.llvm.gelu_forms import exact_gelu, tanh_gelu, tanh_gelu_argument
from onnxcc.ir import DType
from onnxcc.kernel.expr import Binary, Const, Load, Unary, Var

F32, F64 = DType.f32, DType.f64


def _x(dt: DType, name: str = "x") -> Load:
    return Load(name, (Var("i"),), dt)


def _gelu(x, c: float, dt: DType = F32, grouping: str = "torchscript", y=None, times: bool = False):
    """x * 0.5 * (1 + erf(y / c)) in one of the exporters' groupings (y defaults to x; with
    `times`, erf(c * y) as onnx.Gelu's lowering writes it)."""
    y = x if y is None else y
    erf = Unary("erf", Binary("mul", Const(c, dt), y) if times else Binary("div", y, Const(c, dt)))
    one, half = Const(1.0, dt), Const(0.5, dt)
    if grouping == "torchscript":  # x * (1 + erf) * 0.5
        return Binary("mul", Binary("mul", x, Binary("add", one, erf)), half)
    if grouping == "dynamo":  # x * (0.5 * (erf + 1))
        return Binary("mul", x, Binary("mul", half, Binary("add", erf, one)))
    return Binary("mul", half, Binary("mul", Binary("add", erf, one), x))  # operands reversed


def test_exact_gelu_takes_every_grouping_of_the_f32_sqrt2_divisor():
    x = _x(F32)
    for grouping in ("torchscript", "dynamo", "reversed"):
        for c in (1.4142135381698608, math.sqrt(2.0)):  # f32's sqrt 2, and a double that rounds to it
            assert exact_gelu(_gelu(x, c, grouping=grouping)) == x, (grouping, c)
        assert exact_gelu(_gelu(x, 1.0 / math.sqrt(2.0), grouping=grouping, times=True)) == x, grouping
    bias_x = Binary("add", x, _x(F32, "b"))  # com.microsoft.BiasGelu's x + b, the same tree twice
    assert exact_gelu(_gelu(bias_x, math.sqrt(2.0))) == bias_x


def test_exact_gelu_leaves_the_rest_on_the_general_form():
    x = _x(F32)
    assert exact_gelu(_gelu(x, 3.0)) is None  # another divisor: erf_div's h + h erf
    assert exact_gelu(_gelu(x, 1.4142136573791504)) is None  # the next f32 after sqrt 2
    assert exact_gelu(_gelu(_x(F64), math.sqrt(2.0), F64)) is None  # f64: vmath's gelu is f32 only
    assert exact_gelu(_gelu(x, math.sqrt(2.0), y=_x(F32, "y"))) is None  # erf of another tensor
    assert exact_gelu(_gelu(x, math.sqrt(2.0), times=True)) is None  # erf(x * sqrt 2)
    assert exact_gelu(_gelu(x, 0.7, times=True)) is None


def _tanh_gelu(x, grouping: str = "torchscript", cube: str = "left", y=None):
    """x * 0.5 * (1 + tanh(s * (y + k * y**3))) as exporters group it (y defaults to x), the
    cube as products (`left`: ((y * y) * y) * k; `right`: k * (y * (y * y)))."""
    y = x if y is None else y
    k, s = Const(0.044715, F32), Const(0.7978845834732056, F32)
    y3k = Binary("mul", Binary("mul", Binary("mul", y, y), y), k) if cube == "left" else \
        Binary("mul", k, Binary("mul", y, Binary("mul", y, y)))
    u = Binary("mul", Binary("add", y, y3k), s) if cube == "left" else Binary("mul", s, Binary("add", y3k, y))
    one, half = Const(1.0, F32), Const(0.5, F32)
    t = Unary("tanh", u)
    if grouping == "torchscript":
        return Binary("mul", Binary("mul", x, Binary("add", t, one)), half)
    return Binary("mul", Binary("mul", half, x), Binary("add", one, t))  # 0.5 x * (1 + tanh)


def test_tanh_gelu_matches_the_groupings_and_the_cubic_argument():
    x = _x(F32)
    for grouping in ("torchscript", "halfx"):
        for cube in ("left", "right"):
            found = tanh_gelu(_tanh_gelu(x, grouping, cube))
            assert found is not None and found[0] == x, (grouping, cube)
            sk = tanh_gelu_argument(found[1], x)
            assert sk is not None and math.isclose(sk[0], 0.7978845834732056) and math.isclose(sk[1], 0.044715)


def test_tanh_gelu_argument_of_another_shape_is_left_to_the_general_doubling():
    x, y = _x(F32), _x(F32, "y")
    found = tanh_gelu(_tanh_gelu(x, y=y))  # tanh of another tensor's cubic: x sigmoid(2 u), u as written
    assert found is not None and tanh_gelu_argument(found[1], x) is None
    u = Binary("mul", Binary("add", x, Binary("mul", Binary("mul", x, x), Const(0.04, F32))), Const(0.8, F32))
    assert tanh_gelu_argument(u, x) is None  # x**2, not x**3
    assert tanh_gelu(Binary("mul", Binary("mul", x, Binary("add", Unary("tanh", x), Const(1.0, F32))),
                            Const(0.25, F32))) is None  # not a half
