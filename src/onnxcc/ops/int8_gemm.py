"""The quantized contractions with constant weights on the 8-bit GEMM calls (kernel/i8gemm.py:
AVX-512 VNNI vpdpbusd, codegen/cpu/gemm_int8.py), where the backend runs them
(`ctx.int8_dot`); each helper returns False / None, having written nothing, where it does not
apply, and its caller keeps its own path (int_gemm.py, int_as_f32.py).

The weights' zero point is folded at compile time: W' = W - wz (per channel) must fit s8,
which holds for every s8 weight with a zero zero point (onnxruntime's default) and for u8
weights within 128 of theirs; otherwise the caller's path runs. The activations' zero point
za is applied after the GEMM: sum(k: (a - za) * w') = sum(k: a * w') - za * sum(k: w'), the
second sum a constant per output channel. s8 activations are fed as a + 128 (u8), with za + 128.
A conv's padding is fed as the zero point itself, so its terms vanish like the reference's
(x - xz = 0 there)."""

from __future__ import annotations

import functools
import operator

import numpy as np

from ..ir import DType, canon
from ..kernel import Buffer, CallStmt, Const, cast, select
from ..kernel.i8gemm import NR, pack_q, panels
from .int_gemm import pad_guard

MIN_K = 16
"""shorter contractions stay on the caller's path (the packing and the call cost more than
the vectorized dot products)"""


def _scalar_like(buf) -> bool:
    return buf.rank == 0 or all(isinstance(d, int) and d == 1 for d in buf.shape)


def _folded(ctx, w: Buffer, wz, axis: int) -> np.ndarray | None:
    """The constant W (int64) minus its zero point (one, or one per index along `axis`), or None
    where W or the zero point is not constant or W - wz does not fit s8."""
    data = ctx.const_value(ctx.inputs.index(w))
    if data is None:
        return None
    wi = np.asarray(data, np.int64)
    if wz is not None:
        z = ctx.const_value(ctx.inputs.index(wz))
        if z is None:
            return None
        z = np.asarray(z, np.int64).reshape(-1)
        if z.size == 1:
            wi = wi - z[0]
        elif z.size == wi.shape[axis]:
            shape = [1] * wi.ndim
            shape[axis] = -1
            wi = wi - z.reshape(shape)
        else:
            return None
    if wi.size == 0 or wi.min() < -128 or wi.max() > 127:
        return None
    return wi


def _zero_expr(z, ix, shift: int):
    """The i32 zero point of the activation at index ix (None: absent) plus `shift`."""
    i32 = DType.i32
    v = Const(shift, i32) if z is None else cast(z[ix], i32) + Const(shift, i32)
    return v


def _call(ctx, fn: str, sizes, p: Buffer, q: Buffer, c: Buffer) -> None:
    sz = tuple(ctx.dim(canon(s)) for s in sizes)
    ctx.program.body.append(CallStmt(fn, sz, (p.name, q.name, c.name), (c.name,)))


def _u8(ctx, a: Buffer) -> Buffer:
    """s8 activations as u8 a + 128 (in a temp); u8 ones as they are."""
    if a.dtype is DType.u8:
        return a
    t = ctx.temp(DType.u8, a.shape, "a8")
    ctx.compute(t, lambda *ix: cast(cast(a[ix], DType.i16) + Const(128, DType.i16), DType.u8))
    return t


# ---- A (activations) @ B (constant weights) ----------------------------------------------------


def vnni_matmul(ctx, out: Buffer, a: Buffer, az, b: Buffer, bz) -> bool:
    """out (i32, a.shape[:-1] + (N,)) = (A - az) @ (B - bz) for a constant 2-D B: az one element
    or one per row of A (A of rank >= 2), bz one element or one per column. False: not here."""
    if not ctx.int8_dot or b.rank != 2 or a.dtype not in (DType.u8, DType.i8):
        return False
    if az is not None and not (_scalar_like(az) or (az.rank == 1 and a.rank >= 2)):
        return False
    wi = _folded(ctx, b, bz, 1)
    if wi is None:
        return False
    kk, nn = wi.shape
    if kk < MIN_K or not isinstance(a.shape[-1], int) or a.shape[-1] != kk:
        return False
    if tuple(out.shape) != (*a.shape[:-1], nn):
        return False
    m = canon(functools.reduce(operator.mul, a.shape[:-1], 1))
    shift = 128 if a.dtype is DType.i8 else 0
    q = ctx.const(pack_q(wi.astype(np.int8)), "bq")
    p = _u8(ctx, a)
    exact = az is None and shift == 0
    s = out if exact else ctx.temp(DType.i32, out.shape, "s")
    _call(ctx, "onnxcc_i8gemm_us", (1, m, nn, kk, kk, 0, 0, nn, 0), p, q, s)
    if exact:
        return True
    colsum = ctx.const(wi.sum(axis=0).astype(np.int32), "bsum")

    def body(*ix):
        zix = (0,) * az.rank if az is not None and _scalar_like(az) else (ix[-2],)
        return s[ix] - _zero_expr(az, zix, shift) * colsum[(ix[-1],)]

    ctx.compute(out, body)
    return True


# ---- convolutions: W (constant) @ im2col(X) -----------------------------------------------------


def vnni_conv(ctx, shape, x: Buffer, xz, w: Buffer, wz, bias, geometry) -> Buffer | None:
    """A temp acc[n, m, o...] (i32, `shape`) = the integer conv sum(c, k: (X - xz) * (W - wz))
    (+ B) for a constant W, one group and one activation zero point; None: not here.

    The input windows are packed at run time straight into the call's Q layout (the
    im2col of x, 4 taps of one column per 32-bit lane); the 1x1 conv is the same packing
    without taps."""
    outs, pb, pe, strides, dil = geometry
    if not ctx.int8_dot or ctx.attr("group", 1) != 1 or x.dtype not in (DType.u8, DType.i8):
        return None
    if xz is not None and not _scalar_like(xz):
        return None
    wi = _folded(ctx, w, wz, 0)
    bdata = None if bias is None else ctx.const_value(ctx.inputs.index(bias))
    if wi is None or (bias is not None and bdata is None):
        return None
    mo, cin, kernel = wi.shape[0], wi.shape[1], list(wi.shape[2:])
    kk = int(np.prod(kernel))
    red = cin * kk
    if red < MIN_K:
        return None
    wm = wi.reshape(mo, red)
    ncol = canon(functools.reduce(operator.mul, outs, 1))
    npan = panels(ncol) if isinstance(ncol, int) else canon((ncol + NR - 1) // NR)
    groups = -(-red // 4)
    shift = 128 if x.dtype is DType.i8 else 0
    i32, u8 = DType.i32, DType.u8
    zx = _zero_expr(xz, (0,) * xz.rank if xz is not None else (), shift)
    steps = [int(np.prod(kernel[i + 1:])) for i in range(len(kernel))]
    odims = [ctx.dim(o) for o in outs]
    q = ctx.temp(u8, (x.shape[0], npan, groups, NR, 4), "xq")

    def pack(n, pn, g, j, t):
        r = g * 4 + t
        col = pn * NR + j
        c = r // kk
        ks = [(r // st) % k if st > 1 else r % k for k, st in zip(kernel, steps)]
        o, rest = [], col
        for od in reversed(odims[1:]):
            o.append(rest % od)
            rest = rest // od
        o = [rest, *reversed(o)]
        pos = [oi * s + k * d - ctx.dim(p) for oi, k, s, d, p in zip(o, ks, strides, dil, pb)]
        inside = (r < red) & (col < ctx.dim(ncol))
        v = cast(x[(n, c, *pos)], i32) + Const(shift, i32)
        guard = pad_guard(ctx, pos, x.shape[2:], pb, pe)
        if guard is not None:
            v = select(guard, v, zx)  # padding: the zero point, whose term the correction removes
        return cast(select(inside, v, Const(0, i32)), u8)

    ctx.compute(q, pack)
    p = ctx.const(wm.astype(np.int8), "wq")
    s = ctx.temp(i32, (x.shape[0], mo, ncol), "s")
    _call(ctx, "onnxcc_i8gemm_su", (x.shape[0], mo, ncol, red, red, 0, canon(npan * groups * NR * 4), ncol,
                                    canon(mo * ncol)), p, q, s)
    corr = -wm.sum(axis=1)
    rowsum = ctx.const(corr.astype(np.int32), "wsum")
    bconst = None if bias is None else ctx.const(np.asarray(bdata, np.int32).reshape(-1), "bias")
    acc = ctx.temp(i32, shape, "acc")

    def body(n, m, *o):
        flat = o[0]
        for oi, od in zip(o[1:], odims[1:]):
            flat = flat * od + oi
        v = s[(n, m, flat)] + zx * rowsum[(m,)]
        return v if bconst is None else v + bconst[(m,)]

    ctx.compute(acc, body)
    return acc
