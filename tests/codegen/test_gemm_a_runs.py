"""A dense layer whose A rows are runs of its k in different places (kernel/a_runs.py
`runs_of`, `GemmPlan.a_runs`): attention's output projection reading the heads [B, H, S, D]
through the head transpose, `Y[b, k // D, s, k % D]`. Staged run by run per task (codegen/
cpu/gemm_dense.py `stage_runs`) with the epilogue (bias, residual) in the micro-kernel's
registers. The plan's choices are asserted (which loads qualify); the staged path is checked
against numpy over row tails and batch boundaries inside a row panel (S not a multiple of
12), serial and parallel, and through the user path against onnxruntime at symbolic seq 1 to
600 and batches 1 to 3 on 1 to 3 threads in child processes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxcc.codegen.cpu.jit import JitKernel
from onnxcc.ir import DType, sym
from onnxcc.kernel import KernelProgram, Var, rsum
from onnxcc.kernel.schedule import TargetInfo, match_gemm, schedule_program

F32 = DType.f32
B, S = sym("B"), sym("S")
rng = np.random.default_rng(11)


def randf(*shape):
    return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)


def _program(name: str, h: int, d: int, n: int = 256, split=None, const_w: bool = True):
    """C[b, s, n] = sum(k < h*d: Y[b, k // d, s, k % d] * W[k, n]) + bias[n] + R[b, s, n]
    (`split(k)`: A's (head, element) indices instead)."""
    p = KernelProgram.new(name, ["B", "S"])
    y = p.input("Y", F32, (B, h, S, d))
    r = p.input("R", F32, (B, S, n))
    w = p.const("W", randf(h * d, n)) if const_w else p.input("W", F32, (h * d, n))
    bias = p.const("bias", randf(1, n)[0])
    k = Var("k")
    hd = split or (lambda kk: (kk // d, kk % d))
    c = p.compute(p.output("C", F32, (B, S, n)),
                  lambda b, s, j: rsum([(k, h * d)], y[b, hd(k)[0], s, hd(k)[1]] * w[k, j]) + bias[j] + r[b, s, j])
    return p, c


@pytest.mark.parametrize("h,d,want", [
    (4, 64, 64),     # the held-out transformer's projection
    (8, 64, 64),     # 512: one k block
    (16, 16, 16),    # runs of one vector
    (12, 64, 64),    # 768: k blocks of 256, four runs each (bert's projection)
    (4, 48, 48),     # 192: one k block
    (16, 48, 0),     # 768 in blocks of 256: a run would straddle two
    (32, 8, 0),      # runs shorter than a vector
])
def test_runs_found_where_they_fit(h, d, want):
    p, c = _program(f"plan{h}x{d}", h, d)
    g = match_gemm(c, p, TargetInfo(gemm_min_work=1))
    assert g is not None and g.a_runs == want, g.describe()
    assert ("a=runs" in g.describe()) is bool(want)
    if want:  # staged; in one k block the bias and the residual run in the micro-kernel's registers
        assert g.a_direct and g.a_stage and g.in_regs is (h * d <= g.kc)


def test_not_runs_when_the_indices_do_not_split_k_alike():
    p, c = _program("mixed", 4, 64, split=lambda k: (k // 64, k % 32))  # the run's dim is 64, k % 32 repeats
    g = match_gemm(c, p, TargetInfo(gemm_min_work=1))
    assert g is not None and not g.a_runs
    p, c = _program("perrow", 4, 64, const_w=False)  # B packed per call: not a dense layer
    g = match_gemm(c, p, TargetInfo(gemm_min_work=1))
    assert g is not None and not g.a_runs
    # weights per batch (prepacked per b): b is a batch var of the GEMM, which runs does not take
    q = KernelProgram.new("perbatch", ["S"])
    y = q.input("Y", F32, (2, 4, S, 64))
    w = q.const("W", randf(2, 256, 256))
    k = Var("k")
    c = q.compute(q.output("C", F32, (2, S, 256)),
                  lambda b, s, j: rsum([(k, 256)], y[b, k // 64, s, k % 64] * w[b, k, j]))
    g = match_gemm(c, q, TargetInfo(gemm_min_work=1))
    assert g is not None and g.batch and not g.a_runs, g.describe()


@pytest.mark.parametrize("h", [4, 12], ids=["one_block", "three_blocks"])
@pytest.mark.parametrize("parallel", [False, True], ids=["serial", "parallel"])
def test_runs_match_numpy(parallel, h):
    p, _ = _program(f"runs{int(parallel)}h{h}", h, 64)
    w, bias = p.buffers["W"].data, p.buffers["bias"].data
    schedule_program(p, TargetInfo(parallel=parallel, gemm_min_work=1))
    g = next(c.schedule.gemm for c in p.computes())
    assert g is not None and g.a_runs == 64
    kern = JitKernel(p, parallel=parallel)
    for b, s in ((1, 1), (1, 13), (2, 7), (3, 25), (2, 100)):  # panels of 12 rows across batches
        y, r = randf(b, h, s, 64), randf(b, s, 256)
        c, = kern(y, r, syms={"B": b, "S": s})
        want = y.transpose(0, 2, 1, 3).reshape(b, s, h * 64) @ w + bias + r
        np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4, err_msg=f"B={b} S={s}")


def _projection_model() -> onnx.ModelProto:
    """The exporters' tail of attention: heads [B, 4, S, 64] -> Transpose -> Reshape [B, S, 256]
    -> MatMul W -> + bias -> + x."""
    n = helper.make_node
    inits = [numpy_helper.from_array(randf(256, 256), "w"), numpy_helper.from_array(randf(1, 256)[0], "bias"),
             numpy_helper.from_array(np.array([0, 0, 256], np.int64), "shape")]
    nodes = [n("Transpose", ["heads"], ["t"], perm=[0, 2, 1, 3]), n("Reshape", ["t", "shape"], ["flat"]),
             n("MatMul", ["flat", "w"], ["mm"]), n("Add", ["mm", "bias"], ["o"]), n("Add", ["o", "x"], ["y"])]
    f = TensorProto.FLOAT
    g = helper.make_graph(nodes, "proj", [helper.make_tensor_value_info("heads", f, ["B", 4, "S", 64]),
                                          helper.make_tensor_value_info("x", f, ["B", "S", 256])],
                          [helper.make_tensor_value_info("y", f, ["B", "S", 256])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


_RUN = textwrap.dedent("""
    import sys
    import numpy as np
    import onnxcc
    from onnxcc.testing import ort_run
    lib = onnxcc.load(sys.argv[1])
    for s in (1, 5, 12, 13, 17, 64, 127, 128, 300, 511, 600):
        for b in (1, 2, 3):
            rng = np.random.default_rng(s * 10 + b)
            feeds = {"heads": rng.standard_normal((b, 4, s, 64)).astype(np.float32),
                     "x": rng.standard_normal((b, s, 256)).astype(np.float32)}
            np.testing.assert_allclose(np.asarray(lib.run(feeds)["y"]), ort_run(sys.argv[2], feeds)["y"],
                                       rtol=1e-4, atol=1e-4, err_msg=f"batch {b} seq {s}")
    print("ok")
""")


@pytest.fixture(scope="module")
def projection(tmp_path_factory):
    import onnxcc

    d = tmp_path_factory.mktemp("proj")
    onnx.save(_projection_model(), d / "m.onnx")
    text = onnxcc.compile(d / "m.onnx", d / "kir", emit="kernel", max_versions=1).text
    onnxcc.compile(d / "m.onnx", d / "lib")
    return d, text


def test_projection_reads_the_heads_through_the_transpose(projection):
    """The fused GEMM's A is the heads' load with its k split (what kernel/a_runs.py finds)."""
    _, text = projection
    assert "// 64" in text and "% 64" in text


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_projection_matches_onnxruntime(projection, threads):
    d, _ = projection
    env = {**os.environ, "ONNXCC_NUM_THREADS": str(threads)}
    r = subprocess.run([sys.executable, "-c", _RUN, str(d / "lib"), str(d / "m.onnx")], env=env,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr
