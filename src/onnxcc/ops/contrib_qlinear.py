"""com.microsoft QOperator-format ops that onnxruntime's quantizer writes beside QLinearConv,
QLinearMatMul and QLinearAdd / QLinearMul (quant.py): QLinearConcat, QLinearSigmoid,
QLinearLeakyRelu, QLinearWhere, QLinearSoftmax, QLinearGlobalAveragePool, QLinearReduceMean
and QGemm.

Every scale and zero point here is one element (onnxruntime refuses others), except QGemm's
b_scale / b_zero_point, which may have one per output column. Arithmetic follows onnxruntime's
CPU kernels:
- the lookup-table ops (Concat, Sigmoid, LeakyRelu, Where) compute, per element,
  `quantize(f(dequantize(x)))` with `dequantize(x) = f32(x - zp) * scale` and `quantize(v) =
  clamp(round_half_even(v / y_scale) + y_zp)` in f32: onnxruntime builds its 256-entry table
  with the same f32 operations, so Concat, LeakyRelu and Where match it exactly; Sigmoid
  uses MLAS's logistic approximation for the table and may differ by one step at a rounding
  boundary;
- QLinearSoftmax: `quantize(exp(x_scale * (x - max)) / sum)`; onnxruntime reads exp from a
  table of f32 values built in double and multiplies by 1 / y_scale, so an output may differ
  by one step;
- the averages (GlobalAveragePool, ReduceMean) sum `x - zp` exactly in i32 and requantize
  with `x_scale / (y_scale * count)`, as MLAS does;
- QGemm accumulates `(a - a_zp) * (b - b_zp)` exactly in i32, adds the i32 C there, then
  requantizes with `alpha * a_scale * b_scale / y_scale` (or scales to f32 without y_scale).
"""

from __future__ import annotations

import numpy as np

from .. import kernel as K
from ..ir import DType, TensorType, canon
from ..kernel import Const, Var, broadcast_indices, cast, rmax, rsum, select
from .int8_gemm import vnni_matmul
from .int_gemm import per_element
from .matmul import matmul_compute
from .nn import pool, window_geometry
from .quant import quantize_expr, quantize_np, requant_expr, requant_np
from .registry import InferCtx, RefCtx, define, onnx_inputs

_INT8 = (DType.u8, DType.i8)
MS = "com.microsoft."


def _args(ctx, items, n: int) -> list:
    """Operands (or arrays) at their ONNX input positions, None for absent ones, padded to n."""
    out = onnx_inputs(ctx.op, list(items))
    return out + [None] * (n - len(out))


def _check_int8(ctx, t: TensorType, what: str) -> None:
    if t.dtype not in _INT8:
        raise ctx.error(f"{what} must be u8 or i8, got {t.dtype.value}")


def _check_scalar(ctx, t: TensorType | None, what: str) -> None:
    """A per-tensor scale / zero point: one element (a dim that is not 1 is refused)."""
    if t is not None and any(not (isinstance(d, int) and d == 1) for d in t.shape):
        raise ctx.error(f"{what} must have one element, got {t}")


def _scalars(ctx, ts, names: dict[int, str]) -> None:
    for i, what in names.items():
        _check_scalar(ctx, ts[i], what)


# ---- per-element dequantize / quantize (numpy and kernel twins) ------------------------------


def _s(p) -> np.float32:
    return np.float32(np.asarray(p, np.float32).reshape(-1)[0])


def _deq_np(x, scale, zp) -> np.ndarray:
    d = x.astype(np.int32) - (0 if zp is None else np.int32(np.asarray(zp).reshape(-1)[0]))
    return d.astype(np.float32) * _s(scale)


def _q_np(v, scale, zp, dt: DType) -> np.ndarray:
    return quantize_np(v, _s(scale), None if zp is None else np.asarray(zp).reshape(()), dt)


def _f32(e: K.Expr) -> K.Expr:
    return cast(e, DType.f32)


def _deq_expr(x: K.Expr, scale, zp) -> K.Expr:
    d = cast(x, DType.i32)
    if zp is not None:
        d = d - cast(per_element(zp, 0), DType.i32)
    return _f32(d) * _f32(per_element(scale, 0))


def _q_expr(v: K.Expr, scale, zp, dt: DType) -> K.Expr:
    return quantize_expr(v, _f32(per_element(scale, 0)), None if zp is None else per_element(zp, 0), dt)


# ---- QLinearSigmoid / QLinearLeakyRelu: y = quantize(f(dequantize(x))) -------------------------


def _unary_infer(ctx: InferCtx):
    x, xs, xz, ys, yz = _args(ctx, ctx.in_types, 5)
    _check_int8(ctx, x, "X")
    _scalars(ctx, [xs, xz, ys, yz], {0: "X_scale", 1: "X_zero_point", 2: "Y_scale", 3: "Y_zero_point"})
    for z, what in ((xz, "X_zero_point"), (yz, "Y_zero_point")):
        if z is not None and z.dtype is not x.dtype:
            raise ctx.error(f"{what} must have X's type {x.dtype.value}, got {z.dtype.value}")
    return [x]


def _unary_op(name: str, fn_np, fn_k) -> None:
    def reference(ctx: RefCtx, *args):
        x, xs, xz, ys, yz = _args(ctx, args, 5)
        v = fn_np(ctx, _deq_np(x, xs, xz)).astype(np.float32)
        return [_q_np(v, ys, yz, DType.from_np(x.dtype))]

    def lower(ctx) -> None:
        x, xs, xz, ys, yz = _args(ctx, ctx.inputs, 5)
        y = ctx.out(0)
        ctx.compute(y, lambda *ix: _q_expr(fn_k(ctx, _deq_expr(x[ix], xs, xz)), ys, yz, y.dtype))

    define(MS + name, infer=_unary_infer, reference=reference, lower=lower, kind="elementwise", arity=(4, 5))


def _leaky_np(ctx, v):
    return np.where(v >= 0, v, v * np.float32(ctx.attr("alpha", 0.01)))


def _leaky_k(ctx, v):
    return select(v >= Const(0.0, DType.f32), v, v * Const(float(np.float32(ctx.attr("alpha", 0.01))), DType.f32))


_unary_op("QLinearSigmoid", lambda ctx, v: 1 / (1 + np.exp(-v)), lambda ctx, v: K.sigmoid(v))
_unary_op("QLinearLeakyRelu", _leaky_np, _leaky_k)


# ---- QLinearConcat -----------------------------------------------------------------------------


def _concat_parts(items: list) -> list[tuple]:
    """(X, X_scale, X_zero_point) triples after Y_scale, Y_zero_point."""
    return [tuple(items[i:i + 3]) for i in range(2, len(items), 3)]


def _concat_infer(ctx: InferCtx):
    ts = list(ctx.in_types)
    if len(ts) < 5 or (len(ts) - 2) % 3:
        raise ctx.error(f"expected Y_scale, Y_zero_point and (X, X_scale, X_zero_point) triples, got {len(ts)} "
                        "inputs")
    yz = ts[1]
    _scalars(ctx, ts, {0: "Y_scale", 1: "Y_zero_point"})
    _check_int8(ctx, yz, "Y_zero_point")
    parts = _concat_parts(ts)
    rank = parts[0][0].rank
    axis = int(ctx.attr("axis", 0) or 0)
    if not -rank <= axis < rank:
        raise ctx.error(f"axis {axis} out of range for rank {rank}")
    axis %= rank
    out = list(parts[0][0].shape)
    for i, (x, xs, xz) in enumerate(parts):
        if x.dtype is not yz.dtype:
            raise ctx.error(f"input {i} has type {x.dtype.value}, expected Y_zero_point's {yz.dtype.value}")
        _check_scalar(ctx, xs, f"input {i}'s scale")
        _check_scalar(ctx, xz, f"input {i}'s zero point")
        if x.rank != rank:
            raise ctx.error(f"input {i} has rank {x.rank}, expected {rank}")
        for j in range(rank):
            if j != axis and i:
                out[j] = ctx.require_eq(out[j], x.shape[j], f"concat input {i} dim {j}")
    out[axis] = canon(sum((x.shape[axis] for x, _, _ in parts), 0))
    return [TensorType(yz.dtype, tuple(out))]


def _concat_ref(ctx: RefCtx, *args):
    ys, yz = args[0], args[1]
    dt = DType.from_np(yz.dtype)
    parts = [_q_np(_deq_np(x, xs, xz), ys, yz, dt) for x, xs, xz in _concat_parts(list(args))]
    return [np.concatenate(parts, axis=int(ctx.attr("axis", 0) or 0) % parts[0].ndim)]


def _same_quant(ctx, a: tuple, b: tuple) -> bool:
    """whether two (scale, zero point) pairs are the same constants: quantizing a dequantized
    x then gives x back (f32(x - z) * s / s rounds to x - z, |x - z| <= 255, for a normal s),
    so a concat input quantized like the output is copied (squeezenet's QDQ concats: the
    1x1 expand's half; the requantization was most of the concat's time)"""
    vals = []
    for v in (*a, *b):
        data = None if v is None else ctx.const_value(ctx.inputs.index(v))
        if v is not None and data is None:
            return False
        vals.append(np.zeros(1) if data is None else np.asarray(data).reshape(-1))
    s0, z0, s1, z1 = vals
    if s0.size != 1 or s1.size != 1 or np.float32(s0[0]) != np.float32(s1[0]) or z0.size != 1 or z1.size != 1:
        return False
    return bool(abs(np.float32(s0[0])) >= np.finfo(np.float32).tiny and int(z0[0]) == int(z1[0]))


def _concat_lower(ctx) -> None:
    ys, yz = ctx.inputs[0], ctx.inputs[1]
    y = ctx.out(0)
    axis = int(ctx.attr("axis", 0) or 0) % y.rank
    parts = [p for p in _concat_parts(list(ctx.inputs)) if not (isinstance(p[0].shape[axis], int)
                                                                  and p[0].shape[axis] == 0)]
    offsets = [0]
    for x, _, _ in parts:
        offsets.append(canon(offsets[-1] + x.shape[axis]))

    def one(ix, n):
        x, xs, xz = parts[n]
        at = ix[:axis] + (ix[axis] - K.dim_to_expr(offsets[n]),) + ix[axis + 1:]
        if _same_quant(ctx, (xs, xz), (ys, yz)):
            return x[at]
        return _q_expr(_deq_expr(x[at], xs, xz), ys, yz, y.dtype)

    def pick(ix, lo, hi):  # parts lo..hi-1 as a balanced tree of selects
        if hi - lo == 1:
            return one(ix, lo)
        mid = (lo + hi) // 2
        return select(ix[axis] < K.dim_to_expr(offsets[mid]), pick(ix, lo, mid), pick(ix, mid, hi))

    ctx.compute(y, lambda *ix: pick(ix, 0, len(parts)))


define(MS + "QLinearConcat", infer=_concat_infer, reference=_concat_ref, lower=_concat_lower, kind="injective",
       arity=(5, None))


# ---- QLinearWhere ------------------------------------------------------------------------------


def _where_infer(ctx: InferCtx):
    c, x, y, zz = (ctx.in_types[i] for i in (0, 1, 4, 8))
    if c.dtype is not DType.bool:
        raise ctx.error(f"condition must be bool, got {c.dtype.value}")
    for t, what in ((x, "X"), (y, "Y"), (zz, "z_zero_point")):
        _check_int8(ctx, t, what)
        if t.dtype is not x.dtype:
            raise ctx.error(f"{what} must have X's type {x.dtype.value}, got {t.dtype.value}")
    _scalars(ctx, ctx.in_types, {2: "x_scale", 3: "x_zero_point", 5: "y_scale", 6: "y_zero_point",
                                 7: "z_scale", 8: "z_zero_point"})
    return [TensorType(x.dtype, ctx.broadcast(ctx.broadcast(c.shape, x.shape), y.shape))]


def _where_ref(ctx: RefCtx, c, x, xs, xz, y, ys, yz, zs, zz):
    dt = DType.from_np(x.dtype)
    qx = _q_np(_deq_np(x, xs, xz), zs, zz, dt)
    qy = _q_np(_deq_np(y, ys, yz), zs, zz, dt)
    return [np.where(c, qx, qy)]


def _where_lower(ctx) -> None:
    c, x, xs, xz, y, ys, yz, zs, zz = ctx.inputs
    out = ctx.out(0)

    def body(*ix):
        vx = _q_expr(_deq_expr(x[broadcast_indices(ix, x.shape)], xs, xz), zs, zz, out.dtype)
        vy = _q_expr(_deq_expr(y[broadcast_indices(ix, y.shape)], ys, yz), zs, zz, out.dtype)
        return select(c[broadcast_indices(ix, c.shape)], vx, vy)

    ctx.compute(out, body)


define(MS + "QLinearWhere", infer=_where_infer, reference=_where_ref, lower=_where_lower, kind="elementwise",
       arity=9, numpy_broadcast=True)


# ---- QLinearSoftmax ----------------------------------------------------------------------------


def _softmax_axes(ctx, rank: int) -> list[int]:
    """The reduced axes: `axis` alone (opset >= 13), or every axis from `axis` on (the rows of
    the flattened 2-D view older Softmax used)."""
    axis = int(ctx.attr("axis", -1))
    if not -rank <= axis < max(rank, 1):
        raise ctx.error(f"axis {axis} out of range for rank {rank}")
    axis %= max(rank, 1)
    return [axis] if int(ctx.attr("opset", 1)) >= 13 else list(range(axis, rank))


def _softmax_infer(ctx: InferCtx):
    x, xs, xz, ys, yz = _args(ctx, ctx.in_types, 5)
    _check_int8(ctx, x, "X")
    _scalars(ctx, [xs, xz, ys, yz], {0: "X_scale", 1: "x_zero_point", 2: "y_scale", 3: "y_zero_point"})
    if yz is not None and yz.dtype is not x.dtype:
        raise ctx.error(f"y_zero_point must have X's type {x.dtype.value}, got {yz.dtype.value}")
    _softmax_axes(ctx, x.rank)
    return [x]


def _softmax_ref(ctx: RefCtx, *args):
    x, xs, _, ys, yz = _args(ctx, args, 5)
    axes = tuple(_softmax_axes(ctx, x.ndim))
    d = x.astype(np.int32)
    e = np.exp((d - d.max(axis=axes, keepdims=True)).astype(np.float32) * _s(xs))
    return [_q_np(e / e.sum(axis=axes, keepdims=True, dtype=np.float32), ys, yz, DType.from_np(x.dtype))]


def _softmax_lower(ctx) -> None:
    """One compute; the row max and sum are sub-reductions of it (the fuser hoists them out of
    the innermost loop when the reduced axes are innermost, as for Softmax)."""
    x, xs, _, ys, yz = _args(ctx, ctx.inputs, 5)
    y = ctx.out(0)
    axes = _softmax_axes(ctx, x.rank)
    i32 = DType.i32

    def at(o, vs):
        idx = list(o)
        for a, v in zip(axes, vs, strict=True):
            idx[a] = v
        return tuple(idx)

    def body(*o):
        mv = [Var(f"m{a}") for a in axes]
        m = rmax([(v, x.shape[a]) for v, a in zip(mv, axes)], cast(x[at(o, mv)], i32))
        sv = [Var(f"s{a}") for a in axes]
        scale = _f32(per_element(xs, 0))
        total = rsum([(v, x.shape[a]) for v, a in zip(sv, axes)],
                     K.exp(_f32(cast(x[at(o, sv)], i32) - m) * scale))
        e = K.exp(_f32(cast(x[o], i32) - m) * scale)
        return _q_expr(e / total, ys, yz, y.dtype)

    ctx.compute(y, body)


define(MS + "QLinearSoftmax", infer=_softmax_infer, reference=_softmax_ref, lower=_softmax_lower,
       kind="reduction", arity=(4, 5))


# ---- averages: QLinearGlobalAveragePool, QLinearReduceMean -------------------------------------


def _mean_np(x, xs, xz, ys, yz, axes: tuple, keepdims: bool) -> np.ndarray:
    n = int(np.prod([x.shape[a] for a in axes]))
    acc = x.astype(np.int64).sum(axis=axes, keepdims=keepdims)
    acc = acc - (0 if xz is None else n * np.int64(np.asarray(xz).reshape(-1)[0]))
    mult = _s(xs) / (_s(ys) * np.float32(n))
    return requant_np(acc.astype(np.int32), np.asarray(mult), 0 if yz is None else yz, DType.from_np(x.dtype))


def _mean_lower(ctx, x, xs, xz, ys, yz, axes: list[int], keepdims: bool) -> None:
    y = ctx.out(0)
    i32 = DType.i32
    n = canon(_prod([x.shape[a] for a in axes]))
    nk = K.dim_to_expr(n)
    kept = [a for a in range(x.rank) if a not in axes]

    def body(*o):
        rv = [Var(f"r{a}") for a in axes]
        idx: list = [None] * x.rank
        outer = list(o) if not keepdims else [o[a] for a in kept]
        for a, v in zip(kept, outer, strict=True):
            idx[a] = v
        for a, v in zip(axes, rv, strict=True):
            idx[a] = v
        acc = rsum([(v, x.shape[a]) for v, a in zip(rv, axes)], cast(x[tuple(idx)], i32))
        if xz is not None:
            acc = acc - cast(per_element(xz, 0), i32) * cast(nk, i32)
        mult = _f32(per_element(xs, 0)) / (_f32(per_element(ys, 0)) * _f32(nk))
        zp = per_element(yz, 0) if yz is not None else Const(0, DType.i32)
        return requant_expr(acc, mult, zp, y.dtype)

    ctx.compute(y, body)


def _prod(dims):
    out = 1
    for d in dims:
        out = out * d
    return out


def _gap_axes(ctx, rank: int) -> list[int]:
    if rank < 3:
        raise ctx.error(f"X must be (N, C, spatial...), got rank {rank}")
    return list(range(1, rank - 1)) if ctx.attr("channels_last", 0) else list(range(2, rank))


def _gap_infer(ctx: InferCtx):
    x = ctx.in_types[0]
    _check_int8(ctx, x, "X")
    _scalars(ctx, ctx.in_types, {1: "x_scale", 2: "x_zero_point", 3: "y_scale", 4: "y_zero_point"})
    axes = _gap_axes(ctx, x.rank)
    return [TensorType(x.dtype, tuple(1 if i in axes else d for i, d in enumerate(x.shape)))]


define(MS + "QLinearGlobalAveragePool", infer=_gap_infer, kind="reduction", arity=5,
       reference=lambda ctx, x, xs, xz, ys, yz: [_mean_np(x, xs, xz, ys, yz, tuple(_gap_axes(ctx, x.ndim)), True)],
       lower=lambda ctx: _mean_lower(ctx, *ctx.inputs[:5], _gap_axes(ctx, ctx.inputs[0].rank), True))


def _rm_axes(ctx, rank: int) -> list[int]:
    axes = ctx.attr("axes", None)
    if axes is None:
        return list(range(rank))
    out = []
    for a in axes:
        if not -rank <= a < rank:
            raise ctx.error(f"axis {a} out of range for rank {rank}")
        out.append(a % rank)
    return sorted(set(out))


def _rm_infer(ctx: InferCtx):
    x, xs, xz, ys, yz = _args(ctx, ctx.in_types, 5)
    _check_int8(ctx, x, "data")
    _scalars(ctx, [xs, xz, ys, yz], {0: "data_scale", 1: "data_zero_point", 2: "reduced_scale",
                                     3: "reduced_zero_point"})
    axes = _rm_axes(ctx, x.rank)
    if ctx.attr("keepdims", 1):
        return [TensorType(x.dtype, tuple(1 if i in axes else d for i, d in enumerate(x.shape)))]
    return [TensorType(x.dtype, tuple(d for i, d in enumerate(x.shape) if i not in axes))]


def _rm_ref(ctx: RefCtx, *args):
    x, xs, xz, ys, yz = _args(ctx, args, 5)
    return [_mean_np(x, xs, xz, ys, yz, tuple(_rm_axes(ctx, x.ndim)), bool(ctx.attr("keepdims", 1)))]


def _rm_lower(ctx) -> None:
    x, xs, xz, ys, yz = _args(ctx, ctx.inputs, 5)
    _mean_lower(ctx, x, xs, xz, ys, yz, _rm_axes(ctx, x.rank), bool(ctx.attr("keepdims", 1)))


define(MS + "QLinearReduceMean", infer=_rm_infer, reference=_rm_ref, lower=_rm_lower, kind="reduction",
       arity=(4, 5))


# ---- QLinearAveragePool ------------------------------------------------------------------------


def _ap_geometry(ctx, x_shape: tuple):
    """(spatial axes, kernel, strides, (outs, pads begin, pads end)); no dilations in this op."""
    nd = len(x_shape) - 2
    sp = list(range(1, nd + 1)) if ctx.attr("channels_last", 0) else list(range(2, nd + 2))
    kernel = list(ctx.attr("kernel_shape") or [])
    strides = list(ctx.attr("strides") or [1] * nd)
    pads = list(ctx.attr("pads") or [0] * (2 * nd))
    if len(kernel) != nd or len(strides) != nd or len(pads) != 2 * nd:
        raise ctx.error(f"kernel_shape, strides and pads need {nd}, {nd} and {2 * nd} values for {nd} spatial dims")
    geo = window_geometry([x_shape[a] for a in sp], kernel, strides, [1] * nd, pads,
                          ctx.attr("auto_pad", "NOTSET"), ctx.attr("ceil_mode", 0))
    return sp, kernel, strides, geo


def _ap_infer(ctx: InferCtx):
    x, xs, xz, ys, yz = _args(ctx, ctx.in_types, 5)
    _check_int8(ctx, x, "X")
    _scalars(ctx, [xs, xz, ys, yz], {0: "x_scale", 1: "x_zero_point", 2: "y_scale", 3: "y_zero_point"})
    if x.rank < 3:
        raise ctx.error(f"X must have spatial dims, got {x}")
    sp, _, _, (outs, _, _) = _ap_geometry(ctx, x.shape)
    shape = list(x.shape)
    for a, o in zip(sp, outs, strict=True):
        shape[a] = o
    return [TensorType(x.dtype, tuple(shape))]


def _ap_ref(ctx: RefCtx, *args):
    """onnxruntime's kernel: dequantize, average in f32, quantize."""
    x, xs, xz, ys, yz = _args(ctx, args, 5)
    last = bool(ctx.attr("channels_last", 0))
    sp, kernel, strides, (outs, pb, pe) = _ap_geometry(ctx, x.shape)
    d = _deq_np(np.moveaxis(x, -1, 1) if last else x, xs, xz)
    avg, _ = pool(d, "avg", kernel, strides, pb, outs, [1] * len(sp), int(ctx.attr("count_include_pad", 0) or 0), pe)
    y = _q_np(avg.astype(np.float32), ys, yz, DType.from_np(x.dtype))
    return [np.ascontiguousarray(np.moveaxis(y, 1, -1)) if last else y]


def _ap_lower(ctx) -> None:
    x, xs, xz, ys, yz = _args(ctx, ctx.inputs, 5)
    y = ctx.out(0)
    sp, kernel, strides, (_, pb, pe) = _ap_geometry(ctx, x.shape)
    include_pad = bool(ctx.attr("count_include_pad", 0))
    kv = [Var(f"k{i}") for i in range(len(sp))]
    i64 = DType.i64

    def body(*ix):
        starts = [ix[a] * s - ctx.dim(b) for a, s, b in zip(sp, strides, pb, strict=True)]
        pos = [st + k for st, k in zip(starts, kv, strict=True)]
        idx = list(ix)
        inside = None
        count = None
        for a, p, st, kern, e in zip(sp, pos, starts, kernel, pe, strict=True):
            idx[a] = p
            h = ctx.dim(x.shape[a])
            c = (p >= 0) & (p < h)
            inside = c if inside is None else inside & c
            # onnxruntime's divisor: the window cut to the input (or, with count_include_pad,
            # to the input and its end padding)
            if include_pad:
                n = K.minimum(st + kern, h + ctx.dim(e)) - st
            else:
                n = K.maximum(K.minimum(st + kern, h) - K.maximum(st, Const(0, i64)), Const(0, i64))
            count = n if count is None else count * n
        assert inside is not None and count is not None  # rank >= 3: one spatial dim at least
        v = select(inside, _deq_expr(x[tuple(idx)], xs, xz), Const(0.0, DType.f32))
        total = rsum([(k_, k) for k_, k in zip(kv, kernel, strict=True)], v)
        return _q_expr(total / _f32(count), ys, yz, y.dtype)

    ctx.compute(y, body)


define(MS + "QLinearAveragePool", infer=_ap_infer, reference=_ap_ref, lower=_ap_lower, kind="reduction",
       arity=(4, 5))


# ---- QGemm -------------------------------------------------------------------------------------


def _qgemm_mk(ctx, a_shape, b_shape):
    """(M, K, K of B, N) from the transposition attributes."""
    m, k = (a_shape[1], a_shape[0]) if ctx.attr("transA", 0) else tuple(a_shape)
    kb, n = (b_shape[1], b_shape[0]) if ctx.attr("transB", 0) else tuple(b_shape)
    return m, k, kb, n


def _qgemm_infer(ctx: InferCtx):
    a, as_, az, b, bs, bz, c, ys, yz = _args(ctx, ctx.in_types, 9)
    _check_int8(ctx, a, "A")
    _check_int8(ctx, b, "B")
    if a.rank != 2 or b.rank != 2:
        raise ctx.error(f"A and B must be 2-D, got {a} and {b}")
    m, k, kb, n = _qgemm_mk(ctx, a.shape, b.shape)
    ctx.require_eq(k, kb, "A's K vs B's K")
    _scalars(ctx, [as_, az, ys, yz], {0: "a_scale", 1: "a_zero_point", 2: "y_scale", 3: "y_zero_point"})
    for t, what in ((bs, "b_scale"), (bz, "b_zero_point")):
        if t.numel() != 1 and (t.rank != 1 or not isinstance(t.shape[0], int)):
            raise ctx.error(f"{what} must have one element or one per column, got {t}")
        if t.numel() != 1:
            ctx.require_eq(t.shape[0], n, f"{what} length vs N")
    if c is not None:
        if c.dtype is not DType.i32:
            raise ctx.error(f"C must be i32, got {c.dtype.value}")
        ctx.broadcast((m, n), c.shape)
    if ys is None:
        return [TensorType(DType.f32, (m, n))]
    return [TensorType(yz.dtype if yz is not None else a.dtype, (m, n))]


def _qgemm_ref(ctx: RefCtx, *args):
    a, as_, az, b, bs, bz, c, ys, yz = _args(ctx, args, 9)
    if ctx.attr("transA", 0):
        a = a.T
    if ctx.attr("transB", 0):
        b = b.T
    bzv = np.asarray(bz, np.int64).reshape(-1)
    acc = (a.astype(np.int64) - np.int64(np.asarray(az).reshape(-1)[0])) @ (b.astype(np.int64) - bzv)
    if c is not None:
        acc = acc + c.astype(np.int64)
    acc = acc.astype(np.int32)
    scale = np.float32(ctx.attr("alpha", 1.0)) * _s(as_) * np.asarray(bs, np.float32).reshape(-1)
    if ys is None:
        return [acc.astype(np.float32) * scale]
    return [requant_np(acc, scale / _s(ys), 0 if yz is None else yz, ctx.out_type().dtype)]


def _qgemm_lower(ctx) -> None:
    a, as_, az, b, bs, bz, c, ys, yz = _args(ctx, ctx.inputs, 9)
    y = ctx.out(0)
    i32 = DType.i32
    ta, tb = ctx.attr("transA", 0), ctx.attr("transB", 0)
    m, k, _, n = _qgemm_mk(ctx, a.shape, b.shape)

    def load_a(idx):
        v = cast(a[(idx[1], idx[0]) if ta else idx], i32)
        return v - cast(per_element(az, 0), i32)

    def load_b(idx):  # idx = (k, n); transB reads B as stored (N, K), contiguous along k
        v = cast(b[(idx[1], idx[0]) if tb else idx], i32)
        return v - cast(per_element(bz, idx[1]), i32)

    acc = ctx.temp(i32, (m, n), "acc")
    # constant B on the VNNI GEMM (int8_gemm.py), the same exact i32 sums; the epilogue below
    if ta or not vnni_matmul(ctx, acc, a, az, b, bz, trans_b=bool(tb)):
        matmul_compute(ctx, acc, (m, k), (k, n), load_a, load_b)
    alpha = Const(float(np.float32(ctx.attr("alpha", 1.0))), DType.f32)

    def body(i, j):
        v = acc[(i, j)]
        if c is not None:
            v = v + c[broadcast_indices((i, j), c.shape)]
        scale = alpha * _f32(per_element(as_, 0)) * _f32(per_element(bs, j))
        if ys is None:
            return _f32(v) * scale
        zp = per_element(yz, 0) if yz is not None else Const(0, i32)
        return requant_expr(v, scale / _f32(per_element(ys, 0)), zp, y.dtype)

    ctx.compute(y, body)


define(MS + "QGemm", infer=_qgemm_infer, reference=_qgemm_ref, lower=_qgemm_lower, kind="matmul", arity=(6, 9))

