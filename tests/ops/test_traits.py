"""Traits on the OpDefs: the pad rules bucketize applies, the canonical patterns and costs."""

from __future__ import annotations

import math

import pytest

from onnxcc.ops import get_opdef, registered_ops
from onnxcc.ops.traits import PAD_RULES, PadRule


def test_pad_rules_live_on_the_opdefs():
    assert get_opdef("onnx.ReduceMax").pad_rule() == PadRule("reduce", identity=-math.inf, keeps_zero=True)
    assert get_opdef("onnx.ReduceProd").pad_rule() == PadRule("reduce", identity=1.0)
    assert get_opdef("onnx.Softmax").pad_rule() == PadRule("softmax", result_fill=0.0, finite=True)
    assert get_opdef("onnx.Reshape").pad_rule().shape_operands == (1,)
    assert get_opdef("onnx.Add").pad_rule().finite and not get_opdef("onnx.Exp").pad_rule().finite
    assert get_opdef("onnx.Exp").pad_rule() == PadRule("elementwise")  # the elementwise default
    assert get_opdef("onnx.NonZero").pad_rule() is None  # refused by bucketize, by name
    assert [get_opdef(f"onnx.{n}").pad_rule().fills for n in ("Mul", "Div", "Where", "Add")] == [
        "product", "quotient", "select", ""]


def test_every_pad_rule_is_used_and_unknown_rules_are_refused():
    used = {d.pad_rule().rule for d in map(get_opdef, registered_ops()) if d.pad_rule() is not None}
    assert used == set(PAD_RULES)
    with pytest.raises(ValueError, match="unknown pad rule 'sorta'"):
        PadRule("sorta")
    with pytest.raises(ValueError, match="unknown fill algebra 'sum'"):
        PadRule("elementwise", fills="sum")


def test_canonical_patterns_live_on_the_opdefs():
    from onnxcc.ops.traits import Neutral, set_canonical
    from onnxcc.passes.canonicalize import declaring

    assert set(declaring("same-type-identity")) >= {"onnx.Identity", "onnx.Reshape", "onnx.Cast"}
    assert set(declaring("neutral-operand")) == {"onnx.Add", "onnx.Sub", "onnx.Mul", "onnx.Div"}
    assert get_opdef("onnx.Sub").neutral == Neutral(0, commutes=False)
    assert declaring("transpose") == ("onnx.Transpose",) and declaring("dropout") == ("onnx.Dropout",)
    with pytest.raises(ValueError, match="unknown canonical pattern"):
        set_canonical("fold-everything", "onnx.Add")


def test_costs_live_on_the_opdefs():
    from onnxcc import parse_ir
    from onnxcc.passes.bucket_choice import flops_polynomial

    m = parse_ir("""module @m {
  sym n in [1, 64]
  func @main(%a: f32[n, 8], %b: f32[8, 4]) -> (f32[n, 4]) {
    %0 = onnx.MatMul(%a, %b) : (f32[n, 4])
    %1 = onnx.Relu(%0) : (f32[n, 4])
    %2 = onnx.Softmax(%1) {axis = 1} : (f32[n, 4])
    %3 = onnx.ReduceSum(%2) {keepdims = 1} : (f32[1, 1])
    return %2
  }
}
""")
    n = m.symbols["n"].symbol
    # MatMul 2*4n*8, Relu 4n, Softmax 4*4n, ReduceSum one per input element 4n
    assert flops_polynomial(m.functions["main"]) == 64 * n + 4 * n + 16 * n + 4 * n
