"""Convolutions through every native path (im2col GEMM with constant weights packed at
compile time, 1x1 with flat B columns, grouped, depthwise as unrolled taps with and
without a channel multiplier; strides, dilations, asymmetric padding) compiled once at
symbolic N, H, W and compared with onnxruntime at odd sizes (rtol 1e-4, atol 1e-4: sums
of up to 144 products)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from compiled_model import assert_matches_onnxruntime, lib_fixture
from onnx import TensorProto, helper, numpy_helper

import onnxcc
from onnxcc.testing import ort_run

C = 4
# (name, out channels, kernel, attrs)
CONVS = [
    ("pad1", 8, (3, 3), dict(pads=[1, 1, 1, 1])),
    ("asym", 6, (5, 3), dict(pads=[1, 0, 2, 1])),
    ("stride2", 8, (3, 3), dict(pads=[1, 1, 1, 1], strides=[2, 2])),
    ("dil2", 5, (3, 3), dict(pads=[2, 2, 2, 2], dilations=[2, 2])),
    ("same", 8, (3, 3), dict(auto_pad="SAME_UPPER", strides=[2, 1])),
    ("group2", 6, (3, 3), dict(pads=[1, 1, 1, 1], group=2)),
    ("depthwise", 4, (3, 3), dict(pads=[1, 1, 1, 1], group=4)),
    ("dw_mult_s2_d2", 8, (3, 3), dict(pads=[2, 1, 2, 0], strides=[2, 2], dilations=[2, 2], group=4)),
    ("dw_5x5_s2", 4, (5, 5), dict(pads=[2, 2, 2, 2], strides=[2, 1], group=4)),
    ("pointwise", 16, (1, 1), {}),
    ("pointwise_s2", 8, (1, 1), dict(strides=[2, 2])),
    ("valid", 7, (3, 3), {}),
]


def _model(path):
    rng = np.random.default_rng(3)
    nodes, inits, outs = [], [], []
    for name, m, k, attrs in CONVS:
        w = rng.standard_normal((m, C // attrs.get("group", 1), *k)).astype(np.float32)
        bias = rng.standard_normal(m).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w_{name}"), numpy_helper.from_array(bias, f"b_{name}")]
        nodes.append(helper.make_node("Conv", ["x", f"w_{name}", f"b_{name}"], [f"c_{name}"], **attrs))
        nodes.append(helper.make_node("Relu", [f"c_{name}"], [name]))
        outs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", C, "H", "W"])
    g = helper.make_graph(nodes, "convs", [x], outs, inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


built = lib_fixture("convs", _model)


@pytest.mark.parametrize("n,h,w", [(1, 5, 7), (2, 9, 4), (1, 17, 33), (3, 6, 6), (1, 40, 23), (2, 64, 61)])
def test_conv_paths_match_onnxruntime(built, n, h, w):
    path, lib = built
    x = np.random.default_rng(h * w).standard_normal((n, C, h, w)).astype(np.float32)
    assert_matches_onnxruntime(path, lib, {"x": x}, rtol=1e-4, atol=1e-4, where=(n, h, w))


def test_single_channel_input_takes_the_tap_path_and_matches(tmp_path):
    """C == 1, group == 1 (an audio CNN's first layer): every output reads one input
    channel, so it lowers as unrolled taps too; a 1x7 kernel and a 3x3 one."""
    rng = np.random.default_rng(5)
    inits, nodes, outs = [], [], []
    for name, k, pads in (("k3", (3, 3), [1, 1, 1, 1]), ("k17", (1, 7), [0, 3, 0, 3])):
        inits.append(numpy_helper.from_array(rng.standard_normal((8, 1, *k)).astype(np.float32), f"w_{name}"))
        nodes.append(helper.make_node("Conv", ["x", f"w_{name}"], [name], pads=pads))
        outs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, "H", "W"])
    path = tmp_path / "c1.onnx"
    onnx.save(helper.make_model(helper.make_graph(nodes, "c1", [x], outs, inits),
                                opset_imports=[helper.make_opsetid("", 17)]), path)
    onnxcc.compile(path, tmp_path / "lib")
    lib = onnxcc.load(tmp_path / "lib")
    for n, h, w in [(1, 3, 40), (2, 11, 5)]:
        feeds = {"x": rng.standard_normal((n, 1, h, w)).astype(np.float32)}
        want, got = ort_run(path, feeds), lib.run(feeds)
        for name in ("k3", "k17"):
            np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-4,
                                       err_msg=f"{name} {(n, h, w)}")

