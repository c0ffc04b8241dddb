"""GEMMs whose epilogue runs per column in the micro-kernel's registers (kernel/schedule.py
`GemmPlan.col_ops`: A read in place, B prepacked, one k block; a channels-last 1x1 conv's
shape): X[M, K] @ W[K, N] + bias[N] -> Relu -> + residual R[M, N] (and the order flipped,
and a Clip), compared with onnxruntime through the user path (compile, load, run) at a
symbolic M of odd sizes, N narrow (8 to 48: masked column tails) and K short (8 to 96).
Tolerance rtol 1e-4, atol 1e-4: sums of up to 96 products of N(0, 1) values and weights
scaled by 1/sqrt(K), summed in another order than onnxruntime's."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from compiled_model import assert_matches_onnxruntime
from onnx import TensorProto, helper, numpy_helper

import onnxcc
from onnxcc.ir import DType, sym
from onnxcc.kernel import KernelProgram, Var, relu, rsum
from onnxcc.kernel.schedule import TargetInfo, match_gemm

CASES = [(8, 8), (16, 24), (24, 16), (40, 48), (48, 96), (16, 72)]
"""(N, K)"""
ROWS = (1, 5, 13, 37, 250)


def _model(path, n: int, k: int) -> None:
    rng = np.random.default_rng(n * 100 + k)
    w = numpy_helper.from_array((rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32), "w")
    w2 = numpy_helper.from_array((rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32), "w2")
    bias = numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "bias")
    lo = numpy_helper.from_array(np.array(-0.5, np.float32), "lo")
    hi = numpy_helper.from_array(np.array(1.0, np.float32), "hi")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm"]),
        helper.make_node("Add", ["mm", "bias"], ["mb"]),
        helper.make_node("Relu", ["mb"], ["act"]),
        helper.make_node("Add", ["act", "r"], ["y"]),  # relu(x @ w + bias) + r
        helper.make_node("MatMul", ["x", "w2"], ["mm2"]),  # not "w": one MatMul, no fused epilogue
        helper.make_node("Add", ["bias", "mm2"], ["mb2"]),
        helper.make_node("Clip", ["mb2", "lo", "hi"], ["z"]),  # clip(bias + x @ w)
    ]
    g = helper.make_graph(nodes, "colepi",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["M", k]),
                           helper.make_tensor_value_info("r", TensorProto.FLOAT, ["M", n])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["M", n]),
                           helper.make_tensor_value_info("z", TensorProto.FLOAT, ["M", n])],
                          [w, w2, bias, lo, hi])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


@pytest.mark.parametrize("n,k", CASES)
def test_col_epilogue_matches_ort(tmp_path, n, k):
    _model(tmp_path / "m.onnx", n, k)
    llvm = onnxcc.compile(tmp_path / "m.onnx", tmp_path / "ll", emit="llvm", max_versions=1).text
    # both GEMMs take the per-column micro-kernels (".c" + the ops' hash in the name)
    assert len(set(re.findall(r"onnxcc\.gemm\.ukr\.\d+x\d+\.direct\.c(\w+)\.v", llvm))) == 2
    onnxcc.compile(tmp_path / "m.onnx", tmp_path / "lib", max_versions=1)
    lib = onnxcc.load(tmp_path / "lib")
    rng = np.random.default_rng(k)
    for m in ROWS:
        feeds = {"x": rng.standard_normal((m, k)).astype(np.float32),
                 "r": rng.standard_normal((m, n)).astype(np.float32)}
        assert_matches_onnxruntime(tmp_path / "m.onnx", lib, feeds, rtol=1e-4, atol=1e-4, where=f"M={m} N={n} K={k}")


def test_col_ops_planned_only_for_one_k_block():
    """The plan keeps the epilogue in registers for a K within one block and not beyond it
    (a later k block would add to a tile the epilogue already ran on)."""
    for k, want in ((48, True), (300, False)):
        p = KernelProgram.new("p", ["M"])
        a = p.input("A", DType.f32, (sym("M"), k))
        w = p.const("W", np.ones((k, 24), np.float32))
        bias = p.input("bias", DType.f32, (24,))
        kv = Var("k")
        c = p.compute(p.output("C", DType.f32, (sym("M"), 24)),
                      lambda i, j: relu(rsum([(kv, k)], a[i, kv] * w[kv, j]) + bias[j]))
        g = match_gemm(c, p, TargetInfo(gemm_min_work=1))
        assert g is not None and g.a_direct and g.b_const, g
        assert bool(g.col_ops) is want, g.describe()
        assert g.in_regs is want
