"""QLinearConv through the float conv's lowering (ops/int_as_f32.py) where its f32 sums are
exact, the integer path where they might not be: both bit-identical to onnxruntime; and the
kernel program each gets (the f32 sum a GEMM-able compute of its own, requantized after it)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h

import onnxcc
from onnxcc.testing import ort_run

NO_VNNI = "x86-64-v4"


def _qconv(cin: int, wmax: int, seed: int) -> onnx.ModelProto:
    """x (u8, zero point 0: |x - xz| up to 255) -> QLinearConv 3x3 pad 1 with per-channel
    scales and a bias; the weights +-wmax with random signs"""
    r = np.random.default_rng(seed)
    w = (r.choice([-1, 1], (8, cin, 3, 3)) * wmax).astype(np.int8)
    inits = {"xs": np.float32(0.02), "xz": np.uint8(0), "w": w, "ws": r.uniform(1e-4, 2e-3, 8).astype(np.float32),
             "wz": np.zeros(8, np.int8), "ys": np.float32(0.5), "yz": np.uint8(128),
             "b": r.integers(-5000, 5000, 8).astype(np.int32)}
    node = h.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"], pads=[1, 1, 1, 1])
    g = h.make_graph([node], "g", [h.make_tensor_value_info("x", T.UINT8, ["N", cin, "H", "W"])],
                     [h.make_tensor_value_info("y", T.UINT8, None)],
                     [onnx.numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def _run_both(m: onnx.ModelProto, tmp_path, cin: int) -> str:
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    # built for AVX-512 without VNNI: on a VNNI CPU the 8-bit GEMM (int8_gemm.py) would take it
    onnxcc.compile(path, tmp_path / "lib", cpu=NO_VNNI)
    lib = onnxcc.load(tmp_path / "lib")
    r = np.random.default_rng(1)
    for shape in ((1, cin, 5, 7), (2, cin, 9, 4)):
        x = r.integers(0, 256, shape).astype(np.uint8)
        got, want = lib.run({"x": x})["y"], ort_run(path, {"x": x})["y"]
        assert got.dtype == want.dtype == np.uint8
        np.testing.assert_array_equal(got, want)
    return onnxcc.compile(path, tmp_path / "kir", emit="kernel", cpu=NO_VNNI).text


def test_exact_sums_take_the_float_conv(tmp_path):
    # 255 * 16 * 9 * 100 + 5000 < 2**24: every f32 partial sum is an exact integer
    text = _run_both(_qconv(16, 100, 0), tmp_path, 16)
    assert "f32[8, 16, 3, 3]" in text and "i32(" not in text.split("acc")[-1]
    # the f32 sum is its own compute (the GEMM path stores f32); the requantization reads it
    assert any(ln.strip().startswith("acc_") and "sum(" in ln for ln in text.splitlines())


def test_inexact_sums_keep_the_integer_path(tmp_path):
    # 255 * 64 * 9 * 127 > 2**24: an f32 sum could round, so the i32 contraction runs
    text = _run_both(_qconv(64, 127, 2), tmp_path, 64)
    assert "wf_" not in text and "i32" in text
