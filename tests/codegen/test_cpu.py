"""CPU codegen: JIT small kernel programs with MCJIT and compare with numpy."""

from __future__ import annotations

import ctypes
import math
import shutil
import subprocess

import numpy as np
import pytest
import sympy

from onnxcc.codegen.cpu import jit as cpu_jit
from onnxcc.codegen.cpu.emit import emit_llvm, emit_object
from onnxcc.codegen.cpu.jit import JitKernel
from onnxcc.errors import RuntimeCallError
from onnxcc.ir import DType, sym
from onnxcc.kernel import (
    ERR_DIV_ZERO,
    ERR_INDEX,
    KernelProgram,
    Unary,
    Var,
    argmax,
    argmin,
    cast,
    exp,
    maximum,
    plan,
    rem,
    rmax,
    rmin,
    rprod,
    rsum,
    select,
    truncdiv,
    wrap_index,
)

F32, F16, I64, I32, BOOL = DType.f32, DType.f16, DType.i64, DType.i32, DType.bool
N, M, H, W = sym("N"), sym("M"), sym("H"), sym("W")
rng = np.random.default_rng(0)


def randf(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


# ---- elementwise and broadcasting --------------------------------------------------------


def test_elementwise_broadcast_symbolic():
    p = KernelProgram.new("bcast", ["N"])
    X = p.input("X", F32, (N, 16))
    b = p.input("b", F32, (16,))
    s = p.input("s", F32, (N, 1))
    Y = p.output("Y", F32, (N, 16))
    p.compute(Y, lambda n, c: maximum(X[n, c] * s[n, 0] + b[c] * 2.0, 0.0) - exp(-X[n, c]))
    k = JitKernel(p)
    for n in (1, 7, 64):
        x, bb, ss = randf(n, 16), randf(16), randf(n, 1)
        (y,) = k(x, bb, ss)
        np.testing.assert_allclose(y, np.maximum(x * ss + bb * 2, 0) - np.exp(-x), rtol=1e-5, atol=1e-6)


def test_loop_is_vectorized():
    p = KernelProgram.new("vadd", ["N"])
    A, B = p.input("A", F32, (N,)), p.input("B", F32, (N,))
    Y = p.output("Y", F32, (N,))
    p.compute(Y, lambda i: A[i] + B[i])
    k = JitKernel(p)
    assert "x float>" in k.optimized_ir  # <8 x float> / <16 x float>
    a, b = randf(1000), randf(1000)
    np.testing.assert_array_equal(k(a, b)[0], a + b)


# ---- matmul, softmax -----------------------------------------------------------------------


def matmul_program() -> KernelProgram:
    p = KernelProgram.new("matmul", ["M"])
    A = p.input("A", F32, (2, M, 64))
    B = p.input("B", F32, (64, 32))
    C = p.output("C", F32, (2, M, 32))
    k = Var("k")
    p.compute(C, lambda b, i, j: rsum([(k, 64)], A[b, i, k] * B[k, j]))
    return p


def test_matmul_symbolic_m():
    kern = JitKernel(matmul_program())
    for m in (1, 5, 33):
        a, b = randf(2, m, 64), randf(64, 32)
        (c,) = kern(a, b)
        np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_matmul_printed():
    assert str(matmul_program()) == (
        "kernel matmul(M) {\n"
        "  input A: f32[2, M, 64]\n"
        "  input B: f32[64, 32]\n"
        "  output C: f32[2, M, 32]\n"
        "  C[b, i, j] = sum(k < 64: A[b, i, k] * B[k, j])\n"
        "}"
    )


def softmax_program() -> KernelProgram:
    p = KernelProgram.new("softmax", ["N", "M"])
    X = p.input("X", F32, (N, M))
    Mx = p.temp("Mx", F32, (N,))
    S = p.temp("S", F32, (N,))
    Y = p.output("Y", F32, (N, M))
    c = Var("c")
    p.compute(Mx, lambda n: rmax([(c, M)], X[n, c]))
    p.compute(S, lambda n: rsum([(c, M)], exp(X[n, c] - Mx[n])))
    p.compute(Y, lambda n, j: exp(X[n, j] - Mx[n]) / S[n])
    return p


def np_softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_softmax_three_computes_two_temps():
    p = softmax_program()
    mp = plan(p)
    assert mp.offsets["Mx"] == 0 and mp.offsets["S"] != 0
    k = JitKernel(p, mp)
    for n, m in ((1, 1), (3, 10), (17, 100)):
        x = randf(n, m) * 5
        np.testing.assert_allclose(k(x)[0], np_softmax(x), rtol=1e-5, atol=1e-6)


def test_softmax_single_fused_compute_hoists_reductions():
    p = KernelProgram.new("softmax1", ["N", "M"])
    X = p.input("X", F32, (N, M))
    Y = p.output("Y", F32, (N, M))
    c, d = Var("c"), Var("d")
    mx = rmax([(c, M)], X[Var("n"), c])
    den = rsum([(d, M)], exp(X[Var("n"), d] - mx))
    p.compute(Y, lambda n, j: exp(X[n, j] - mx) / den)
    k = JitKernel(p)
    # the max is computed once per row outside the j loop: one reduction loop each in the IR
    assert k.llvm_ir.count('%"c" = phi') == 1
    x = randf(9, 33)
    np.testing.assert_allclose(k(x)[0], np_softmax(x), rtol=1e-5, atol=1e-6)


# ---- concat, gather ------------------------------------------------------------------------


def test_concat_via_select():
    p = KernelProgram.new("concat", ["N"])
    A = p.input("A", F32, (N, 3))
    B = p.input("B", F32, (N, 5))
    Y = p.output("Y", F32, (N, 8))
    p.compute(Y, lambda i, j: select(j < 3, A[i, j], B[i, j - 3]))
    k = JitKernel(p)
    for n in (1, 4):
        a, b = randf(n, 3), randf(n, 5)
        np.testing.assert_array_equal(k(a, b)[0], np.concatenate([a, b], axis=1))


@pytest.mark.parametrize("idx_dtype", [I64, I32])
def test_gather_loaded_negative_indices(idx_dtype):
    p = KernelProgram.new("gather", ["K"])
    K = sym("K")
    D = p.input("D", F32, (5, 4))
    Idx = p.input("Idx", idx_dtype, (K,))
    Y = p.output("Y", F32, (K, 4))
    p.compute(Y, lambda i, j: D[wrap_index(Idx[i], 5), j])
    k = JitKernel(p)
    d = randf(5, 4)
    idx = np.array([0, 4, -1, -5, 2], dtype=idx_dtype.np)
    np.testing.assert_array_equal(k(d, idx)[0], d[idx])
    for bad in (5, -6):
        with pytest.raises(RuntimeCallError, match="index out of range") as info:
            k(d, np.array([1, bad], dtype=idx_dtype.np))
        assert info.value.code == ERR_INDEX


# ---- conv ------------------------------------------------------------------------------------


def np_conv2d(x, w, pad, stride):
    n, _, h, wd = x.shape
    f, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh = (h + 2 * pad - kh) // stride + 1
    ow = (wd + 2 * pad - kw) // stride + 1
    y = np.zeros((n, f, oh, ow), np.float32)
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, :, i * stride:i * stride + kh, j * stride:j * stride + kw]
            y[:, :, i, j] = np.einsum("nchw,fchw->nf", patch, w)
    return y


@pytest.mark.parametrize("stride", [1, 2])
def test_conv2d_padding_via_select(stride):
    pad, C, F, KH = 1, 3, 4, 3
    OH = sympy.floor((H + 2 * pad - KH) / stride) + 1
    OW = sympy.floor((W + 2 * pad - KH) / stride) + 1
    w = randf(F, C, KH, KH)
    p = KernelProgram.new("conv", ["N", "H", "W"])
    X = p.input("X", F32, (N, C, H, W))
    Wt = p.const("Wt", w)
    Bias = p.const("Bias", np.arange(F, dtype=np.float32))
    Y = p.output("Y", F32, (N, F, OH, OW))
    c, kh, kw = Var("c"), Var("kh"), Var("kw")

    def body(n, f, oh, ow):
        ih = oh * stride + kh - pad
        iw = ow * stride + kw - pad
        inside = (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        x = select(inside, X[n, c, ih, iw], 0.0)
        return rsum([(c, C), (kh, KH), (kw, KH)], x * Wt[f, c, kh, kw]) + Bias[f]

    p.compute(Y, body)
    k = JitKernel(p)
    for n, h, wd in ((1, 5, 5), (2, 8, 7)):
        x = randf(n, C, h, wd)
        want = np_conv2d(x, w, pad, stride) + np.arange(F, dtype=np.float32)[None, :, None, None]
        np.testing.assert_allclose(k(x)[0], want, rtol=1e-4, atol=1e-4)


# ---- reductions ------------------------------------------------------------------------------


def test_cumsum_extent_depends_on_outer_var():
    p = KernelProgram.new("cumsum", ["N"])
    X = p.input("X", F32, (3, N))
    Y = p.output("Y", F32, (3, N))
    Z = p.output("Z", F32, (3, N))  # exclusive, reversed
    k = Var("k")
    p.compute(Y, lambda r, i: rsum([(k, i + 1)], X[r, k]))
    p.compute(Z, lambda r, i: rsum([(k, N - 1 - i)], X[r, i + 1 + k]))
    kern = JitKernel(p)
    for n in (1, 6):
        x = randf(3, n)
        y, z = kern(x)
        np.testing.assert_allclose(y, np.cumsum(x, axis=1), rtol=1e-5, atol=1e-5)
        want = np.flip(np.cumsum(np.flip(x, 1), axis=1), 1) - x
        np.testing.assert_allclose(z, want, rtol=1e-5, atol=1e-5)


def test_argmax_argmin_first_and_nan():
    p = KernelProgram.new("argmax", ["N"])
    X = p.input("X", F32, (4, N))
    Y = p.output("Y", I64, (4,))
    Z = p.output("Z", I64, (4,))
    k = Var("k")
    p.compute(Y, lambda r: argmax(k, N, X[r, k]))
    p.compute(Z, lambda r: argmin(k, N, X[r, k]))
    kern = JitKernel(p)
    x = np.array([[1, 3, 3, 0, 2], [5, 5, 5, 5, 5], [-1, np.nan, 7, np.nan, -9], [-np.inf] * 5], np.float32)
    y, z = kern(x)
    np.testing.assert_array_equal(y, np.argmax(x, axis=1))
    np.testing.assert_array_equal(z, np.argmin(x, axis=1))


def test_reduce_ops_init_multi_var_and_empty():
    p = KernelProgram.new("reds", ["N"])
    X = p.input("X", F32, (N, 3, 4))
    Iv = p.input("Iv", I32, (N, 4))
    S = p.output("S", F32, (N,))
    P = p.output("P", F32, (N,))
    Mn = p.output("Mn", I32, (N,))
    E = p.output("E", F32, (N,))
    a, b = Var("a"), Var("b")
    p.compute(S, lambda n: rsum([(a, 3), (b, 4)], X[n, a, b], init=10.0))
    p.compute(P, lambda n: rprod([(a, 3)], X[n, a, 0]))
    p.compute(Mn, lambda n: rmin([(b, 4)], Iv[n, b]))
    p.compute(E, lambda n: rmax([(a, n)], X[n, 0, a] * 0.0 + 1.0, init=-5.0))  # empty for n = 0
    kern = JitKernel(p)
    x = randf(3, 3, 4)
    ii = rng.integers(-100, 100, (3, 4)).astype(np.int32)
    s, pr, mn, e = kern(x, ii)
    np.testing.assert_allclose(s, x.sum(axis=(1, 2)) + 10, rtol=1e-5)
    np.testing.assert_allclose(pr, x[:, :, 0].prod(axis=1), rtol=1e-5)
    np.testing.assert_array_equal(mn, ii.min(axis=1))
    np.testing.assert_array_equal(e, [-5.0, 1.0, 1.0])


def test_scalar_output():
    p = KernelProgram.new("total", ["N"])
    X = p.input("X", F32, (N,))
    T = p.output("T", F32, ())
    i = Var("i")
    p.compute(T, rsum([(i, N)], X[i]))
    x = randf(100)
    np.testing.assert_allclose(JitKernel(p)(x)[0], x.sum(), rtol=1e-5)


# ---- dtypes ---------------------------------------------------------------------------------


def test_casts_and_bool_outputs():
    p = KernelProgram.new("casts", ["N"])
    X = p.input("X", F32, (N,))
    Ti = p.output("Ti", I64, (N,))
    Tf = p.output("Tf", F32, (N,))
    Gt = p.output("Gt", BOOL, (N,))
    Wh = p.output("Wh", F32, (N,))
    p.compute(Ti, lambda i: cast(X[i], I64))
    p.compute(Tf, lambda i: cast(cast(X[i], I64), F32) + cast(X[i] > 0.0, F32))
    p.compute(Gt, lambda i: (X[i] > 0.5) | (X[i] < -1.0))
    p.compute(Wh, lambda i: select(cast(cast(X[i] > 0.0, I32), BOOL), X[i], -X[i]))
    kern = JitKernel(p)
    x = np.array([-2.7, -1.0, -0.2, 0.0, 0.4, 0.6, 3.9, 1e3], np.float32)
    ti, tf, gt, wh = kern(x)
    np.testing.assert_array_equal(ti, x.astype(np.int64))
    np.testing.assert_array_equal(tf, x.astype(np.int64).astype(np.float32) + (x > 0))
    assert gt.dtype == np.bool_
    np.testing.assert_array_equal(gt, (x > 0.5) | (x < -1.0))
    np.testing.assert_array_equal(wh, np.abs(x))


def test_bool_input_and_int_ops():
    p = KernelProgram.new("ints", ["N"])
    A = p.input("A", I32, (N,))
    B = p.input("B", I32, (N,))
    Mk = p.input("Mk", BOOL, (N,))
    outs = {name: p.output(name, I32, (N,)) for name in ("fd", "md", "td", "rm", "mx", "sh")}
    p.compute(outs["fd"], lambda i: A[i] // B[i])
    p.compute(outs["md"], lambda i: A[i] % B[i])
    p.compute(outs["td"], lambda i: truncdiv(A[i], B[i]))
    p.compute(outs["rm"], lambda i: rem(A[i], B[i]))
    p.compute(outs["mx"], lambda i: select(Mk[i] & (A[i] > 0), maximum(A[i], B[i]), -A[i]))
    p.compute(outs["sh"], lambda i: (A[i] << 2) >> 1)
    kern = JitKernel(p)
    a = np.array([7, -7, 7, -7, 0, -2**31, 5], np.int32)
    b = np.array([2, 2, -2, -2, 3, -1, 1], np.int32)
    mk = np.array([1, 0, 1, 1, 0, 1, 1], bool)
    fd, md, td, rm, mx, sh = kern(a, b, mk)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(fd[:5], a[:5] // b[:5])
        np.testing.assert_array_equal(md, a % b)
        np.testing.assert_array_equal(td[:5], np.trunc(a[:5] / b[:5]).astype(np.int32))
        np.testing.assert_array_equal(rm, np.fmod(a, b))
        np.testing.assert_array_equal(mx, np.where(mk & (a > 0), np.maximum(a, b), -a))
        np.testing.assert_array_equal(sh, (a << 2) >> 1)
    assert fd[5] == -2**31 and td[5] == -2**31  # INT_MIN / -1 wraps instead of trapping
    with pytest.raises(RuntimeCallError, match="division by zero") as info:
        kern(a[:2], np.array([1, 0], np.int32), mk[:2])
    assert info.value.code == ERR_DIV_ZERO


def test_f16_in_out():
    p = KernelProgram.new("half", ["N"])
    X = p.input("X", F16, (N, 8))
    Y = p.output("Y", F16, (N, 8))
    S = p.output("S", F32, (N,))
    k = Var("k")
    p.compute(Y, lambda n, c: X[n, c] * 2.0 + 0.1)
    p.compute(S, lambda n: cast(rsum([(k, 8)], X[n, k]), F32))
    kern = JitKernel(p)
    x = randf(3, 8).astype(np.float16)
    y, s = kern(x)
    assert y.dtype == np.float16
    np.testing.assert_allclose(y.astype(np.float32), (x.astype(np.float32) * 2 + np.float32(np.float16(0.1))),
                               rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(s, x.astype(np.float32).sum(axis=1), rtol=1e-3, atol=1e-3)


def test_bf16_round_trip():
    p = KernelProgram.new("bf16", ["N"])
    X = p.input("X", F32, (N,))
    Y = p.output("Y", DType.bf16, (N,))
    Z = p.output("Z", F32, (N,))
    Bt = p.temp("Bt", DType.bf16, (N,))
    p.compute(Y, lambda i: cast(X[i], DType.bf16))
    p.compute(Bt, lambda i: cast(X[i], DType.bf16))
    p.compute(Z, lambda i: cast(Bt[i], F32))
    x = np.array([1.0, 1.00390625, 1.01171875, -3.14159, 65504.0, np.inf, np.nan], np.float32)
    y, z = JitKernel(p)(x)
    bits = x.view(np.uint32).astype(np.uint64)
    want = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    assert y.dtype == np.uint16
    np.testing.assert_array_equal(y[:-1], want[:-1])
    assert np.isnan(z[-1])
    np.testing.assert_array_equal(z[:-1], (want[:-1].astype(np.uint32) << 16).view(np.float32))


@pytest.mark.parametrize("op,ref", [
    ("sqrt", np.sqrt), ("exp", np.exp), ("log", np.log), ("tanh", np.tanh), ("sin", np.sin), ("cos", np.cos),
    ("tan", np.tan), ("atan", np.arctan), ("sinh", np.sinh), ("cosh", np.cosh), ("asinh", np.arcsinh),
    ("floor", np.floor), ("ceil", np.ceil), ("round", np.round), ("trunc", np.trunc), ("abs", np.abs),
    ("neg", np.negative), ("sign", np.sign), ("recip", np.reciprocal), ("relu", lambda x: np.maximum(x, 0)),
    ("sigmoid", lambda x: 1 / (1 + np.exp(-x))), ("softplus", lambda x: np.log1p(np.exp(x))),
    ("erf", np.vectorize(math.erf)),
])
def test_float_unary_ops(op, ref):
    p = KernelProgram.new(f"u_{op}", ["N"])
    X = p.input("X", F32, (N,))
    Y = p.output("Y", F32, (N,))
    p.compute(Y, lambda i: Unary(op, X[i]))
    x = np.array([-2.5, -1.5, -0.5, 0.25, 0.5, 1.5, 2.5, 3.0], np.float32)
    if op in ("sqrt", "log"):
        x = np.abs(x) + 0.1
    np.testing.assert_allclose(JitKernel(p)(x)[0], ref(x.astype(np.float64)).astype(np.float32), rtol=2e-6,
                               atol=1e-6)


def test_isnan_isinf_and_nan_max():
    p = KernelProgram.new("nans", ["N"])
    X = p.input("X", F32, (N,))
    A = p.output("A", BOOL, (N,))
    B = p.output("B", BOOL, (N,))
    C = p.output("C", F32, (N,))
    p.compute(A, lambda i: Unary("isnan", X[i]))
    p.compute(B, lambda i: Unary("isinf", X[i]))
    p.compute(C, lambda i: maximum(X[i], 0.0))
    x = np.array([np.nan, np.inf, -np.inf, 1.0, -1.0], np.float32)
    a, b, c = JitKernel(p)(x)
    np.testing.assert_array_equal(a, np.isnan(x))
    np.testing.assert_array_equal(b, np.isinf(x))
    np.testing.assert_array_equal(c, np.maximum(x, 0))


# ---- views, consts, parallel, objects --------------------------------------------------------


def test_view_reshape_without_copy():
    p = KernelProgram.new("view", ["N"])
    X = p.input("X", F32, (N, 6))
    T = p.temp("T", F32, (N, 6))
    V = p.view("V", T, (N, 2, 3))
    Y = p.output("Y", F32, (N, 3))
    k = Var("k")
    p.compute(T, lambda n, c: X[n, c] + 1.0)
    p.compute(Y, lambda n, j: rsum([(k, 2)], V[n, k, j]))
    mp = plan(p)
    assert "V" not in mp.offsets
    x = randf(4, 6)
    np.testing.assert_allclose(JitKernel(p, mp)(x)[0], (x + 1).reshape(4, 2, 3).sum(axis=1), rtol=1e-5)


def test_parallel_compute_matches_serial():
    p = KernelProgram.new("par", ["N"])
    A = p.input("A", F32, (N, 64))
    B = p.input("B", F32, (64, 48))
    Ix = p.input("Ix", I64, (N,))
    C = p.output("C", F32, (N, 48))
    E = p.output("E", F32, (N * 64,))
    G = p.output("G", F32, (N, 64))
    k = Var("k")
    p.compute(C, lambda i, j: rsum([(k, 64)], A[i, k] * B[k, j]))
    p.compute(E, lambda f: A[f // 64, f % 64] * 3.0)
    p.compute(G, lambda i, j: A[wrap_index(Ix[i], N), j])
    kern = JitKernel(p, parallel=True, parallel_min_work=1024)
    assert "onnxcc_parallel_for" in kern.llvm_ir
    before = cpu_jit.PARALLEL_CALLS[0]
    n = 200
    a, b = randf(n, 64), randf(64, 48)
    idx = rng.integers(-n, n, n)
    c, e, g = kern(a, b, idx)
    assert cpu_jit.PARALLEL_CALLS[0] >= before + 3
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(e, a.reshape(-1) * 3)
    np.testing.assert_array_equal(g, a[idx])
    small = kern(a[:2], b, np.array([0, 1]))  # below the threshold: runs the body directly
    np.testing.assert_allclose(small[0], a[:2] @ b, rtol=1e-4, atol=1e-4)
    bad = idx.copy()
    bad[150] = n
    with pytest.raises(RuntimeCallError) as info:
        kern(a, b, bad)
    assert info.value.code == ERR_INDEX


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler to link")
def test_object_links_into_shared_library(tmp_path):
    p = KernelProgram.new("affine", ["N"])
    X = p.input("X", F32, (N, 3))
    Wt = p.const("Wt", np.arange(12, dtype=np.float32).reshape(3, 4))
    Y = p.output("Y", F32, (N, 4))
    k = Var("k")
    p.compute(Y, lambda n, j: Unary("tanh", rsum([(k, 3)], X[n, k] * Wt[k, j])))
    mod = emit_llvm(p, plan(p), "affine_v0", parallel=True, parallel_min_work=1)
    obj = emit_object(mod)
    assert obj[:4] == b"\x7fELF"
    (tmp_path / "k.o").write_bytes(obj)
    (tmp_path / "rt.c").write_text(
        "#include <stdint.h>\n"
        "void onnxcc_parallel_for(int64_t n, void (*body)(int64_t, int64_t, void *), void *ctx)"
        " { body(0, n / 2, ctx); body(n / 2, n, ctx); }\n")
    so = tmp_path / "libk.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(so), str(tmp_path / "k.o"), str(tmp_path / "rt.c"),
                    "-lm"], check=True)
    lib = ctypes.CDLL(str(so))
    fn = lib.affine_v0
    fn.restype = ctypes.c_int32
    x = randf(5, 3)
    y = np.empty((5, 4), np.float32)
    syms = (ctypes.c_int64 * 1)(5)
    ins = (ctypes.c_void_p * 1)(x.ctypes.data)
    outs = (ctypes.c_void_p * 1)(y.ctypes.data)
    assert fn(syms, ins, outs, None) == 0
    np.testing.assert_allclose(y, np.tanh(x @ np.arange(12, dtype=np.float32).reshape(3, 4)), rtol=1e-5)


# ---- corner cases -----------------------------------------------------------------------------


def test_unsigned_and_narrow_ints():
    p = KernelProgram.new("uints", ["N"])
    U = p.input("U", DType.u8, (N,))
    X = p.input("X", F32, (N,))
    A = p.output("A", F32, (N,))
    B = p.output("B", DType.u8, (N,))
    C = p.output("C", DType.u64, (N,))
    D = p.output("D", DType.i8, (N,))
    p.compute(A, lambda i: cast(U[i], F32) / 2.0)
    p.compute(B, lambda i: (U[i] + 200) // 3 + (U[i] >> 1))
    p.compute(C, lambda i: cast(U[i], DType.u64) * 1000000007)
    p.compute(D, lambda i: cast(X[i], DType.i8))
    u = np.array([0, 1, 100, 200, 255], np.uint8)
    x = np.array([1.9, -1.9, 100.0, 127.0, -128.0], np.float32)
    a, b, c, d = JitKernel(p)(u, x)
    np.testing.assert_array_equal(a, u.astype(np.float32) / 2)
    np.testing.assert_array_equal(b, (u + np.uint8(200)) // 3 + (u >> 1))
    np.testing.assert_array_equal(c, u.astype(np.uint64) * 1000000007)
    np.testing.assert_array_equal(d, x.astype(np.int8))


def test_reduction_inside_lazy_select_and_triangular_reduce():
    p = KernelProgram.new("tri", ["N"])
    X = p.input("X", F32, (N, N))
    Y = p.output("Y", F32, (N,))
    T = p.output("T", F32, ())
    a, b, k = Var("a"), Var("b"), Var("k")
    p.compute(Y, lambda i: select(i < 2, rsum([(k, N)], X[i, k]), -1.0))
    p.compute(T, rsum([(a, N), (b, a + 1)], X[a, b]))  # lower triangle incl. the diagonal
    x = randf(5, 5)
    y, t = JitKernel(p)(x)
    np.testing.assert_allclose(y, [x[0].sum(), x[1].sum(), -1, -1, -1], rtol=1e-5)
    np.testing.assert_allclose(t, np.tril(x).sum(), rtol=1e-5)


def test_checks_are_not_hoisted_out_of_empty_reductions():
    p = KernelProgram.new("lazycheck", ["N"])
    D = p.input("D", F32, (3,))
    Idx = p.input("Idx", I64, (1,))
    Y = p.output("Y", F32, (N,))
    k = Var("k")
    p.compute(Y, lambda i: rsum([(k, i)], D[wrap_index(Idx[0], 3)]))  # row 0 never reads D
    kern = JitKernel(p)
    d = np.array([1, 2, 3], np.float32)
    np.testing.assert_array_equal(kern(d, np.array([7]), syms={"N": 1})[0], [0.0])
    np.testing.assert_array_equal(kern(d, np.array([-1]), syms={"N": 3})[0], [0.0, 3.0, 6.0])
    with pytest.raises(RuntimeCallError):
        kern(d, np.array([7]), syms={"N": 2})


def test_parallel_rank3_collapses_leading_vars():
    p = KernelProgram.new("par3", ["N", "M"])
    X = p.input("X", F32, (N, M, 33))
    Y = p.output("Y", F32, (N, M, 33))
    p.compute(Y, lambda a, b, c: X[a, b, c] * 2.0 + cast(a * 100 + b, F32))
    kern = JitKernel(p, parallel=True, parallel_min_work=1)
    x = randf(3, 7, 33)
    want = x * 2 + (np.arange(3)[:, None, None] * 100 + np.arange(7)[None, :, None]).astype(np.float32)
    np.testing.assert_allclose(kern(x)[0], want, rtol=1e-6)


def test_two_kernels_share_one_module():
    mod = emit_llvm(matmul_program(), plan(matmul_program()), "mm_v0")
    mod = emit_llvm(softmax_program(), plan(softmax_program()), "sm_v0", module=mod)
    text = str(mod)
    assert 'define i32 @"mm_v0"' in text and 'define i32 @"sm_v0"' in text
    assert len(emit_object(mod)) > 0


def test_reshape_by_index_arithmetic_and_broadcast_helper():
    from onnxcc.kernel import broadcast_indices, flatten_index, unflatten_index

    p = KernelProgram.new("reshape", ["N"])
    X = p.input("X", F32, (N, 6))
    Bv = p.input("Bv", F32, (1, 3))
    Y = p.output("Y", F32, (2, N, 3))

    def body(a, b, c):
        src = unflatten_index(flatten_index((a, b, c), Y.shape), X.shape)
        return X[src] + Bv[broadcast_indices((a, b, c), Bv.shape)]

    p.compute(Y, body)
    x, bv = randf(5, 6), randf(1, 3)
    np.testing.assert_array_equal(JitKernel(p)(x, bv)[0], x.reshape(2, 5, 3) + bv)


def test_schedule_hook_order_parallel_vector_width():
    import dataclasses
    import types

    p = KernelProgram.new("transpose", ["N", "M"])
    X = p.input("X", F32, (M, N))
    Y = p.output("Y", F32, (N, M))
    c = p.compute(Y, lambda i, j: X[j, i] + 1.0)
    x = randf(6, 5)
    for parallel in (False, True):
        sch = types.SimpleNamespace(order=("j", "i"), parallel=parallel, vector_width=4, unroll=2)
        p.body[-1] = dataclasses.replace(c, schedule=sch)
        kern = JitKernel(p)
        ir_text = kern.llvm_ir
        assert "llvm.loop.vectorize.width" in ir_text
        assert ("onnxcc_parallel_for" in ir_text) == parallel
        if not parallel:
            assert ir_text.index('%"j" = phi') < ir_text.index('%"i" = phi')  # j is the outer loop
        np.testing.assert_array_equal(kern(x)[0], x.T + 1)


def test_f64_float_mod_pow_and_bool_reductions():
    F64 = DType.f64
    p = KernelProgram.new("misc", ["N"])
    X = p.input("X", F64, (N,))
    Yv = p.input("Yv", F64, (N,))
    Iv = p.input("Iv", I32, (N,))
    Bm = p.input("Bm", BOOL, (3, N))
    outs = [p.output(f"o{k}", F64, (N,)) for k in range(4)]
    Ip = p.output("Ip", I32, (N,))
    Any = p.output("Any", BOOL, (3,))
    All = p.output("All", BOOL, (3,))
    k = Var("k")
    p.compute(outs[0], lambda i: X[i] % Yv[i])
    p.compute(outs[1], lambda i: X[i] // Yv[i])
    p.compute(outs[2], lambda i: Unary("abs", X[i]) ** Yv[i])
    p.compute(outs[3], lambda i: exp(X[i] / 10.0) + Unary("erf", X[i]) + Unary("tanh", X[i]))
    p.compute(Ip, lambda i: Iv[i] ** 3)
    p.compute(Any, lambda r: rmax([(k, N)], Bm[r, k]))
    p.compute(All, lambda r: rmin([(k, N)], Bm[r, k]))
    x = np.array([-7.5, 7.5, -1.0, 3.25, 0.0], np.float64)
    y = np.array([2.0, -2.0, 3.0, 0.5, 1.5], np.float64)
    iv = np.array([-3, 0, 2, 5, 11], np.int32)
    bm = np.array([[0, 0, 1, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]], bool)
    o0, o1, o2, o3, ip, anyv, allv = JitKernel(p)(x, y, iv, bm)
    np.testing.assert_array_equal(o0, np.mod(x, y))
    np.testing.assert_array_equal(o1, np.floor_divide(x, y))
    np.testing.assert_allclose(o2, np.abs(x) ** y, rtol=1e-15)
    erf = np.vectorize(math.erf)
    np.testing.assert_allclose(o3, np.exp(x / 10) + erf(x) + np.tanh(x), rtol=1e-14)
    np.testing.assert_array_equal(ip, iv ** 3)
    np.testing.assert_array_equal(anyv, bm.any(axis=1))
    np.testing.assert_array_equal(allv, bm.all(axis=1))
