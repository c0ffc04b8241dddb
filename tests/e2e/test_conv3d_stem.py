"""A video net's 3-D stem (mc3_18 / r3d_18: 3 input channels, kernel 3x7x7, stride (1, 2, 2),
pads (1, 3, 3)) through ops/conv_depth.py: with the channels as the first reduce var its
3*7*7 = 147 inner taps were past the GEMM schedule's inner-block limit and the conv ran as a
scalar loop nest; the largest extent first makes it a window GEMM. Compared with
onnxruntime at symbolic N, D, H, W (batch 1 and 3, odd planes); tolerance rtol 1e-4,
atol 5e-4 (sums of 441 products of N(0, 1) inputs and 0.1-scaled weights, another order)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxcc
from onnxcc.testing import ort_run


def _model(path, bias: bool):
    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array((rng.standard_normal((16, 3, 3, 7, 7)) * 0.1).astype(np.float32), "w")]
    ins = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b"))
        ins.append("b")
    node = helper.make_node("Conv", ins, ["y"], kernel_shape=[3, 7, 7], strides=[1, 2, 2], pads=[1, 3, 3, 1, 3, 3])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "D", "H", "W"])
    g = helper.make_graph([node], "stem", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


@pytest.mark.parametrize("bias", [True, False])
def test_stem_matches_onnxruntime(tmp_path, bias):
    _model(tmp_path / "m.onnx", bias)
    onnxcc.compile(tmp_path / "m.onnx", tmp_path / "lib", max_versions=1)
    lib = onnxcc.load(tmp_path / "lib")
    rng = np.random.default_rng(1)
    for n, d, h, w in ((1, 2, 9, 7), (3, 4, 16, 13)):
        feeds = {"x": rng.standard_normal((n, 3, d, h, w)).astype(np.float32)}
        want, got = ort_run(tmp_path / "m.onnx", feeds)["y"], lib.run(feeds)["y"]
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=5e-4)


def test_stem_is_a_window_gemm(tmp_path):
    _model(tmp_path / "m.onnx", True)
    text = onnxcc.compile(tmp_path / "m.onnx", tmp_path / "ll", emit="llvm", max_versions=1).text
    assert "gemm.ydepth" in text and ".win." in text
