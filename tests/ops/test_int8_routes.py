"""QGemm (transB or not), MatMulIntegerToFloat and DynamicQuantizeMatMul (com.microsoft) with a
constant B on the 8-bit VNNI GEMM (ops/int8_gemm.py), compared with onnxruntime: exact for the
8-bit and the i32-sum results; the float outputs to 1e-6 relative (the same f32 product of the
exact sum and the scales, onnxruntime may fuse the multiply differently)."""

from __future__ import annotations

import numpy as np
import pytest
from int8_models import extremes, quant_model, run_against_ort
from onnx import TensorProto as T
from onnx import helper as h

from onnxcc.codegen.cpu.backend import CpuBackend

pytestmark = pytest.mark.skipif(not CpuBackend().int8_dot(), reason="the build host has no AVX-512 VNNI")


@pytest.mark.parametrize("trans_b", [0, 1])
def test_qgemm(tmp_path, trans_b):
    r = np.random.default_rng(trans_b)
    k, n = 37, 45
    b = extremes(r, (n, k) if trans_b else (k, n), np.int8)
    inits = {"b": b, "as": np.float32(0.02), "az": np.uint8(255), "bs": r.uniform(1e-3, 3e-3, n).astype(np.float32),
             "bz": np.zeros(n, np.int8), "c": r.integers(-9000, 9000, n).astype(np.int32), "ys": np.float32(0.4),
             "yz": np.uint8(7)}
    nodes = [h.make_node("QGemm", ["a", "as", "az", "b", "bs", "bz", "c", "ys", "yz"], ["y"], domain="com.microsoft",
                         transB=trans_b, alpha=0.75),
             h.make_node("QGemm", ["a", "as", "az", "b", "bs", "bz", "c"], ["f"], domain="com.microsoft",
                         transB=trans_b)]
    m = quant_model(nodes, [("a", T.UINT8, ["M", k])], [("y", T.UINT8), ("f", T.FLOAT)], inits, microsoft=True)
    feeds = [{"a": extremes(r, (mm, k), np.uint8)} for mm in (1, 9, 23)]
    text = run_against_ort(m, tmp_path, feeds, {"y"})
    assert text.count("call onnxcc_i8gemm(") == 2


def test_matmul_integer_to_float_and_dynamic_quantize_matmul(tmp_path):
    r = np.random.default_rng(3)
    k, n = 24, 19
    inits = {"b": extremes(r, (k, n), np.int8), "as": np.float32(0.03), "az": np.uint8(128),
             "bs": r.uniform(1e-3, 3e-3, n).astype(np.float32), "bz": np.zeros(n, np.int8),
             "bias": r.standard_normal(n).astype(np.float32)}
    nodes = [h.make_node("MatMulIntegerToFloat", ["a", "b", "as", "bs", "az", "bz", "bias"], ["y"],
                         domain="com.microsoft"),
             h.make_node("DynamicQuantizeMatMul", ["x", "b", "bs", "bz", "bias"], ["z"], domain="com.microsoft")]
    m = quant_model(nodes, [("a", T.UINT8, ["B", "M", k]), ("x", T.FLOAT, ["M", k])], [("y", T.FLOAT), ("z", T.FLOAT)],
               inits, microsoft=True)
    feeds = [{"a": extremes(r, (bb, mm, k), np.uint8), "x": r.standard_normal((mm, k)).astype(np.float32)}
             for bb, mm in ((1, 1), (2, 7), (3, 17))]
    text = run_against_ort(m, tmp_path, feeds, set())
    assert text.count("call onnxcc_i8gemm(") == 2


@pytest.mark.parametrize("n", [5, 16])
def test_narrow_panels(tmp_path, n):
    """N <= 16 on the 16-column panels (`_n16` callees): i32 sums, requantized u8 rows, and a
    requantized conv (its channels-last store), M and N tails"""
    r = np.random.default_rng(n)
    k = 21
    inits = {"b": extremes(r, (k, n), np.int8), "az": np.uint8(3), "as": np.float32(0.02), "bs": np.float32(0.002),
             "ys": np.float32(0.3), "yz": np.uint8(9), "w": extremes(r, (n, 4, 3, 3), np.int8), "xz": np.uint8(250),
             "ws": r.uniform(1e-3, 3e-3, n).astype(np.float32), "bz": np.int8(0)}
    nodes = [h.make_node("MatMulInteger", ["a", "b", "az"], ["y0"]),
             h.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y1"]),
             h.make_node("QLinearConv", ["x", "as", "xz", "w", "ws", "bz", "ys", "yz"], ["y2"], pads=[1, 1, 1, 1])]
    m = quant_model(nodes, [("a", T.UINT8, ["M", k]), ("x", T.UINT8, ["N", 4, "H", "W"])],
               [("y0", T.INT32), ("y1", T.UINT8), ("y2", T.UINT8)], inits, microsoft=True)
    feeds = [{"a": extremes(r, (mm, k), np.uint8), "x": extremes(r, (nb, 4, hh, ww), np.uint8)}
             for mm, nb, hh, ww in ((1, 1, 3, 3), (9, 2, 5, 7), (30, 1, 11, 13))]
    text = run_against_ort(m, tmp_path, feeds, {"y0", "y1", "y2"})
    calls = text.count("call onnxcc_i8gemm")
    assert calls >= 3 and text.count("_n16(") == calls  # every version's three calls narrow
