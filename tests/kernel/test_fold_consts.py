"""fold-consts: a compute that only moves elements of const buffers (a concat of weight
slices, a transpose) becomes a const buffer holding exactly the values the kernel would
compute (checked through the JIT before and after); float arithmetic, symbolic dims and
computes reading run-time data are left alone. End to end: an ONNX graph that slices and
concatenates its initializers in front of a MatMul, against onnxruntime."""

from __future__ import annotations

import copy

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import onnxcc
from onnxcc.codegen.cpu.jit import JitKernel
from onnxcc.ir import DType
from onnxcc.kernel import KernelProgram, select
from onnxcc.kernel.fold_consts import fold_const_remaps
from onnxcc.kernel.fuse import fuse
from onnxcc.testing import ort_run

F32 = DType.f32
W = np.arange(24, dtype=np.float32).reshape(6, 4) - 7.5


def _program(body=None, symbolic: bool = False) -> KernelProgram:
    p = KernelProgram.new("fold", ["n"] if symbolic else [])
    x = p.input("x", F32, (3, 4))
    w = p.const("w", W)
    t = p.temp("t", F32, ("n" if symbolic else 6, 4))
    tv = p.view("tv", t, (24,))
    y = p.output("y", F32, (3, 6, 4))
    # rows 0-1 of w after rows 2-5 (a gate reorder), as the lowering of Slice + Concat writes it
    p.compute(t, body or (lambda i, j: select(i < 4, w[i + 2, j], w[i - 4, j])))
    p.compute(y, lambda b, i, j: x[b, j] * tv[i * 4 + j])
    return p


def _run(p: KernelProgram) -> np.ndarray:
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    (y,) = JitKernel(p)(x)
    return y


def test_a_remap_of_consts_becomes_a_const():
    p = _program()
    before = copy.deepcopy(p)
    assert fold_const_remaps(p) == ["t"]
    assert [c.out for c in p.computes()] == ["y"]
    assert "t" not in p.buffers and "w" not in p.buffers  # nothing reads them any more
    tv = p.buffers["tv"]
    assert tv.kind == "const" and tv.alias_of is None
    np.testing.assert_array_equal(tv.data, np.concatenate([W[2:], W[:2]]).reshape(24))
    p.verify()
    np.testing.assert_array_equal(_run(p), _run(before))


def test_float_arithmetic_is_left_to_the_kernel():
    p = _program(lambda i, j: _program().buffers["w"][i, j] * 2.0)
    assert fold_const_remaps(p) == []
    assert [c.out for c in p.computes()] == ["t", "y"]


def test_a_broadcast_of_consts_is_left_alone():
    """Expanding 24 values to 24 * 1024 would ship every copy in the library."""
    p = KernelProgram.new("fold", [])
    w = p.const("w", W)
    t = p.temp("t", F32, (1024, 6, 4))
    y = p.output("y", F32, (1024, 6, 4))
    p.compute(t, lambda k, i, j: w[i, j])
    p.compute(y, lambda k, i, j: t[k, i, j] + 1.0)
    assert fold_const_remaps(p) == []


def test_symbolic_dims_are_left_alone():
    p = _program(symbolic=True)
    assert fold_const_remaps(p) == []


def test_a_remap_of_run_time_data_is_left_alone():
    p = KernelProgram.new("fold", [])
    x = p.input("x", F32, (6, 4))
    t = p.temp("t", F32, (4, 6))
    y = p.output("y", F32, (4, 6))
    p.compute(t, lambda i, j: x[j, i])
    p.compute(y, lambda i, j: t[i, j] + 1.0)
    assert fold_const_remaps(p) == []


def test_folded_then_fused_matches():
    p = _program()
    before = copy.deepcopy(p)
    fold_const_remaps(p)
    fuse(p)
    np.testing.assert_array_equal(_run(p), _run(before))


def _lstm_like_model(path) -> None:
    """W [40, 8] sliced into gate blocks and concatenated in another order, transposed, then
    x[batch, 8] @ W'^T + b': what a PyTorch LSTM export does to its weights (more than the
    64 elements canonicalize folds)."""
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal((40, 8)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal((40,)).astype(np.float32), "b")
    consts = {n: numpy_helper.from_array(np.array(v, dtype=np.int64), n)
              for n, v in (("s0", [0]), ("s2", [10]), ("s4", [20]), ("s8", [40]), ("ax", [0]))}
    nodes = [helper.make_node("Slice", ["w", "s0", "s2", "ax"], ["w0"]),
             helper.make_node("Slice", ["w", "s2", "s4", "ax"], ["w1"]),
             helper.make_node("Slice", ["w", "s4", "s8", "ax"], ["w2"]),
             helper.make_node("Concat", ["w2", "w0", "w1"], ["wc"], axis=0),
             helper.make_node("Transpose", ["wc"], ["wt"], perm=[1, 0]),
             helper.make_node("Slice", ["b", "s4", "s8", "ax"], ["b2"]),
             helper.make_node("Slice", ["b", "s0", "s4", "ax"], ["b0"]),
             helper.make_node("Concat", ["b2", "b0"], ["bc"], axis=0),
             helper.make_node("MatMul", ["x", "wt"], ["xw"]),
             helper.make_node("Add", ["xw", "bc"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph(nodes, "lstm_like", [x], [y], [w, b, *consts.values()])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_sliced_weights_end_to_end(tmp_path):
    _lstm_like_model(tmp_path / "m.onnx")
    text = onnxcc.compile(tmp_path / "m.onnx", tmp_path / "kir", emit="kernel").text
    # the remaps of w and b are consts; what runs is the GEMM (its bias epilogue inside)
    assert text.count(" = sum(") == 1 and "select(" not in text, text
    onnxcc.compile(tmp_path / "m.onnx", tmp_path / "lib")
    lib = onnxcc.load(tmp_path / "lib")
    for batch in (1, 5, 33):
        x = np.random.default_rng(batch).standard_normal((batch, 8)).astype(np.float32)
        want = ort_run(tmp_path / "m.onnx", {"x": x})
        np.testing.assert_allclose(lib.run({"x": x})["y"], want["y"], rtol=1e-5, atol=1e-6)


def test_a_load_from_an_empty_const_is_left_to_the_kernel():
    # Funnel's opset-14 export: a select whose untaken arm reads a const with no elements
    p = KernelProgram.new("fold", [])
    x = p.input("x", F32, (3, 4))
    w = p.const("w", W)
    e = p.const("e", np.zeros((0, 4), np.float32))
    t = p.temp("t", F32, (6, 4))
    y = p.output("y", F32, (3, 6, 4))
    p.compute(t, lambda i, j: select(i < 6, w[i, j], e[i - 6, j]))
    p.compute(y, lambda b, i, j: x[b, j] * t[i, j])
    assert fold_const_remaps(p) == []
    p.verify()
    x0 = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    (got,) = JitKernel(p)(x0)
    np.testing.assert_allclose(got, x0[:, None, :] * W[None], rtol=1e-6)
