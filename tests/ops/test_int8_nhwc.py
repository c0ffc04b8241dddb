"""cc.qlinearconv_nhwc (ops/int8_nhwc.py) through the user's path, bit-exact against
onnxruntime: every conv geometry of the VNNI GEMM's and the depthwise kernel's own tests
(test_int8_gemm.py CONVS, test_int8_depthwise.py CASES: u8 / s8 data with the extremes,
zero points at the extremes, per-channel weight zero points, strides, asymmetric pads,
dilations, a depth multiplier, symbolic N / H / W), each followed by a depthwise conv so the
two make a region (passes/qnhwc_region.py) and run channels-last; both results are outputs,
the first leaving the region through its Transpose. A first conv of 1 to 3 input channels
(STEMS, and CONVS' 3-channel one) reads the NCHW input in packed pixels."""

from __future__ import annotations

import numpy as np
import pytest
from int8_models import extremes, quant_model, run_against_ort
from onnx import TensorProto as T
from onnx import helper as h
from test_int8_depthwise import CASES as DEPTHWISE
from test_int8_gemm import CONVS

from onnxcc.codegen.cpu.backend import CpuBackend
from onnxcc.compiler import load_module
from onnxcc.passes import run_pipeline
from onnxcc.passes.pipelines import DEFAULT_GRAPH_PIPELINE

pytestmark = pytest.mark.skipif(not CpuBackend().int8_dot(), reason="the build host has no AVX-512 VNNI")

STEMS = [  # convs of 1 to 3 input channels, which read the NCHW input packed per pixel (`nchw_input`)
    (T.INT8, np.int8, 1, 16, 3, -5, 0, {"pads": [1, 1, 1, 1]}, False),
    (T.UINT8, np.int8, 2, 24, 5, 200, 0, {"pads": [2, 1, 0, 2], "strides": [2, 2]}, True),
    (T.INT8, np.int8, 3, 8, 3, 127, 0, {"dilations": [2, 1], "pads": [2, 1, 2, 1]}, False),
]
FIRST = [("dense", c) for c in CONVS + STEMS] + [("depthwise", c) for c in DEPTHWISE]


def _first_conv(r, kind, case):
    """(x type, channels in, channels out, inits, attrs) of a case of either table"""
    if kind == "dense":
        xt, wdt, cin, cout, k, xz, wz, attrs, per_ch = case
        group = 1
    else:
        xt, wdt, cin, mult, k, xz, wz, attrs, per_ch = case
        cout, group = cin * mult, cin
    xdt = np.uint8 if xt == T.UINT8 else np.int8
    w = extremes(r, (cout, cin // group, k, k), wdt, middle=kind == "depthwise")
    if wz and kind == "dense":  # weights within s8 of their zero point (else not on the GEMM)
        w = np.clip(w.astype(np.int64), np.iinfo(np.int8).min + wz, np.iinfo(np.int8).max + wz).astype(wdt)
    inits = {"w": w, "xz": xdt(xz), "wz": np.full(cout, wz, wdt) if per_ch else wdt(wz), "xs": np.float32(0.02),
             "ws": r.uniform(1e-4, 2e-3, cout).astype(np.float32), "ys": np.float32(0.5), "yz": xdt(3),
             "b": r.integers(-5000, 5000, cout).astype(np.int32)}
    return xt, xdt, cin, cout, inits, dict(attrs, group=group)


@pytest.mark.parametrize("case", range(len(FIRST)))
def test_conv_then_depthwise_channels_last(tmp_path, case):
    kind, spec = FIRST[case]
    r = np.random.default_rng(100 + case)
    xt, xdt, cin, cout, inits, attrs = _first_conv(r, kind, spec)
    inits.update(dw=extremes(r, (cout, 1, 3, 3), np.int8), dws=np.float32(4e-3), dwz=np.int8(0),
                 y2s=np.float32(0.3), y2z=xdt(np.iinfo(xdt).max - 9))
    nodes = [h.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"], **attrs),
             h.make_node("QLinearConv", ["y", "ys", "yz", "dw", "dws", "dwz", "y2s", "y2z"], ["y2"], group=cout,
                         pads=[1, 1, 1, 1])]
    m = quant_model(nodes, [("x", xt, ["N", cin, "H", "W"])], [("y", xt), ("y2", xt)], inits)
    g = load_module(m)
    run_pipeline(g, DEFAULT_GRAPH_PIPELINE)
    assert [op.name for op in g.walk()].count("cc.qlinearconv_nhwc") == 2
    feeds = [{"x": extremes(r, (n, cin, hh, ww), xdt)} for n, hh, ww in ((1, 5, 7), (2, 9, 4), (1, 13, 11))]
    text = run_against_ort(m, tmp_path, feeds)
    if kind == "dense":  # the first conv on the GEMM, storing channels-last in place
        assert "call onnxcc_i8gemm" in text
    assert ("xpix" in text) == (kind == "dense" and cin <= 3)  # the stem's packed pixels
