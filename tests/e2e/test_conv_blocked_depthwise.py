"""Depthwise convs through the channel-blocked path (ops/conv_blocked.py), compared with
onnxruntime: 5x5 at stride 1 with 40 channels (two and a half blocks: the ragged block's
padding channels), 5x5 at stride 2 with 144 channels and 5x7 at strides (2, 3) with
dilations (1, 2) and uneven pads, a 3-D 3x3x3 and a 1-D 25-tap one; one library at symbolic
N and spatial dims, with planes smaller than a vector and odd sizes, batch 1 and 3. Also
checked: which convs take the path (the kernel IR holds the blocked copies) and which keep
the row-vectorised taps. Tolerance rtol 1e-4, atol 1e-4: sums of up to 35 products of
N(0, 1) inputs and weights, summed in another order than onnxruntime's."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from compiled_model import assert_matches_onnxruntime, lib_fixture
from onnx import TensorProto, helper, numpy_helper

import onnxcc

# (name, channels, kernel, attrs, input dims): input dims are symbols but for N's
CONVS = [
    ("k5s1", 40, (5, 5), dict(pads=[2, 2, 2, 2]), ["H", "W"]),
    ("k5s2", 144, (5, 5), dict(pads=[2, 2, 2, 2], strides=[2, 2]), ["H", "W"]),
    ("k57dil", 144, (5, 7), dict(pads=[1, 3, 2, 0], strides=[2, 3], dilations=[1, 2]), ["P", "Q"]),
    ("k333", 32, (3, 3, 3), dict(pads=[1, 1, 1, 1, 1, 1]), ["D", "H", "W"]),
    ("k25", 24, (25,), dict(pads=[12, 12]), ["L"]),
]
# P x Q: the dilated 5x7 window spans 5 x 13 (with 3 pad rows and 3 pad columns)
SHAPES = [dict(N=1, H=1, W=1, D=1, L=1, P=2, Q=10), dict(N=3, H=2, W=3, D=2, L=5, P=3, Q=11),
          dict(N=1, H=7, W=7, D=3, L=16, P=7, Q=13), dict(N=1, H=14, W=15, D=4, L=33, P=9, Q=16),
          dict(N=3, H=9, W=20, D=5, L=40, P=12, Q=20)]


def _model(path):
    rng = np.random.default_rng(5)
    nodes, inits, ins, outs = [], [], [], []
    for i, (name, c, k, attrs, dims) in enumerate(CONVS):
        inits.append(numpy_helper.from_array(rng.standard_normal((c, 1, *k)).astype(np.float32), f"w_{name}"))
        bias = ["b_" + name] if i % 2 == 0 else []
        if bias:
            inits.append(numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), bias[0]))
        nodes.append(helper.make_node("Conv", [f"x_{name}", f"w_{name}", *bias], [f"c_{name}"], group=c, **attrs))
        nodes.append(helper.make_node("Relu", [f"c_{name}"], [name]))
        ins.append(helper.make_tensor_value_info(f"x_{name}", TensorProto.FLOAT, ["N", c, *dims]))
        outs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    g = helper.make_graph(nodes, "blocked_dw", ins, outs, inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


built = lib_fixture("blocked_dw", _model, max_versions=1)


@pytest.mark.parametrize("dims", SHAPES, ids=lambda d: "x".join(str(v) for v in d.values()))
def test_blocked_depthwise_matches_onnxruntime(built, dims):
    path, lib = built
    rng = np.random.default_rng(dims["H"] * 100 + dims["W"])
    feeds = {f"x_{name}": rng.standard_normal((dims["N"], c, *[dims[s] for s in sp])).astype(np.float32)
             for name, c, _, _, sp in CONVS}
    assert_matches_onnxruntime(path, lib, feeds, rtol=1e-4, atol=1e-4, where=dims)


def _dw_model(path, c, k, strides):
    w = numpy_helper.from_array(np.ones((c, 1, *k), np.float32), "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], group=c, strides=strides)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", c, "H", "W"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    onnx.save(helper.make_model(helper.make_graph([node], "dw", [x], [y], [w]),
                                opset_imports=[helper.make_opsetid("", 13)]), path)


@pytest.mark.parametrize("c,k,strides,blocked", [
    (64, (5, 5), [1, 1], True),     # 25 taps at stride 1
    (128, (5, 5), [2, 2], True),    # strided, wide
    (48, (5, 5), [2, 2], False),    # strided, narrow: the input copy weighs more
    (64, (3, 3), [1, 1], False),    # 9 taps: the copies cost more than they save
])
def test_which_convs_take_the_blocked_path(tmp_path, c, k, strides, blocked):
    _dw_model(tmp_path / "m.onnx", c, k, strides)
    text = onnxcc.compile(tmp_path / "m.onnx", tmp_path / "kir", emit="kernel", max_versions=1).text
    assert ("xblk" in text) is blocked
