"""A conv whose im2col columns are packed per call and whose weights are prepacked (silero's
encoder convs over a few frames) picks one-vector-wide tiles per call when they waste fewer
columns (codegen/cpu/gemm.py `_narrow_choice`): both tile widths against onnxruntime, at
lengths that choose each (1 to 4 frames narrow, 200 wide), batch 1 and 3, odd lengths."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

import onnxcc
from onnxcc.testing import ort_run


def _conv_relu(cin: int, cout: int, k: int, pad: int, stride: int) -> onnx.ModelProto:
    rng = np.random.default_rng(5)
    w = rng.standard_normal((cout, cin, k)).astype(np.float32) / np.sqrt(cin * k)
    b = rng.standard_normal(cout).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[k], pads=[pad, pad], strides=[stride]),
             helper.make_node("Relu", ["c"], ["y"])]
    g = helper.make_graph(nodes, "narrow", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", cin, "L"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.ravel()),
                           helper.make_tensor("b", TensorProto.FLOAT, b.shape, b)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_narrow_and_wide_tiles_of_a_packed_conv(tmp_path):
    model = _conv_relu(129, 128, 3, 1, 1)
    path = tmp_path / "c.onnx"
    onnx.save(model, path)
    llvm = onnxcc.compile(path, tmp_path / "ll", emit="llvm").text
    assert "gemm.narrow" in llvm  # the per-call choice is there
    onnxcc.compile(path, tmp_path / "art")
    lib = onnxcc.load(tmp_path / "art")
    rng = np.random.default_rng(2)
    for n, length in ((1, 1), (3, 2), (1, 4), (3, 17), (2, 200)):
        x = rng.standard_normal((n, 129, length)).astype(np.float32)
        want = ort_run(model, {"x": x})["y"]
        got = lib.run({"x": x})["y"]
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
