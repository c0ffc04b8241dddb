"""The 8-bit VNNI GEMM (ops/int8_gemm.py, codegen/cpu/gemm_int8.py) through the user's path
(compile + load + run), bit-exact against onnxruntime: random u8 / s8 data with the extremes
0 / 255 / -128 / 127 in it, zero points at the extremes, K not a multiple of 4, M and N tails,
per-channel scales and weight zero points, symbolic M / H / W; and the gate (a library built
for a CPU without VNNI does not use it)."""

from __future__ import annotations

import numpy as np
import pytest
from int8_models import extremes, quant_model, run_against_ort
from onnx import TensorProto as T
from onnx import helper as h

from onnxcc.codegen.cpu.backend import CpuBackend

pytestmark = pytest.mark.skipif(not CpuBackend().int8_dot(), reason="the build host has no AVX-512 VNNI")


@pytest.mark.parametrize("adt,bdt,k,n", [(np.uint8, np.int8, 19, 45), (np.int8, np.int8, 64, 33),
                                         (np.uint8, np.uint8, 37, 70)])
def test_matmul_integer_and_qlinear_matmul(tmp_path, adt, bdt, k, n):
    r = np.random.default_rng(k)
    ta = T.UINT8 if adt == np.uint8 else T.INT8
    info = np.iinfo(adt)
    b = extremes(r, (k, n), bdt)
    # u8 weights fit s8 only with a zero point in their middle (else the integer path runs)
    bz = np.full(n, 128, bdt) if bdt == np.uint8 else r.integers(-3, 3, n).astype(bdt)
    b = np.clip(b.astype(np.int64), bz.astype(np.int64) - 128, bz.astype(np.int64) + 127).astype(bdt)
    inits = {"b": b, "bz": bz, "az": adt(info.max), "az0": adt(info.min), "as": np.float32(0.03),
             "bs": r.uniform(1e-3, 3e-3, n).astype(np.float32), "ys": np.float32(0.7), "yz": adt(info.min + 3)}
    nodes = [h.make_node("MatMulInteger", ["a", "b"], ["y0"]),
             h.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y1"]),
             h.make_node("QLinearMatMul", ["a", "as", "az0", "b", "bs", "bz", "ys", "yz"], ["y2"])]
    m = quant_model(nodes, [("a", ta, ["B", "M", k])], [("y0", T.INT32), ("y1", T.INT32), ("y2", ta)], inits)
    feeds = [{"a": extremes(r, s, adt)} for s in ((1, 1, k), (2, 13, k), (1, 37, k))]
    text = run_against_ort(m, tmp_path, feeds)
    # u8 weights without their zero point (y0) do not fit s8: the integer path
    assert text.count("call onnxcc_i8gemm(") == (1 if bdt == np.uint8 else 2)
    # the requantization in the GEMM's stores
    assert text.count(f"call onnxcc_i8gemm_{'u8' if adt == np.uint8 else 'i8'}(") == 1


CONVS = [  # x type, w type, cin, cout, kernel, x zero point, w zero point, attrs, per-channel w zero point
    (T.UINT8, np.int8, 16, 24, 1, 128, 0, {}, False),
    (T.UINT8, np.int8, 8, 19, 3, 255, 0, {"pads": [1, 1, 1, 1]}, False),
    (T.INT8, np.int8, 6, 33, 3, -128, 0, {"pads": [1, 0, 2, 1], "strides": [2, 1]}, False),
    (T.UINT8, np.uint8, 5, 7, 3, 0, 128, {"dilations": [2, 1], "pads": [2, 2, 2, 2]}, False),
    (T.UINT8, np.int8, 3, 9, 3, 7, 0, {"dilations": [1, 2], "pads": [0, 2, 1, 2], "strides": [1, 3]}, False),
    (T.INT8, np.int8, 17, 9, 1, 127, 1, {"strides": [2, 2]}, True),
]


@pytest.mark.parametrize("case", range(len(CONVS)))
def test_conv_integer_and_qlinear_conv(tmp_path, case):
    xt, wdt, cin, cout, k, xz, wz, attrs, per_ch = CONVS[case]
    r = np.random.default_rng(case)
    xdt = np.uint8 if xt == T.UINT8 else np.int8
    w = extremes(r, (cout, cin, k, k), wdt)
    if wz:  # weights within s8 of their zero point
        w = np.clip(w.astype(np.int64), np.iinfo(np.int8).min + wz, np.iinfo(np.int8).max + wz).astype(wdt)
    inits = {"w": w, "xz": xdt(xz), "wz": np.full(cout, wz, wdt) if per_ch else wdt(wz), "xs": np.float32(0.02),
             "ws": r.uniform(1e-4, 2e-3, cout).astype(np.float32), "ys": np.float32(0.5), "yz": xdt(3),
             "b": r.integers(-5000, 5000, cout).astype(np.int32)}
    nodes = [h.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"], **attrs),
             h.make_node("ConvInteger", ["x", "w", "xz"] + ([] if per_ch else ["wz"]), ["c"], **attrs)]
    outs = [("y", xt)] + ([] if per_ch else [("c", T.INT32)])
    m = quant_model(nodes, [("x", xt, ["N", cin, "H", "W"])], outs, inits)
    feeds = [{"x": extremes(r, (n, cin, hh, ww), xdt)} for n, hh, ww in ((1, 5, 7), (2, 9, 4), (1, 13, 11))]
    text = run_against_ort(m, tmp_path, feeds)
    # (N <= 16: the callees of 16-column panels, `_n16`)
    wide = "_n16" if cout <= 16 else ""
    assert f"call onnxcc_i8gemm_rows_{'u8' if xt == T.UINT8 else 'i8'}{wide}(" in text
    assert per_ch or f"call onnxcc_i8gemm_rows{wide}(" in text


def test_no_vnni_target_keeps_the_integer_path(tmp_path):
    """--cpu x86-64-v4 (AVX-512 without VNNI): the same model, no VNNI call, same results"""
    r = np.random.default_rng(9)
    inits = {"b": extremes(r, (40, 24), np.int8), "az": np.uint8(9)}
    m = quant_model([h.make_node("MatMulInteger", ["a", "b", "az"], ["y"])], [("a", T.UINT8, ["M", 40])],
               [("y", T.INT32)], inits)
    text = run_against_ort(m, tmp_path, [{"a": extremes(r, (5, 40), np.uint8)}], cpu="x86-64-v4")
    assert "i8gemm" not in text
    assert not CpuBackend(cpu="x86-64-v4").int8_dot() and CpuBackend(cpu="icelake-server").int8_dot()
