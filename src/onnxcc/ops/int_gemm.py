"""Operand loaders shared by the integer contractions (MatMulInteger, QLinearMatMul,
MatMulIntegerToFloat, DynamicQuantizeMatMul).

The contraction body is `rsum(k: load_a(.., k) * load_b(k, ..))` in i32. With B in its ONNX
layout (K, N) the k loop strides through B by N and LLVM leaves it a scalar loop; with B
stored transposed, (N, K), both operands are read along contiguous k and LLVM's loop
vectorizer turns the sum into vector dot products (AVX-512 VNNI vpdpwssd where the CPU has it),
measured 60x to 300x faster at 128x512x512.

The integer convolutions (ConvInteger, QLinearConv) get the same shape of contraction by copying
their input once into an i16 temp laid out with the contraction innermost (`conv_rows`, or the
general `conv_im2col`) and storing W with (c, k...) contiguous."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .. import kernel as K
from ..ir import DType, canon
from ..kernel import Const, Var, broadcast_indices, cast, rsum, select
from .pad_guard import pad_guard

Loader = Callable[[tuple], K.Expr]


def per_element(buf, i) -> K.Expr:
    """A scale / zero point that is one element or one per index `i`."""
    if buf.rank == 0 or all(isinstance(d, int) and d == 1 for d in buf.shape):
        return buf[(0,) * buf.rank]
    return buf[(i,) if buf.rank == 1 else broadcast_indices((i,), buf.shape)]


def nonzero_zero_point(ctx, zp):
    """A zero point, or None when it is absent or a constant of zeros (nothing to subtract)."""
    if zp is None:
        return None
    data = ctx.const_value(ctx.inputs.index(zp))
    return None if data is not None and not np.any(data) else zp


def zp_loader(x, z, axis: int) -> Loader:
    """`idx -> i32(x[idx]) - i32(z[idx[axis]])` (z one element or one per index along `axis`)."""
    i32 = DType.i32
    if z is None:
        return lambda idx: cast(x[idx], i32)
    return lambda idx: cast(x[idx], i32) - cast(per_element(z, idx[axis]), i32)


def _swap(idx: tuple) -> tuple:
    return (*idx[:-2], idx[-1], idx[-2])


def transposed_b_loader(ctx, operand: int, zp: Callable[[tuple], K.Expr] | None) -> Loader | None:
    """The loader of B (input `operand`, rank >= 2) read from a copy with its last two dims
    swapped, so the contraction over k reads it contiguously; None for a 1-D B (already
    contiguous along k: the caller keeps its plain loader).

    A constant B is transposed at compile time. Any other B is transposed at run time into an
    i16 temp holding `B - zero point` (both lie in [-255, 255]): O(K*N) work before an O(M*K*N)
    contraction, and the subtraction keeps the fuser from inlining the copy back into the
    contraction (it does not recompute arithmetic inside one).
    `zp(idx)` gives the zero point of B's element at its logical index `idx = (..., k, n)`, or is None."""
    b = ctx.inputs[operand]
    if b.rank < 2:
        return None
    i32 = DType.i32
    data = ctx.const_value(operand)
    if data is not None:
        bt = _transposed_const(ctx, data)
        if zp is None:
            return lambda idx: cast(bt[_swap(idx)], i32)
        # the difference in i16 (it lies in [-255, 255]) then widened: LLVM matches the i16
        # products summed into i32 to vpmaddwd / vpdpwssd
        i16 = DType.i16
        return lambda idx: cast(cast(bt[_swap(idx)], i16) - cast(zp(idx), i16), i32)
    i16 = DType.i16
    bt = ctx.temp(i16, _swap(tuple(b.shape)), "bt")

    def body(*ix):
        v = cast(b[_swap(ix)], i16)
        return v if zp is None else v - cast(zp(_swap(ix)), i16)

    ctx.compute(bt, body)
    return lambda idx: cast(bt[_swap(idx)], i32)


def _transposed_const(ctx, data: np.ndarray):
    """`data` with its last two dims swapped, as a constant buffer; one weight shared by several
    contractions (tied weights) is transposed into one buffer, not one per use."""
    t = np.ascontiguousarray(np.swapaxes(data, -1, -2))
    for buf in ctx.program.buffers.values():
        if (buf.kind == "const" and buf.shape == t.shape and buf.data.dtype == t.dtype
                and np.array_equal(buf.data, t)):
            return buf
    return ctx.const(t, "bt")


def b_loader(ctx, operand: int, bz) -> Loader:
    """B's loader for the QLinear / contrib contractions, whose B zero point is one element or one
    per column: read transposed unless B is 1-D."""
    bz = nonzero_zero_point(ctx, bz)
    zp = None if bz is None else (lambda idx: per_element(bz, idx[-1]))
    return transposed_b_loader(ctx, operand, zp) or zp_loader(ctx.inputs[operand], bz, -1)


# ---- integer convolutions as contiguous contractions ------------------------------------------


def _wzero(wz, m):
    if wz is None:
        return None
    if wz.rank == 0 or all(isinstance(d, int) and d == 1 for d in wz.shape):
        return wz[(0,) * wz.rank]
    return wz[(m,)]


def conv_rows(ctx, out, x, w, xz, wz, bias, geometry) -> None:
    """A 2-D integer conv (one group, no dilation along W) over channels-last rows: `x - xz`
    is copied once, padded with zeros, into an i16 temp `xp[n, h, (w, c)]`; for one window row
    kh the taps (kw, c) are then one contiguous run of KW * C elements of xp, and W is stored as
    (M, KH, (kw, c)), so the inner i32 sum reads both operands contiguously and LLVM vectorizes
    it (vpdpwssd). The copy is about the size of the input (no K-fold im2col blow-up)."""
    _, pb, pe, strides, dil = geometry
    n_, cin, hin, win = x.shape
    mo, _, kh_, kw_ = w.shape
    i16, i32 = DType.i16, DType.i32
    hp, wp = canon(hin + pb[0] + pe[0]), canon(win + pb[1] + pe[1])
    xp = ctx.temp(i16, (n_, hp, canon(wp * cin)), "xp")
    cdim = ctx.dim(cin)

    def xp_body(n, h, q):
        pos = [h - ctx.dim(pb[0]), q // cdim - ctx.dim(pb[1])]
        xv = cast(x[(n, q % cdim, *pos)], i16)
        if xz is not None:
            xv = xv - cast(xz[(0,) * xz.rank], i16)
        cond = pad_guard(ctx, pos, x.shape[2:], pb, pe)
        return xv if cond is None else select(cond, xv, Const(0, i16))

    ctx.compute(xp, xp_body)
    row = kw_ * cin
    data = ctx.const_value(ctx.inputs.index(w))
    if data is not None:
        wt = ctx.const(np.ascontiguousarray(data.transpose(0, 2, 3, 1)).reshape(mo, kh_, row), "wt")

        def wload(m, kh, j):
            v = cast(wt[(m, kh, j)], i32)
            z = _wzero(wz, m)
            return v if z is None else v - cast(z, i32)
    else:
        # W re-laid in a temp with its zero point applied (the subtraction, or the cast, keeps
        # the fuser from inlining it back into the contraction)
        wt = ctx.temp(i16, (mo, kh_, row), "wt")

        def wbody(m, kh, j):
            v = cast(w[(m, j % cdim, kh, j // cdim)], i16)
            z = _wzero(wz, m)
            return v if z is None else v - cast(z, i16)

        ctx.compute(wt, wbody)

        def wload(m, kh, j):
            return cast(wt[(m, kh, j)], i32)

    khv, jv = Var("kh"), Var("j")

    def body(n, m, oh, ow):
        xi = (n, oh * strides[0] + khv * dil[0], ow * (strides[1] * cdim) + jv)
        acc = rsum([(khv, kh_), (jv, row)], cast(xp[xi], i32) * wload(m, khv, jv))
        return acc if bias is None else acc + cast(bias[(m,)], i32)

    ctx.compute(out, body)


def conv_im2col(ctx, out, x, w, xz, wz, bias, geometry, group: int, mg) -> None:
    """The integer conv as a GEMM over one contraction axis r = (c, k...) (static channel count
    and kernel): the windows of `x - xz` are copied once into an i16 temp `col[n, (g,) o..., r]`
    (0 where padding), W is read as (M, R), transposed-free since its contraction is already
    innermost, so both operands of the i32 sum are contiguous along r and LLVM vectorizes it
    (vpdpwssd) as for MatMulInteger. The copy costs one output channel's work."""
    outs, pb, pe, strides, dil = geometry
    cg, kernel = w.shape[1], list(w.shape[2:])
    kk = int(np.prod(kernel))
    red = cg * kk
    i16, i32 = DType.i16, DType.i32
    grouped = group != 1
    col = ctx.temp(i16, (x.shape[0], *((group,) if grouped else ()), *outs, red), "col")

    def split(r):
        """r -> (c, k0, k1, ...) for r = c * kk + k0 * (k1 * ...) + ... (W's row-major order)"""
        steps = [int(np.prod(kernel[i + 1:])) for i in range(len(kernel))]
        return r // kk, [(r // st) % k if st > 1 else r % k for k, st in zip(kernel, steps)]

    def col_body(n, *ix):
        g, o, r = (ix[0], ix[1:-1], ix[-1]) if grouped else (None, ix[:-1], ix[-1])
        c, ks = split(r)
        ch = c if g is None else g * cg + c
        pos = [oi * st + k * d - ctx.dim(p) for oi, k, st, d, p in zip(o, ks, strides, dil, pb)]
        xv = cast(x[(n, ch, *pos)], i16)
        if xz is not None:
            xv = xv - cast(xz[(0,) * xz.rank], i16)
        cond = pad_guard(ctx, pos, x.shape[2:], pb, pe)
        return xv if cond is None else select(cond, xv, Const(0, i16))

    ctx.compute(col, col_body)

    data = ctx.const_value(ctx.inputs.index(w))
    if data is not None:
        wm = ctx.const(data.reshape(data.shape[0], red), "wr")

        def wload(m, r):
            v = cast(wm[(m, r)], i32)
            z = _wzero(wz, m)
            return v if z is None else v - cast(z, i32)
    else:
        # W in a temp (M, R) with its zero point applied (the subtraction, or the cast, keeps the
        # fuser from inlining it back into the contraction)
        wm = ctx.temp(i16, (w.shape[0], red), "wr")

        def wbody(m, r):
            c, ks = split(r)
            v = cast(w[(m, c, *ks)], i16)
            z = _wzero(wz, m)
            return v if z is None else v - cast(z, i16)

        ctx.compute(wm, wbody)

        def wload(m, r):
            return cast(wm[(m, r)], i32)

    rv = Var("r")

    def body(n, m, *o):
        g = (m // mg,) if grouped else ()
        acc = rsum([(rv, red)], cast(col[(n, *g, *o, rv)], i32) * wload(m, rv))
        return acc if bias is None else acc + cast(bias[(m,)], i32)

    ctx.compute(out, body)
