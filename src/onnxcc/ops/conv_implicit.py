"""A dense channels-last f32 conv as one implicit GEMM call (kernel/conv_call.py), where the
backend runs it (`ctx.f32_conv_call`: codegen/cpu/gemm_implicit.py).

The NCHW window GEMM computes its columns over a padded plane (a 13x13 output with pads 1
is 13 x 15 columns, then rounded up to whole tiles: about 70% useful). Here the GEMM's rows
are the real output pixels (n, oh, ow), its columns the output channels, and K = (kh, kw, c)
is read in place from one padded channels-last copy of X at each pixel's window offset,
so nothing is computed for padding and no im2col matrix is written. The weights are packed
at compile time; bias and ReLU are applied in the stores.

`implicit_conv` returns False, having written nothing, where it does not apply (another
target, another dtype, grouped, weights not constant); the caller keeps its own path."""

from __future__ import annotations

import numpy as np

from ..ir import DType, canon
from ..kernel import Buffer, CallStmt, Compute, Const, Load, select
from ..kernel.conv_call import CALLEE, POOL_ROWS, Buffers, Sizes, pack_w, pack_w_planar
from ..kernel.conv_stem_call import PREFIX as STEM_PREFIX
from ..kernel.conv_stem_call import StemSpec
from ..kernel.conv_wino_call import WinoSpec, pack_q
from .pad_guard import pad_guard


def _literal_zero(d) -> bool:
    return isinstance(d, int) and d == 0


PLANAR_MAX_CIN = 4
"""a conv of at most this many input channels (an image stem) reads its windows from a planar
padded copy [N, C, HP, WP] instead of a channels-last one: the copy of the net's NCHW input
is then a contiguous one along W (channels-last, with 3 channels innermost, it ran as scalar
code: 15% of benchmarks/convnets.py's mobile net at 224x224), and a window is KH x C
segments of KW contiguous elements. Unpadded too (squeezenet's stride-2 stem): the copy is a
plain one of the input, not a transposing one (1.8% of squeezenet's run at one thread). A
stem the stem call takes (`_callee`) reads no padded copy: the NCHW input itself where X is
its transpose (`_stem_planar`)"""


def _padded_read(ctx, x: Buffer, pb, pe, n, h, w, c):
    """x[n, h - pb0, w - pb1, c], zero in the padding"""
    pos = [h - ctx.dim(pb[0]), w - ctx.dim(pb[1])]
    guard = pad_guard(ctx, pos, x.shape[1:3], pb, pe)
    v = x[(n, *pos, c)]
    return v if guard is None else select(guard, v, Const(0.0, DType.f32))  # lazy: padding is never loaded


def _rows(stored, pool: bool):
    """the call's rows: the stored pixels, or with `pool` each pooled pixel's 2x2 window of
    conv pixels, 4 consecutive rows. `stored`: the extents of the pixels the call stores (y's,
    less its out pads). The rows' window offsets the call steps itself (ta, tb): a table of
    them, made at every call (a 4-D compute with an innermost extent of 2 where pooled), cost
    3.7% of benchmarks/convnets.py's plain net at 224x224."""
    oh_, ow_ = stored
    return canon(oh_ * ow_ * (POOL_ROWS if pool else 1))


def _out_table(ctx, stored, wpo, out_pads, mo: int):
    """V: each pixel's element offset in a residual map another conv wrote padded (kernel/conv_call.py)"""
    opt, opl = out_pads[0], out_pads[1]
    u = ctx.temp(DType.i64, stored, "resoff")
    ctx.compute(u, lambda oh, ow: ((oh + opt) * ctx.dim(wpo) + ow + opl) * mo)
    return u


def _planar(ctx, x: Buffer, stored, wv: np.ndarray, win: dict, pb, pe, pool: bool):
    """The call's sizes of its rows and window (`Sizes` batch .. sp, ta, tb, by name), P and Q for
    a window read from a planar padded copy of X"""
    n_, hin, win_, cin = x.shape
    mo, _, kh, kw = (int(d) for d in wv.shape)
    strides, dil = win["strides"], win["dilations"]
    hp, wp = canon(hin + pb[0] + pe[0]), canon(win_ + pb[1] + pe[1])
    xp = ctx.temp(DType.f32, (n_, cin, hp, wp), "xplanar")
    ctx.compute(xp, lambda n, c, h, w: _padded_read(ctx, x, pb, pe, n, h, w, c))
    q = ctx.const(pack_w_planar(wv), "wpack")
    # K = (kh, c, kw): KH segments d0 rows apart, C planes apart each, of KW contiguous taps
    window = dict(batch=n_, m=_rows(stored, pool), n=mo, s0=kh, ss0=canon(dil[0] * wp), s1=cin, ss1=canon(hp * wp),
                  l=kw, sp=canon(cin * hp * wp), ta=canon(strides[0] * wp), tb=strides[1])
    return window, xp, q


def _nchw_source(ctx, x: Buffer) -> Buffer | None:
    """the [N, C, H, W] f32 buffer X is the channels-last transpose of (X[n, h, w, c] = S[n, c, h,
    w], a net's NCHW input brought into the channels-last region), or None"""
    for st in reversed(ctx.program.body):
        if isinstance(st, Compute) and st.out == x.name:
            vs = [v for v, _ in st.vars]
            body = st.body
            if not (isinstance(body, Load) and len(vs) == 4 and body.dtype is DType.f32
                    and body.indices == (vs[0], vs[3], vs[1], vs[2])):
                return None
            src = ctx.program.buffers[body.buffer]
            want = tuple(canon(d) for d in (x.shape[0], x.shape[3], x.shape[1], x.shape[2]))
            return src if tuple(canon(d) for d in src.shape) == want else None
    return None


def _stem_planar(ctx, x: Buffer, stored, wv: np.ndarray, win: dict, pb, pool: bool):
    """The stem call's window sizes, P and Q: P the planar input [N, C, H, W] itself, unpadded
    (the call masks the padding off its loads): the NCHW buffer X was transposed from where
    there is one, so no copy is made (30 us of benchmarks/convnets.py's plain net at 1x224x224,
    the region profile), else a planar copy of X. The contract's window sizes the stem call has
    no use for (its kernel and strides are in its name) carry the input's extents and pads
    instead (kernel/conv_stem_call.py): s0, s1 the top and left pads, l and tb W and H."""
    n_, hin, win_, cin = x.shape
    mo = int(wv.shape[0])
    xp = _nchw_source(ctx, x)
    if xp is None:
        xp = ctx.temp(DType.f32, (n_, cin, hin, win_), "xplanar")
        ctx.compute(xp, lambda n, c, h, w: x[n, h, w, c])
    q = ctx.const(pack_w_planar(wv), "wpack")
    window = dict(batch=n_, m=_rows(stored, pool), n=mo, s0=canon(pb[0]), ss0=win_, s1=canon(pb[1]),
                  ss1=canon(hin * win_), l=win_, sp=canon(cin * hin * win_), ta=canon(win["strides"][0] * win_),
                  tb=hin)
    return window, xp, q


WINOGRAD = True
"""route dense 3x3 stride-1 convs of kernel/conv_wino_call.py's channel range to the Winograd
call (codegen/cpu/conv_wino.py); off: every such conv on the GEMM call"""


def _callee(planar: bool, wshape: tuple[int, ...], win: dict, pool: bool, residual: Buffer | None) -> str:
    """The one routing decision between the GEMM call and the stem call (same sizes and
    buffers): a planar stem without a residual, its strides 1 or 2 and kernel at most 7x7,
    takes the stem call (codegen/cpu/conv_stem.py: output pixels in the lanes, no window
    pointer per pixel, a block's 16 x 16 results transposed in registers; benchmarks/
    convnets.py's plain stem, 3 -> 16 3x3 with its pool, 484 -> 422 us at 224x224 on one
    thread, 78% -> 88% of the core's FMA roof, the region profile); any other conv the GEMM
    call. A window of fewer than 9 taps per channel (a 1x1 stem) stays on the GEMM
    call too: the stem call's 16 x 16 transpose per block would weigh on a few FMAs (not
    measured). A dense 3x3 stride-1 conv of kernel/conv_wino_call.py's channel range (16 to
    128 in and out), not pooled, takes the Winograd call (codegen/cpu/conv_wino.py: 2.25x
    fewer FMAs; benchmarks/region_profile.py convnets:resnet at 1x224x224, one thread: a 32 ->
    32 conv on the 112x112 map ~1.3 ms, the GEMM call's ~2.0 ms; benchmarks/
    conv_wino_channels.py: two C -> C convs at 56x56 0.54-0.67x the GEMM call's time from C =
    16 to 128)."""
    mo, cin, kh, kw = wshape
    strides = tuple(win["strides"])
    spec = StemSpec(cin, kh, kw, strides[0], strides[1], pool)
    if planar and residual is None and tuple(win["dilations"]) == (1, 1) and spec.supported() and kh * kw >= 9:
        return spec.callee
    wino = WinoSpec(cin, mo)
    if (WINOGRAD and not planar and not pool and (kh, kw) == (3, 3) and strides == (1, 1)
            and tuple(win["dilations"]) == (1, 1) and wino.supported()):
        return wino.callee
    return CALLEE


def implicit_conv(ctx, y: Buffer, x: Buffer, w_index: int, bias_index: int | None, win: dict, pb, pe,
                  relu: bool, pool: bool = False, residual: Buffer | None = None,
                  out_pads: tuple[int, int, int, int] = (0, 0, 0, 0),
                  residual_pads: tuple[int, int, int, int] = (0, 0, 0, 0)) -> bool:
    """y[n, oh, ow, m] = act(sum(kh, kw, c: padded x[n, oh*s0 + kh*d0 - pb0, ow*s1 + kw*d1 - pb1, c]
    * W[m, c, kh, kw]) + B[m]) through the call; with `pool`, y is the 2x2 stride-2 max pool of
    that (floor mode: y[n, ph, pw, m] the maximum over oh in {2ph, 2ph+1}, ow in {2pw, 2pw+1});
    with `residual` (a buffer shaped like y, not with `pool`) act(... + B[m] + residual[n, oh, ow,
    m]), or residual[n, oh + top, ow + left, m] with `residual_pads` (top, left, bottom, right:
    a map another conv wrote padded); with `out_pads` y is the result zero-padded on H and W
    (the call writes the border's zeros); False: not here."""
    if not ctx.f32_conv_call or win["group"] != 1 or x.dtype is not DType.f32 or y.dtype is not DType.f32:
        return False
    if residual is not None and (pool or residual.dtype is not DType.f32):
        return False
    wv = ctx.const_value(w_index)
    bv = None if bias_index is None else ctx.const_value(bias_index)
    if wv is None or (bias_index is not None and bv is None) or wv.ndim != 4:
        return False
    mo, cin, kh, kw = (int(d) for d in wv.shape)
    strides, dil = win["strides"], win["dilations"]
    if not all(isinstance(v, int) for v in (*strides, *dil)):
        return False
    n_, hin, win_, _ = x.shape
    padded = not all(_literal_zero(p) for p in (*pb, *pe))
    opt, opl, opb, opr = out_pads
    stored = (canon(y.shape[1] - opt - opb), canon(y.shape[2] - opl - opr))
    planar = cin <= PLANAR_MAX_CIN and dil[1] == 1
    callee = _callee(planar, wv.shape, win, pool, residual)
    if callee.startswith(STEM_PREFIX):
        window, xp, q = _stem_planar(ctx, x, stored, wv, win, pb, pool)
    elif planar:
        window, xp, q = _planar(ctx, x, stored, wv, win, pb, pe, pool)
    else:
        if not padded:
            xp, hp, wp = x, hin, win_  # no padding: the windows are read from X itself
        else:
            hp, wp = canon(hin + pb[0] + pe[0]), canon(win_ + pb[1] + pe[1])
            xp = ctx.temp(DType.f32, (n_, hp, wp, cin), "xpad")
            ctx.compute(xp, lambda n, h, w, c: _padded_read(ctx, x, pb, pe, n, h, w, c))
        q = ctx.const(pack_w(wv) if callee == CALLEE else pack_q(wv), "wpack")
        # window rows of KW * C contiguous elements, or taps of C when dilated along W
        s1, ss1, seg = (1, 0, kw * cin) if dil[1] == 1 else (kw, dil[1] * cin, cin)
        window = dict(batch=n_, m=_rows(stored, pool), n=mo, s0=kh, ss0=canon(dil[0] * wp * cin), s1=s1, ss1=ss1,
                      l=seg, sp=canon(hp * wp * cin), ta=canon(strides[0] * wp * cin), tb=strides[1] * cin)
    bconst = ctx.const(np.zeros(mo, np.float32) if bv is None else np.asarray(bv, np.float32).reshape(-1), "bias")
    res = bconst if residual is None else residual  # without a residual the call never reads it
    sr = canon(res.shape[1] * res.shape[2] * mo) if residual is not None else 0
    # C: the stored pixels' rows (y's, or its interior with out pads), sc y's batch stride
    sizes = Sizes(**window, ldc=mo, sc=canon(y.shape[1] * y.shape[2] * mo), relu=int(relu),
                  pool=POOL_ROWS if pool else 1, res=int(residual is not None), oh=stored[0], ow=stored[1],
                  wpo=y.shape[2], opt=opt, opl=opl, opb=opb, opr=opr, sr=sr, rpad=int(any(residual_pads)))
    exprs = tuple(ctx.dim(canon(d)) for d in sizes.values())
    # V: any buffer where the call does not read it (a flat residual)
    res_places = bconst if not any(residual_pads) else _out_table(ctx, stored, res.shape[2], residual_pads, mo)
    bufs = Buffers(P=xp.name, Q=q.name, C=y.name, B=bconst.name, R=res.name, V=res_places.name)
    ctx.program.body.append(CallStmt(callee, exprs, bufs.values(), (y.name,)))
    return True


__all__ = ["implicit_conv"]
