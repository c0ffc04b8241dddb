"""A short dense chain (benchmarks/convnets.py's `plain` net: a 3 -> 16 stem, a 16 -> C conv,
Relus and max pools, a global average pool) runs channels-last as implicit GEMM calls: the
stem joins the region because its result reaches a dense conv (DENSE_STEM_MIN_COUT), the
input's change of layout is taken by the stem's padded copy, and a dense conv weighs
DENSE_WEIGHT convs against the one change out (passes/nhwc_region.py). A stem of at most 16
output channels runs the 16-column micro-kernel (codegen/cpu/gemm_implicit.py), as does any
last panel of at most 16 columns (C = 40: a second panel of 8).

Compared with onnxruntime through the user path at symbolic N, H, W, on planes from 2x2 (the
second conv on a 1x1 plane: every tap but the centre reads padding) to 37x29 (sizes no pool
divides). Tolerance rtol 1e-4, atol 1e-4: sums of up to 144 products of N(0, 1) values and
weights scaled by 1/sqrt(fan-in), in another order than onnxruntime's."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from compiled_model import assert_matches_onnxruntime, image_feeds
from conv_net import ConvNet
from onnx import TensorProto, helper, numpy_helper

import onnxcc
from onnxcc.testing import ort_run

SHAPES = [dict(N=1, H=2, W=2), dict(N=3, H=5, W=7), dict(N=2, H=37, W=29), dict(N=1, H=3, W=16)]


def _model(path, stem: int, cout: int, second_pool: bool) -> None:
    net = ConvNet(stem * 100 + cout)

    def conv(x, y, cin, co):
        return net.conv(x, y, cin, co, 3, act="Relu", kernel_shape=[3, 3], pads=[1] * 4)

    h = conv("x", "c1", 3, stem)
    net.node("MaxPool", [h], "p1", kernel_shape=[2, 2], strides=[2, 2])
    h = conv("p1", "c2", stem, cout)
    if second_pool:
        h = net.node("MaxPool", [h], "p2", kernel_shape=[2, 2], strides=[2, 2])
    net.node("GlobalAveragePool", [h], "gap")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])
    onnx.save(net.model("stem_chain", [x], ["gap", h], 13), path)


def test_stem_and_conv_are_one_region(tmp_path):
    """Both convs channels-last with their Relus folded, the first pool between them; one
    change in (the 3-channel input), one out (read by the global pool and returned)."""
    _model(tmp_path / "m.onnx", 16, 32, second_pool=True)
    text = onnxcc.compile(tmp_path / "m.onnx", tmp_path / "ir", emit="ir", max_versions=1).text
    assert text.count("cc.conv_nhwc(") == 2
    assert text.count("onnx.Conv(") == 0
    assert text.count("relu = 1") == 2
    assert text.count("perm = [0, 2, 3, 1]") == 1
    assert text.count("perm = [0, 3, 1, 2]") == 1


def _dw_model(path, cin: int) -> None:
    """a cin -> 16 stem, Relu, a 3x3 depthwise conv, Relu, a 1x1 conv to 32 (a mobile net's start)"""
    rng = np.random.default_rng(cin)
    w1 = numpy_helper.from_array((rng.standard_normal((16, cin, 3, 3)) / 5).astype(np.float32), "w1")
    w2 = numpy_helper.from_array((rng.standard_normal((16, 1, 3, 3)) / 3).astype(np.float32), "w2")
    w3 = numpy_helper.from_array((rng.standard_normal((32, 16, 1, 1)) / 4).astype(np.float32), "w3")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], kernel_shape=[3, 3], pads=[1] * 4, strides=[2, 2]),
             helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("Conv", ["ar", "w2"], ["b"], kernel_shape=[3, 3], pads=[1] * 4, group=16),
             helper.make_node("Relu", ["b"], ["br"]),
             helper.make_node("Conv", ["br", "w3"], ["y"], kernel_shape=[1, 1])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", cin, "H", "W"])
    g = helper.make_graph(nodes, "dw", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [w1, w2, w3])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def test_image_stem_before_a_depthwise_conv_joins(tmp_path):
    """A 3 -> 16 stem before a depthwise conv (a mobile net's) joins the region: the stem call
    reads its windows from the NCHW input itself (ops/conv_implicit.py `_stem_planar`), so the
    input's change of layout costs no copy. Against onnxruntime at odd planes and batch 1 to
    3."""
    _dw_model(tmp_path / "m.onnx", 3)
    text = onnxcc.compile(tmp_path / "m.onnx", tmp_path / "ir", emit="ir", max_versions=1).text
    assert "onnx.Conv(" not in text
    assert text.count("cc.conv_nhwc(") == 3
    kernel = onnxcc.compile(tmp_path / "m.onnx", tmp_path / "k", emit="kernel", max_versions=1).text
    assert "xplanar" not in kernel and "call onnxcc_f32stem_c3k3x3s2x2p0(" in kernel
    onnxcc.compile(tmp_path / "m.onnx", tmp_path / "lib", max_versions=1)
    lib = onnxcc.load(tmp_path / "lib")
    for n, h, w in ((1, 1, 1), (3, 9, 14), (2, 31, 17)):
        feeds = {"x": np.random.default_rng(h * w).standard_normal((n, 3, h, w)).astype(np.float32)}
        np.testing.assert_allclose(lib.run(feeds)["y"], ort_run(tmp_path / "m.onnx", feeds)["y"],
                                   rtol=1e-4, atol=1e-4, err_msg=f"{n}x{h}x{w}")


def test_stem_of_five_channels_before_a_depthwise_conv_stays_out(tmp_path):
    """A 5 -> 16 stem (more channels than the planar copy takes) whose result reaches only a
    depthwise conv keeps STEM_MIN_COUT: it stays an NCHW Conv."""
    _dw_model(tmp_path / "m.onnx", 5)
    text = onnxcc.compile(tmp_path / "m.onnx", tmp_path / "ir", emit="ir", max_versions=1).text
    assert "onnx.Conv(%x" in text
    assert "cc.conv_nhwc(%x" not in text


@pytest.mark.parametrize("stem,cout,second_pool", [(16, 32, True), (16, 40, False), (16, 16, True)],
                         ids=["plain", "narrow_stem_two_panels", "sixteen"])
def test_stem_chain_matches_onnxruntime(tmp_path, stem, cout, second_pool):
    _model(tmp_path / "m.onnx", stem, cout, second_pool)
    onnxcc.compile(tmp_path / "m.onnx", tmp_path / "lib", max_versions=1)
    lib = onnxcc.load(tmp_path / "lib")
    for k, dims in enumerate(SHAPES):
        if second_pool and min(dims["H"], dims["W"]) < 4:
            continue  # the second pool needs a 2x2 plane
        assert_matches_onnxruntime(tmp_path / "m.onnx", lib, image_feeds(dims, seed=k), rtol=1e-4, atol=1e-4,
                                   where=dims)
