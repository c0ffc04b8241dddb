"""Neural-network ops: Conv, ConvTranspose, MaxPool, AveragePool, LpPool, MaxUnpool,
GlobalAveragePool and GlobalMaxPool (the normalizations are in norm.py, imported from here).

`window_geometry` is the one place the sliding-window arithmetic lives; it works on Dims,
so the same code gives symbolic output dims (`floor((H + pb + pe - d*(k-1) - 1)/s) + 1`)
at compile time and concrete pads and extents in the numpy references.
"""

from __future__ import annotations

from functools import reduce as _fold

import numpy as np
import sympy

from ..ir import DType, TensorType, canon
from ..kernel import (
    Const,
    Expr,
    Var,
    argmax,
    cast,
    flatten_index,
    maximum,
    minimum,
    power,
    rmax,
    rsum,
    select,
    sqrt,
    unflatten_index,
)
from .conv_blocked import blocked_applies, blocked_depthwise_lower
from .conv_deadtaps import lower_regimes, tap_regimes, trim_dead_taps
from .conv_depth import depth_batched_applies, depth_batched_lower
from .conv_grouped import grouped_gemm_applies, grouped_gemm_lower
from .convt_col2im import col2im_applies, col2im_lower, transposed_source
from .elementwise import cast_out, kwiden, results_between, same_dtype, widen
from .half_as_f32 import lowered_in_f32
from .pad_guard import pad_conds
from .registry import InferCtx, RefCtx, define
from .shape import fresh_dim
from .traits import set_cost

# ---- window arithmetic on Dims ---------------------------------------------------------------------


def _floordiv(a, b):
    a, b = canon(a), canon(b)
    if isinstance(a, int) and isinstance(b, int):
        return a // b
    return canon(sympy.floor(sympy.sympify(a) / b))


def _ceildiv(a, b):
    a, b = canon(a), canon(b)
    if isinstance(a, int) and isinstance(b, int):
        return -(-a // b)
    return canon(sympy.ceiling(sympy.sympify(a) / b))


def _max(a, b):
    return canon(sympy.Max(a, b))


def _min(a, b):
    return canon(sympy.Min(a, b))


def window_geometry(in_dims, kernel, strides, dilations, pads, auto_pad="NOTSET", ceil_mode=0):
    """Output extents and (begin, end) pads of a strided, dilated window over `in_dims`.

    Returns (out_dims, pads_begin, pads_end); every entry is a Dim.
    """
    nd = len(in_dims)
    outs, begins, ends = [], [], []
    for i in range(nd):
        h, k, s, d = in_dims[i], kernel[i], strides[i], dilations[i]
        span = canon(d * (k - 1) + 1)
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            out = _ceildiv(h, s)
            total = _max(0, (out - 1) * s + span - h)
            half = _floordiv(total, 2)
            b = half if auto_pad == "SAME_UPPER" else canon(total - half)
            e = canon(total - b)
        elif auto_pad == "VALID":
            b = e = 0
            out = canon(_floordiv(h - span, s) + 1)
        else:
            b, e = pads[i], pads[i + nd]
            if ceil_mode:
                out = canon(_ceildiv(h + b + e - span, s) + 1)
                # the last window must start inside the input or its begin padding; that can
                # only fail when span - e < s (then ceil((A - t)/s) <= floor((A - 1)/s) may not hold)
                if not (isinstance(span - e, int) and isinstance(s, int) and span - e >= s):
                    out = _min(out, _floordiv(h + b - 1, s) + 1)
            else:
                out = canon(_floordiv(h + b + e - span, s) + 1)
        outs.append(out)
        begins.append(b)
        ends.append(e)
    return outs, begins, ends


def _ints_attr(ctx, name: str, n: int, default: int) -> list:
    v = ctx.attr(name)
    return [default] * n if v is None else list(v)


def _window_attrs(ctx, nd: int, kernel) -> dict:
    pads = _ints_attr(ctx, "pads", 2 * nd, 0)
    return dict(kernel=kernel, strides=_ints_attr(ctx, "strides", nd, 1),
                dilations=_ints_attr(ctx, "dilations", nd, 1), pads=pads,
                auto_pad=ctx.attr("auto_pad", "NOTSET"), ceil_mode=ctx.attr("ceil_mode", 0))


def _check_lengths(ctx: InferCtx, w: dict, nd: int) -> None:
    for name, want in (("kernel", nd), ("strides", nd), ("dilations", nd), ("pads", 2 * nd)):
        if len(w[name]) != want:
            raise ctx.error(f"{name} needs {want} values for {nd} spatial dims, got {len(w[name])}")


def _require_positive(ctx: InferCtx, dims, first_axis: int = 2) -> None:
    """A window op's output extents must be >= 1; what cannot be proved becomes a constraint."""
    for i, d in enumerate(dims):
        p = ctx.symbols.prove_le(1, d)
        if p is True:
            continue
        if p is False or isinstance(d, int):
            raise ctx.error(f"output dim {first_axis + i} is {d}, expected >= 1 "
                            "(input smaller than the window)")
        ctx.require(sympy.Ge(d, 1), f"output dim {first_axis + i} >= 1 (input at least the window size)")


# ---- lowering helpers --------------------------------------------------------------------------


def _is_int(d, value: int) -> bool:
    return isinstance(d, int) and d == value


def _all(conds: list):
    """The conjunction of `conds`, or None when there is nothing to check."""
    out = None
    for c in conds:
        out = c if out is None else out & c
    return out


def _guard(conds: list, value: Expr, fill) -> Expr:
    """`value` where every cond holds, else `fill`; a lazy select, so an out-of-range
    position is never loaded."""
    cond = _all(conds)
    return value if cond is None else select(cond, value, fill)


def _window_vars(kernel, prefix: str = "k") -> list:
    """One reduce var per spatial kernel dim; None where the extent is 1 (index 0)."""
    return [None if _is_int(k, 1) else Var(f"{prefix}{i}") for i, k in enumerate(kernel)]


def _reduce_axes(pairs) -> list:
    return [(v, ext) for v, ext in pairs if v is not None]


def _window_positions(ctx, outs, ks, strides, dilations, pads_begin) -> list:
    """Input positions `o*s + k*d - pad_begin` of window offsets `ks` (Exprs or None = 0)."""
    zero = Const(0, DType.i64)
    return [o * s + (zero if k is None else k) * d - ctx.dim(pb)
            for o, k, s, d, pb in zip(outs, ks, strides, dilations, pads_begin)]


def _lowest(dt: DType):
    return float("-inf") if dt.is_float else int(np.iinfo(dt.np).min)


def _spatial_input(ctx: InferCtx) -> TensorType:
    x = ctx.in_types[0]
    if x.rank < 3:
        raise ctx.error(f"x must be (N, C, spatial...) with rank >= 3, got {x}")
    return x


# ---- Conv ------------------------------------------------------------------------------------------


def conv(x, w, b, strides, pads_begin, pads_end, dilations, group: int):
    """N-d grouped convolution: x (N, C, *S), w (M, C/group, *K), b (M) or None."""
    n, c = x.shape[:2]
    m, kernel = w.shape[0], w.shape[2:]
    nd = len(kernel)
    xp = np.pad(x, [(0, 0), (0, 0)] + [(pads_begin[i], pads_end[i]) for i in range(nd)])
    outs = [(xp.shape[2 + i] - dilations[i] * (kernel[i] - 1) - 1) // strides[i] + 1 for i in range(nd)]
    xg = xp.reshape(n, group, c // group, *xp.shape[2:])
    wg = w.reshape(group, m // group, c // group, *kernel)
    y = np.zeros((n, group, m // group, *outs), dtype=np.result_type(x, w))
    for k in np.ndindex(*kernel):
        sl = tuple(slice(k[i] * dilations[i], k[i] * dilations[i] + strides[i] * (outs[i] - 1) + 1,
                         strides[i]) for i in range(nd))
        y += np.einsum("ngc...,gmc->ngm...", xg[(Ellipsis,) + sl], wg[(Ellipsis,) + k])
    y = y.reshape(n, m, *outs)
    if b is not None:
        y = y + b.reshape((1, m) + (1,) * nd)
    return y


def _conv_kernel(ctx, w_shape) -> list:
    ks = ctx.attr("kernel_shape")
    return list(w_shape[2:]) if ks is None else list(ks)


def _conv_infer(ctx: InferCtx):
    x, w = _spatial_input(ctx), ctx.in_types[1]
    dt = same_dtype(ctx)
    nd = x.rank - 2
    if w.rank != x.rank:
        raise ctx.error(f"w must have rank {x.rank} like x, got {w}")
    group = ctx.attr("group", 1)
    win = _window_attrs(ctx, nd, _conv_kernel(ctx, w.shape))
    _check_lengths(ctx, win, nd)
    for i, k in enumerate(win["kernel"]):
        ctx.require_eq(w.shape[2 + i], k, f"kernel_shape[{i}] vs w dim {2 + i}")
    ctx.require_eq(x.shape[1], canon(w.shape[1] * group), "input channels (x dim 1 vs w dim 1 * group)")
    m = w.shape[0]
    if isinstance(m, int) and m % group:
        raise ctx.error(f"output channels {m} not divisible by group {group}")
    if len(ctx.in_types) > 2:
        bt = ctx.in_types[2]
        if bt.rank != 1:
            raise ctx.error(f"b must be 1-D, got {bt}")
        ctx.require_eq(bt.shape[0], m, "bias length vs output channels")
    outs, _, _ = window_geometry(x.shape[2:], win["kernel"], win["strides"], win["dilations"], win["pads"],
                                 win["auto_pad"])
    _require_positive(ctx, outs)
    return [TensorType(dt, (x.shape[0], m, *outs))]


def _conv_ref(ctx: RefCtx, x, w, b=None):
    nd = x.ndim - 2
    win = _window_attrs(ctx, nd, _conv_kernel(ctx, w.shape))
    _, pb, pe = window_geometry(x.shape[2:], win["kernel"], win["strides"], win["dilations"], win["pads"],
                                win["auto_pad"])
    y = conv(widen(x), widen(w), None if b is None else widen(b), win["strides"], pb, pe, win["dilations"],
             ctx.attr("group", 1))
    return [cast_out(ctx, y)]


def _conv_lower(ctx, trimmed=None, regimes: bool = True) -> None:
    """Y[n, m, o...] = sum(c < C/group, k...: pad-guarded X[n, g*C/group + c, o*s + k*d - p]
    * W[m, c, k...]) + B[m], g = m // (M/group): one compute, the contraction one rsum with
    the bias outside it. Depthwise convs (C/group == 1) and 1-wide kernel dims get no var.
    `trimmed`: the (w, kernel, pb, pe) of a run-time tap regime (ops/conv_deadtaps.py)."""
    if lowered_in_f32(ctx, _conv_lower):  # half precision: on f32 buffers (the GEMM paths)
        return
    x, w = ctx.inputs[0], ctx.inputs[1]
    bias = ctx.inputs[2] if len(ctx.inputs) > 2 else None
    nd = x.rank - 2
    kernel = list(w.shape[2:])
    win = _window_attrs(ctx, nd, kernel)
    _, pb, pe = window_geometry(x.shape[2:], kernel, win["strides"], win["dilations"], win["pads"],
                                win["auto_pad"])
    rg = regimes and tap_regimes(ctx, x, w, kernel, win["strides"], win["dilations"], pb, pe)
    if rg:  # dead taps on small planes of a symbolic extent: one lowering per regime
        lower_regimes(ctx, rg, lambda t: _conv_lower(ctx, t, regimes=False))
        return
    trimmed = trimmed or trim_dead_taps(ctx, x, w, kernel, win["strides"], win["dilations"], pb, pe)
    if trimmed is not None:  # taps that read only padding dropped (ops/conv_deadtaps.py)
        w, kernel, pb, pe = trimmed
        win["kernel"] = kernel
    group = ctx.attr("group", 1)
    cg = w.shape[1]
    mg = canon(sympy.sympify(w.shape[0]) / group)
    c = None if _is_int(cg, 1) else Var("c")
    kv = _window_vars(kernel)
    axes = _reduce_axes([(c, cg)] + list(zip(kv, kernel)))
    if blocked_applies(x, w, kernel, group, win["strides"]):
        blocked_depthwise_lower(ctx, x, w, bias, kernel, win["strides"], win["dilations"], pb, pe)
        return
    if depth_batched_applies(x, w, group):
        depth_batched_lower(ctx, x, w, bias, win["strides"], win["dilations"], pb, pe)
        return
    if grouped_gemm_applies(x, w, group):  # a GEMM per group (ops/conv_grouped.py)
        grouped_gemm_lower(ctx, x, w, bias, win["strides"], win["dilations"], pb, pe, group)
        return
    taps = c is None and axes and all(isinstance(k, int) for k in kernel) \
        and int(np.prod(kernel)) <= _UNROLL_WINDOW
    paired = bool(taps) and _pair_taps(kernel, win)
    if paired or (any(s > 1 for s in win["strides"]) and not all(_is_int(p, 0) for p in (*pb, *pe))):
        x = _padded_input(ctx, x, pb, pe, extra_end=1 if paired else 0)
        pb, pe = [0] * nd, [0] * nd
    if taps:
        _depthwise_lower(ctx, x, w, bias, kernel, win, pb, pe, mg, paired)
        return
    if group > 1 and c is not None and nd == 1 and isinstance(mg, int) and x.dtype is DType.f32:
        _grouped_conv1d_lower(ctx, x, w, bias, kv, axes, win, pb, pe, group, mg)
        return

    def body(*ix):
        n, m, o = ix[0], ix[1], ix[2:]
        cw = Const(0, DType.i64) if c is None else c
        if group == 1:
            ch = cw
        else:
            g = m if _is_int(mg, 1) else m // ctx.dim(mg)
            ch = g * ctx.dim(cg) + cw
        pos = _window_positions(ctx, o, kv, win["strides"], win["dilations"], pb)
        xv = _guard(pad_conds(ctx, pos, x.shape[2:], pb, pe), x[(n, ch, *pos)], 0)
        prod = xv * w[(m, cw, *[Const(0, DType.i64) if k is None else k for k in kv])]
        acc = rsum(axes, prod) if axes else prod
        return acc if bias is None else acc + bias[m]

    ctx.compute(ctx.out(0), body)


def _grouped_conv1d_lower(ctx, x, w, bias, kv, axes, win, pb, pe, group: int, mg: int) -> None:
    """A grouped 1-D conv (wav2vec2's positional conv: 16 groups, kernel 128) as a GEMM per
    (batch, group) into T[n, g, j, o], then Y[n, g*mg + j, o] = T[n, g, j, o]: in one compute
    the group index g = m // mg sits in both operands' indices, so no GEMM reading exists
    and it ran as a scalar loop nest. The copy is injective: fusion folds it into its readers."""
    cg = w.shape[1]
    t = ctx.temp(x.dtype, [x.shape[0], group, mg, *ctx.out_type().shape[2:]], "gconv")
    cv = Var("c")

    def gemm(n, g, j, o):
        m = g * mg + j
        pos = _window_positions(ctx, [o], kv, win["strides"], win["dilations"], pb)
        xv = _guard(pad_conds(ctx, pos, x.shape[2:], pb, pe), x[(n, g * ctx.dim(cg) + cv, *pos)], 0)
        acc = rsum(axes, xv * w[(m, cv, Const(0, DType.i64) if kv[0] is None else kv[0])])
        return acc if bias is None else acc + bias[m]

    ctx.compute(t, gemm)
    ctx.compute(ctx.out(0), lambda n, m, o: t[n, m // mg, m % mg, o])


def _padded_input(ctx, x, pb, pe, extra_end: int = 0, fill=0):
    """X zero-padded into a temp, for a strided conv: its window loads then need no bounds
    selects, which LLVM only vectorises at stride 1 (fusion keeps this copy when it is read
    with a stride, see kernel/fuse.py `_strided`); one cheap stride-1 pass over X buys
    unmasked loads in every tap. `extra_end` more zero columns after the last dim's end
    padding (the paired taps' extra load, `_pair_taps`, reads one past the last window);
    `fill` instead of 0 (max pooling pads with the lowest value)."""
    nd = x.rank - 2
    pe = [*pe[:-1], canon(pe[-1] + extra_end)]
    shape = [x.shape[0], x.shape[1]] + [canon(x.shape[2 + i] + pb[i] + pe[i]) for i in range(nd)]
    xp = ctx.temp(x.dtype, shape, "xpad")

    def body(*ix):
        pos = _window_positions(ctx, ix[2:], [None] * nd, [1] * nd, [1] * nd, pb)
        return _guard(pad_conds(ctx, pos, x.shape[2:], pb, pe), x[(ix[0], ix[1], *pos)], fill)

    ctx.compute(xp, body)
    return xp


_UNROLL_WINDOW = 49
"""kernel windows of at most this many taps are unrolled when each output reads one input
channel (depthwise): a sum of taps with no reduce, so the output row loop vectorises"""


def _pair_taps(kernel, win) -> bool:
    """Whether the taps along the last axis get one extra load (times 0): at stride 2 and
    dilation 1 an odd kernel reads positions 2o, 2o+1, ..., 2o+K-1 of a row, and LLVM's
    vectoriser loads the pairs (2o+2t, 2o+2t+1) as two vectors and a deinterleave but the
    lone last one with a gather, which costs more than the whole rest of the row; with
    2o+K added every load is half of a pair."""
    k = kernel[-1]
    return win["strides"][-1] == 2 and win["dilations"][-1] == 1 and k % 2 == 1 and k > 1


def _depthwise_lower(ctx, x, w, bias, kernel, win, pb, pe, mg, paired: bool = False) -> None:
    """Y[n, m, o...] = sum over the taps k (unrolled) of pad-guarded X[n, m // (M/group),
    o*s + k*d - p] * W[m, 0, k...] (+ B[m]): a plain elementwise compute over the output.
    `paired` (X padded, see `_pair_taps`): each row of taps also adds X[..., 2o + K] * 0."""
    zero = Const(0, DType.i64)
    nought = Const(0.0, x.dtype) if x.dtype.is_float else None
    inf = Const(float("inf"), x.dtype) if x.dtype.is_float else None

    def body(*ix):
        n, m, o = ix[0], ix[1], ix[2:]
        ch = m if _is_int(mg, 1) else m // ctx.dim(mg)
        acc = None
        for tap in np.ndindex(*kernel):
            ks = [Const(int(t), DType.i64) for t in tap]
            pos = _window_positions(ctx, o, ks, win["strides"], win["dilations"], pb)
            xv = _guard(pad_conds(ctx, pos, x.shape[2:], pb, pe), x[(n, ch, *pos)], 0)
            term = xv * w[(m, zero, *ks)]
            acc = term if acc is None else acc + term
            if paired and nought is not None and tap[-1] == kernel[-1] - 1:
                # the extra load, exactly 0 whatever it reads (an inf or nan there belongs to
                # another window); LLVM keeps it (no fast-math); the pad column that
                # `_padded_input(extra_end=1)` adds keeps it inside X
                xd = x[(n, ch, *pos[:-1], pos[-1] + 1)]
                acc = acc + select(abs(xd) < inf, xd, nought) * nought
        return acc if bias is None else acc + bias[m]

    ctx.compute(ctx.out(0), body)


define("onnx.Conv", infer=_conv_infer, reference=_conv_ref, arity=(2, 3), math=conv, lower=_conv_lower,
       kind="matmul")  # NOTE: like MatMul, a conv takes elementwise epilogues


# ---- ConvTranspose ---------------------------------------------------------------------------------


def conv_transpose(x, w, b, strides, pads_begin, out_dims, dilations, group: int):
    """Transposed convolution: x (N, C, *S), w (C, M/group, *K) -> (N, M, *out_dims)."""
    n, c = x.shape[:2]
    mg, kernel = w.shape[1], w.shape[2:]
    nd = len(kernel)
    ins = x.shape[2:]
    full = [max((ins[i] - 1) * strides[i] + dilations[i] * (kernel[i] - 1) + 1, pads_begin[i] + out_dims[i])
            for i in range(nd)]
    xg = x.reshape(n, group, c // group, *ins)
    wg = w.reshape(group, c // group, mg, *kernel)
    y = np.zeros((n, group, mg, *full), dtype=np.result_type(x, w))
    for k in np.ndindex(*kernel):
        sl = tuple(slice(k[i] * dilations[i], k[i] * dilations[i] + strides[i] * (ins[i] - 1) + 1, strides[i])
                   for i in range(nd))
        y[(Ellipsis,) + sl] += np.einsum("ngc...,gcm->ngm...", xg, wg[(Ellipsis,) + k])
    crop = tuple(slice(pads_begin[i], pads_begin[i] + out_dims[i]) for i in range(nd))
    y = y[(Ellipsis,) + crop].reshape(n, mg * group, *out_dims)
    if b is not None:
        y = y + b.reshape((1, -1) + (1,) * nd)
    return y


def conv_transpose_geometry(ctx, in_dims, w_shape) -> tuple[list, list]:
    """(out_dims, pads_begin) of a ConvTranspose, per the ONNX spec."""
    nd = len(in_dims)
    kernel = _conv_kernel(ctx, w_shape)
    strides = _ints_attr(ctx, "strides", nd, 1)
    dil = _ints_attr(ctx, "dilations", nd, 1)
    opad = _ints_attr(ctx, "output_padding", nd, 0)
    pads = _ints_attr(ctx, "pads", 2 * nd, 0)
    auto_pad, out_shape = ctx.attr("auto_pad", "NOTSET"), ctx.attr("output_shape")
    outs, begins = [], []
    for i in range(nd):
        natural = canon((in_dims[i] - 1) * strides[i] + opad[i] + dil[i] * (kernel[i] - 1) + 1)
        if out_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            out = list(out_shape)[-nd:][i] if out_shape is not None else canon(in_dims[i] * strides[i])
            total = canon(natural - out)
            # the spec: SAME_UPPER puts the smaller half first, anything else the larger
            b = _floordiv(total, 2) if auto_pad == "SAME_UPPER" else canon(total - _floordiv(total, 2))
        else:
            b = 0 if auto_pad == "VALID" else pads[i]
            e = 0 if auto_pad == "VALID" else pads[i + nd]
            out = canon(natural - b - e)
        outs.append(out)
        begins.append(b)
    return outs, begins


def _convt_infer(ctx: InferCtx):
    x, w = _spatial_input(ctx), ctx.in_types[1]
    dt = same_dtype(ctx)
    if w.rank != x.rank:
        raise ctx.error(f"w must have rank {x.rank} like x, got {w}")
    group = ctx.attr("group", 1)
    ctx.require_eq(x.shape[1], w.shape[0], "input channels (x dim 1 vs w dim 0)")
    m = canon(w.shape[1] * group)
    if len(ctx.in_types) > 2:
        ctx.require_eq(ctx.in_types[2].shape[0], m, "bias length vs output channels")
    outs, _ = conv_transpose_geometry(ctx, x.shape[2:], w.shape)
    _require_positive(ctx, outs)
    return [TensorType(dt, (x.shape[0], m, *outs))]


def _convt_ref(ctx: RefCtx, x, w, b=None):
    nd = x.ndim - 2
    outs, pb = conv_transpose_geometry(ctx, x.shape[2:], w.shape)
    y = conv_transpose(widen(x), widen(w), None if b is None else widen(b), _ints_attr(ctx, "strides", nd, 1),
                       pb, outs, _ints_attr(ctx, "dilations", nd, 1), ctx.attr("group", 1))
    return [cast_out(ctx, y)]


def _convt_lower(ctx) -> None:
    """Y[n, m, o...] = sum(c < C/group, k...: X[n, g*C/group + c, t/s] * W[g*C/group + c, m % M/g, k...])
    + B[m] with t = o + pad_begin - k*d, taking only the terms where t is a multiple of s
    inside the input (a gather form of the scatter: one rsum, no temporaries)."""
    x, w = ctx.inputs[0], ctx.inputs[1]
    bias = ctx.inputs[2] if len(ctx.inputs) > 2 else None
    nd = x.rank - 2
    kernel = list(w.shape[2:])
    _, pb = conv_transpose_geometry(ctx, x.shape[2:], w.shape)
    strides, dil = _ints_attr(ctx, "strides", nd, 1), _ints_attr(ctx, "dilations", nd, 1)
    group = ctx.attr("group", 1)
    if col2im_applies(x, w, strides, group):
        return col2im_lower(ctx, x, w, bias, pb, strides, dil)
    cg = canon(sympy.sympify(x.shape[1]) / group)
    mg = w.shape[1]
    c = None if _is_int(cg, 1) else Var("c")
    kv = _window_vars(kernel)
    axes = _reduce_axes([(c, cg)] + list(zip(kv, kernel)))
    zero = Const(0, DType.i64)

    def body(*ix):
        n, m, o = ix[0], ix[1], ix[2:]
        cw = zero if c is None else c
        if group == 1:
            ch, mm = cw, m
        else:
            g, mm = (m, zero) if _is_int(mg, 1) else (m // ctx.dim(mg), m % ctx.dim(mg))
            ch = g * ctx.dim(cg) + cw
        conds, xi = [], []
        for i in range(nd):
            k = zero if kv[i] is None else kv[i]
            exists, at = transposed_source(o[i] + ctx.dim(pb[i]) - k * dil[i], strides[i], ctx.dim(x.shape[2 + i]))
            conds += exists
            xi.append(at)
        prod = _guard(conds, x[(n, ch, *xi)], 0) * w[(ch, mm, *[zero if k is None else k for k in kv])]
        acc = rsum(axes, prod) if axes else prod
        return acc if bias is None else acc + bias[m]

    ctx.compute(ctx.out(0), body)


define("onnx.ConvTranspose", infer=_convt_infer, reference=_convt_ref, arity=(2, 3), kind="matmul",
       math=conv_transpose, lower=_convt_lower)


# ---- pooling -------------------------------------------------------------------------------------


def pool(x, mode: str, kernel, strides, pads_begin, out_dims, dilations, count_include_pad=0,
         pads_end=None, storage_order=0):
    """Max or average pooling over the trailing spatial dims.

    Returns (y, indices); indices (max only) are flat positions into x, row-major over
    (N, C, *S) (storage_order 1: spatial dims column-major), the first maximum winning.
    """
    n, c, sp = x.shape[0], x.shape[1], x.shape[2:]
    nd = len(sp)
    shape = (n, c, *out_dims)
    if mode == "max":
        lowest = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
        acc = np.full(shape, lowest, dtype=x.dtype)
        best = np.zeros(shape, dtype=np.int64)
    else:
        acc = np.zeros(shape, dtype=x.dtype)
        count = np.zeros(out_dims, dtype=np.int64)
    pads_end = pads_end if pads_end is not None else [0] * nd
    strides_sp = [int(np.prod(sp[i + 1:])) for i in range(nd)] if not storage_order else \
        [int(np.prod(sp[:i])) for i in range(nd)]
    base = (np.arange(n)[:, None] * c + np.arange(c)[None, :]) * int(np.prod(sp))
    for k in np.ndindex(*kernel):
        pos = [np.arange(out_dims[i]) * strides[i] + k[i] * dilations[i] - pads_begin[i] for i in range(nd)]
        valid = np.ones(out_dims, dtype=bool)
        counted = np.ones(out_dims, dtype=bool)
        for i in range(nd):
            shp = [1] * nd
            shp[i] = -1
            valid &= ((pos[i] >= 0) & (pos[i] < sp[i])).reshape(shp)
            counted &= (pos[i] < sp[i] + pads_end[i]).reshape(shp)
        vals = x[(slice(None), slice(None)) + np.ix_(*[np.clip(p, 0, s - 1) for p, s in zip(pos, sp)])]
        if mode == "max":
            take = valid & (vals > acc)
            acc = np.where(take, vals, acc)
            flat = sum(np.clip(p, 0, s - 1).reshape([-1 if j == i else 1 for j in range(nd)]) * st
                       for i, (p, s, st) in enumerate(zip(pos, sp, strides_sp)))
            best = np.where(take, base.reshape((n, c) + (1,) * nd) + flat, best)
        else:
            acc = acc + np.where(valid, vals, 0)
            count += counted if count_include_pad else valid
    if mode == "max":
        return acc, best
    return acc / np.maximum(count, 1), None


def _pool_geometry(ctx, sp_dims):
    nd = len(sp_dims)
    win = _window_attrs(ctx, nd, list(ctx.attr("kernel_shape") or []))
    return win, window_geometry(sp_dims, win["kernel"], win["strides"], win["dilations"], win["pads"],
                                win["auto_pad"], win["ceil_mode"])


def _pool_infer(ctx: InferCtx):
    x = _spatial_input(ctx)
    if ctx.attr("kernel_shape") is None:
        raise ctx.error("attribute 'kernel_shape' is required")
    _check_lengths(ctx, _window_attrs(ctx, x.rank - 2, list(ctx.attr("kernel_shape"))), x.rank - 2)
    _, (outs, _, _) = _pool_geometry(ctx, x.shape[2:])
    _require_positive(ctx, outs)
    y = x.with_shape((x.shape[0], x.shape[1], *outs))
    return [y, y.with_dtype(DType.i64)][: len(ctx.op.results)]


def _pool_ref(mode: str):
    def reference(ctx: RefCtx, x):
        win, (outs, pb, pe) = _pool_geometry(ctx, x.shape[2:])
        y, idx = pool(widen(x), mode, win["kernel"], win["strides"], pb, outs, win["dilations"],
                      ctx.attr("count_include_pad", 0), pe, ctx.attr("storage_order", 0))
        return [cast_out(ctx, y), idx][: len(ctx.op.results)]

    return reference


def _avg_count(ctx, o, k: int, s: int, d: int, h, pb, pe, ceil_mode: int, include_pad: int):
    """How many window positions along one spatial dim the average divides by: those inside
    the input, or with count_include_pad those before the end of the end padding. An int
    when it does not depend on the output position `o`, else an i64 Expr."""
    if not ceil_mode and (include_pad or (_is_int(pb, 0) and _is_int(pe, 0))):
        return k
    st = o * s - ctx.dim(pb)  # first position of the window
    if include_pad:  # st >= -pad_begin: only the end can cut the window short
        return minimum(k - 1, (ctx.dim(h) + ctx.dim(pe) - 1 - st) // d) + 1
    if d == 1:
        return maximum(minimum(st + k, ctx.dim(h)) - maximum(st, 0), 0)
    lo = maximum(-(st // d), 0)  # ceil(-st / d)
    hi = minimum((ctx.dim(h) - 1 - st) // d, k - 1)
    return maximum(hi - lo + 1, 0)


def _pool_taps(ctx, mode: str, win, pb, pe) -> bool:
    """Max / average pooling of a float X as an unrolled sum (or max) of window taps over a
    padded copy (`_padded_input`, filled with -inf for max, 0 for average), like the
    depthwise conv: the output row loop then vectorises with unmasked loads, where the
    guarded reduce over the window ran as scalar code (a 3x3 stride-2 max pool 10x slower
    than onnxruntime). Returns False (nothing lowered) for other cases: an int or half
    X, MaxPool's Indices, windows of more than `_UNROLL_WINDOW` taps."""
    x = ctx.inputs[0]
    kernel, strides, ceil_mode = win["kernel"], win["strides"], win["ceil_mode"]
    if (x.dtype not in (DType.f32, DType.f64) or len(ctx.op.results) > 1
            or not all(isinstance(k, int) for k in kernel) or int(np.prod(kernel)) > _UNROLL_WINDOW):
        return False
    nd, sp, dt = x.rank - 2, x.shape[2:], x.dtype
    fill = _lowest(dt) if mode == "max" else 0.0
    paired = _pair_taps(kernel, win) and strides[-1] == 1
    if paired or ceil_mode or not all(_is_int(p, 0) for p in (*pb, *pe)):
        # with ceil_mode the last window may reach up to one stride past the end padding
        ends = [canon(pe[i] + (strides[i] if ceil_mode else 0)) for i in range(nd)]
        xs = _padded_input(ctx, x, pb, ends, extra_end=1 if paired else 0, fill=fill)
    else:
        xs = x
    zeros = [0] * nd
    nought, inf = Const(0.0, dt), Const(float("inf"), dt)
    include_pad = ctx.attr("count_include_pad", 0)
    if strides[-1] > 1:
        _pool_dense_rows(ctx, mode, win, xs, sp, pb, pe, include_pad)
        return True

    def body(n, c, *o):
        terms = []
        for tap in np.ndindex(*kernel):
            pos = _window_positions(ctx, o, [Const(int(t), DType.i64) for t in tap], strides, win["dilations"], zeros)
            terms.append(xs[(n, c, *pos)])
            if paired and tap[-1] == kernel[-1] - 1:
                # the pairing load (see `_pair_taps`), neutral whatever it reads: -inf for max, 0 for sum
                xd = xs[(n, c, *pos[:-1], pos[-1] + 1)]
                zero = select(abs(xd) < inf, xd, nought) * nought
                terms.append(zero - inf if mode == "max" else zero)
        acc = _combine_taps(mode, terms)
        if mode == "max":
            return acc
        count = 1
        for i in range(nd):
            count = count * _avg_count(ctx, o[i], kernel[i], strides[i], win["dilations"][i], sp[i], pb[i], pe[i],
                                       ceil_mode, include_pad)
        return acc / (float(count) if isinstance(count, int) else cast(count, dt))

    ctx.program.compute(ctx.out(0), body, names=["n", "c"] + [f"o{i}" for i in range(nd)])
    return True


def _combine_taps(mode: str, terms: list):
    """The max (a balanced tree, not a chain: max is exact in any order, and a chain of
    NaN-aware maxima, compare and blend each, is one long dependency) or the sum of a pool
    window's taps."""
    if mode == "max":
        while len(terms) > 1:
            terms = [maximum(terms[i], terms[i + 1]) if i + 1 < len(terms) else terms[i]
                     for i in range(0, len(terms), 2)]
        return terms[0]
    acc = terms[0]
    for t in terms[1:]:
        acc = acc + t
    return acc


def _pool_dense_rows(ctx, mode: str, win, xs, sp, pb, pe, include_pad) -> None:
    """A pool strided along its last axis as two computes: the window reduced at EVERY
    position of that axis (`T[n, c, o..., w]`, stride-1 loads: plain vector loads), then the
    output picks every s-th column (one strided load per output). Read directly with the
    stride, each of the window's taps became a gather (Zen 4: a 3x3 stride-2 max pool 3-4x
    slower than onnxruntime); here only the pick is strided. kernel/fuse.py keeps `T` a
    buffer (`_stencil`), so fusion does not put the taps back under the stride."""
    x = ctx.inputs[0]
    nd, dt = x.rank - 2, x.dtype
    kernel, strides, dil = win["kernel"], win["strides"], win["dilations"]
    outs = ctx.out(0).shape[2:]
    s = strides[-1]
    wide = canon((outs[-1] - 1) * s + 1)  # columns 0, s, ..., (Wo - 1) * s are picked
    t = ctx.temp(dt, [x.shape[0], x.shape[1], *outs[:-1], wide], "prow")
    zeros = [0] * nd
    steps = [*strides[:-1], 1]

    def window(n, c, *o):
        terms = []
        for tap in np.ndindex(*kernel):
            pos = _window_positions(ctx, o, [Const(int(k), DType.i64) for k in tap], steps, dil, zeros)
            terms.append(xs[(n, c, *pos)])
        return _combine_taps(mode, terms)

    ctx.program.compute(t, window, names=["n", "c"] + [f"o{i}" for i in range(nd - 1)] + ["w"])

    def pick(n, c, *o):
        v = t[(n, c, *o[:-1], o[-1] * s)]
        if mode == "max":
            return v
        count = 1
        for i in range(nd):
            count = count * _avg_count(ctx, o[i], kernel[i], strides[i], dil[i], sp[i], pb[i], pe[i],
                                       win["ceil_mode"], include_pad)
        return v / (float(count) if isinstance(count, int) else cast(count, dt))

    ctx.program.compute(ctx.out(0), pick, names=["n", "c"] + [f"o{i}" for i in range(nd)])


def _pool_lower(mode: str):
    def lower(ctx) -> None:
        x = ctx.inputs[0]
        nd = x.rank - 2
        win, (_, pb, pe) = _pool_geometry(ctx, x.shape[2:])
        if _pool_taps(ctx, mode, win, pb, pe):
            return
        kernel, strides, dil, ceil_mode = win["kernel"], win["strides"], win["dilations"], win["ceil_mode"]
        sp = x.shape[2:]
        kv = _window_vars(kernel)
        axes = _reduce_axes(zip(kv, kernel))
        dt = x.dtype

        def window(n, c, o, ks, fill):
            pos = _window_positions(ctx, o, ks, strides, dil, pb)
            return _guard(pad_conds(ctx, pos, sp, pb, pe, ceil_mode), x[(n, c, *pos)], fill)

        if mode == "max":
            def body(n, c, *o):
                v = window(n, c, o, kv, _lowest(dt))
                return rmax(axes, v) if axes else v
        else:
            include_pad = ctx.attr("count_include_pad", 0)

            def body(n, c, *o):
                v = window(n, c, o, kv, 0)
                acc = rsum(axes, v) if axes else v
                count = 1
                for i in range(nd):
                    count = count * _avg_count(ctx, o[i], kernel[i], strides[i], dil[i], sp[i], pb[i], pe[i],
                                               ceil_mode, include_pad)
                return acc / (float(count) if isinstance(count, int) else cast(count, dt))

        names = ["n", "c"] + [f"o{i}" for i in range(nd)]
        ctx.program.compute(ctx.out(0), body, names=names)
        if mode == "max" and len(ctx.op.results) > 1:
            _maxpool_indices(ctx, x, kernel, strides, dil, pb, pe, ceil_mode, names)

    return lower


def _maxpool_indices(ctx, x, kernel, strides, dil, pb, pe, ceil_mode, names) -> None:
    """MaxPool's Indices: the flat position in X (storage_order 1: spatial dims column-major)
    of the window's first maximum, found by one argmax over the flattened window."""
    sp = x.shape[2:]
    r = Var("r")
    size = int(np.prod(kernel))

    def body(n, c, *o):
        def positions(flat):
            return _window_positions(ctx, o, unflatten_index(flat, kernel), strides, dil, pb)

        pos = positions(r)
        v = _guard(pad_conds(ctx, pos, sp, pb, pe, ceil_mode), x[(n, c, *pos)], _lowest(x.dtype))
        best = positions(argmax(r, size, v))
        if not ctx.attr("storage_order", 0):
            return flatten_index((n, c, *best), x.shape)
        flat = (n * ctx.dim(x.shape[1]) + c) * ctx.dim(canon(sympy.prod(sp)))
        stride = Const(1, DType.i64)
        for p, h in zip(best, sp):
            flat, stride = flat + p * stride, stride * ctx.dim(h)
        return flat

    ctx.program.compute(ctx.out(1), body, names=names)


define("onnx.MaxPool", infer=_pool_infer, reference=_pool_ref("max"), kind="reduction", arity=1,
       num_results=None, verify=results_between(1, 2), math=pool, lower=_pool_lower("max"))
define("onnx.AveragePool", infer=_pool_infer, reference=_pool_ref("avg"), kind="reduction", arity=1,
       math=pool, lower=_pool_lower("avg"))



# ---- LpPool ----------------------------------------------------------------------------------------


def lp_pool(x, p: int, kernel, strides, pads_begin, out_dims, dilations):
    """(sum over the window of |x|^p)^(1/p); padding contributes zeros."""
    sp = x.shape[2:]
    nd = len(sp)
    acc = np.zeros((x.shape[0], x.shape[1], *out_dims), dtype=x.dtype)
    for k in np.ndindex(*kernel):
        pos = [np.arange(out_dims[i]) * strides[i] + k[i] * dilations[i] - pads_begin[i] for i in range(nd)]
        valid = np.ones(out_dims, dtype=bool)
        for i in range(nd):
            valid &= ((pos[i] >= 0) & (pos[i] < sp[i])).reshape([-1 if j == i else 1 for j in range(nd)])
        vals = x[(slice(None), slice(None)) + np.ix_(*[np.clip(q, 0, s - 1) for q, s in zip(pos, sp)])]
        acc = acc + np.where(valid, np.abs(vals) ** p, 0)
    return acc ** (1.0 / p)


def _lppool_ref(ctx: RefCtx, x):
    win, (outs, pb, _) = _pool_geometry(ctx, x.shape[2:])
    y = lp_pool(widen(x), ctx.attr("p", 2), win["kernel"], win["strides"], pb, outs, win["dilations"])
    return [cast_out(ctx, y)]


def _lppool_infer(ctx: InferCtx):
    if not ctx.in_types[0].dtype.is_float:
        raise ctx.error(f"LpPool needs a float input, got {ctx.in_types[0].dtype.value}")
    return _pool_infer(ctx)


def _lppool_lower(ctx) -> None:
    x = ctx.inputs[0]
    win, (_, pb, pe) = _pool_geometry(ctx, x.shape[2:])
    kernel, strides, dil, ceil_mode = win["kernel"], win["strides"], win["dilations"], win["ceil_mode"]
    p = int(ctx.attr("p", 2))
    kv = _window_vars(kernel)
    axes = _reduce_axes(zip(kv, kernel))
    y = ctx.out(0)

    def body(n, c, *o):
        pos = _window_positions(ctx, o, kv, strides, dil, pb)
        v = abs(kwiden(x[(n, c, *pos)]))
        term = v if p == 1 else v * v if p == 2 else power(v, float(p))
        term = _guard(pad_conds(ctx, pos, x.shape[2:], pb, pe, ceil_mode), term, 0.0)
        acc = rsum(axes, term) if axes else term
        out = acc if p == 1 else sqrt(acc) if p == 2 else power(acc, 1.0 / p)
        return cast(out, y.dtype)

    ctx.program.compute(y, body, names=["n", "c"] + [f"o{i}" for i in range(x.rank - 2)])


define("onnx.LpPool", infer=_lppool_infer, reference=_lppool_ref, kind="reduction", arity=1, math=lp_pool,
       lower=_lppool_lower)


# ---- MaxUnpool -------------------------------------------------------------------------------------


def _unpool_default(ctx, sp, fail) -> tuple:
    """The inverse of MaxPool's geometry: (in - 1) * stride - pad_begin - pad_end + kernel.
    The indices are flat positions in (N, C, these dims) even when output_shape is given."""
    nd = len(sp)
    kernel = list(ctx.attr("kernel_shape") or [])
    strides, pads = _ints_attr(ctx, "strides", nd, 1), _ints_attr(ctx, "pads", 2 * nd, 0)
    if len(kernel) != nd or len(strides) != nd or len(pads) != 2 * nd:
        raise fail(f"kernel_shape, strides and pads must have {nd}, {nd} and {2 * nd} values")
    return tuple(canon((sp[i] - 1) * strides[i] - pads[i] - pads[nd + i] + kernel[i]) for i in range(nd))


def _unpool_dims(ctx, x: TensorType):
    """The output spatial dims: output_shape's when given (a fresh symbol when only the run
    knows it), else the default."""
    default = _unpool_default(ctx, x.shape[2:], ctx.error)
    if len(ctx.in_types) > 2:
        known = ctx.known_ints(2)
        if known is None:
            return tuple(fresh_dim(ctx, "unpool_dim", "output_shape input", dim=2 + i)
                         for i in range(len(default)))
        if len(known) != x.rank:
            raise ctx.error(f"output_shape must have {x.rank} values, got {known}")
        return tuple(known[2:])
    return default


def _same(a, b) -> bool:
    return canon(sympy.sympify(a) - sympy.sympify(b)) == 0


def _unpool_infer(ctx: InferCtx):
    x = _spatial_input(ctx)
    ind = ctx.in_types[1]
    if ind.dtype is not DType.i64 or ind.rank != x.rank:
        raise ctx.error(f"I must be an int64 tensor shaped like X, got {ind}")
    for i, (a, b) in enumerate(zip(x.shape, ind.shape)):
        ctx.require_eq(a, b, f"I dim {i} == X dim {i}")
    return [x.with_shape((x.shape[0], x.shape[1], *_unpool_dims(ctx, x)))]


def max_unpool(x, indices, default, out_shape):
    """Scatter x to the flat positions `indices` of a zero (N, C, *default) tensor (a later
    write wins), then cut or zero-pad its spatial dims to `out_shape`."""
    full = (x.shape[0], x.shape[1], *default)
    y = np.zeros(int(np.prod(full)), x.dtype)
    y[indices.reshape(-1)] = x.reshape(-1)
    y = y.reshape(full)
    out = np.zeros(out_shape, x.dtype)
    common = tuple(slice(0, min(a, b)) for a, b in zip(full, out_shape))
    out[common] = y[common]
    return out


def _unpool_ref(ctx: RefCtx, x, ind, *rest):
    default = _unpool_default(ctx, x.shape[2:], ValueError)
    shape = [int(d) for d in np.asarray(rest[0]).reshape(-1)] if rest else [x.shape[0], x.shape[1], *default]
    return [max_unpool(x, ind, default, shape)]


def _unpool_lower(ctx) -> None:
    """Each output element searches I for its own flat position (O(|X|) per element, the last
    match winning, as a sequence of writes would): an argmax over I in reverse order."""
    x, ind = ctx.inputs[0], ctx.inputs[1]
    y = ctx.out(0)
    default = _unpool_default(ctx, x.shape[2:], ctx.unsupported)
    if any(not _same(d, e) for d, e in zip(default, y.shape[2:])):
        # the ONNX node tests place index i of the default layout at the same coordinates of
        # the bigger output; onnxruntime reads i as a flat position in output_shape itself
        raise ctx.unsupported(f"output_shape {list(y.shape[2:])} other than the default {list(default)} "
                              "(onnxruntime and the ONNX reference disagree on where the indices go)")
    total = ctx.dim(canon(sympy.prod(list(x.shape))))
    r = Var("r")
    zero = Const(0.0 if x.dtype.is_float else 0, x.dtype)

    def at(q):
        return unflatten_index(q, x.shape)

    def body(*o):
        p = flatten_index(o, (x.shape[0], x.shape[1], *default))
        hit = argmax(r, total, cast(ind[at(total - 1 - r)].eq(p), DType.i32))
        q = at(total - 1 - hit)
        return select(ind[q].eq(p), x[q], zero)

    ctx.compute(y, body)


define("onnx.MaxUnpool", infer=_unpool_infer, reference=_unpool_ref, kind="opaque", arity=(2, 3),
       math=max_unpool, lower=_unpool_lower)

def _global_infer(ctx: InferCtx):
    x = _spatial_input(ctx)
    return [x.with_shape((x.shape[0], x.shape[1]) + (1,) * (x.rank - 2))]


def _global(fn):
    return lambda ctx, x: [cast_out(ctx, fn(widen(x), axis=tuple(range(2, x.ndim)), keepdims=True))]


def _global_lower(mode: str):
    def lower(ctx) -> None:
        x = ctx.inputs[0]
        sp = x.shape[2:]
        rv = [Var(f"r{i}") for i in range(len(sp))]

        def body(*ix):
            v = x[(ix[0], ix[1], *rv)]
            if mode == "max":
                return rmax(list(zip(rv, sp)), v)
            return rsum(list(zip(rv, sp)), v) / cast(ctx.dim(canon(sympy.prod(sp))), x.dtype)

        ctx.compute(ctx.out(0), body)

    return lower


define("onnx.GlobalAveragePool", infer=_global_infer, reference=_global(np.mean), kind="reduction", arity=1,
       lower=_global_lower("avg"))
define("onnx.GlobalMaxPool", infer=_global_infer, reference=_global(np.max), kind="reduction", arity=1,
       lower=_global_lower("max"))


# the normalizations live in their own module; importing it registers them with this family
from . import norm as _norm  # noqa: E402,F401


# ---- cost (multiply-add = 2): each output element contracts a weight slice
def _conv_flops(op):
    w = op.operands[1].type
    return 2 * op.results[0].type.numel() * canon(_fold(lambda a, b: a * b, w.shape[1:], 1))


set_cost(_conv_flops, "onnx.Conv", "onnx.ConvTranspose")
