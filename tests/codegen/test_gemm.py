"""The GEMM path (kernel/schedule.py recognises, codegen/cpu/gemm.py emits): numerics vs numpy
through JitKernel for many shapes, symbolic dims, batch broadcasting, transposed operands,
epilogues, convolutions, parallel on and off. Timing lives in benchmarks/gemm.py."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from onnxcc.codegen.cpu import jit as cpu_jit
from onnxcc.codegen.cpu.jit import JitKernel
from onnxcc.errors import RuntimeCallError
from onnxcc.ir import DType, sym
from onnxcc.kernel import KernelProgram, Var, broadcast_indices, relu, rsum, select, wrap_index
from onnxcc.kernel.schedule import TargetInfo, schedule_program

F32, I64 = DType.f32, DType.i64
M, N, K, Bt, H, W = sym("M"), sym("N"), sym("K"), sym("Bt"), sym("H"), sym("W")
SIZES = (1, 3, 17, 64, 100, 129)
rng = np.random.default_rng(7)
# every shape through the GEMM path, however small (the default keeps tiny ones on loops)
ALWAYS = dict(gemm_min_work=1)


def randf(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def scheduled(p: KernelProgram, parallel: bool = False, **target) -> JitKernel:
    schedule_program(p, TargetInfo(parallel=parallel, **{**ALWAYS, **target}))
    for c in p.computes():
        assert c.schedule.gemm is not None, c.schedule.describe()
    return JitKernel(p, parallel=parallel)


def close(got, want, k=1):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * max(1, k) ** 0.5 * 4)


# ---- plain / transposed matmuls with and without epilogue, every size combination ------------


def matmul_program(name="mm"):
    """Four GEMMs over symbolic M, N, K: plain, A transposed, B transposed (+ bias + relu),
    both transposed."""
    p = KernelProgram.new(name, ["M", "N", "K"])
    A, At = p.input("A", F32, (M, K)), p.input("At", F32, (K, M))
    B, Bt_ = p.input("B", F32, (K, N)), p.input("Bt", F32, (N, K))
    bias = p.input("bias", F32, (N,))
    outs = [p.output(f"C{i}", F32, (M, N)) for i in range(4)]
    k = Var("k")
    p.compute(outs[0], lambda i, j: rsum([(k, K)], A[i, k] * B[k, j]))
    p.compute(outs[1], lambda i, j: rsum([(k, K)], At[k, i] * B[k, j]))
    p.compute(outs[2], lambda i, j: relu(rsum([(k, K)], A[i, k] * Bt_[j, k]) + bias[j]))
    p.compute(outs[3], lambda i, j: rsum([(k, K)], At[k, i] * Bt_[j, k]) * 2.0)
    return p


@pytest.fixture(scope="module", params=[False, True], ids=["serial", "parallel"])
def mm_kernel(request):
    return scheduled(matmul_program(f"mm{int(request.param)}"), request.param), request.param


def test_matmul_all_sizes_symbolic(mm_kernel):
    kern, parallel = mm_kernel
    flags = [(c.schedule.gemm.a_k_inner, c.schedule.gemm.b_k_inner) for c in kern.program.computes()]
    assert flags == [(True, False), (False, False), (True, True), (False, True)]
    before = cpu_jit.PARALLEL_CALLS[0]
    for m, n, k in itertools.product(SIZES, SIZES, SIZES):
        a, b, bias = randf(m, k), randf(k, n), randf(n)
        c0, c1, c2, c3 = kern(a, a.T.copy(), b, b.T.copy(), bias, syms={"M": m, "N": n, "K": k})
        ref = a @ b
        close(c0, ref, k)
        close(c1, ref, k)
        close(c2, np.maximum(ref + bias, 0), k)
        close(c3, ref * 2, k)
    # the pool only runs GEMMs big enough to pay for waking it
    assert (cpu_jit.PARALLEL_CALLS[0] > before) == parallel


def test_ir_has_vector_micro_kernel(mm_kernel):
    kern, _ = mm_kernel
    assert "onnxcc.gemm.ukr.12x32" in kern.llvm_ir
    assert "llvm.fma.v16f32" in kern.optimized_ir
    assert "llvm.masked.store.v16f32" in kern.optimized_ir


def test_static_shapes_const_b_prepacked():
    w = randf(129, 100)
    p = KernelProgram.new("mmc", ["M"])
    A = p.input("A", F32, (M, 129))
    Wc = p.const("W", w)
    bias = p.const("bias", randf(100))
    C = p.output("C", F32, (M, 100))
    k = Var("k")
    p.compute(C, lambda i, j: rsum([(k, 129)], A[i, k] * Wc[k, j]) * 0.5 + bias[j])
    kern = scheduled(p)
    g = p.body[0].schedule.gemm
    assert g.b_const and g.b_packed.shape == (1, 4, 129, 32)
    assert p.body[0].schedule.scratch_bytes == 0 and kern.plan.scratch_offset is None
    for m in (1, 13, 100):
        a = randf(m, 129)
        close(kern(a)[0], (a @ w) * 0.5 + p.buffers["bias"].data, 129)


@pytest.mark.parametrize("m", [3, 5, 7, 15, 27])
def test_static_m_remainder_kernel(m):
    """A static M whose remainder mod mr is no power of two gets a micro-kernel of exactly
    that height (one pass over each B panel); direct, packed and prepacked A all agree."""
    w, ac = randf(64, 40), randf(m, 64)
    p = KernelProgram.new("mmr", [])
    A, At = p.input("A", F32, (m, 64)), p.input("At", F32, (64, m))
    Wc, Ac = p.const("W", w), p.const("Ac", ac)
    outs = [p.output(f"C{i}", F32, (m, 40)) for i in range(3)]
    k = Var("k")
    p.compute(outs[0], lambda i, j: rsum([(k, 64)], A[i, k] * Wc[k, j]))
    p.compute(outs[1], lambda i, j: rsum([(k, 64)], At[k, i] * Wc[k, j]) + 1.0)
    p.compute(outs[2], lambda i, j: rsum([(k, 64)], Ac[i, k] * Wc[k, j]))
    kern = scheduled(p)
    rem = m % p.body[0].schedule.gemm.mr  # 8 rows for N = 40: 8 x 48 tiles pad it least
    if rem & (rem - 1):
        assert f"ukr.{rem}x" in kern.optimized_ir
    a = randf(m, 64)
    got = kern(a, np.ascontiguousarray(a.T))
    for g, want in zip(got, (a @ w, a @ w + 1.0, ac @ w)):
        close(g, want, 64)


# ---- batches ----------------------------------------------------------------------------------


def test_batched_and_broadcast_batches():
    p = KernelProgram.new("bmm", ["Bt", "M", "N", "K"])
    A3 = p.input("A3", F32, (Bt, M, K))
    B3 = p.input("B3", F32, (Bt, K, N))
    A2 = p.input("A2", F32, (M, K))
    B2 = p.input("B2", F32, (K, N))
    A4 = p.input("A4", F32, (Bt, 1, M, K))
    B4 = p.input("B4", F32, (1, 3, K, N))
    outs = [p.output(f"C{i}", F32, (Bt, M, N)) for i in range(3)]
    C4 = p.output("C4", F32, (Bt, 3, M, N))
    k = Var("k")
    p.compute(outs[0], lambda b, i, j: rsum([(k, K)], A3[b, i, k] * B3[b, k, j]))
    p.compute(outs[1], lambda b, i, j: rsum([(k, K)], A3[b, i, k] * B2[k, j]))   # m = (b, i)
    p.compute(outs[2], lambda b, i, j: rsum([(k, K)], A2[i, k] * B3[b, k, j]))   # A shared by batches
    p.compute(C4, lambda b, h, i, j: rsum([(k, K)], A4[(*broadcast_indices((b, h), (Bt, 1)), i, k)]
                                        * B4[(*broadcast_indices((b, h), (1, 3)), k, j)]))
    kern = scheduled(p, parallel=True)
    g = [c.schedule.gemm for c in p.computes()]
    assert (g[0].batch, g[0].m) == (("b",), ("i",))
    assert (g[1].batch, g[1].m) == ((), ("b", "i"))
    assert g[2].batch == ("b",) and g[2].a_batch_vars == () and g[2].b_batch_vars == ("b",)
    for bt, m, n, kk in [(1, 1, 1, 1), (2, 17, 33, 64), (3, 13, 40, 129)]:
        a3, b3, a2, b2 = randf(bt, m, kk), randf(bt, kk, n), randf(m, kk), randf(kk, n)
        a4, b4 = randf(bt, 1, m, kk), randf(1, 3, kk, n)
        c0, c1, c2, c4 = kern(a3, b3, a2, b2, a4, b4, syms={"Bt": bt, "M": m, "N": n, "K": kk})
        close(c0, a3 @ b3, kk)
        close(c1, a3 @ b2, kk)
        close(c2, a2 @ b3, kk)
        close(c4, a4 @ b4, kk)


# ---- epilogues and operand expressions ----------------------------------------------------------


def test_residual_epilogue_scaled_operand_and_empty_contraction():
    p = KernelProgram.new("epi", ["M", "N", "K"])
    A = p.input("A", F32, (M, 48))
    B = p.input("B", F32, (48, N))
    R = p.input("R", F32, (M, N))
    s = p.input("s", F32, (M,))
    A0 = p.input("A0", F32, (M, K - 1))
    B0 = p.input("B0", F32, (K - 1, N))
    C = p.output("C", F32, (M, N))
    C0 = p.output("C0", F32, (M, N))
    k = Var("k")
    # a prologue scale on A (a third factor over m only), residual + relu after
    p.compute(C, lambda i, j: relu(rsum([(k, 48)], A[i, k] * s[i] * B[k, j]) + R[i, j]) - 0.5)
    # a contraction that may be empty (K = 1): the loop nest writes the epilogue of 0
    p.compute(C0, lambda i, j: rsum([(k, K - 1)], A0[i, k] * B0[k, j]) + R[i, j])
    kern = scheduled(p, parallel=True)
    for m, n, kk in [(1, 1, 1), (25, 70, 1), (100, 129, 20)]:
        a, b, r, sv = randf(m, 48), randf(48, n), randf(m, n), randf(m)
        a0, b0 = randf(m, kk - 1), randf(kk - 1, n)
        c, c0 = kern(a, b, r, sv, a0, b0, syms={"K": kk})
        close(c, np.maximum((a * sv[:, None]) @ b + r, 0) - 0.5, 48)
        close(c0, a0 @ b0 + r, kk)


def test_gather_operand_errors_propagate():
    p = KernelProgram.new("emb", ["M"])
    idx = p.input("idx", I64, (M,))
    table = p.input("table", F32, (50, 32))
    Wt = p.input("Wt", F32, (32, 64))
    C = p.output("C", F32, (M, 64))
    k = Var("k")
    p.compute(C, lambda i, j: rsum([(k, 32)], table[wrap_index(idx[i], 50), k] * Wt[k, j]))
    kern = scheduled(p, parallel=True)
    t, w = randf(50, 32), randf(32, 64)
    for ids in (np.array([3, -1, 49, 0, 7], np.int64), rng.integers(-50, 50, 300)):
        close(kern(ids, t, w)[0], t[ids] @ w, 32)
    for bad in (np.array([1, 50], np.int64), np.r_[rng.integers(0, 50, 299), -51]):
        with pytest.raises(RuntimeCallError, match="index out of range"):
            kern(bad, t, w)


# ---- convolutions ---------------------------------------------------------------------------------


def conv_ref(x, w, b, pad):
    n, _c, h, wd = x.shape
    f, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = h + 2 * pad - kh + 1, wd + 2 * pad - kw + 1
    y = np.zeros((n, f, oh, ow), np.float32)
    for i in range(kh):
        for j in range(kw):
            y += np.einsum("nchw,fc->nfhw", xp[:, :, i:i + oh, j:j + ow], w[:, :, i, j])
    return y + b[None, :, None, None]


def test_conv_3x3_and_1x1():
    p = KernelProgram.new("conv", ["Bt", "H", "W"])
    X = p.input("X", F32, (Bt, 5, H, W))
    W3 = p.const("W3", randf(16, 5, 3, 3))
    W1 = p.const("W1", randf(7, 5, 1, 1))
    bias = p.const("bias", randf(16))
    Y3 = p.output("Y3", F32, (Bt, 16, H, W))
    Y1 = p.output("Y1", F32, (Bt, 7, H, W))
    c, kh, kw = Var("c"), Var("kh"), Var("kw")

    def conv3(n, f, oh, ow):
        ih, iw = oh + kh - 1, ow + kw - 1
        x = select((ih >= 0) & (ih < H) & (iw >= 0) & (iw < W), X[n, c, ih, iw], 0.0)
        return relu(rsum([(c, 5), (kh, 3), (kw, 3)], x * W3[f, c, kh, kw]) + bias[f])

    p.compute(Y3, conv3)
    p.compute(Y1, lambda n, f, oh, ow: rsum([(c, 5), (kh, 1), (kw, 1)], X[n, c, oh + kh, ow + kw] * W1[f, c, kh, kw]))
    kern = scheduled(p, parallel=True)
    g = p.body[0].schedule.gemm
    assert (g.batch, g.m, g.n, g.k_inner) == (("n",), ("f",), ("oh", "ow"), 9)
    # the constant weights (A) are packed at compile time, all of K, rows zero-padded
    assert g.a_const and g.a_packed.shape == (-(-16 // g.mr), 45, g.mr)
    np.testing.assert_array_equal(g.a_packed.transpose(0, 2, 1).reshape(-1, 45)[:16],
                                  p.buffers["W3"].data.reshape(16, 45))
    assert not g.a_packed.transpose(0, 2, 1).reshape(-1, 45)[16:].any()
    for bt, h, w in [(1, 1, 1), (2, 7, 9), (1, 16, 13)]:
        x = randf(bt, 5, h, w)
        y3, y1 = kern(x, syms={"Bt": bt, "H": h, "W": w})
        close(y3, np.maximum(conv_ref(x, p.buffers["W3"].data, p.buffers["bias"].data, 1), 0), 45)
        close(y1, conv_ref(x, p.buffers["W1"].data, np.zeros(7, np.float32), 0), 5)



def test_conv_epilogues_flat_and_per_column():
    """A conv's epilogue runs over flat (oh, ow) columns when every use of them is a
    same-shaped trailing load (residual R), and column by column otherwise (a select on ow,
    a load broadcast along oh): both against numpy, odd sizes and several tiles per row."""
    p = KernelProgram.new("convepi", ["Bt", "H", "W"])
    X = p.input("X", F32, (Bt, 3, H, W))
    R = p.input("R", F32, (Bt, 8, H, W))
    Rw = p.input("Rw", F32, (Bt, 8, 1, W))
    Wt = p.const("Wt", randf(8, 3, 3, 3))
    ys = [p.output(f"Y{i}", F32, (Bt, 8, H, W)) for i in range(3)]
    c, kh, kw = Var("c"), Var("kh"), Var("kw")

    def acc(n, f, oh, ow):
        ih, iw = oh + kh - 1, ow + kw - 1
        x = select((ih >= 0) & (ih < H) & (iw >= 0) & (iw < W), X[n, c, ih, iw], 0.0)
        return rsum([(c, 3), (kh, 3), (kw, 3)], x * Wt[f, c, kh, kw])

    p.compute(ys[0], lambda n, f, oh, ow: relu(acc(n, f, oh, ow) + R[n, f, oh, ow]))
    p.compute(ys[1], lambda n, f, oh, ow: select(ow < 5, acc(n, f, oh, ow), 0.0))
    p.compute(ys[2], lambda n, f, oh, ow: acc(n, f, oh, ow) * Rw[n, f, 0, ow])
    kern = scheduled(p, parallel=True)
    w = p.buffers["Wt"].data
    for bt, h, wd in [(1, 1, 1), (3, 7, 9), (1, 5, 61)]:
        x, r, rw = randf(bt, 3, h, wd), randf(bt, 8, h, wd), randf(bt, 8, 1, wd)
        y0, y1, y2 = kern(x, r, rw, syms={"Bt": bt, "H": h, "W": wd})
        base = conv_ref(x, w, np.zeros(8, np.float32), 1)
        close(y0, np.maximum(base + r, 0), 27)
        close(y1, np.where(np.arange(wd) < 5, base, 0), 27)
        close(y2, base * rw, 27)


def test_flat_columns_check():
    """Which epilogues may read a conv's (oh, ow) as one flat index."""
    from onnxcc.codegen.cpu.gemm_flat import flat_columns_ok
    from onnxcc.kernel.expr import Load

    shapes = {"O": (Bt, 8, H, W), "R": (Bt, 8, H, W), "S": (Bt, 8, H, 4), "T": (Bt, 8, W, H)}
    ext = {"n": Bt, "f": 8, "oh": H, "ow": W}

    def ld(buf, *ix):
        return Load(buf, tuple(Var(i) if isinstance(i, str) else i for i in ix), F32)

    def ok(e):
        return flat_columns_ok(e, ("oh", "ow"), ext, shapes.__getitem__)

    acc = ld("O", "n", "f", "oh", "ow")
    assert ok(relu(acc + ld("R", "n", "f", "oh", "ow")))
    assert not ok(acc + ld("S", "n", "f", "oh", "ow"))  # trailing dim 4, not W: not flat
    assert not ok(acc + ld("T", "n", "f", "ow", "oh"))  # vars swapped
    assert not ok(select(Var("ow") < 5, acc, 0.0))  # ow used outside a load
    assert not flat_columns_ok(acc, ("ow",), ext, shapes.__getitem__)  # one var: nothing to flatten


# ---- fused attention layouts: batch vars between m and n, operands using some batch vars -------


def test_attention_layouts():
    Sq = sym("S")
    p = KernelProgram.new("attn", ["Bt", "S"])
    X = p.input("X", F32, (Bt, Sq, 24))
    Wq = p.const("Wq", randf(24, 3 * 8))
    bq = p.const("bq", randf(3 * 8))
    Pm = p.input("P", F32, (Bt, 3, Sq, Sq))
    V = p.input("V", F32, (Bt, 3, Sq, 8))
    Kt = p.input("Kt", F32, (Bt, Sq, 3, 8))
    Q = p.output("Q", F32, (Bt, 3, Sq, 8))
    O = p.output("O", F32, (Bt, Sq, 3, 8))  # noqa: E741 - the attention output, as in the papers
    Sc = p.output("Sc", F32, (Bt, 3, Sq, Sq))
    k = Var("k")
    # projection straight into heads: B = W[k, h*8 + d] uses batch var h only (prepacked per head)
    p.compute(Q, lambda b, h, s, d: rsum([(k, 24)], X[b, s, k] * Wq[k, h * 8 + d]) + bq[h * 8 + d])
    # P @ V written transposed to [b, s, h, d]: batch var h sits between m (s) and n (d)
    p.compute(O, lambda b, s, h, d: rsum([(k, Sq)], Pm[b, h, s, k] * V[b, h, k, d]))
    # Q @ K^T with K read as [b, j, h, k] (B walks k contiguously)
    p.compute(Sc, lambda b, h, i, j: rsum([(k, 8)], Q[b, h, i, k] * Kt[b, j, h, k]) * 0.25)
    kern = scheduled(p, parallel=True)
    gq, go, gs = (c.schedule.gemm for c in p.computes())
    assert (gq.batch, gq.m, gq.n, gq.a_batch_vars, gq.b_batch_vars) == (("b", "h"), ("s",), ("d",), ("b",), ("h",))
    assert gq.b_const and gq.b_packed.shape[0] == 3
    assert (go.batch, go.m, go.n) == (("b", "h"), ("s",), ("d",))
    assert gs.b_k_inner and (gs.m, gs.n) == (("i",), ("j",))
    assert gq.a_direct and go.a_direct and gs.a_direct  # A's rows read in place, never packed
    wq, bqv = p.buffers["Wq"].data, p.buffers["bq"].data
    for bt, s in [(1, 1), (2, 17), (1, 40), (2, 70), (1, 129)]:  # several row blocks and B panels
        x, pm, v, kt = randf(bt, s, 24), randf(bt, 3, s, s), randf(bt, 3, s, 8), randf(bt, s, 3, 8)
        q, o, sc = kern(x, pm, v, kt, syms={"Bt": bt, "S": s})
        qr = (x @ wq + bqv).reshape(bt, s, 3, 8).transpose(0, 2, 1, 3)
        close(q, qr, 24)
        close(o, (pm @ v).transpose(0, 2, 1, 3), s)
        close(sc, (qr @ kt.transpose(0, 2, 3, 1)) * 0.25, 8)


def test_a_read_in_place_where_its_rows_are_strided_rows():
    """A is read in place (no packing) when it is a plain load with k last and the m vars
    consecutive (any batch vars around them); otherwise it is packed. Both agree with numpy."""
    Sq = sym("S")
    p = KernelProgram.new("adirect", ["Bt", "S"])
    Xh = p.input("Xh", F32, (Bt, Sq, 3, 8))    # [b, s, h, d]: rows s at stride 24, h between
    Y = p.input("Y", F32, (Bt, Sq + 1, 8))     # rows of a longer buffer: flattened (b, s) would skip
    At = p.input("At", F32, (8, Bt, Sq))       # k first: packed
    Wt = p.const("Wt", randf(8, 16))
    Wh = p.const("Wh", randf(3, 8, 16))        # per head: h is a batch var, m = (s)
    O1 = p.output("O1", F32, (Bt, 3, Sq, 16))
    O2 = p.output("O2", F32, (Bt, Sq, 16))
    O3 = p.output("O3", F32, (Bt, Sq, 16))
    O4 = p.output("O4", F32, (Bt, Sq, 16))
    k = Var("k")
    p.compute(O1, lambda b, h, s, j: rsum([(k, 8)], Xh[b, s, h, k] * Wh[h, k, j]))
    p.compute(O2, lambda b, s, j: rsum([(k, 8)], Y[b, s, k] * Wt[k, j]))
    p.compute(O3, lambda b, s, j: rsum([(k, 8)], At[k, b, s] * Wt[k, j]))
    p.compute(O4, lambda b, s, j: rsum([(k, 8)], Xh[b, s, 1, k] * Wt[k, j]))  # a constant index
    kern = scheduled(p, parallel=True)
    g1, g2, g3, g4 = (c.schedule.gemm for c in p.computes())
    assert g1.a_direct and (g1.m, g1.batch) == (("s",), ("b", "h"))
    assert (g2.m, g2.a_direct) == (("b", "s"), False)  # Y's dim S + 1 != the extent S
    assert not g3.a_direct and not g4.a_direct
    wt, wh = p.buffers["Wt"].data, p.buffers["Wh"].data
    for bt, s in [(1, 1), (2, 13), (3, 40)]:
        xh, y, at = randf(bt, s, 3, 8), randf(bt, s + 1, 8), randf(8, bt, s)
        o1, o2, o3, o4 = kern(xh, y, at, syms={"Bt": bt, "S": s})
        close(o1, xh.transpose(0, 2, 1, 3) @ wh, 8)
        close(o2, y[:, :s] @ wt, 8)
        close(o3, at.transpose(1, 2, 0) @ wt, 8)
        close(o4, xh[:, :, 1] @ wt, 8)
