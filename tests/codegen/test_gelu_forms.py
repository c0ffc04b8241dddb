"""codegen/llvm/gelu_forms: which GELU spellings go to vmath's `gelu` (x Phi(x) fitted for
the divisor sqrt 2 rounded to f32) and which keep the general h + h erf(x / c) form."""

from __future__ import annotations

import math

from onnxcc.codegen.llvm.gelu_forms import exact_gelu
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
