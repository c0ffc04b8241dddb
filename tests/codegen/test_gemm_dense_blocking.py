"""A dense layer's GEMM plan (kernel/schedule.py `_dense_blocking`: B prepacked, A not): one
k block up to ONE_BLOCK_MAX_K, and A's rows staged per task (`GemmPlan.a_stage`, codegen/cpu/
gemm_dense.py `stage_rows`) where they sit a multiple of 4 KiB apart and N is wide enough. The plan
choices are asserted; the staged path is checked against numpy (rtol 1e-4, atol scaled with
sqrt(K): f32 sums in another order) over row tails, k blocks with a remainder, column tails,
batch vars in A and in the prepacked B, epilogues, serial and parallel."""

from __future__ import annotations

import numpy as np
import pytest

from onnxcc.codegen.cpu.jit import JitKernel
from onnxcc.ir import DType, sym
from onnxcc.kernel import KernelProgram, Var, relu, rsum
from onnxcc.kernel.schedule import DENSE_MIN_WORK, ONE_BLOCK_MAX_K, TargetInfo, match_gemm, schedule_program

F32 = DType.f32
M, S = sym("M"), sym("S")
rng = np.random.default_rng(5)


def randf(*shape):
    return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)


def _plan(k: int, n: int, row: int | None = None, const_b: bool = True):
    """The plan of C[M, n] = A[M, :k] @ W[k, n] with A's rows `row` floats long (default k)."""
    p = KernelProgram.new("p", ["M"])
    a = p.input("A", F32, (M, row or k))
    w = p.const("W", randf(k, n)) if const_b else p.input("W", F32, (k, n))
    kv = Var("k")
    c = p.compute(p.output("C", F32, (M, n)), lambda i, j: rsum([(kv, k)], a[i, kv] * w[kv, j]))
    g = match_gemm(c, p, TargetInfo(gemm_min_work=1))
    assert g is not None and g.a_direct
    return g


def test_one_k_block_up_to_the_limit():
    target_kc = TargetInfo().gemm_kc
    assert _plan(512, 256).kc == 512 == ONE_BLOCK_MAX_K
    assert _plan(300, 256).kc == 300
    assert _plan(1024, 256).kc == target_kc  # past the limit: the target's blocks
    assert _plan(200, 256).kc == target_kc  # one block anyway
    assert _plan(512, 256, const_b=False).kc == target_kc  # B packed per call: not a dense layer
    assert _plan(300, 64).kc == target_kc  # 300 x 64 multiply-adds a row: not a dense layer


def test_dense_only_from_the_work_per_row():
    assert _plan(256, 128).dense and 256 * 128 == DENSE_MIN_WORK
    assert not _plan(256, 127).dense
    assert not _plan(96, 16).dense  # a small channels-last 1x1 conv's shape
    assert not _plan(1024, 256, const_b=False).dense


@pytest.mark.parametrize("k,n,row,want", [
    (1024, 256, None, True),    # rows 4 KiB apart: every row in the same L1 sets
    (2048, 512, None, True),
    (1000, 256, 1024, True),    # a slice of 4 KiB rows
    (512, 2048, None, False),   # 2 KiB apart: two set groups, as the direct path measured best
    (768, 256, None, False),
    (1024, 64, None, False),    # too few columns to pay for the copy
    (1024, 16, None, False),    # not a dense layer (16k multiply-adds a row)
])
def test_stage_only_aliasing_rows(k, n, row, want):
    g = _plan(k, n, row)
    assert g.a_stage is want, g.describe()
    assert ("a=staged" in g.describe()) is want


def test_no_stage_when_b_is_packed_per_call():
    assert not _plan(1024, 256, const_b=False).a_stage


def _program(name: str):
    """Three staged GEMMs: relu(A[M, 1024] @ W + bias) with N = 136 (a column tail); A[M, :1000]
    of 1024-float rows (k blocks 256 x 3 + 232) plus a residual; per batch b, A3[b, S, 1024]
    @ Wb[b] (A and the prepacked B both with a batch var)."""
    p = KernelProgram.new(name, ["M", "S"])
    a = p.input("A", F32, (M, 1024))
    r = p.input("R", F32, (M, 160))
    a3 = p.input("A3", F32, (2, S, 1024))
    w1, w2, wb = p.const("W1", randf(1024, 136)), p.const("W2", randf(1000, 160)), p.const("Wb", randf(2, 1024, 128))
    bias = p.const("bias", randf(1, 136)[0])
    c1, c2 = p.output("C1", F32, (M, 136)), p.output("C2", F32, (M, 160))
    c3 = p.output("C3", F32, (2, S, 128))
    k = Var("k")
    p.compute(c1, lambda i, j: relu(rsum([(k, 1024)], a[i, k] * w1[k, j]) + bias[j]))
    p.compute(c2, lambda i, j: rsum([(k, 1000)], a[i, k] * w2[k, j]) + r[i, j])
    p.compute(c3, lambda b, i, j: rsum([(k, 1024)], a3[b, i, k] * wb[b, k, j]))
    return p


@pytest.mark.parametrize("parallel", [False, True], ids=["serial", "parallel"])
def test_staged_rows_match_numpy(parallel):
    p = _program(f"stage{int(parallel)}")
    consts = {n: p.buffers[n].data for n in ("W1", "W2", "Wb", "bias")}
    schedule_program(p, TargetInfo(parallel=parallel, gemm_min_work=1))
    plans = [c.schedule.gemm for c in p.computes()]
    assert all(g is not None and g.a_stage for g in plans), [c.schedule.describe() for c in p.computes()]
    kern = JitKernel(p, parallel=parallel)
    for m, s in ((1, 1), (5, 3), (13, 12), (37, 25), (100, 49)):
        a, r, a3 = randf(m, 1024), randf(m, 160), randf(2, s, 1024)
        c1, c2, c3 = kern(a, r, a3, syms={"M": m, "S": s})
        tol = dict(rtol=1e-4, atol=4e-5 * 32)
        np.testing.assert_allclose(c1, np.maximum(a @ consts["W1"] + consts["bias"], 0), **tol, err_msg=f"M={m}")
        np.testing.assert_allclose(c2, a[:, :1000] @ consts["W2"] + r, **tol, err_msg=f"M={m}")
        np.testing.assert_allclose(c3, a3 @ consts["Wb"], **tol, err_msg=f"S={s}")


def test_staged_kernel_ir_copies_rows():
    """The staged plans' task functions hold the stack row block (and a plan without
    `a_stage` does not: the micro-kernel reads A's rows in place)."""
    p = _program("stage_ir")
    schedule_program(p, TargetInfo(parallel=False, gemm_min_work=1))
    assert "%\"astage\" = alloca" in JitKernel(p, parallel=False).llvm_ir
    q = KernelProgram.new("direct_ir", ["M"])
    a = q.input("A", F32, (M, 512))
    w = q.const("W", randf(512, 256))
    k = Var("k")
    q.compute(q.output("C", F32, (M, 256)), lambda i, j: rsum([(k, 512)], a[i, k] * w[k, j]))
    schedule_program(q, TargetInfo(parallel=False, gemm_min_work=1))
    assert "%\"astage\" = alloca" not in JitKernel(q, parallel=False).llvm_ir


def test_mlp_through_the_user_path_matches_ort(tmp_path):
    """x[batch, 256] -> Gemm 256x1024 -> Relu -> Gemm 1024x256 -> + x, compiled and run on the
    runtime's thread pool (every core): the first GEMM one k block with its epilogue in
    registers, the second staged (rows 4 KiB apart) over 4 k blocks; batches that leave row
    panels of 1 to 11 rows and odd panel counts (the tasks' column split). Against
    onnxruntime, rtol 1e-4, atol 1e-4."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    import onnxcc
    from onnxcc.testing import ort_run

    d, h = 256, 1024
    inits = [numpy_helper.from_array(randf(d, h), "w1"), numpy_helper.from_array(randf(1, h)[0], "b1"),
             numpy_helper.from_array(randf(h, d), "w2"), numpy_helper.from_array(randf(1, d)[0], "b2")]
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Gemm", ["r", "w2", "b2"], ["o"]), helper.make_node("Add", ["o", "x"], ["y"])]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", d])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", d])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), tmp_path / "m.onnx")
    onnxcc.compile(tmp_path / "m.onnx", tmp_path / "lib")
    lib = onnxcc.load(tmp_path / "lib")
    for batch in (1, 7, 12, 25, 59, 130):
        x = rng.standard_normal((batch, d)).astype(np.float32)
        got = lib.run({"x": x})["y"]
        np.testing.assert_allclose(np.asarray(got), ort_run(tmp_path / "m.onnx", {"x": x})["y"], rtol=1e-4,
                                   atol=1e-4, err_msg=f"batch={batch}")


def test_runtime_define_reads_the_c_constant(tmp_path):
    """The dense tasks are counted in the runtime pool's chunks, a constant codegen reads from
    the C runtime's source (codegen/c/target.py `runtime_define`): its integer, or an error
    where the source has none (no silent default)."""
    from onnxcc.codegen.c.link import runtime_define
    from onnxcc.codegen.cpu import gemm_dense
    from onnxcc.errors import CompileError

    src = tmp_path / "rt.c"
    src.write_text("#define ONNXCC_CHUNKS_PER_THREADS 9\n#define ONNXCC_CHUNKS_PER_THREAD 6 /* why */\n")
    assert runtime_define("ONNXCC_CHUNKS_PER_THREAD", src) == 6
    with pytest.raises(CompileError, match="ONNXCC_OTHER"):
        runtime_define("ONNXCC_OTHER", src)
    assert gemm_dense.POOL_CHUNKS_PER_THREAD == runtime_define("ONNXCC_CHUNKS_PER_THREAD") >= 1
