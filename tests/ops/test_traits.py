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


def test_every_pad_rule_is_used_and_unknown_rules_are_refused():
    used = {d.pad_rule().rule for d in map(get_opdef, registered_ops()) if d.pad_rule() is not None}
    assert used == set(PAD_RULES)
    with pytest.raises(ValueError, match="unknown pad rule 'sorta'"):
        PadRule("sorta")
