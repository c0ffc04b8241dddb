"""specialize on what exporters write: BatchNormalization's per-channel parameters are not
a broadcast against the trailing W, and a 0/1-rule version that can never run (W == 1 before
a 2-wide pool) is dropped instead of failing the compile (regression: a torch CNN exported
with do_constant_folding=False did not compile)."""

from __future__ import annotations

from onnxcc import parse_ir
from onnxcc.passes import run_pipeline
from onnxcc.passes.specialize import broadcast_symbols

BN = """module @m {
  sym n in [1, 100]
  sym w in [1, 64]
  func @main(%x: f32[n, 3, 4, w], %s: f32[3], %b: f32[3], %mu: f32[3], %var: f32[3]) -> (f32[n, 3, 4, w]) {
    %0 = onnx.BatchNormalization(%x, %s, %b, %mu, %var) : (f32[n, 3, 4, w])
    return %0
  }
}
"""

POOL = """module @m {
  sym n in [1, 100]
  sym w in [1, 64]
  func @main(%x: f32[n, 1, w], %b: f32[1]) -> (f32[n, 1, floor(w/2)]) {
    %0 = onnx.Add(%x, %b) : (f32[n, 1, w])
    %1 = onnx.MaxPool(%0) {kernel_shape = [2], strides = [2]} : (f32[n, 1, floor(w/2)])
    return %1
  }
}
"""


def test_batchnorm_parameters_are_not_a_broadcast():
    m = parse_ir(BN)
    assert broadcast_symbols(m.main) == set()


def test_one_version_that_cannot_run_is_dropped():
    m = parse_ir(POOL)
    run_pipeline(m, "shape-inference,specialize")
    assert m.dispatch["main"] == ["main.generic"]
    assert any(d.startswith("w1:") for d in m.attrs["dropped_versions"])
