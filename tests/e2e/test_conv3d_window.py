"""Dense 3-D convs as batches of 2-D window GEMMs (ops/conv_depth.py), compared with
onnxruntime: 3x3x3 padded at stride 1, stride (1, 2, 2) with uneven pads, dilation
(2, 1, 2), one input channel with a 2x1x1 kernel, a 1x3x3 kernel (one depth tap), and a
strided patch embedding (kernel = stride, no padding); one library at symbolic N, D, H, W,
batch 1 and 3, odd sizes. Also checked: the depth-batched form is what the kernel IR holds.
Tolerance rtol 1e-4, atol 1e-4: sums of up to 216 products of N(0, 1) inputs and 0.1-scaled
weights, summed in another order than onnxruntime's."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from compiled_model import assert_matches_onnxruntime, lib_fixture
from onnx import TensorProto, helper, numpy_helper

import onnxcc

# (name, in channels, out channels, kernel, attrs)
CONVS = [
    ("k333", 8, 12, (3, 3, 3), dict(pads=[1, 1, 1, 1, 1, 1])),
    ("s122", 8, 5, (3, 3, 3), dict(pads=[1, 0, 1, 0, 1, 2], strides=[1, 2, 2])),
    ("dil", 8, 4, (2, 3, 2), dict(pads=[1, 1, 1, 1, 1, 1], dilations=[2, 1, 2])),
    ("c1", 1, 6, (2, 1, 1), {}),
    ("k133", 8, 7, (1, 3, 3), dict(pads=[0, 1, 1, 0, 1, 1])),
    ("patch", 8, 16, (2, 2, 2), dict(strides=[2, 2, 2])),
]
SHAPES = [(1, 2, 2, 2), (3, 4, 5, 3), (1, 5, 9, 11), (2, 6, 8, 8)]


def _model(path):
    rng = np.random.default_rng(3)
    nodes, inits, outs = [], [], []
    for i, (name, c, m, k, attrs) in enumerate(CONVS):
        inits.append(numpy_helper.from_array((rng.standard_normal((m, c, *k)) * 0.1).astype(np.float32), f"w_{name}"))
        bias = [f"b_{name}"] if i % 2 == 0 else []
        if bias:
            inits.append(numpy_helper.from_array(rng.standard_normal(m).astype(np.float32), bias[0]))
        src = "x1" if c == 1 else "x"
        nodes.append(helper.make_node("Conv", [src, f"w_{name}", *bias], [name], **attrs))
        outs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8, "D", "H", "W"]),
           helper.make_tensor_value_info("x1", TensorProto.FLOAT, ["N", 1, "D", "H", "W"])]
    g = helper.make_graph(nodes, "conv3d", ins, outs, inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


built = lib_fixture("conv3d", _model, max_versions=1)


@pytest.mark.parametrize("n,dd,h,w", SHAPES)
def test_conv3d_matches_onnxruntime(built, n, dd, h, w):
    path, lib = built
    rng = np.random.default_rng(dd * 100 + h * 10 + w)
    feeds = {"x": rng.standard_normal((n, 8, dd, h, w)).astype(np.float32),
             "x1": rng.standard_normal((n, 1, dd, h, w)).astype(np.float32)}
    assert_matches_onnxruntime(path, lib, feeds, rtol=1e-4, atol=1e-4, where=(n, dd, h, w))


def test_conv3d_is_computed_depth_batched(tmp_path):
    _model(tmp_path / "m.onnx")
    text = onnxcc.compile(tmp_path / "m.onnx", tmp_path / "kir", emit="kernel", max_versions=1).text
    assert text.count("temp ydepth") == len(CONVS)
