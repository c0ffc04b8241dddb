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

import onnxcc
from onnxcc.codegen.cpu.backend import CpuBackend
from onnxcc.compiler import load_module
from onnxcc.interp import run as interp_run
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


def _ir_chain() -> str:
    """cc.qlinearconv_nhwc as the pass leaves it, on every lowering: a stem reading NCHW
    (`nchw_input`, packed pixels on the GEMM), a conv of 2 groups (neither the GEMM nor the
    depthwise kernel: the loops) and u8 weights whose per-channel zero points put W - wz
    outside s8 (the loops)"""
    r = np.random.default_rng(2)
    consts = {"xs": ("f32[]", [0.05]), "xz": ("u8[]", [131]), "ws": ("f32[8]", r.uniform(1e-3, 3e-3, 8)),
              "wz": ("i8[]", [0]), "wz2": ("u8[8]", [0, 255, 128, 3, 77, 128, 200, 9]),
              "w0": ("i8[8, 3, 3, 3]", r.integers(-128, 128, 216)),
              "w1": ("i8[8, 4, 3, 3]", r.integers(-128, 128, 288)),
              "w2": ("u8[8, 8, 3, 3]", r.integers(0, 256, 576)), "b": ("i32[8]", r.integers(-2000, 2000, 8)),
              "ys": ("f32[]", [0.2]), "yz": ("u8[]", [120])}
    lines = [f"%{k} = cc.const() {{value = dense<{t}: [{', '.join(str(v) for v in np.asarray(a).tolist())}]>}} : ({t})"
             for k, (t, a) in consts.items()]
    out = "u8[N, floor(H/2), W - 1, 8]"
    lines += [
        "%0 = cc.qlinearconv_nhwc(%x, %xs, %xz, %w0, %ws, %wz, %ys, %yz, %b) {nchw_input = 1, pads = [1, 1, 1, 1]}"
        " : (u8[N, H, W, 8])",
        "%1 = cc.qlinearconv_nhwc(%0, %ys, %yz, %w1, %ws, %wz, %ys, %yz) {group = 2, pads = [0, 1, 1, 0],"
        f" strides = [2, 1]}} : ({out})",
        f"%2 = cc.qlinearconv_nhwc(%1, %ys, %yz, %w2, %ws, %wz2, %ys, %yz, %b) {{pads = [1, 1, 1, 1]}} : ({out})",
        "return %0, %1, %2"]
    body = "\n".join("    " + line for line in lines)
    return ("module @m {\n  sym N in [1, 4]\n  sym H in [4, 32]\n  sym W in [4, 32]\n"
            f"  func @main(%x: u8[N, 3, H, W]) -> (u8[N, H, W, 8], {out}, {out}) {{\n{body}\n  }}\n}}\n")


@pytest.mark.parametrize("cpu", [None, "x86-64-v4"])
def test_lowerings_equal_the_reference(tmp_path, cpu):
    """with VNNI (the stem on the GEMM) and without (every conv on the loops): the 8-bit
    results equal the numpy reference's (the QLinearConv reference on the transposed input)"""
    path = tmp_path / "chain.onnxir"
    path.write_text(_ir_chain())
    onnxcc.compile(path, tmp_path / "lib", **({"cpu": cpu} if cpu else {}))
    lib = onnxcc.load(tmp_path / "lib")
    module = load_module(path)
    r = np.random.default_rng(0)
    for n, hh, ww in ((1, 4, 4), (2, 9, 13)):
        x = extremes(r, (n, 3, hh, ww), np.uint8)
        got, want = list(lib.run({"x": x}).values()), interp_run(module, {"x": x})
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w)
