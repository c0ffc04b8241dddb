"""Control-flow statements of the kernel IR (kernel/control.py): printing, verification,
nested fusion, and JIT runs of loops and branches against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from onnxcc.codegen.cpu.jit import JitKernel
from onnxcc.errors import VerifyError
from onnxcc.ir import DType, sym
from onnxcc.kernel import (
    Compute,
    IfStmt,
    KernelProgram,
    LoopStmt,
    SetSymbol,
    Var,
    WriteAt,
    const,
    dim_to_expr,
)
from onnxcc.kernel.control import optimize_nested

F32 = DType.f32
n = sym("n")


def cumsum_program() -> KernelProgram:
    """Y[t, :] = X[0, :] + ... + X[t, :] with a carried row S and a WriteAt per iteration;
    Z = 2 * X when X[0, 0] > 0 else -X."""
    p = KernelProgram.new("ctl", ["n"])
    X = p.input("X", F32, (n, 4))
    p.output("Y", F32, (n, 4))
    Z = p.output("Z", F32, (n, 4))
    S = p.temp("S", F32, (4,))
    T = p.temp("T", F32, (4,))
    t = p.temp("t", DType.i64, ())
    p.compute(S, lambda j: const(0.0, F32))
    body: list = []
    saved, p.body = p.body, body
    p.compute(T, lambda j: S[j] + X[t[()], j])
    j = Var("j")
    body.append(WriteAt("Y", ((j, 4),), (t[()], j), T[j]))
    p.compute(S, lambda j: T[j])
    then_b, else_b = [], []
    p.body = then_b
    p.compute(Z, lambda i, j: X[i, j] * 2.0)
    p.body = else_b
    p.compute(Z, lambda i, j: -X[i, j])
    p.body = saved
    p.body.append(LoopStmt(body, index="t", trips=dim_to_expr(n)))
    p.body.append(IfStmt(X[0, 0] > 0.0, then_b, else_b))
    return p


def test_control_statements_print_and_verify():
    p = cumsum_program()
    p.verify()
    text = str(p)
    assert "loop t < n {" in text and "Y[t[], j] = T[j]  for (j < 4)" in text
    assert "if (X[0, 0] > 0.0) {" in text and "} else {" in text
    assert [c.out for c in p.computes()] == ["S", "T", "S", "Z", "Z"]  # nested computes included


@pytest.mark.parametrize("rows", [1, 5])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_loop_and_branch_run(rows, sign):
    k = JitKernel(cumsum_program())
    x = np.random.default_rng(rows).standard_normal((rows, 4)).astype(np.float32)
    x[0, 0] = sign * (abs(x[0, 0]) + 0.1)
    y, z = k(x)
    np.testing.assert_allclose(y, np.cumsum(x, axis=0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(z, 2 * x if sign > 0 else -x)


def test_nested_fusion_keeps_carried_state():
    p = cumsum_program()
    optimize_nested(p)
    loop = next(s for s in p.body if isinstance(s, LoopStmt))
    # T is read by the WriteAt (not a compute) and is S's next value: it stays
    assert [type(s).__name__ for s in loop.body] == ["Compute", "WriteAt", "Compute"]
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_allclose(JitKernel(p)(x)[0], np.cumsum(x, axis=0))


def test_verify_errors():
    p = cumsum_program()
    p.body.append(LoopStmt([]))
    with pytest.raises(VerifyError, match="needs a trip count or a condition"):
        p.verify()
    p = cumsum_program()
    p.body.append(IfStmt(p.buffers["X"][0, 0], [], []))
    with pytest.raises(VerifyError, match="condition is f32, expected bool"):
        p.verify()
    p = cumsum_program()
    j = Var("j")
    p.body.append(WriteAt("Y", ((j, 4),), (const(0, DType.i64), j), p.buffers["Y"][1, j]))
    with pytest.raises(VerifyError, match="shares memory with its output"):
        p.verify()
    p = cumsum_program()
    p.body.append(SetSymbol("m", const(1, DType.i64)))
    with pytest.raises(VerifyError, match="unknown symbol m"):
        p.verify()
    assert not isinstance(p.body[0], IfStmt) and isinstance(p.body[0], Compute)


def test_nested_cleanup_keeps_every_view_of_a_used_chain(tmp_path):
    """An LSTM (a loop statement) reading a view of a view (Reshape then Unsqueeze): the temp
    cleanup after nested optimisation dropped the middle view, orphaning the one the loop
    reads ("loads unknown buffer"; found on a pretrained voice-activity model)."""
    import onnx
    from onnx import TensorProto, helper

    import onnxcc
    from onnxcc.testing import ort_run

    rng = np.random.default_rng(0)
    hidden = 8
    w = rng.standard_normal((1, 4 * hidden, 6)).astype(np.float32)
    r = rng.standard_normal((1, 4 * hidden, hidden)).astype(np.float32)
    nodes = [
        helper.make_node("Reshape", ["x", "shape"], ["flat"]),
        helper.make_node("Unsqueeze", ["flat", "axes"], ["seq"]),
        helper.make_node("LSTM", ["seq", "W", "R"], ["", "h"], hidden_size=hidden),
    ]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("h", TensorProto.FLOAT, None)],
                          [onnx.numpy_helper.from_array(np.array([1, 6], np.int64), "shape"),
                           onnx.numpy_helper.from_array(np.array([1], np.int64), "axes"),
                           onnx.numpy_helper.from_array(w, "W"), onnx.numpy_helper.from_array(r, "R")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnxcc.compile(model, tmp_path, name="chain")
    x = rng.standard_normal((2, 3)).astype(np.float32)
    got = onnxcc.load(tmp_path).run({"x": x})["h"]
    np.testing.assert_allclose(got, ort_run(model, {"x": x})["h"], rtol=1e-5, atol=1e-6)
