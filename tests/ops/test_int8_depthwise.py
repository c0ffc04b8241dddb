"""The depthwise 8-bit conv kernel (ops/int8_depthwise.py) through the user's path (compile +
load + run), bit-exact against onnxruntime: u8 / s8 data with the extremes 0 / 255 / -128 /
127 in it, zero points at the extremes, per-tensor and per-channel scales and weight zero
points, strides 1 / 2, pads (asymmetric too), dilation, odd planes, channel counts that are
not a multiple of a vector, a depth multiplier, symbolic N / H / W; the kernel needs no VNNI,
so a generic x86-64 build takes it too."""

from __future__ import annotations

import numpy as np
import pytest
from int8_models import extremes, quant_model, run_against_ort
from onnx import TensorProto as T
from onnx import helper as h

CASES = [  # x type, w type, channels, depth multiplier, kernel, x zero point, w zero point, attrs, per-channel
    (T.UINT8, np.int8, 19, 1, 3, 255, 0, {"pads": [1, 1, 1, 1]}, True),
    (T.UINT8, np.int8, 8, 1, 3, 0, 0, {"pads": [1, 1, 1, 1], "strides": [2, 2]}, False),
    (T.INT8, np.int8, 33, 1, 3, -128, 0, {"pads": [1, 0, 2, 1], "strides": [2, 1]}, True),
    (T.UINT8, np.uint8, 5, 1, 3, 128, 255, {"dilations": [2, 2], "pads": [2, 2, 2, 2]}, False),
    (T.UINT8, np.uint8, 7, 1, 5, 7, 128, {"pads": [2, 2, 2, 2]}, True),
    (T.INT8, np.int8, 6, 2, 3, 127, -128, {"strides": [1, 2]}, True),
    (T.UINT8, np.int8, 17, 1, 3, 3, 0, {"auto_pad": "SAME_UPPER", "strides": [2, 2]}, False),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_depthwise_qlinear_conv_and_conv_integer(tmp_path, case):
    xt, wdt, c, mult, k, xz, wz, attrs, per_ch = CASES[case]
    r = np.random.default_rng(case)
    xdt = np.uint8 if xt == T.UINT8 else np.int8
    cout = c * mult
    w = extremes(r, (cout, 1, k, k), wdt, middle=True)
    wzs = np.full(cout, wz, wdt) if per_ch else wdt(wz)
    if per_ch:  # zero points at both ends across the channels
        wzs[::2] = np.iinfo(wdt).min if wz == 0 else wz
    inits = {"w": w, "xz": xdt(xz), "wz": wzs, "xs": np.float32(0.02),
             "ws": r.uniform(1e-4, 2e-3, cout).astype(np.float32) if per_ch else np.float32(9e-4),
             "ys": np.float32(0.3), "yz": xdt(np.iinfo(xdt).min + 5),
             "b": r.integers(-5000, 5000, cout).astype(np.int32)}
    nodes = [h.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"], group=c, **attrs),
             h.make_node("ConvInteger", ["x", "w", "xz"] + ([] if per_ch else ["wz"]), ["ci"], group=c, **attrs)]
    outs = [("y", xt)] + ([] if per_ch else [("ci", T.INT32)])
    m = quant_model(nodes, [("x", xt, ["N", c, "H", "W"])], outs, inits)
    feeds = [{"x": extremes(r, (n, c, hh, ww), xdt, middle=True)} for n, hh, ww in ((1, 5, 7), (2, 9, 4), (1, 13, 11))]
    text = run_against_ort(m, tmp_path, feeds)
    # the depthwise kernel took it: its folded weights, no f32 conv and no VNNI call; its
    # channels-last result kept a buffer (not recomputed in the channels-first reader's order)
    assert "wdw" in text and "i8gemm" not in text and "xf_" not in text
    assert "temp dwl" in text


def test_runtime_zero_point_and_no_bias(tmp_path):
    """X's zero point a graph input (read at run time), no bias, u8 weights off s8 (i32 products)"""
    r = np.random.default_rng(11)
    c = 21
    w = extremes(r, (c, 1, 3, 3), np.uint8, middle=True)
    inits = {"w": w, "wz": np.uint8(0), "xs": np.float32(0.05), "ws": np.float32(0.004), "ys": np.float32(0.9),
             "yz": np.uint8(250)}
    node = h.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"], group=c,
                       pads=[1, 1, 1, 1])
    m = quant_model([node], [("x", T.UINT8, ["N", c, "H", "W"]), ("xz", T.UINT8, [])], [("y", T.UINT8)], inits)
    feeds = [{"x": extremes(r, (1, c, 6, 5), np.uint8, middle=True), "xz": np.array(z, np.uint8)} for z in (0, 255, 77)]
    assert "wdw" in run_against_ort(m, tmp_path, feeds)


def test_generic_cpu(tmp_path):
    """a build for a plain x86-64 (no AVX-512) runs the same kernel, same results"""
    r = np.random.default_rng(5)
    c = 24
    inits = {"w": extremes(r, (c, 1, 3, 3), np.int8, middle=True), "wz": np.int8(0), "xz": np.uint8(200),
             "xs": np.float32(0.05), "ws": np.float32(0.004), "ys": np.float32(0.2), "yz": np.uint8(17)}
    node = h.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"], group=c,
                       pads=[1, 1, 1, 1], strides=[2, 2])
    m = quant_model([node], [("x", T.UINT8, ["N", c, "H", "W"])], [("y", T.UINT8)], inits)
    feeds = [{"x": extremes(r, (2, c, hw, hw), np.uint8, middle=True)} for hw in (7, 10)]
    assert "wdw" in run_against_ort(m, tmp_path, feeds, cpu="x86-64")
