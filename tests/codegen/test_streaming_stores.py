"""Non-temporal row stores of a row-staged compute (codegen/cpu/streaming_stores.py): none
with the path switched off (STREAMING); on, emitted only where the output may reach
STREAM_MIN_BYTES and the row is whole cache lines, fenced
before the function returns, and the results equal the plain path's bit for bit on both
sides of the threshold (symbolic sizes), on a misaligned output (the plain path) and
against a float64 reference."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxcc
from onnxcc.codegen.cpu import streaming_stores
from onnxcc.codegen.cpu.jit import JitKernel
from onnxcc.codegen.cpu.streaming_stores import STREAM_MIN_BYTES
from onnxcc.ir import DType, sym
from onnxcc.kernel import KernelProgram, Var, cast, rsum, sigmoid
from onnxcc.kernel.schedule import TargetInfo, schedule_program

F32 = DType.f32
WIDTH = 768
ROW_BYTES = WIDTH * 4
ABOVE, BELOW = STREAM_MIN_BYTES // ROW_BYTES + 40, STREAM_MIN_BYTES // ROW_BYTES - 40
rng = np.random.default_rng(3)


def _ln_silu(rows, width) -> KernelProgram:
    """Z = LayerNorm(X * sigmoid(X)) over rows of `width` (static or symbolic)."""
    p = KernelProgram.new("ln", [s for s in ("R", "N") if not isinstance({"R": rows, "N": width}[s], int)])
    X = p.input("X", F32, (rows, width))
    Z = p.output("Z", F32, (rows, width))
    d, e = Var("d"), Var("e")

    def body(r, j):
        a = X[r, j] * sigmoid(X[r, j])
        mean = rsum([(d, width)], X[r, d] * sigmoid(X[r, d])) / cast(width, F32)
        var = rsum([(e, width)], (X[r, e] * sigmoid(X[r, e]) - mean) * (X[r, e] * sigmoid(X[r, e]) - mean))
        return (a - mean) * (1.0 / (var / cast(width, F32) + 1e-5) ** 0.5)

    p.compute(Z, body)
    return p


def _ir(rows, width, parallel: bool) -> str:
    p = _ln_silu(rows, width)
    schedule_program(p, TargetInfo(parallel=parallel, min_parallel_work=64))
    (c,) = p.computes()
    assert c.schedule.row_stage is not None
    return JitKernel(p, parallel=parallel, parallel_min_work=64).llvm_ir


@pytest.fixture
def streaming(monkeypatch):
    """The streaming path turned on (STREAMING, its default)."""
    monkeypatch.setattr(streaming_stores, "STREAMING", True)


@pytest.fixture
def no_streaming(monkeypatch):
    """The streaming path switched off."""
    monkeypatch.setattr(streaming_stores, "STREAMING", False)


@pytest.mark.usefixtures("no_streaming")
@pytest.mark.parametrize("parallel", [False, True])
def test_no_row_streams_when_switched_off(parallel):
    for rows in (ABOVE, sym("R")):
        ir_text = _ir(rows, WIDTH, parallel)
        assert "nontemporal" not in ir_text and "sfence" not in ir_text, rows


@pytest.mark.usefixtures("streaming")
@pytest.mark.parametrize("parallel", [False, True])
def test_large_static_output_streams_small_does_not(parallel):
    big = _ir(ABOVE, WIDTH, parallel)
    assert re.search(r"store <16 x i32> [^\n]*!nontemporal", big)
    assert "llvm.x86.sse.sfence" in big
    for rows, width in ((BELOW, WIDTH), (sym("R"), 37), (sym("R"), sym("N"))):
        # below the threshold; a row not of whole lines; a symbolic row
        small = _ir(rows, width, parallel)
        assert "nontemporal" not in small and "sfence" not in small, (rows, width)
    assert "!nontemporal" in _ir(sym("R"), WIDTH, parallel)  # decided at run time


def _silu_ln_model() -> tuple[onnx.ModelProto, list[onnx.TensorProto]]:
    n = helper.make_node
    r = np.random.default_rng(1)
    inits = [numpy_helper.from_array((1 + 0.1 * r.standard_normal(WIDTH)).astype(np.float32), "g"),
             numpy_helper.from_array((0.1 * r.standard_normal(WIDTH)).astype(np.float32), "b")]
    nodes = [n("Sigmoid", ["x"], ["sg"]), n("Mul", ["x", "sg"], ["a"]),
             n("LayerNormalization", ["a", "g", "b"], ["y"], axis=-1, epsilon=1e-5)]
    shape = ["batch", "seq", WIDTH]
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), inits


def _ref(x: np.ndarray, g: np.ndarray, b: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    a = x / (1 + np.exp(-x))
    m = a.mean(-1, keepdims=True)
    return (a - m) / np.sqrt(((a - m) ** 2).mean(-1, keepdims=True) + 1e-5) * g + b


@pytest.mark.usefixtures("streaming")
def test_streamed_rows_equal_plain_rows(tmp_path):
    """One library (symbolic batch and seq): a call above the threshold into the loader's
    64-byte-aligned output (the streaming path), one below it and one into a misaligned
    output (both plain) give the same rows bit for bit, and the float64 reference's."""
    model, (g, b) = _silu_ln_model()
    asm = onnxcc.compile(model, tmp_path / "asm", name="chain", emit="asm").text
    assert re.search(r"vmovnt(ps|dq)\s+%zmm", asm) and "sfence" in asm
    onnxcc.compile(model, tmp_path / "lib", name="chain")
    lib = onnxcc.load(tmp_path / "lib")
    x = (rng.standard_normal((2, ABOVE // 2 + 1, WIDTH)) * 3).astype(np.float32)
    assert x[:1].nbytes < STREAM_MIN_BYTES <= x.nbytes
    big = lib.run({"x": x})["y"]
    assert big.ctypes.data % 64 == 0  # the premise of the streaming path
    np.testing.assert_allclose(big, _ref(x, numpy_helper.to_array(g), numpy_helper.to_array(b)),
                               rtol=1e-4, atol=2e-5)
    small = lib.run({"x": x[:1]})["y"]
    np.testing.assert_array_equal(big[:1], small)
    raw = np.zeros(x.nbytes + 64, np.uint8)
    start = (-raw.ctypes.data) % 64 + 4  # 4 bytes past a line: every row misaligned
    odd = raw[start:start + x.nbytes].view(np.float32).reshape(x.shape)
    lib.run({"x": x}, out={"y": odd})
    np.testing.assert_array_equal(odd, big)
