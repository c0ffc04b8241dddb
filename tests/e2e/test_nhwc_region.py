"""Mobile-net blocks run channels-last by the nhwc-region pass (passes/nhwc_region.py),
compared with onnxruntime through the user path (compile, load, run), one library at
symbolic N, H, W: odd sizes, planes smaller than a vector, batch 1 and 3.

The graph holds a dense 3x3 stride-2 stem (NCHW) and, in one region, an inverted residual
block (1x1 expand to 40 channels (not a multiple of 16) -> Clip 0..6 -> 3x3 depthwise ->
HardSwish -> 1x1 project -> residual Add, then three more of 24 -> 48 -> 24), a 5x5
stride-2 depthwise with uneven pads, SiLU (x * Sigmoid(x)), an SE block (GlobalAveragePool
-> 1x1 -> Relu -> 1x1 -> HardSigmoid -> Mul broadcast: all inside the region), a dilated
3x3 depthwise and a per-channel constant Add; its exits feed a Flatten -> Gemm, a Concat
and a Shape. Tolerance rtol 1e-4, atol 1e-4: sums of up to 360 products of N(0, 1) values
and small weights, summed in another order than onnxruntime's."""

from __future__ import annotations

import onnx
import pytest
from compiled_model import assert_matches_onnxruntime, image_feeds, lib_fixture
from conv_net import ConvNet
from onnx import TensorProto, helper

import onnxcc

SHAPES = [dict(N=1, H=1, W=1), dict(N=3, H=5, W=7), dict(N=1, H=9, W=4), dict(N=1, H=16, W=16),
          dict(N=3, H=23, W=30)]


def _model(path):
    net = ConvNet(11)
    rng, const, conv, node = net.rng, net.const, net.conv, net.node
    lo, hi = const("lo", 0.0), const("hi", 6.0)
    s = conv("x", "stem", 3, 24, (3, 3), pads=[1, 1, 1, 1], strides=[2, 2])
    s = node("Relu", [s], "stem_r")
    e = conv(s, "expand", 24, 40, (1, 1))
    e = node("Clip", [e, lo, hi], "expand_r")
    d = conv(e, "dw3", 40, 40, (3, 3), group=40, pads=[1, 1, 1, 1])
    d = node("HardSwish", [d], "dw3_a")
    p = conv(d, "project", 40, 24, (1, 1))
    r = node("Add", [p, s], "res")
    for i in range(3):  # more inverted residual blocks: the region pays for its layout changes
        e = node("Relu", [conv(r, f"ex{i}", 24, 48, (1, 1))], f"ex{i}_r")
        d = node("Clip", [conv(e, f"dw{i}", 48, 48, (3, 3), group=48, pads=[1, 1, 1, 1]), lo, hi], f"dw{i}_r")
        r = node("Add", [conv(d, f"pr{i}", 48, 24, (1, 1)), r], f"res{i}")
    d5 = conv(r, "dw5", 24, 24, (5, 5), group=24, pads=[2, 1, 2, 3], strides=[2, 2])
    sg = node("Sigmoid", [d5], "dw5_sig")
    si = node("Mul", [d5, sg], "silu")
    g = node("GlobalAveragePool", [si], "se_pool")
    g = conv(g, "se1", 24, 8, (1, 1))
    g = node("Relu", [g], "se1_r")
    g = conv(g, "se2", 8, 24, (1, 1))
    g = node("HardSigmoid", [g], "se_gate")
    se = node("Mul", [si, g], "se")
    dd = conv(se, "dwdil", 24, 24, (3, 3), group=24, pads=[2, 2, 2, 2], dilations=[2, 2])
    o = node("Add", [dd, const("chan", rng.standard_normal((24, 1, 1)))], "chan_add")
    f = node("GlobalAveragePool", [o], "head_pool")
    f = node("Flatten", [f], "flat")
    fc = node("Gemm", [f, const("fc_w", rng.standard_normal((10, 24)) * 0.2)], "logits", transB=1)
    cat = node("Concat", [o, dd], "cat", axis=1)
    shp = node("Shape", [o], "shape")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])
    outs = [fc, cat, helper.make_tensor_value_info(shp, TensorProto.INT64, None)]
    onnx.save(net.model("mobile_block", [x], outs, 14), path)


built = lib_fixture("nhwc_region", _model, max_versions=1)


def test_region_is_channels_last(tmp_path):
    """The six depthwise and ten 1x1 convs became cc.conv_nhwc, the SE and head pools
    cc.global_avgpool_nhwc; the 3 -> 24 stem stays an NCHW Conv (24 channels: a masked half
    vector, passes/nhwc_region.py DENSE_STEM_MIN_COUT): its result is the one entry, the
    Concat's operand the one feature map leaving, the head pool's [N, 1, 1, C] leaves as a
    Reshape (a view)."""
    _model(tmp_path / "m.onnx")
    text = onnxcc.compile(tmp_path / "m.onnx", tmp_path / "ir", emit="ir", max_versions=1).text
    assert text.count("cc.conv_nhwc(") == 16
    assert text.count("onnx.Conv(") == 1
    assert text.count("cc.global_avgpool_nhwc(") == 2
    assert text.count("perm = [0, 2, 3, 1]") == 1  # the stem's result
    assert text.count("perm = [0, 3, 1, 2]") == 1  # the Concat's and Shape's operand
    assert text.count("onnx.Reshape(") == 1  # the head pool to Flatten


@pytest.mark.parametrize("dims", SHAPES, ids=lambda d: "x".join(str(v) for v in d.values()))
def test_region_matches_onnxruntime(built, dims):
    path, lib = built
    assert_matches_onnxruntime(path, lib, image_feeds(dims), rtol=1e-4, atol=1e-4, where=dims)
