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
from ..kernel.i8gemm import NR_NARROW, pack_q, panel_width
from .int_gemm import pad_guard

MIN_K = 8
"""shorter contractions stay on the caller's path (the packing and the call cost more than
the vectorized dot products). 8, not 16: a mobile net's 1x1 convs over 8 channels took the f32
path, whose channels-first operand also pulled the depthwise conv before it out of its
channels-last order (int8_depthwise.py); on the GEMM, mobilenet_v2_qop_u8_s8 went 1.18x ->
1.03x onnxruntime (1 thread, batch 2, 96x80)."""


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


Requant = tuple  # (scale: n -> f32 Expr, zero point: i64 Expr, out dtype u8 / i8)
"""the requantization a QLinear op applies to the sums, fused into the GEMM's stores"""


def _call(ctx, sizes, p: Buffer, q: Buffer, c: Buffer, table: Buffer | None = None,
          cols: tuple[Buffer, Buffer] | None = None, zp=None, cs=1) -> None:
    """the CallStmt (kernel/i8gemm.py); `cols` (bias, scale) and `zp` for the requantizing
    variants (C u8 / i8)"""
    fn = "onnxcc_i8gemm" + ("" if table is None else "_rows") + ("" if cols is None else f"_{c.dtype.value}")
    fn += "_n16" if panel_width(sizes[2]) == NR_NARROW else ""
    bufs = (p.name, q.name, c.name) + (() if table is None else (table.name,))
    bufs += () if cols is None else (cols[0].name, cols[1].name)
    exprs = tuple(ctx.dim(canon(d)) for d in (*sizes, cs)) + (Const(0, DType.i64) if zp is None else zp,)
    ctx.program.body.append(CallStmt(fn, exprs, bufs, (c.name,)))


def _columns(ctx, n: int, za, colsum: np.ndarray, bias: np.ndarray | None, requant: Requant):
    """(bias, scale) of the requantizing GEMM: bias[j] = B[j] - za * colsum[j] (i32; a const
    unless za is read at run time), scale[j] (f32)"""
    const_za = za is None or isinstance(za, int)
    base = (np.zeros(n, np.int64) if bias is None else np.asarray(bias, np.int64).reshape(-1))
    if const_za:
        bb = ctx.const((base - (za or 0) * colsum).astype(np.int32), "cbias")
    else:
        bb = ctx.temp(DType.i32, (n,), "cbias")
        cb = ctx.const(base.astype(np.int32), "b0")
        cc = ctx.const(colsum.astype(np.int32), "csum")
        ctx.compute(bb, lambda j: cb[(j,)] - za * cc[(j,)])
    sc = ctx.temp(DType.f32, (n,), "scale")
    ctx.compute(sc, lambda j: requant[0](j))
    return bb, sc


def _zero_value(ctx, z, shift: int):
    """the activation zero point plus `shift`: an int when constant, else an i32 Expr"""
    if z is None:
        return shift
    data = ctx.const_value(ctx.inputs.index(z)) if z in ctx.inputs else None
    if data is not None:
        return int(np.asarray(data).reshape(-1)[0]) + shift
    return cast(z[(0,) * z.rank], DType.i32) + Const(shift, DType.i32)


def _u8(ctx, a: Buffer) -> Buffer:
    """s8 activations as u8 a + 128 (in a temp); u8 ones as they are."""
    if a.dtype is DType.u8:
        return a
    t = ctx.temp(DType.u8, a.shape, "a8")
    ctx.compute(t, lambda *ix: cast(cast(a[ix], DType.i16) + Const(128, DType.i16), DType.u8))
    return t


# ---- A (activations) @ B (constant weights) ----------------------------------------------------


def vnni_matmul(ctx, out: Buffer, a: Buffer, az, b: Buffer, bz, requant: Requant | None = None,
                trans_b: bool = False) -> bool:
    """out (i32, a.shape[:-1] + (N,)) = (A - az) @ (B - bz) for a constant 2-D B (stored (N, K)
    with `trans_b`, QGemm's transB): az one element or one per row of A (A of rank >= 2), bz
    one element or one per column; with `requant`, out (u8 / i8) = its requantization (az one
    element). False: not here."""
    if not ctx.int8_dot or b.rank != 2 or a.dtype not in (DType.u8, DType.i8):
        return False
    if requant is not None and az is not None and not _scalar_like(az):
        return False
    if az is not None and not (_scalar_like(az) or (az.rank == 1 and a.rank >= 2)):
        return False
    wi = _folded(ctx, b, bz, 0 if trans_b else 1)
    if wi is None:
        return False
    wi = wi.T if trans_b else wi
    kk, nn = wi.shape
    if kk < MIN_K or not isinstance(a.shape[-1], int) or a.shape[-1] != kk:
        return False
    if tuple(out.shape) != (*a.shape[:-1], nn):
        return False
    m = canon(functools.reduce(operator.mul, a.shape[:-1], 1))
    shift = 128 if a.dtype is DType.i8 else 0
    q = ctx.const(pack_q(wi.astype(np.int8), nr=panel_width(nn)), "bq")
    p = _u8(ctx, a)
    if requant is not None:
        cols = _columns(ctx, nn, _zero_value(ctx, az, shift), wi.sum(axis=0), None, requant)
        _call(ctx, (1, m, nn, 1, 0, 1, 0, kk, kk, 0, nn, 0), p, q, out, cols=cols, zp=requant[1])
        return True
    exact = az is None and shift == 0
    s = out if exact else ctx.temp(DType.i32, out.shape, "s")
    # batch, M, N, S0, SS0, S1, SS1, L, lda, sp, ldc, sc (kernel/i8gemm.py)
    _call(ctx, (1, m, nn, 1, 0, 1, 0, kk, kk, 0, nn, 0), p, q, s)
    if exact:
        return True
    colsum = ctx.const(wi.sum(axis=0).astype(np.int32), "bsum")

    def body(*ix):
        zix = (0,) * az.rank if az is not None and _scalar_like(az) else (ix[-2],)
        return s[ix] - _zero_expr(az, zix, shift) * colsum[(ix[-1],)]

    ctx.compute(out, body)
    return True


# ---- convolutions: im2col(X) read in place @ W (constant) ---------------------------------------


PACK_MAX_CIN = 3
"""an NCHW X of at most this many channels (an image stem's) is copied into packed pixels"""


def _packed_pixels(ctx, x: Buffer, zx, shift: int, padded: tuple, pb, pe) -> Buffer:
    """X [N, C, H, W] (C <= 3) padded into one i32 word per pixel, xw[n, h, w] = sum(c: u8(x[n, c, h, w])
    << 8c), the pads the zero point in every channel byte and byte 3 zero (its weight is zero):
    the GEMM reads it as [N, HP, WP, 4] bytes, a window row one run of KW * 4 bytes. A
    channels-last copy of a 3-channel X was a gather along its innermost axis (16 byte
    inserts per vector); this reads each plane along W."""
    i32 = DType.i32
    cin = x.shape[1]
    xw = ctx.temp(i32, (x.shape[0], *padded), "xpix")
    pad = zx * Const(sum(1 << (8 * c) for c in range(cin)), i32)

    def body(n, h, wq):
        pos = [h - ctx.dim(pb[0]), wq - ctx.dim(pb[1])]
        word = None
        for c in range(cin):
            v = (cast(x[(n, c, *pos)], i32) + Const(shift, i32)) * Const(1 << (8 * c), i32)
            word = v if word is None else word + v
        guard = pad_guard(ctx, pos, x.shape[2:], pb, pe)
        return word if guard is None else select(guard, word, pad)

    ctx.compute(xw, body)
    return xw


def vnni_conv(ctx, shape, x: Buffer, xz, w: Buffer, wz, bias, geometry, requant: Requant | None = None,
              out: Buffer | None = None, channels_last: bool = False, x_last: bool | None = None) -> Buffer | None:
    """A temp acc[n, m, oh, ow] (i32, `shape`) = the 2-D integer conv sum(c, k: (X - xz) *
    (W - wz)) (+ B) for a constant W, one group and one activation zero point; None: not here.

    X is copied once into a padded channels-last u8 temp xp[n, h, w, c] (padding = the zero
    point, s8 shifted to u8); output pixel (oh, ow)'s window is then, per window row, one
    contiguous run of KW * C bytes of xp (per tap, C bytes, with a dilation along W), which
    the GEMM reads in place (kernel/i8gemm.py's segments); its result, channels last, is
    read back into NCHW by the correction. With `requant` the GEMM stores the requantized
    result channels last into a temp and `out` (channels first) is written as its index
    remap, which fusion folds into the readers; returns `out`.

    `channels_last` (cc.qlinearconv_nhwc, ops/int8_nhwc.py; with `requant` and `out`): X is
    [N, H, W, C] and `out` [N, OH, OW, M], which the GEMM stores directly; the copy of X is a
    plain padded one, made only where the conv pads or X is s8 (else the GEMM reads X in
    place), and a 1x1 conv at stride 1 reads X's pixels as its rows, with no offset table.
    `x_last` False with `channels_last`: X stays [N, C, H, W] (a region's stem reads the
    NCHW input). An NCHW X of at most PACK_MAX_CIN channels is copied as packed pixels
    (`_packed_pixels`)."""
    x_last = channels_last if x_last is None else x_last
    outs, pb, pe, strides, dil = geometry
    if not ctx.int8_dot or ctx.attr("group", 1) != 1 or x.dtype not in (DType.u8, DType.i8) or x.rank != 4:
        return None
    if channels_last and (requant is None or out is None):
        return None
    if xz is not None and not _scalar_like(xz):
        return None
    wi = _folded(ctx, w, wz, 0)
    bdata = None if bias is None else ctx.const_value(ctx.inputs.index(bias))
    if wi is None or (bias is not None and bdata is None):
        return None
    mo, cin, kh, kw = wi.shape
    red = cin * kh * kw
    if red < MIN_K:
        return None
    n_, hin, win = (x.shape[0], *x.shape[1:3]) if x_last else (x.shape[0], *x.shape[2:])
    hp, wp = canon(hin + pb[0] + pe[0]), canon(win + pb[1] + pe[1])
    shift = 128 if x.dtype is DType.i8 else 0
    i32, i64, u8 = DType.i32, DType.i64, DType.u8
    zx = _zero_expr(xz, (0,) * xz.rank if xz is not None else (), shift)
    unpadded = all(isinstance(p, int) and p == 0 for p in (*pb, *pe))
    packed = not x_last and cin <= PACK_MAX_CIN
    if packed:  # one i32 word per pixel, the weights of its padding bytes zero
        xp = _packed_pixels(ctx, x, zx, shift, (hp, wp), pb, pe)
        wi = np.concatenate([wi, np.zeros((mo, 4 - cin, kh, kw), wi.dtype)], axis=1)
        cin, red = 4, 4 * kh * kw
    elif x_last and unpadded and shift == 0:
        xp = x  # read in place: the previous channels-last op's result is already the GEMM's A
    else:
        # 4-D (pixel, channel) so the copy's indices need no division (the GEMM reads it flat)
        xp = ctx.temp(u8, (n_, hp, wp, cin), "xp")
        spatial = x.shape[1:3] if x_last else x.shape[2:]

        def xp_body(n, h, wq, ch):
            pos = [h - ctx.dim(pb[0]), wq - ctx.dim(pb[1])]
            v = cast(x[(n, *pos, ch) if x_last else (n, ch, *pos)], i32) + Const(shift, i32)
            guard = pad_guard(ctx, pos, spatial, pb, pe)
            v = v if guard is None else select(guard, v, zx)  # padding: the zero point, whose term is removed
            return cast(v, u8)

        ctx.compute(xp, xp_body)
    oh_, ow_ = outs
    cdim = ctx.dim(cin)
    if channels_last:
        cols = _columns(ctx, mo, _zero_value(ctx, xz, shift), wi.transpose(0, 2, 3, 1).reshape(mo, red).sum(axis=1),
                        bdata, requant)
        if x_last and unpadded and (kh, kw) == (1, 1) and tuple(strides) == (1, 1):
            # a 1x1 conv at stride 1: every pixel of X is a row of A, the batch folded into M
            wk = wi.reshape(mo, cin)
            q = ctx.const(pack_q(np.ascontiguousarray(wk.T).astype(np.int8), nr=panel_width(mo)), "wq")
            m = canon(n_ * hin * win)
            _call(ctx, (1, m, mo, 1, 0, 1, 0, cin, cin, 0, mo, 0), xp, q, out, cols=cols, zp=requant[1])
            return out
    table = ctx.temp(i64, (oh_, ow_), "rows")
    ctx.compute(table, lambda oh, ow: (oh * (strides[0] * ctx.dim(wp)) + ow * strides[1]) * cdim)
    # the window's segments: rows kh of KW * C bytes, or taps (kh, kw) of C bytes when dilated along W
    s0, ss0 = kh, canon(dil[0] * wp * cin)
    s1, ss1, seg = (1, 0, kw * cin) if dil[1] == 1 else (kw, dil[1] * cin, cin)
    wk = wi.transpose(0, 2, 3, 1).reshape(mo, red)
    q = ctx.const(pack_q(np.ascontiguousarray(wk.T).astype(np.int8), s0 * s1, panel_width(mo)), "wq")
    npix = canon(oh_ * ow_)
    if channels_last:  # `out` [N, OH, OW, M] is the GEMM's C, stored in place
        _call(ctx, (n_, npix, mo, s0, ss0, s1, ss1, seg, 0, canon(hp * wp * cin), mo, canon(npix * mo)), xp, q, out,
              table, cols=cols, zp=requant[1])
        return out
    if requant is not None and out is not None:
        cols = _columns(ctx, mo, _zero_value(ctx, xz, shift), wk.sum(axis=1), bdata, requant)
        # stored channels last (dense vector stores), `out` its index remap, which fusion
        # inlines into the readers: the next conv's channels-last copy (a mobile net's 1x1 ->
        # depthwise -> 1x1) then moves contiguous bytes instead of transposing twice.
        # Measured (1 thread): mobilenet_v2_qop_u8_s8 1.05-1.09x -> 0.85-0.90x onnxruntime at
        # batch 2 96x80, convnet_qop_u8_s8_pc 1.11x -> 0.86x at 64x64
        o = ctx.temp(out.dtype, (n_, npix, mo), "onhwc")
        _call(ctx, (n_, npix, mo, s0, ss0, s1, ss1, seg, 0, canon(hp * wp * cin), mo, canon(npix * mo)), xp, q, o,
              table, cols=cols, zp=requant[1])
        owd = ctx.dim(ow_)
        ctx.compute(out, lambda n, m, oh, ow: o[(n, oh * owd + ow, m)])
        return out
    s = ctx.temp(i32, (n_, npix, mo), "s")
    _call(ctx, (n_, npix, mo, s0, ss0, s1, ss1, seg, 0, canon(hp * wp * cin), mo, canon(npix * mo)), xp, q, s,
          table)
    colsum = ctx.const((-wk.sum(axis=1)).astype(np.int32), "wsum")
    bconst = None if bias is None else ctx.const(np.asarray(bdata, np.int32).reshape(-1), "bias")
    acc = ctx.temp(i32, shape, "acc")
    owd = ctx.dim(ow_)

    def body(n, m, oh, ow):
        v = s[(n, oh * owd + ow, m)] + zx * colsum[(m,)]
        return v if bconst is None else v + bconst[(m,)]

    ctx.compute(acc, body)
    return acc
