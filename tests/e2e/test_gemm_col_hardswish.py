"""A GEMM epilogue that multiplies the value by a constant chain of itself (HardSwish,
x * min(max(x / 6 + 0.5, 0), 1); x * HardSigmoid(x) as older exporters write it) runs in the
micro-kernel's registers as a column epilogue (kernel/row_epilogue.py op "mulself",
codegen/cpu/gemm_ukr.py): X[M, K] @ W[K, N] + bias[N] -> HardSwish, compared with onnxruntime
through the user path at a symbolic M of odd sizes, N narrow (masked column tails) and K
short. Tolerance rtol 1e-4, atol 1e-4: sums of up to 64 products of N(0, 1) values and
weights scaled by 1/sqrt(K), summed in another order than onnxruntime's."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from compiled_model import assert_matches_onnxruntime
from onnx import TensorProto, helper, numpy_helper

import onnxcc
from onnxcc.ir import DType
from onnxcc.kernel.expr import Const, Load, Var, maximum, minimum
from onnxcc.kernel.row_epilogue import match_row_epilogue

CASES = [(16, 16), (40, 32), (64, 24)]
"""(N, K)"""
ROWS = (1, 13, 250)


def _model(path, n: int, k: int) -> None:
    rng = np.random.default_rng(n * 100 + k)
    w = numpy_helper.from_array((rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32), "w")
    w2 = numpy_helper.from_array((rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32), "w2")
    bias = numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "bias")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm"]),
        helper.make_node("Add", ["mm", "bias"], ["mb"]),
        helper.make_node("HardSwish", ["mb"], ["y"]),
        helper.make_node("MatMul", ["x", "w2"], ["mm2"]),
        helper.make_node("Add", ["mm2", "bias"], ["mb2"]),
        helper.make_node("HardSigmoid", ["mb2"], ["hs"], alpha=0.2, beta=0.5),
        helper.make_node("Mul", ["hs", "mb2"], ["z"]),  # the gate on the left
    ]
    g = helper.make_graph(nodes, "colhswish", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["M", k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["M", n]),
                           helper.make_tensor_value_info("z", TensorProto.FLOAT, ["M", n])],
                          [w, w2, bias])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


@pytest.mark.parametrize("n,k", CASES)
def test_hardswish_col_epilogue_matches_ort(tmp_path, n, k):
    _model(tmp_path / "m.onnx", n, k)
    llvm = onnxcc.compile(tmp_path / "m.onnx", tmp_path / "ll", emit="llvm", max_versions=1).text
    # both GEMMs take per-column micro-kernels (".c" + the ops' hash in the name)
    assert len(re.findall(r"define internal void @\"?[\w.]*onnxcc\.gemm\.ukr\.\d+x\d+\.direct\.c\w+\.v", llvm)) >= 1
    assert "e.self" in llvm
    onnxcc.compile(tmp_path / "m.onnx", tmp_path / "lib", max_versions=1)
    lib = onnxcc.load(tmp_path / "lib")
    rng = np.random.default_rng(k)
    for m in ROWS:
        feeds = {"x": (3 * rng.standard_normal((m, k))).astype(np.float32)}  # past the clamps
        assert_matches_onnxruntime(tmp_path / "m.onnx", lib, feeds, rtol=1e-4, atol=1e-4, where=f"M={m} N={n} K={k}")


def test_self_product_only_when_asked():
    """x * min(max(x * c + 0.5, 0), 1) matches as one "mulself" step with its constant chain
    where the column epilogue asks for it, and not otherwise (the window and GEMV row
    epilogues do not apply it); a product of two different chains is no step."""
    acc = Load("C", (Var("i"), Var("j")), DType.f32)
    bias = Load("b", (Var("j"),), DType.f32)
    x = acc + bias
    gate = minimum(maximum(x * Const(1 / 6, DType.f32) + Const(0.5, DType.f32), Const(0.0, DType.f32)),
                   Const(1.0, DType.f32))
    shapes = {"C": (7, 16), "b": (16,)}.__getitem__
    ops = match_row_epilogue(x * gate, acc, "j", shapes, self_products=True)
    assert ops is not None and [o.op for o in ops] == ["add", "mulself"]
    assert [o.op for o in ops[1].sub] == ["mul", "add", "max", "min"]
    assert match_row_epilogue(gate * x, acc, "j", shapes, self_products=True) is not None
    assert match_row_epilogue(x * gate, acc, "j", shapes) is None
    other = minimum(acc, Const(1.0, DType.f32))
    assert match_row_epilogue(x * other, acc, "j", shapes, self_products=True) is None

