"""Depthwise 8-bit convolution (QLinearConv / ConvInteger with group == input channels and a
constant W) as one integer kernel, on any CPU.

The general paths cost too much here: the VNNI GEMM wants one group, and the f32 path
converts X to f32 and runs the float depthwise conv. This copies the 8-bit X once into a
padded channels-last plane xp[n, h, w, c] (the pads filled with the zero point) and
accumulates in i32 with the channels as the vector lanes, into a channels-last result that is
then stored back channels first:

    acc[n, oh, ow, m] = sum(kh, kw: i32(xp[n, oh*s0 + kh*d0, ow*s1 + kw*d1, m // mult]) * W'[kh, kw, m])
                        + bias'[m]
    W' = W - wz[m]                    (folded at compile time; per tensor or per channel)
    bias' = B[m] - xz * sum(W'[m])    (the zero point of X taken out after the sum)

which is exact: sum((x - xz) * W') = sum(x * W') - xz * sum(W'), and a pad holding xz adds
xz * W' that the correction removes, as the reference's (x - xz = 0 there). QLinearConv's
requantization is requant_expr with the multiplier computed once per channel by the same f32
steps as the other paths, so the 8-bit result is bit-identical to them and onnxruntime.

Channels as lanes rather than the output row: the planes of a mobile net shrink to a few
pixels while its channels grow (48-240, multiples of 16 mostly); along the rows most of the
work fell into the vectorizer's scalar remainder. Measured (mobilenet_v2_qop_u8_s8, 1 thread,
batch 2 at 96x80): 1.40 ms rows-as-lanes -> 0.88 ms channels-as-lanes, the two transposes
included.

The products fit i16 where W' fits s8 and X is 8-bit (|x * w'| <= 255 * 128), so they are
formed in i16 and widened for the i32 sum (half the vector work of i32 multiplies)."""

from __future__ import annotations

import numpy as np

from ..ir import DType, canon
from ..kernel import Buffer, Const, cast, select
from .pad_guard import pad_guard
from .quant_requant import requant_expr

MAX_TAPS = 64
"""kernels with more taps than this stay on the general paths (the taps are unrolled)"""


def _const_int(ctx, buf) -> np.ndarray | None:
    if buf is None:
        return np.zeros(1, np.int64)
    if buf not in ctx.inputs:
        return None
    data = ctx.const_value(ctx.inputs.index(buf))
    return None if data is None else np.asarray(data, np.int64).reshape(-1)


def _scalar_like(buf) -> bool:
    return buf is None or buf.rank == 0 or all(isinstance(d, int) and d == 1 for d in buf.shape)


def depthwise_applies(ctx, x: Buffer, w: Buffer, channels_last: bool = False) -> bool:
    """whether `x` (N, C, H, W; channels last (N, H, W, C)) and `w` (M, 1, KH, KW) make a
    depthwise conv this kernel takes"""
    group = ctx.attr("group", 1)
    if x.rank != 4 or w.rank != 4 or x.dtype not in (DType.u8, DType.i8) or group == 1:
        return False
    c, m = x.shape[3 if channels_last else 1], w.shape[0]
    if not all(isinstance(d, int) for d in (c, m, *w.shape[1:])):
        return False
    return c == group and w.shape[1] == 1 and m % c == 0 and w.shape[2] * w.shape[3] <= MAX_TAPS


def depthwise_qconv(ctx, out: Buffer, x: Buffer, xz, w: Buffer, wz, bias, geometry, requant=None,
                    channels_last: bool = False) -> bool:
    """Write `out` (i32 sums, or with `requant` = (scale: m -> f32 Expr, zero point Expr,
    dtype) their requantization); False, having written nothing, where it does not apply
    (not depthwise, W / its zero point / B not constant, X's zero point not one element).
    `channels_last` (cc.qlinearconv_nhwc, ops/int8_nhwc.py): X is [N, H, W, C] and `out`
    [N, OH, OW, M], written directly; X is copied only where the conv pads."""
    if not depthwise_applies(ctx, x, w, channels_last) or not _scalar_like(xz):
        return False
    wdata, wzv, bdata = _const_int(ctx, w), _const_int(ctx, wz), _const_int(ctx, bias)
    if wdata is None or wzv is None or bdata is None:
        return False
    mo, _, kh, kw = w.shape
    wi = wdata.reshape(mo, kh * kw) - (wzv[:, None] if wzv.size > 1 else wzv[0])
    base = np.broadcast_to(bdata, (mo,)) if bdata.size in (1, mo) else None
    if base is None or (wzv.size not in (1, mo)):
        return False
    if bias is None:
        base = np.zeros(mo, np.int64)
    i16, i32 = DType.i16, DType.i32
    narrow = wi.min() >= -128 and wi.max() <= 127
    # wq[tap, m]: a tap's weights of consecutive channels side by side, as the vector lanes
    wq = ctx.const(np.ascontiguousarray(wi.T).astype(np.int16 if narrow else np.int32), "wdw")
    cbias = _corrected_bias(ctx, xz, base, wi.sum(axis=1))
    xp = _padded(ctx, x, xz, geometry, channels_last)
    _, _, strides, dil = geometry[1:]
    mult = mo // x.shape[3 if channels_last else 1]
    sc = None
    if requant is not None:
        sc = ctx.temp(DType.f32, (mo,), "dwscale")
        ctx.compute(sc, lambda j: requant[0](j))

    def body(n, m, oh, ow):
        ch = m if mult == 1 else m // mult
        acc = None
        for t in range(kh * kw):
            a, b = divmod(t, kw)
            if not wi[:, t].any():  # a tap that is zero in every channel
                continue
            i, j = oh * strides[0] + a * dil[0], ow * strides[1] + b * dil[1]
            v, wv = xp[(n, i, j, ch)], wq[(t, m)]
            term = cast(cast(v, i16) * wv, i32) if narrow else cast(v, i32) * wv
            acc = term if acc is None else acc + term
        acc = cbias[(m,)] if acc is None else acc + cbias[(m,)]
        if requant is None:
            return acc
        return requant_expr(acc, sc[(m,)], requant[1], requant[2])

    if channels_last:
        ctx.compute(out, lambda n, oh, ow, m: body(n, m, oh, ow))
        return True
    # the result over flat pixels p = oh * OW + ow: read back at a computed index, it is never
    # inlined into its reader, which would run it in the reader's (channels-first) order, the
    # channels a stride apart (a single depthwise conv read by a DequantizeLinear ran 10%
    # slower than the old f32 path that way); a following GEMM's channels-last copy reads it
    # contiguously
    n_, _, oh_, ow_ = out.shape
    owd = ctx.dim(ow_)
    t = ctx.temp(out.dtype, (n_, canon(oh_ * ow_), mo), "dwl")
    ctx.compute(t, lambda n, p, m: body(n, m, p // owd, p % owd))
    ctx.compute(out, lambda n, m, oh, ow: t[(n, oh * owd + ow, m)])
    return True


def _corrected_bias(ctx, xz, base: np.ndarray, colsum: np.ndarray) -> Buffer:
    """bias'[m] = B[m] - xz * sum(W'[m]) (i32): a constant, or computed at run time where the
    zero point of X is read then"""
    mo = base.shape[0]
    if xz is None:
        return ctx.const(base.astype(np.int32), "dwbias")
    z = _const_int(ctx, xz)
    if z is not None:
        return ctx.const((base - int(z[0]) * colsum).astype(np.int32), "dwbias")
    i32 = DType.i32
    b0, cs = ctx.const(base.astype(np.int32), "dwb0"), ctx.const(colsum.astype(np.int32), "dwcs")
    out = ctx.temp(i32, (mo,), "dwbias")
    zx = cast(xz[(0,) * xz.rank], i32)
    ctx.compute(out, lambda j: b0[(j,)] - zx * cs[(j,)])
    return out


def _padded(ctx, x: Buffer, xz, geometry, channels_last: bool = False) -> Buffer:
    """X's channels-last copy xp[n, h, w, c], padded: the border holds the zero point (0
    without one), so the window reads need no guard; a channels-last X that needs no padding
    is read as it is"""
    _, pb, pe, _, _ = geometry
    if channels_last and all(isinstance(p, int) and p == 0 for p in (*pb, *pe)):
        return x
    n_, c, h, w = (x.shape[0], x.shape[3], *x.shape[1:3]) if channels_last else x.shape
    hp, wp = canon(h + pb[0] + pe[0]), canon(w + pb[1] + pe[1])
    xp = ctx.temp(x.dtype, (n_, hp, wp, c), "xpad8")
    fill = Const(0, x.dtype) if xz is None else xz[(0,) * xz.rank]

    def body(n, ch, i, j):
        pos = [i - ctx.dim(pb[0]), j - ctx.dim(pb[1])]
        guard = pad_guard(ctx, pos, (h, w), pb, pe)
        v = x[(n, *pos, ch) if channels_last else (n, ch, *pos)]
        return v if guard is None else select(guard, v, fill)

    ctx.compute(xp, lambda n, i, j, ch: body(n, ch, i, j))
    return xp
