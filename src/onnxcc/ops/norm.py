"""Normalizations: BatchNormalization (inference and training form), InstanceNormalization,
LayerNormalization (optional Mean / InvStdDev outputs), RMSNormalization (opset 23),
GroupNormalization (opset 18 per-group and opset 21 per-channel scale), LpNormalization and LRN.
Registered on import (nn.py imports this module)."""

from __future__ import annotations

import numpy as np
import sympy

from ..ir import DType, TensorType, canon, identical
from ..kernel import Const, Expr, Var, broadcast_indices, cast, maximum, minimum, power, rsum, select, sqrt
from .dtypes import onnx_dtype
from .elementwise import cast_out, results_between, same_dtype, unidirectional, widen
from .registry import InferCtx, RefCtx, define
from .traits import PadRule, set_cost, set_pad


def lp_normalize(x, axis: int, p: int):
    norm = np.sum(np.abs(x), axis=axis, keepdims=True) if p == 1 else \
        np.sqrt(np.sum(x * x, axis=axis, keepdims=True))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(norm == 0, 0, x / norm)  # a zero vector stays zero


def _lp_infer(ctx: InferCtx):
    t = ctx.in_types[0]
    if ctx.attr("p", 2) not in (1, 2):
        raise ctx.error(f"p must be 1 or 2, got {ctx.attr('p')}")
    if not -t.rank <= ctx.attr("axis", -1) < t.rank:
        raise ctx.error(f"axis {ctx.attr('axis')} out of range for rank {t.rank}")
    return [t]


def _lp_ref(ctx: RefCtx, x):
    return [cast_out(ctx, lp_normalize(widen(x), ctx.attr("axis", -1), ctx.attr("p", 2)))]


# ---- lowering helpers --------------------------------------------------------------------------
#
# Normalizations over one (last) axis lower to ONE compute per result: the statistics are
# reductions inside the body that depend only on the outer vars, and the kernel codegen hoists
# them out of the row loop (kernel/rownorm.py). Instance and group norms, which reduce over
# several axes, compute their statistics into small temps first (`stats_temps`).


def _numel(ctx, dims) -> Expr:
    """The element count of `dims` as an i64 Expr."""
    return ctx.dim(canon(sympy.prod(list(dims))))


def moments(load, axes, count: Expr, eps: float, dt: DType) -> tuple[Expr, Expr]:
    """(mean, 1/sqrt(var + eps)) of `load(vars)` over the reduce box `axes` = [(var, extent)],
    in dtype `dt`, two-pass (the variance sums squared deviations from the mean). The mean
    is ONE expression object shared by both, so codegen evaluates it once."""
    n = cast(count, dt)
    mean = rsum(axes, load([v for v, _ in axes])) / n
    vaxes = [(Var(f"{v.name}v"), ext) for v, ext in axes]
    dev = load([v for v, _ in vaxes]) - mean
    var = rsum(vaxes, dev * dev) / n
    return mean, Const(1.0, dt) / sqrt(var + Const(float(eps), dt))


def inv_rms(load, axes, count: Expr, eps: float, dt: DType) -> Expr:
    """1/sqrt(mean(x^2) + eps) of `load(vars)` over the reduce box `axes`, in dtype `dt`
    (RMSNormalization and onnxruntime's SimplifiedLayerNormalization family)."""
    v = load([v for v, _ in axes])
    return Const(1.0, dt) / sqrt(rsum(axes, v * v) / cast(count, dt) + Const(float(eps), dt))


def _lp_lower(ctx) -> None:
    """Y = X * (norm == 0 ? 0 : 1/norm). Over the last axis the norm is reduced in the body
    (hoisted out of the row loop); over another axis it depends on vars inside the loop over
    that axis, so it goes to a temp (with the axis kept as 1) first: in the body it was
    recomputed for every element, 1.5x onnxruntime's time over the channels of NCHW."""
    x = ctx.inputs[0]
    axis = ctx.attr("axis", -1) % x.rank
    p = ctx.attr("p", 2)
    k = Var("k")

    def inv_norm(ix):
        v = x[(*ix[:axis], k, *ix[axis + 1:])]
        norm = rsum([(k, x.shape[axis])], abs(v)) if p == 1 else sqrt(rsum([(k, x.shape[axis])], v * v))
        return select(norm.eq(Const(0.0, x.dtype)), 0.0, 1.0 / norm)

    if axis == x.rank - 1:
        ctx.compute(ctx.out(0), lambda *ix: x[ix] * inv_norm(ix))
        return
    inv = ctx.temp(x.dtype, (*x.shape[:axis], 1, *x.shape[axis + 1:]), "lp_inv")
    ctx.compute(inv, lambda *ix: inv_norm(ix))
    ctx.compute(ctx.out(0), lambda *ix: x[ix] * inv[(*ix[:axis], Const(0, DType.i64), *ix[axis + 1:])])


define("onnx.LpNormalization", infer=_lp_infer, reference=_lp_ref, kind="reduction", arity=1,
       math=lp_normalize, lower=_lp_lower)


def _channel_params(ctx: InferCtx, first: int, what: tuple[str, ...]) -> None:
    """Check that operands first.. are 1-D of length C (x dim 1)."""
    x = ctx.in_types[0]
    c = x.shape[1] if x.rank > 1 else 1
    for name, t in zip(what, ctx.in_types[first:]):
        if t.rank != 1:
            raise ctx.error(f"{name} must be 1-D of length C, got {t}")
        ctx.require_eq(t.shape[0], c, f"{name} length vs channels (x dim 1)")


def batch_norm(x, scale, bias, mean, var, epsilon: float):
    """Inference-form BatchNormalization over channel axis 1."""
    shp = (1, -1) + (1,) * (x.ndim - 2)
    inv = 1.0 / np.sqrt(var.reshape(shp) + epsilon)
    return (x - mean.reshape(shp)) * inv * scale.reshape(shp) + bias.reshape(shp)


def batch_norm_training(x, scale, bias, mean, var, epsilon: float, momentum: float):
    """Training-form BatchNormalization: normalize with the batch statistics; returns
    (y, running_mean, running_var) with the running statistics updated by `momentum`."""
    axes = (0, *range(2, x.ndim))
    cur_mean, cur_var = x.mean(axis=axes), x.var(axis=axes)
    y = batch_norm(x, scale, bias, cur_mean, cur_var, epsilon)
    return y, mean * momentum + cur_mean * (1 - momentum), var * momentum + cur_var * (1 - momentum)


def _bn_training(op) -> bool:
    return bool(op.attrs.get("training_mode", 0)) or len(op.results) > 1


def _bn_infer(ctx: InferCtx):
    _channel_params(ctx, 1, ("scale", "b", "input_mean", "input_var"))
    if not _bn_training(ctx.op):
        return [ctx.in_types[0]]
    return [ctx.in_types[0], ctx.in_types[3], ctx.in_types[4]][: len(ctx.op.results)]


def _bn_ref(ctx: RefCtx, x, s, b, m, v):
    args = (widen(x), widen(s), widen(b), widen(m), widen(v), float(ctx.attr("epsilon", 1e-5)))
    if not _bn_training(ctx.op):
        return [cast_out(ctx, batch_norm(*args))]
    outs = batch_norm_training(*args, float(ctx.attr("momentum", 0.9)))
    return [cast_out(ctx, o, i) for i, o in enumerate(outs[: len(ctx.op.results)])]


# NOTE: kind "broadcast" describes the inference form (per-channel affine); the training form
# (training_mode = 1 or extra results) also reduces over the batch and spatial axes
def _bn_lower(ctx) -> None:
    """Inference form as one elementwise compute Y = X * a[c] + b[c]: with constant
    parameters a = scale / sqrt(var + eps) and b = bias - mean * a are folded at compile
    time; otherwise the per-channel terms are expressions the codegen hoists per channel."""
    if _bn_training(ctx.op):
        _bn_training_lower(ctx)
        return
    x, scale, bias, mean, var = ctx.inputs
    dt = x.dtype
    eps = float(ctx.attr("epsilon", 1e-5))
    params = [ctx.const_value(i) for i in range(1, 5)]
    if all(p is not None for p in params) and dt is not DType.bf16:
        s, b, m, v = (np.asarray(p, dtype=np.float64) for p in params)
        a = s / np.sqrt(v + eps)
        ka, kb = ctx.const((a).astype(dt.np), "bn_scale"), ctx.const((b - m * a).astype(dt.np), "bn_shift")
        ctx.compute(ctx.out(0), lambda *ix: x[ix] * ka[_channel(ix)] + kb[_channel(ix)])
        return

    def body(*ix):
        c = _channel(ix)
        a = cast(scale[c], dt) / sqrt(cast(var[c], dt) + Const(eps, dt))
        return (x[ix] - cast(mean[c], dt)) * a + cast(bias[c], dt)

    ctx.compute(ctx.out(0), body)


def _bn_training_lower(ctx) -> None:
    """Training form: the batch mean / variance per channel (over N and the spatial dims) go
    to two small temps, then Y and the running statistics are elementwise computes."""
    x, scale, bias, mean, var = ctx.inputs
    dt = x.dtype
    eps, momentum = float(ctx.attr("epsilon", 1e-5)), float(ctx.attr("momentum", 0.9))
    rest = [x.shape[0], *x.shape[2:]]
    rv = [Var(f"r{i}") for i in range(len(rest))]
    chans = x.shape[1] if x.rank > 1 else 1

    def load(c, vs):
        return x[(vs[0], c, *vs[1:])] if x.rank > 1 else x[(vs[0],)]

    bmean, bvar = ctx.temp(dt, (chans,), "bn_mean"), ctx.temp(dt, (chans,), "bn_var")
    count = cast(_numel(ctx, rest), dt)
    ctx.compute(bmean, lambda c: rsum(list(zip(rv, rest)), load(c, rv)) / count)

    def var_body(c):
        vs = [Var(f"{v.name}v") for v in rv]
        dev = load(c, vs) - bmean[c]
        return rsum(list(zip(vs, rest)), dev * dev) / count

    ctx.compute(bvar, var_body)

    def y_body(*ix):
        c = _channel(ix)
        return (x[ix] - bmean[c]) * (cast(scale[c], dt) / sqrt(bvar[c] + Const(eps, dt))) + cast(bias[c], dt)

    ctx.compute(ctx.out(0), y_body)
    for k, (run, cur) in enumerate(((mean, bmean), (var, bvar))[: len(ctx.op.results) - 1]):
        out = ctx.out(k + 1)
        ctx.compute(out, lambda c, run=run, cur=cur, odt=out.dtype: cast(
            cast(run[c], dt) * Const(momentum, dt) + cur[c] * Const(1.0 - momentum, dt), odt))


def _channel(ix) -> tuple:
    """The index of a per-channel (axis 1) parameter."""
    return (ix[1] if len(ix) > 1 else Const(0, DType.i64),)


define("onnx.BatchNormalization", infer=_bn_infer, reference=_bn_ref, kind="broadcast", arity=5,
       num_results=None, verify=results_between(1, 3), math=batch_norm, lower=_bn_lower)


def instance_norm(x, scale, bias, epsilon: float):
    axes = tuple(range(2, x.ndim))
    mean = np.mean(x, axis=axes, keepdims=True)
    var = np.mean((x - mean) ** 2, axis=axes, keepdims=True)
    shp = (1, -1) + (1,) * (x.ndim - 2)
    return (x - mean) / np.sqrt(var + epsilon) * scale.reshape(shp) + bias.reshape(shp)


def _in_infer(ctx: InferCtx):
    if ctx.in_types[0].rank < 3:
        raise ctx.error(f"x must be (N, C, spatial...) with rank >= 3, got {ctx.in_types[0]}")
    same_dtype(ctx)
    _channel_params(ctx, 1, ("scale", "b"))
    return [ctx.in_types[0]]


def stats_temps(ctx, outer, load, axes, count: Expr, eps: float, dt: DType):
    """Temps mean[outer...] and inv_std[outer...] (`moments` of `load(outer_ix, vars)` over
    `axes`), two small computes. Instance and group norms reduce over several axes (the
    spatial dims, a group's channels): written inside the per-element compute, those sums
    were hoisted out of the innermost loop only, so each ran once per row (per row and
    channel for groups) instead of once per (n, c): a 64x64 InstanceNormalization ran 31x
    onnxruntime's time, a 128x128 one 106x."""
    mean_t, inv_t = ctx.temp(dt, tuple(outer), "norm_mean"), ctx.temp(dt, tuple(outer), "norm_inv")
    n = cast(count, dt)
    ctx.compute(mean_t, lambda *o: rsum(axes, load(o, [v for v, _ in axes])) / n)

    def inv_body(*o):
        vaxes = [(Var(f"{v.name}v"), ext) for v, ext in axes]
        dev = load(o, [v for v, _ in vaxes]) - mean_t[o]
        return Const(1.0, dt) / sqrt(rsum(vaxes, dev * dev) / n + Const(float(eps), dt))

    ctx.compute(inv_t, inv_body)
    return mean_t, inv_t


def _in_lower(ctx) -> None:
    """Y[n, c, s...] = (X - mean[n, c]) * inv_std[n, c] * scale[c] + B[c]: the statistics
    over the spatial dims in two [N, C] temps first (`stats_temps`), then one elementwise compute."""
    x, scale, bias = ctx.inputs
    sp = x.shape[2:]
    rv = [Var(f"r{i}") for i in range(len(sp))]
    mean, inv = stats_temps(ctx, x.shape[:2], lambda o, vs: x[(o[0], o[1], *vs)], list(zip(rv, sp)),
                            _numel(ctx, sp), float(ctx.attr("epsilon", 1e-5)), x.dtype)

    def body(*ix):
        n, c = ix[0], ix[1]
        return (x[ix] - mean[n, c]) * inv[n, c] * scale[c] + bias[c]

    ctx.compute(ctx.out(0), body)


define("onnx.InstanceNormalization", infer=_in_infer, kind="reduction", arity=3, math=instance_norm,
       lower=_in_lower,
       reference=lambda ctx, x, s, b: [cast_out(ctx, instance_norm(widen(x), widen(s), widen(b),
                                                                   float(ctx.attr("epsilon", 1e-5))))])


def layer_norm(x, scale, bias, axis: int, epsilon: float, stash: np.dtype):
    """Returns (y, mean, inv_std_dev); statistics computed in the stash dtype."""
    xs = x.astype(stash)
    axes = tuple(range(axis, x.ndim))
    mean = np.mean(xs, axis=axes, keepdims=True)
    inv = 1.0 / np.sqrt(np.mean((xs - mean) ** 2, axis=axes, keepdims=True) + epsilon)
    y = (xs - mean) * inv * scale.astype(stash)
    if bias is not None:
        y = y + bias.astype(stash)
    return y, mean, inv


def _ln_axis(rank: int, axis: int, fail) -> int:
    if not -rank <= axis < rank:
        raise fail(f"axis {axis} out of range for rank {rank}")
    return axis % rank


def _ln_infer(ctx: InferCtx):
    x = ctx.in_types[0]
    dt = same_dtype(ctx)
    axis = _ln_axis(x.rank, ctx.attr("axis", -1), ctx.error)
    for name, t in zip(("scale", "b"), ctx.in_types[1:]):
        unidirectional(ctx, x.shape[axis:], t.shape, name)
    try:
        stash = onnx_dtype(ctx.attr("stash_type", 1))
    except ValueError as e:
        raise ctx.error(f"attribute 'stash_type': {e}") from None
    stat = TensorType(stash, x.shape[:axis] + (1,) * (x.rank - axis))
    return [x.with_dtype(dt), stat, stat][: len(ctx.op.results)]


def _ln_ref(ctx: RefCtx, x, scale, bias=None):
    axis = ctx.attr("axis", -1) % x.ndim
    stash = onnx_dtype(ctx.attr("stash_type", 1)).np
    outs = layer_norm(x, scale, bias, axis, float(ctx.attr("epsilon", 1e-5)), stash)
    return [cast_out(ctx, o, i) for i, o in enumerate(outs[: len(ctx.op.results)])]


def _ln_lower(ctx) -> None:
    """One compute per result. Y = (X - mean) * inv_std * scale + B in the stash dtype, the
    mean / variance reductions over dims axis.. depending only on the leading vars (hoisted
    out of the normalized loops); Mean and InvStdDev recompute the same reductions."""
    x, scale = ctx.inputs[0], ctx.inputs[1]
    bias = ctx.inputs[2] if len(ctx.inputs) > 2 else None
    axis = ctx.attr("axis", -1) % x.rank
    st = onnx_dtype(ctx.attr("stash_type", 1))
    norm = x.shape[axis:]
    rv = [Var(f"r{i}") for i in range(len(norm))]
    eps = float(ctx.attr("epsilon", 1e-5))

    def stats(ix):
        def load(vs):
            return cast(x[(*ix[:axis], *vs)], st)

        return moments(load, list(zip(rv, norm)), _numel(ctx, norm), eps, st)

    def y_body(*ix):
        mean, inv = stats(ix)
        inner = ix[axis:]
        y = (cast(x[ix], st) - mean) * inv * cast(scale[broadcast_indices(inner, scale.shape)], st)
        if bias is not None:
            y = y + cast(bias[broadcast_indices(inner, bias.shape)], st)
        return cast(y, x.dtype)

    ctx.compute(ctx.out(0), y_body)
    for k in range(1, len(ctx.op.results)):
        ctx.compute(ctx.out(k), lambda *ix, k=k: stats(ix)[k - 1])


define("onnx.LayerNormalization", infer=_ln_infer, reference=_ln_ref, kind="reduction", arity=(2, 3),
       num_results=None, verify=results_between(1, 3), math=layer_norm, lower=_ln_lower)


# ---- RMSNormalization (opset 23) -------------------------------------------------------------------


def rms_norm(x, scale, axis: int, epsilon: float, stash: np.dtype):
    """Returns (y, inv_rms): y = x / sqrt(mean(x^2 over dims axis..) + eps) * scale, with the
    statistic computed in the stash dtype."""
    xs = x.astype(stash)
    inv = 1.0 / np.sqrt(np.mean(xs * xs, axis=tuple(range(axis, x.ndim)), keepdims=True) + epsilon)
    return xs * inv * scale.astype(stash), inv


def norm_stash(ctx: InferCtx) -> DType:
    try:
        return onnx_dtype(ctx.attr("stash_type", 1))
    except ValueError as e:
        raise ctx.error(f"attribute 'stash_type': {e}") from None


def _rms_infer(ctx: InferCtx):
    x = ctx.in_types[0]
    dt = same_dtype(ctx)
    axis = _ln_axis(x.rank, ctx.attr("axis", -1), ctx.error)
    unidirectional(ctx, x.shape[axis:], ctx.in_types[1].shape, "scale")
    norm_stash(ctx)
    return [x.with_dtype(dt)]


def _rms_ref(ctx: RefCtx, x, scale):
    y, _ = rms_norm(x, scale, ctx.attr("axis", -1) % x.ndim, float(ctx.attr("epsilon", 1e-5)),
                    onnx_dtype(ctx.attr("stash_type", 1)).np)
    return [cast_out(ctx, y)]


def rms_lower(ctx, x, scale, axis: int, eps: float, st: DType, y, inv=None) -> None:
    """Y = X * inv_rms * scale in the stash dtype, one compute; the sum of squares over dims
    axis.. depends only on the leading vars, so the codegen hoists it per row. `inv`, when
    given, receives the statistic (shape x.shape[:axis] + 1s)."""
    norm = x.shape[axis:]
    rv = [Var(f"r{i}") for i in range(len(norm))]

    def stat(ix):
        return inv_rms(lambda vs: cast(x[(*ix[:axis], *vs)], st), list(zip(rv, norm)), _numel(ctx, norm), eps,
                       st)

    def y_body(*ix):
        s = cast(scale[broadcast_indices(ix[axis:], scale.shape)], st)
        return cast(cast(x[ix], st) * stat(ix) * s, y.dtype)

    ctx.compute(y, y_body)
    if inv is not None:
        ctx.compute(inv, lambda *ix: cast(stat(ix), inv.dtype))


def _rms_lower(ctx) -> None:
    x, scale = ctx.inputs
    rms_lower(ctx, x, scale, ctx.attr("axis", -1) % x.rank, float(ctx.attr("epsilon", 1e-5)),
              onnx_dtype(ctx.attr("stash_type", 1)), ctx.out(0))


define("onnx.RMSNormalization", infer=_rms_infer, reference=_rms_ref, kind="reduction", arity=2,
       math=rms_norm, lower=_rms_lower)


def group_norm(x, scale, bias, groups: int, epsilon: float, stash: np.dtype):
    """GroupNormalization; scale/bias per channel (opset 21) or per group (opset 18)."""
    n, c = x.shape[:2]
    xs = x.astype(stash).reshape(n, groups, -1)
    mean = xs.mean(axis=2, keepdims=True)
    var = ((xs - mean) ** 2).mean(axis=2, keepdims=True)
    y = ((xs - mean) / np.sqrt(var + epsilon)).reshape(x.shape)
    if scale.size != c:  # one value per group: repeat over the group's channels
        scale, bias = np.repeat(scale, c // groups), np.repeat(bias, c // groups)
    shp = (1, c) + (1,) * (x.ndim - 2)
    return y * scale.astype(stash).reshape(shp) + bias.astype(stash).reshape(shp)


def _gn_infer(ctx: InferCtx):
    x = ctx.in_types[0]
    if x.rank < 2:
        raise ctx.error(f"x must be (N, C, ...), got {x}")
    same_dtype(ctx)
    g, c = ctx.attr("num_groups"), x.shape[1]
    if not isinstance(g, int) or g < 1:
        raise ctx.error(f"attribute 'num_groups' must be a positive int, got {g!r}")
    if isinstance(c, int) and c % g:
        raise ctx.error(f"channels {c} not divisible by num_groups {g}")
    if not isinstance(c, int):
        ctx.require(sympy.Eq(sympy.Mod(c, g), 0), f"channels divisible by num_groups {g}")
    for name, t in zip(("scale", "bias"), ctx.in_types[1:]):
        if t.rank != 1:
            raise ctx.error(f"{name} must be 1-D, got {t}")
        if ctx.symbols.prove_eq(t.shape[0], g) is not True:
            ctx.require_eq(t.shape[0], c, f"{name} length vs channels (x dim 1)")
    return [x]


def _gn_lower(ctx) -> None:
    """Y[n, c, s...] = (X - mean[n, g]) * inv_std[n, g] * scale[c or g] + bias[c or g] with
    g = c // (C / G): the statistics over (the group's channels, spatial dims) in two [N, G]
    temps first (`stats_temps`), then one elementwise compute. Scale and bias hold one value per channel
    (opset 21) or per group (opset 18)."""
    x, scale, bias = ctx.inputs
    groups = ctx.attr("num_groups")
    st = onnx_dtype(ctx.attr("stash_type", 1))
    c_dim, sp = x.shape[1], x.shape[2:]
    cg = canon(sympy.sympify(c_dim) / groups)
    per_channel = _proved_eq(scale.shape[0], c_dim)
    rv = [Var("rc")] + [Var(f"r{i}") for i in range(len(sp))]
    axes = list(zip(rv, (cg, *sp)))
    eps = float(ctx.attr("epsilon", 1e-5))

    def load(o, vs):
        n, g = o
        return cast(x[(n, g * ctx.dim(cg) + vs[0], *vs[1:])], st)

    mean, inv = stats_temps(ctx, (x.shape[0], groups), load, axes, _numel(ctx, (cg, *sp)), eps, st)

    def body(*ix):
        n, c = ix[0], ix[1]
        g = c if _proved_eq(cg, 1) else c // ctx.dim(cg)
        p = c if per_channel else g
        y = (cast(x[ix], st) - mean[n, g]) * inv[n, g] * cast(scale[p], st) + cast(bias[p], st)
        return cast(y, x.dtype)

    ctx.compute(ctx.out(0), body)


def _proved_eq(a, b) -> bool:
    return identical(a, b)


define("onnx.GroupNormalization", infer=_gn_infer, kind="reduction", arity=3, math=group_norm,
       lower=_gn_lower,
       reference=lambda ctx, x, s, b: [cast_out(ctx, group_norm(
           widen(x), s, b, ctx.attr("num_groups"), float(ctx.attr("epsilon", 1e-5)),
           onnx_dtype(ctx.attr("stash_type", 1)).np))])


def lrn(x, size: int, alpha: float, beta: float, bias: float):
    """Local response normalization across channels (axis 1)."""
    c = x.shape[1]
    sq = x * x
    lo_off, hi_off = (size - 1) // 2, -(-(size - 1) // 2)
    acc = np.zeros_like(x)
    for ch in range(c):
        lo, hi = max(0, ch - lo_off), min(c - 1, ch + hi_off)
        acc[:, ch] = sq[:, lo:hi + 1].sum(axis=1)
    with np.errstate(invalid="ignore", over="ignore"):  # inf / inf is NaN, as IEEE says
        return x / (bias + alpha / size * acc) ** beta


def _lrn_infer(ctx: InferCtx):
    if not isinstance(ctx.attr("size"), int):
        raise ctx.error("attribute 'size' is required")
    if ctx.in_types[0].rank < 2:
        raise ctx.error(f"x must be (N, C, ...), got {ctx.in_types[0]}")
    return [ctx.in_types[0]]


def _lrn_ref(ctx: RefCtx, x):
    y = lrn(widen(x), ctx.attr("size"), float(ctx.attr("alpha", 1e-4)), float(ctx.attr("beta", 0.75)),
            float(ctx.attr("bias", 1.0)))
    return [cast_out(ctx, y)]


def _lrn_lower(ctx) -> None:
    """Y = X / (bias + alpha / size * sum(X[n, j, ...]^2))^beta over the channels j in
    [max(0, c - floor((size-1)/2)), min(C-1, c + ceil((size-1)/2))]: the window is clipped by
    the reduce extent itself (it may depend on c), so no bounds checks are needed."""
    x = ctx.inputs[0]
    size = ctx.attr("size")
    alpha, beta, bias = (float(ctx.attr(n, d)) for n, d in (("alpha", 1e-4), ("beta", 0.75), ("bias", 1.0)))
    lo_off, hi_off = (size - 1) // 2, -(-(size - 1) // 2)
    j = Var("j")
    dt = x.dtype
    channels = ctx.dim(x.shape[1])

    def window_sum(ix):
        c = ix[1]
        if size > MAX_UNROLLED_WINDOW:
            lo = maximum(c - lo_off, 0)
            hi = minimum(c + hi_off, channels - 1)
            v = x[(ix[0], lo + j, *ix[2:])]
            return rsum([(j, hi - lo + 1)], v * v)
        # the taps written out: a reduction over the channels would keep the loop over the
        # last axis scalar (schedule.py: a reduction per element of the inner axis); each tap
        # reads a clamped channel (always in bounds) and is masked off past the ends
        acc = None
        for d in range(-lo_off, hi_off + 1):
            v = x[(ix[0], minimum(maximum(c + d, 0), channels - 1), *ix[2:])]
            t = v * v
            if d:
                inside = (c + d >= 0) if d < 0 else (c + d < channels)
                t = select(inside, t, Const(0.0, dt))
            acc = t if acc is None else acc + t
        return acc

    def body(*ix):
        b = Const(bias, dt) + Const(alpha / size, dt) * window_sum(ix)
        if beta == 0.75:  # b^-0.75 = r * sqrt(r) with r = 1 / sqrt(b): no log and exp
            r = Const(1.0, dt) / sqrt(b)
            return x[ix] * (r * sqrt(r))
        return x[ix] / power(b, Const(beta, dt))

    ctx.compute(ctx.out(0), body)


#: LRN windows up to this many channels are summed tap by tap (vectorised along the last axis)
MAX_UNROLLED_WINDOW = 16


define("onnx.LRN", infer=_lrn_infer, reference=_lrn_ref, kind="opaque", arity=1, math=lrn, lower=_lrn_lower)


# ---- bucketing
set_pad(PadRule("layernorm"), "onnx.LayerNormalization")  # rewritten to use the true count
set_pad(PadRule("batchnorm"), "onnx.BatchNormalization")


# ---- cost: mean, variance, normalise, scale and shift
set_cost(lambda op: 8 * op.results[0].type.numel(), "onnx.LayerNormalization")
