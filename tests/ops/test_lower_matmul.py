"""Lowerings of the contractions (ops/matmul.py: MatMul, Gemm, MatMulInteger, Einsum) to
kernel computes, JIT-compiled and compared with onnxruntime at several settings of the
symbolic dims (one of them 1). Ops are grouped into few models so the suite JITs little;
each model is compiled once and run at every setting."""

import numpy as np
from onnx import TensorProto as T
from onnx import helper as h

from onnxcc.kernel import Reduce, walk
from onnxcc.testing import check_jit, op_model

F = T.FLOAT
_RNG = np.random.default_rng(7)


def _weights(*shape):
    return (_RNG.standard_normal(shape) * 0.5).astype(np.float32)


def _reduces(prog, out):
    (c,) = [c for c in prog.computes() if c.out == out]
    return c, [n for n in walk(c.body) if isinstance(n, Reduce)]


def test_lower_matmul_shapes_and_broadcast():
    nodes = [
        h.make_node("MatMul", ["a", "w"], ["y0"]),      # [B, M, K] @ const [K, 6]
        h.make_node("MatMul", ["a4", "b3"], ["y1"]),    # [B, 1, M, K] @ [3, K, 4]: batch broadcast
        h.make_node("MatMul", ["v", "b3"], ["y2"]),     # 1-D @ 3-D
        h.make_node("MatMul", ["a", "v"], ["y3"]),      # 3-D @ 1-D
        h.make_node("MatMul", ["v", "v"], ["y4"]),      # 1-D @ 1-D -> scalar
        h.make_node("MatMul", ["p", "q"], ["y5"]),      # symbolic contraction dim
    ]
    m = op_model(nodes, [("a", F, ["B", "M", 5]), ("a4", F, ["B", 1, "M", 5]), ("b3", F, [3, 5, 4]),
                       ("v", F, [5]), ("p", F, ["M", "K"]), ("q", F, ["K", 3])],
               [f"y{i}" for i in range(6)], {"w": _weights(5, 6)})
    prog = check_jit(m, [{"B": 1, "M": 1, "K": 1}, {"B": 3, "M": 7, "K": 13}])
    # each MatMul is one compute whose body is exactly one sum over the contraction
    for k in range(6):
        c, reds = _reduces(prog, f"out{k}")
        assert len(reds) == 1 and reds[0].op == "sum" and c.body is reds[0]


def test_lower_gemm_variants():
    nodes = [
        h.make_node("Gemm", ["a", "w", "c1"], ["y0"], alpha=0.5, beta=2.0),            # C [N]
        h.make_node("Gemm", ["at", "w", "cm"], ["y1"], transA=1),                      # C [M, N]
        h.make_node("Gemm", ["a", "wt", "cs"], ["y2"], transB=1, beta=-1.0),           # scalar C
        h.make_node("Gemm", ["at", "wt", "cc"], ["y3"], transA=1, transB=1, alpha=3.0),  # C [M, 1]
        h.make_node("Gemm", ["a", "w"], ["y4"]),                                       # no C
        h.make_node("Gemm", ["a", "w", "c1"], ["y5"], beta=0.0),                       # C ignored
    ]
    m = op_model(nodes, [("a", F, ["M", 5]), ("at", F, [5, "M"]), ("cm", F, ["M", 6]), ("cc", F, ["M", 1])],
               [f"y{i}" for i in range(6)],
               {"w": _weights(5, 6), "wt": _weights(6, 5), "c1": _weights(6), "cs": _weights()})
    prog = check_jit(m, [{"M": 1}, {"M": 11}])
    # the bias epilogue stays outside the one contraction: alpha * sum(...) + beta * C
    c, reds = _reduces(prog, "out0")
    assert len(reds) == 1 and str(c.body).startswith("0.5 * sum(k < 5: ") and "2.0 * " in str(c.body)


def test_lower_matmul_integer():
    u8 = T.UINT8

    def feeds(dims, seed):
        rng = np.random.default_rng(seed)
        m, b = dims["M"], dims["B"]
        return {"a": rng.integers(0, 255, (m, 7), dtype=np.uint8),
                "b": rng.integers(0, 255, (7, 4), dtype=np.uint8),
                "a3": rng.integers(0, 255, (b, m, 7), dtype=np.uint8),
                "az": rng.integers(0, 255, (1,), dtype=np.uint8),
                "bz": rng.integers(0, 255, (4,), dtype=np.uint8)}

    nodes = [
        h.make_node("MatMulInteger", ["a", "b"], ["y0"]),
        h.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y1"]),   # one-element / per-column zero points
        h.make_node("MatMulInteger", ["a3", "b", "az"], ["y2"]),        # batched A
        h.make_node("MatMulInteger", ["a", "b", "", "bz"], ["y3"]),     # absent a_zero_point
    ]
    m = op_model(nodes, [("a", u8, ["M", 7]), ("b", u8, [7, 4]), ("a3", u8, ["B", "M", 7]), ("az", u8, [1]),
                       ("bz", u8, [4])], [f"y{i}" for i in range(4)], opset=13)
    # NOTE: the zero point is [1], not rank 0: JitKernel passes inputs through
    # np.ascontiguousarray, which turns a 0-d array into shape (1,)
    check_jit(m, [{"M": 1, "B": 1}, {"M": 9, "B": 3}], feeds=feeds)


def test_lower_matmul_integer_per_row_zero_point_vs_interp():
    """A per-row a_zero_point (1-D, length M) and i8 operands: onnxruntime's kernel takes
    scalar zero points only, so the numpy reference interpreter is the oracle."""
    i8 = T.INT8
    nodes = [h.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y0"])]
    m = op_model(nodes, [("a", i8, [5, 7]), ("b", i8, [7, "N"]), ("az", i8, [5]), ("bz", i8, ["N"])], ["y0"])
    check_jit(m, [{"N": 1}, {"N": 6}], oracle="interp")


def test_lower_matmul_integer_constant_and_variable_b():
    """B is read from a transposed copy (the k loop then runs along contiguous memory in both
    operands): made at compile time for a constant B, at run time for a B that is an input.
    Exact i32 results vs onnxruntime at symbolic M, with and without zero points."""
    u8 = T.UINT8
    k, n = 40, 24
    w = _RNG.integers(-128, 128, (k, n), dtype=np.int8)
    wu = _RNG.integers(0, 256, (k, n), dtype=np.uint8)
    inits = {"w": w, "wu": wu, "az": np.array(131, np.uint8), "bz": np.array(-5, np.int8),
             "bzc": _RNG.integers(0, 256, (n,), dtype=np.uint8),
             "w3": _RNG.integers(-128, 128, (2, k, n), dtype=np.int8)}
    nodes = [
        h.make_node("MatMulInteger", ["a", "w", "az", "bz"], ["y0"]),   # scalar zero points
        h.make_node("MatMulInteger", ["a", "wu", "", "bzc"], ["y1"]),   # per-column b zero point
        h.make_node("MatMulInteger", ["a3", "w"], ["y2"]),              # batched A, no zero points
        h.make_node("MatMulInteger", ["a", "b", "az", "bv"], ["y3"]),   # B and its zero point inputs
        h.make_node("MatMulInteger", ["a", "w3", "az", "bz"], ["y4"]),  # batched constant B
        h.make_node("MatMulInteger", ["a3", "b3"], ["y5"]),             # batched input B
    ]

    def feeds(dims, seed):
        rng = np.random.default_rng(seed)
        m = dims["M"]
        return {"a": rng.integers(0, 256, (m, k), dtype=np.uint8),
                "a3": rng.integers(0, 256, (2, m, k), dtype=np.uint8),
                "b": rng.integers(0, 256, (k, n), dtype=np.uint8),
                "bv": rng.integers(0, 256, (n,), dtype=np.uint8),
                "b3": rng.integers(0, 256, (2, k, n), dtype=np.uint8)}

    m = op_model(nodes, [("a", u8, ["M", k]), ("a3", u8, [2, "M", k]), ("b", u8, [k, n]), ("bv", u8, [n]),
                       ("b3", u8, [2, k, n])], [f"y{i}" for i in range(6)], inits, opset=13)
    prog = check_jit(m, [{"M": 1}, {"M": 9}, {"M": 33}], rtol=0, atol=0, feeds=feeds)
    transposed = [b for b in prog.buffers.values() if b.kind == "const" and b.shape == (n, k)]
    assert sorted(b.dtype.value for b in transposed) == ["i8", "u8"], prog.buffers
    for t in transposed:
        src = w if t.dtype.value == "i8" else wu
        np.testing.assert_array_equal(t.data, src.T)
    # y3's B (the third parameter) minus its zero point is transposed at run time into an i16
    # temp, which the fuser must not inline back into the contraction
    (var,) = [c for c in prog.computes() if c.out == prog.outputs[3]]
    (bt,) = [prog.buffers[r] for r in var.reads() if prog.buffers[r].kind == "temp"]
    assert (bt.dtype.value, bt.shape) == ("i16", (n, k))
    (copy,) = [c for c in prog.computes() if c.out == bt.name]
    assert prog.inputs[2] in copy.reads() and prog.inputs[2] not in var.reads()


def test_lower_einsum():
    eqs = [
        ("bij,bjk->bik", [["B", 3, 4], ["B", 4, 5]]),
        ("bhqd,bhkd->bhqk", [["B", 2, "S", 4], ["B", 2, "S", 4]]),   # attention scores
        ("ij->ji", [["S", 3]]),
        ("ii->i", [[4, 4]]),                                         # diagonal
        ("bij->", [["B", 3, 4]]),                                    # full sum
        ("...ij,jk->...ik", [["B", "S", 3], [3, 2]]),
        ("ij,jk,kl->il", [["S", 3], [3, 4], [4, 2]]),                # three operands
        ("i,j->ij", [["S"], [3]]),                                   # outer product: no reduction
    ]
    inputs, nodes, outs = [], [], []
    for k, (eq, shapes) in enumerate(eqs):
        names = [f"x{k}_{j}" for j in range(len(shapes))]
        inputs += [(n, F, s) for n, s in zip(names, shapes)]
        nodes.append(h.make_node("Einsum", names, [f"y{k}"], equation=eq))
        outs.append(f"y{k}")
    check_jit(op_model(nodes, inputs, outs), [{"B": 1, "S": 1}, {"B": 2, "S": 7}])
