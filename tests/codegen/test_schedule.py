"""Schedules (kernel/schedule.py) and what the CPU backend makes of them: strip-mined vector
loops with scalar tails (none where a version proves divisibility), parallel outer loops,
vector reductions, GEMM recognition, scratch in the memory plan, driver integration."""

from __future__ import annotations

import re

import numpy as np
import pytest
import sympy

from onnxcc.codegen.cpu import jit as cpu_jit
from onnxcc.codegen.cpu.jit import JitKernel
from onnxcc.ir import Divisible, DType, sym
from onnxcc.kernel import (
    KernelProgram,
    Var,
    exp,
    maximum,
    plan,
    rmax,
    rsum,
    sqrt,
)
from onnxcc.kernel.plan_memory import reserve_scratch
from onnxcc.kernel.schedule import (
    TAP_WORK_DIVISOR,
    Schedule,
    TargetInfo,
    compute_work,
    facts_from_attrs,
    gemm_tile,
    match_gemm,
    proves_multiple,
    schedule_program,
    scratch_bytes,
)

F32 = DType.f32
N, R, S, M = sym("N"), sym("R"), sym("S"), sym("M")
rng = np.random.default_rng(3)


def randf(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def _fn_text(ir_text: str, name: str) -> str:
    m = re.search(r'define[^\n]*@"?' + re.escape(name) + r'"?\(.*?\n}', ir_text, re.S)
    assert m, name
    return m.group(0)


# ---- facts and proofs ---------------------------------------------------------------------


def test_facts_and_divisibility_proofs():
    facts = facts_from_attrs([Divisible("seq", 16), Divisible("N", 4)])
    assert facts == {"seq": 16, "N": 4}
    seq = sym("seq")
    assert proves_multiple(seq, 16, facts)
    assert proves_multiple(3 * seq + 32, 16, facts)
    assert proves_multiple(N * 4, 16, facts)
    assert not proves_multiple(seq + 1, 16, facts)
    assert not proves_multiple(N, 16, facts)
    assert not proves_multiple(sympy.floor(seq / 2), 16, facts)
    assert proves_multiple(48, 16, {}) and not proves_multiple(47, 16, {})


# ---- elementwise: vector chunks + tails ---------------------------------------------------------


def ew_program(name: str, rank: int) -> KernelProgram:
    p = KernelProgram.new(name, ["R", "N"])
    shape = (R, N) if rank == 2 else (N,)
    X, B = p.input("X", F32, shape), p.input("B", F32, (N,))
    Y = p.output("Y", F32, shape)
    if rank == 2:
        p.compute(Y, lambda r, i: maximum(X[r, i] * 2.0 + B[i], 0.0) - exp(-X[r, i]))
    else:
        p.compute(Y, lambda i: maximum(X[i] * 2.0 + B[i], 0.0) - exp(-X[i]))
    return p


def ew_ref(x, b):
    return np.maximum(x * 2 + b, 0) - np.exp(-x)


@pytest.mark.parametrize("rank", [1, 2])
@pytest.mark.parametrize("parallel", [False, True])
def test_vectorized_elementwise_tails(rank, parallel):
    p = ew_program(f"ew{rank}{int(parallel)}", rank)
    schedule_program(p, TargetInfo(parallel=parallel, min_parallel_work=64))
    sch = p.body[0].schedule
    assert (sch.vector_width, sch.vector_tail, sch.parallel) == (16, "scalar", None if parallel else False)
    kern = JitKernel(p, parallel=parallel, parallel_min_work=64)  # symbolic work: decided at run time
    before = cpu_jit.PARALLEL_CALLS[0]
    extents = [1, 15, 16, 17, 33] + ([4096 * 2 + 17] if rank == 1 else [])
    for n in extents:
        x = randf(3, n) if rank == 2 else randf(n)
        b = randf(n)
        np.testing.assert_allclose(kern(x, b, syms={"R": 3})[0], ew_ref(x, b), rtol=1e-5, atol=1e-6)
    assert (cpu_jit.PARALLEL_CALLS[0] > before) == parallel
    assert "<16 x float>" in kern.optimized_ir


def test_divisible_version_has_no_tail_loop():
    generic, divisible = ew_program("ewg", 2), ew_program("ewd", 2)
    schedule_program(generic, TargetInfo(parallel=False))
    schedule_program(divisible, TargetInfo(parallel=False), facts_from_attrs([Divisible("N", 16)]))
    assert divisible.body[0].schedule.vector_tail == "none"
    kg, kd = JitKernel(generic), JitKernel(divisible)
    assert "i.tail" in kg.llvm_ir  # the generic kernel has a tail (a guarded chunk or a loop)
    assert ".tail" not in kd.llvm_ir
    opt = _fn_text(kd.optimized_ir, "ewd")
    # every float operation of the divisible kernel is a 16-lane vector one
    assert re.search(r"= (fmul|fadd|fsub)[^\n]* float ", opt) is None
    assert re.search(r"load float", opt) is None
    assert "fmul contract <16 x float>" in opt
    for n in (16, 48):
        x, b = randf(4, n), randf(n)
        np.testing.assert_allclose(kd(x, b, syms={"R": 4})[0], ew_ref(x, b), rtol=1e-5, atol=1e-6)


def test_static_extents_and_parallel_decisions():
    p = KernelProgram.new("st", [])
    X = p.input("X", F32, (512, 300))
    Y1 = p.output("Y1", F32, (512, 300))
    Y2 = p.output("Y2", F32, (4, 7))
    Y3 = p.output("Y3", F32, (4, 32))
    p.compute(Y1, lambda a, b: X[a, b] + 1.0)
    p.compute(Y2, lambda a, b: X[a, b] * 2.0)
    p.compute(Y3, lambda a, b: X[a, b] * 3.0)
    schedule_program(p, TargetInfo())
    s1, s2, s3 = (c.schedule for c in p.computes())
    assert (s1.vector_width, s1.vector_tail, s1.parallel) == (16, "scalar", True)
    assert s2.vector_width is None and s2.parallel is False    # 7 < 16 lanes: left to LLVM
    assert (s3.vector_width, s3.vector_tail) == (16, "none")   # 32 = 2 chunks, no tail
    x = randf(512, 300)
    y1, y2, y3 = JitKernel(p)(x)
    np.testing.assert_allclose(y1, x + 1)
    np.testing.assert_allclose(y2, x[:4, :7] * 2)
    np.testing.assert_allclose(y3, x[:4, :32] * 3)


def test_window_taps_count_as_work():
    """A 5x5 window over a small plane (mnasnet's depthwise conv on 12 x 10 x 72: 8640 outputs
    per image) is 25 loads per output, ceil(25 / TAP_WORK_DIVISOR) operations, worth a split;
    x * max(x, 0) loads x once, and an elementwise op on two buffers is one per buffer."""
    p = KernelProgram.new("taps", [])
    X = p.input("X", F32, (16, 14, 72))
    W = p.input("W", F32, (5, 5, 72))
    B = p.input("B", F32, (12, 10, 72))
    Y = p.output("Y", F32, (12, 10, 72))
    Z = p.output("Z", F32, (12, 10, 72))
    E = p.output("E", F32, (12, 10, 72))

    def window(h, w, c):
        acc = X[h, w, c] * W[0, 0, c]
        for i in range(5):
            for j in range(5):
                if i or j:
                    acc = acc + X[h + i, w + j, c] * W[i, j, c]
        return acc

    p.compute(Y, window)
    p.compute(Z, lambda h, w, c: X[h, w, c] * maximum(X[h, w, c], 0.0))
    p.compute(E, lambda h, w, c: X[h, w, c] + B[h, w, c])
    y, z, e = p.computes()
    assert compute_work(y) == 12 * 10 * 72 * -(-25 // TAP_WORK_DIVISOR) > TargetInfo().min_parallel_work
    assert compute_work(z) == compute_work(e) == 12 * 10 * 72
    schedule_program(p, TargetInfo(parallel=True))
    assert [c.schedule.parallel for c in p.computes()] == [True, False, False]


# ---- reductions ---------------------------------------------------------------------------------


def test_reductions_vector_accumulators_and_hoisted_row_stats():
    p = KernelProgram.new("red", ["R", "N"])
    X = p.input("X", F32, (R, N))
    Ss = p.output("Ss", F32, (R,))
    Z = p.output("Z", F32, (R, N))
    k, d, r = Var("k"), Var("d"), Var("r")
    p.compute(Ss, lambda r: rsum([(k, N)], X[r, k] * X[r, k]))
    mx = rmax([(k, N)], X[r, k])
    p.compute(Z, lambda r, j: exp(X[r, j] - mx) / rsum([(d, N)], exp(X[r, d] - mx)))
    schedule_program(p, TargetInfo(parallel=False))
    s_sum, s_soft = (c.schedule for c in p.computes())
    assert s_sum.vector_width is None  # the reduction's own loop is the vector one
    assert s_soft.vector_width == 16   # row statistics hoist out of the strip-mined j loop
    kern = JitKernel(p)
    opt = _fn_text(kern.optimized_ir, "red")
    assert re.search(r"fadd reassoc[^\n]*<16 x float>", opt)
    for n in (1, 17, 100):
        x = randf(5, n)
        ss, z = kern(x)
        np.testing.assert_allclose(ss, (x * x).sum(1), rtol=1e-5, atol=1e-5)
        e = np.exp(x - x.max(1, keepdims=True))
        np.testing.assert_allclose(z, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-6)


# ---- GEMM recognition -----------------------------------------------------------------------------


def test_match_gemm_patterns():
    p = KernelProgram.new("pat", ["M", "N"])
    A, B = p.input("A", F32, (M, 64)), p.input("B", F32, (64, N))
    Cm = p.input("Cm", F32, (M, N))
    X = p.input("X", F32, (M, N))
    outs = [p.output(f"O{i}", F32, (M, N)) for i in range(5)]
    k, c = Var("k"), Var("c")
    t = TargetInfo()
    cs = [
        p.compute(outs[0], lambda i, j: sqrt(rsum([(k, 64)], A[i, k] * B[k, j] * 0.5)) + Cm[i, j]),
        # a factor over both m and n is not a GEMM
        p.compute(outs[1], lambda i, j: rsum([(k, 64)], A[i, k] * B[k, j] * Cm[i, j])),
        # a reduce extent depending on an output var (cumsum-like) is not a GEMM
        p.compute(outs[2], lambda i, j: rsum([(k, j + 1)], X[i, k])),
        # a max reduction is not a GEMM
        p.compute(outs[3], lambda i, j: rmax([(k, 64)], A[i, k] * B[k, j])),
        # softmax-like: two reductions
        p.compute(outs[4], lambda i, j: X[i, j] / rsum([(c, N)], X[i, c]) + rsum([(k, 64)], A[i, k] * B[k, j])),
    ]
    g = match_gemm(cs[0], p, t)
    assert g is not None and (g.m, g.n) == (("i",), ("j",)) and g.epilogue is not None
    assert "O0[i, j]" in str(g.epilogue)
    assert all(match_gemm(x, p, t) is None for x in cs[1:])
    # static and tiny: the loop nest is faster than packing
    q = KernelProgram.new("tiny", [])
    a, b = q.input("a", F32, (2, 4)), q.input("b", F32, (4, 3))
    o = q.output("o", F32, (2, 3))
    assert match_gemm(q.compute(o, lambda i, j: rsum([(k, 4)], a[i, k] * b[k, j])), q, t) is None


def test_scratch_reserved_in_memory_plan():
    p = KernelProgram.new("scr", ["M", "N"])
    A, B = p.input("A", F32, (M, 64)), p.input("B", F32, (64, N))
    T = p.temp("T", F32, (M, N))
    C = p.output("C", F32, (M, N))
    k = Var("k")
    p.compute(T, lambda i, j: rsum([(k, 64)], A[i, k] * B[k, j]))
    # a second GEMM (B through a non-affine index) packs a different amount: they share
    p.compute(C, lambda i, j: rsum([(k, N)], T[i, k] * B[j % 64, k]))
    schedule_program(p, TargetInfo(parallel=False))
    need = scratch_bytes(p)
    panels = sympy.ceiling(N / 32)
    assert sympy.simplify(need - sympy.Max(64 * 4 * 32 * panels, N * 4 * 32 * panels)) == 0
    base = plan(p)
    mp = reserve_scratch(base, p)
    assert mp.scratch_offset == base.workspace_bytes  # already 64-aligned
    assert reserve_scratch(mp, p) is mp
    from onnxcc.ir import evaluate

    env = {"M": 5, "N": 70}
    assert evaluate(mp.workspace_bytes, env) == evaluate(base.workspace_bytes, env) + 70 * 4 * 96
    kern = JitKernel(p, mp)
    a, b = randf(5, 64), randf(64, 70)
    (c,) = kern(a, b)
    np.testing.assert_allclose(c, (a @ b) @ b[np.arange(70) % 64].T, rtol=1e-4, atol=1e-3)


def test_gemm_over_a_floor_divided_reduce_extent():
    """Attention's P @ V over `S // 5 // 2 - 1` keys (wav2vec2's conv front end shortens the
    sequence): a GEMM whose packed-B scratch is sized with the floor, not a scalar loop nest."""
    keys = sympy.floor(sympy.floor(S / 5) / 2) - 1
    p = KernelProgram.new("pv", ["S"])
    P = p.input("P", F32, (2, keys, keys))
    V = p.input("V", F32, (keys, 2, 16))
    Out = p.output("O", F32, (2, keys, 16))
    k = Var("k")
    p.compute(Out, lambda h, i, j: rsum([(k, keys)], P[h, i, k] * V[k, h, j]))
    schedule_program(p, TargetInfo(parallel=False))
    (sch,) = (c.schedule for c in p.computes())
    assert sch.gemm is not None and sch.gemm.batch == ("h",)
    need = scratch_bytes(p)
    from onnxcc.ir import evaluate

    assert evaluate(need, {"S": 1601}) == 2 * 16 * 159 * 4  # two heads' packed V, one 16-wide panel
    kern = JitKernel(p, reserve_scratch(plan(p), p))
    for s in (20, 400, 1601):  # 1 key, 39 keys, 159 keys
        n = s // 5 // 2 - 1
        pm, v = randf(2, n, n), randf(n, 2, 16)
        (o,) = kern(pm, v, syms={"S": s})
        np.testing.assert_allclose(o, np.einsum("hik,khj->hij", pm, v), rtol=1e-4, atol=1e-4)


def test_schedule_dataclass_describe():
    s = Schedule(vector_width=16, vector_tail="none", parallel=True)
    assert s.describe() == "vector=16 tail=none parallel=True"


def test_gemm_tile_fits_static_channel_counts():
    """A static M that 8 divides but the target's mr does not gets 8-row panels with the same
    accumulator count; any other M (or an unknown one) keeps the target's tile."""
    avx512 = TargetInfo.from_features("+avx512f")
    for m in (8, 16, 32, 64, 200):
        assert gemm_tile(avx512, m) == {"mr": 8, "nr": 48}, m
    for m in (None, 12, 24, 36, 10, 3):
        assert gemm_tile(avx512, m) == {"mr": 12, "nr": 32}, m
    avx2 = TargetInfo.from_features("+avx2,+avx")  # 6 x 16: 12 registers, no 8-row tile as big
    assert gemm_tile(avx2, 16) == {"mr": 6, "nr": 16}


def test_gemm_tile_keeps_32_columns_for_channels_last_pointwise():
    """A channels-last 1x1 conv: M its pixels (8 divides 56 x 56, 28 x 28, 112 x 112 but 12
    does not), N its output channels. 8 x 48 would pad 32, 64, 128, 256 channels to 48, 96,
    144, 288; 12 x 32 pads nothing but one partial row tile, so it stays. An NCHW conv's
    few output channels as M against many pixels keep the 8-row tile."""
    avx512 = TargetInfo.from_features("+avx512f")
    for m, n in ((3136, 64), (12544, 32), (784, 128), (392, 256), (6272, 32)):
        assert gemm_tile(avx512, m, n) == {"mr": 12, "nr": 32}, (m, n)
    for m, n in ((16, 3136), (32, 3136), (64, 12544), (16, 49)):
        assert gemm_tile(avx512, m, n) == {"mr": 8, "nr": 48}, (m, n)


def test_narrow_static_n_gets_one_vector_tiles():
    """N of at most one vector (attention's P @ V, heads of 8 or 16): tiles one vector wide with
    the tile's accumulator count in rows, half-width vectors for N of at most 8; wider or
    unknown N keeps the target's tile. Run at
    row counts that leave every partial panel height (the 24-row tile's 16, 8, ..., 1 and an
    odd remainder) and N below, at and (for the wide tile) above the vector."""
    avx512 = TargetInfo.from_features("+avx512f")
    assert gemm_tile(avx512, 50, 16) == gemm_tile(avx512, None, 9) == {"mr": 24, "nr": 16}
    assert gemm_tile(avx512, None, 8) == {"mr": 24, "nr": 8, "vl": 8}  # half-width vectors
    assert gemm_tile(avx512, None, 17) == gemm_tile(avx512, None) == {"mr": 12, "nr": 32}
    avx2 = TargetInfo.from_features("+avx2,+avx")
    assert gemm_tile(avx2, None, 8) == {"mr": 12, "nr": 8}
    for n in (3, 8, 9, 16, 17):
        p = KernelProgram.new(f"narrow{n}", ["M", "K"])
        K = sym("K")
        A, B = p.input("A", F32, (2, M, K)), p.input("B", F32, (2, K, n))
        C = p.output("C", F32, (2, M, n))
        k = Var("k")
        p.compute(C, lambda h, i, j: rsum([(k, K)], A[h, i, k] * B[h, k, j]))
        schedule_program(p, TargetInfo(parallel=False))
        (sch,) = (c.schedule for c in p.computes())
        assert sch.gemm is not None and sch.gemm.nr == (8 if n <= 8 else 16 if n <= 16 else 32), n
        assert sch.gemm.vl == (8 if n <= 8 else 16), n
        kern = JitKernel(p, reserve_scratch(plan(p), p))
        for m, kk in ((1, 5), (24, 300), (63, 17), (13, 1)):
            a, b = randf(2, m, kk), randf(2, kk, n)
            (c,) = kern(a, b)
            np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


# ---- driver integration ---------------------------------------------------------------------------


def test_driver_schedules_every_version(tmp_path):
    from onnx import TensorProto, helper

    from onnxcc.compiler import CompileOptions, compile_model

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq"])
    w = helper.make_tensor("w", TensorProto.FLOAT, [48, 48], randf(48, 48).ravel())
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 48])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", "seq"])
    xs = helper.make_tensor_value_info("xs", TensorProto.FLOAT, ["batch", 48])
    nodes = [helper.make_node("MatMul", ["xs", "w"], ["mm"]), helper.make_node("Relu", ["mm"], ["y"]),
             helper.make_node("Sigmoid", ["x"], ["z"])]
    g = helper.make_graph(nodes, "g", [x, xs], [y, z], initializer=[w])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    art = compile_model(model, tmp_path, CompileOptions(name="sched", divisible=16, parallel=False), emit="llvm")
    text = art.text
    assert "onnxcc.gemm.ukr." in text  # the tile depends on the host's vector unit
    versions = sorted(set(re.findall(r'define[^\n]*@"?(sched_v\d+)"?\(', text)))
    assert len(versions) >= 2
    divisible = [m.group(1) for m in re.finditer(r'define[^\n]*@"?(sched_v\d+)"?\(', text)
                 if ".tail" not in _fn_text(text, m.group(1))]
    assert divisible and len(divisible) < len(versions)  # the seq % 16 version has no tail


def test_erf_is_vector_code_and_accurate():
    import math

    from onnxcc.kernel import erf

    p = KernelProgram.new("erfk", ["N"])
    X = p.input("X", F32, (N,))
    Y = p.output("Y", F32, (N,))
    p.compute(Y, lambda i: erf(X[i]) * 0.5)
    schedule_program(p, TargetInfo(parallel=False))
    kern = JitKernel(p)
    assert "erff" not in kern.optimized_ir and "<16 x float>" in kern.optimized_ir
    x = np.concatenate([np.linspace(-5, 5, 4001),
                        [0.0, 1e-30, -1e-20, 0.5, np.inf, -np.inf, np.nan]]).astype(np.float32)
    y = kern(x)[0]
    ref = 0.5 * np.array([math.erf(float(v)) for v in x])
    np.testing.assert_allclose(y, ref, rtol=1e-6, atol=2e-7)
