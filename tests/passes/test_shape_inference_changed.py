"""shape-inference reports a change exactly when a type, a constraint or a symbol changed
(it compares those, not the printed module)."""

from __future__ import annotations

from onnxcc.ir.parser import parse_module
from onnxcc.passes import PassContext, get_pass

STALE = """
module @m {
  sym n in [1, 100]
  sym k in [1, 64]
  func @main(%x: f32[n, k], %b: f32[k]) -> (f32[n, k]) {
    %0 = onnx.Add(%x, %b) : (f32[1, 1])
    return %0
  }
}
"""


def test_changed_then_unchanged():
    m = parse_module(STALE)
    p = get_pass("shape-inference")
    assert p.run(m, PassContext()) is True  # the stale result type is recomputed
    assert "onnx.Add(%x, %b) : (f32[n, k])" in str(m)
    text = str(m)
    assert p.run(m, PassContext()) is False  # a second run changes nothing
    assert str(m) == text
