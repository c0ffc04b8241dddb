"""Reductions: ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSum/LogSumExp/SumSquare, ArgMax/ArgMin,
Softmax/LogSoftmax/Hardmax (opset 13 semantics: one axis), CumSum and CumProd.

Reduce axes come from the second operand when present (ReduceSum from opset 13, the others
from 18) and from the `axes` attribute otherwise. Axes only the run knows (a graph input)
still work: the result rank follows from keepdims and the axes' length, and each dim that
may or may not be reduced becomes a fresh data-dependent symbol.
Sum/Prod/Max/Min also propagate values, so `Shape -> ReduceProd` gives a symbolic count.

Lowering: each reduction is one compute whose body reduces over the reduced axes
(`REDUCE_KERNEL`, the kernel twins of `REDUCE_MATH`, read a `Reduction`); Softmax,
LogSoftmax and Hardmax are one fused compute each (the row max / sum are sub-reductions
the code generator hoists out of the loop over the axis); CumSum / CumProd reduce over a prefix
(or suffix) whose extent depends on the output index.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import reduce as _fold

import numpy as np
import sympy

from .. import kernel as K
from ..ir import DType, TensorType, canon
from ..kernel import Expr, Var
from .elementwise import cast_out, kfloat, kwiden, widen
from .registry import InferCtx, RefCtx, define, get_opdef
from .shape import fresh_dim
from .traits import PadRule, set_cost, set_pad

# ---- axes ----------------------------------------------------------------------------------------


def normalize_axes(axes, rank: int, fail: Callable[[str], Exception]) -> tuple[int, ...]:
    """Axes in [-rank, rank) -> sorted non-negative axes; `fail(msg)` builds the error."""
    out = []
    for a in axes:
        a = int(a)
        if not -rank <= a < rank:
            raise fail(f"axis {a} out of range for rank {rank}")
        a %= rank
        if a in out:
            raise fail(f"axis {a} repeated in axes {list(axes)}")
        out.append(a)
    return tuple(sorted(out))


def reduce_axes(axes, rank: int, noop_with_empty_axes: int, fail) -> tuple[int, ...]:
    """The axes to reduce. Empty axes with noop_with_empty_axes set reduce over no axis,
    which still applies the op's elementwise part (ReduceSumSquare squares, ReduceLogSum logs)."""
    axes = [] if axes is None else list(axes)
    if not axes:
        return () if noop_with_empty_axes else tuple(range(rank))
    return normalize_axes(axes, rank, fail)


def _axes_infer(ctx: InferCtx) -> tuple[int, ...]:
    rank = ctx.in_types[0].rank
    if len(ctx.in_types) > 1:
        axes = ctx.known_ints(1)
        if axes is None:
            raise ctx.error("axes must be known at compile time, got a run-time value")
    else:
        axes = ctx.attr("axes")
    return reduce_axes(axes, rank, ctx.attr("noop_with_empty_axes", 0), ctx.error)


def _axes_ref(ctx: RefCtx, x, args) -> tuple[int, ...]:
    axes = [int(a) for a in args[0].reshape(-1)] if args else ctx.attr("axes")
    return reduce_axes(axes, x.ndim, ctx.attr("noop_with_empty_axes", 0), ValueError)


def reduced_shape(shape: tuple, axes: tuple[int, ...], keepdims: int) -> tuple:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


# ---- the math ------------------------------------------------------------------------------------


def _extreme(dtype: np.dtype, high: bool):
    """The identity of max (high=False) or min (high=True): what an empty reduction gives."""
    if dtype == np.bool_:
        return high
    if dtype.kind == "f":
        return np.inf if high else -np.inf
    info = np.iinfo(dtype)
    return info.max if high else info.min


def _max(x, axis, keepdims):
    return np.max(x, axis=axis, keepdims=keepdims, initial=_extreme(x.dtype, False))


def _min(x, axis, keepdims):
    return np.min(x, axis=axis, keepdims=keepdims, initial=_extreme(x.dtype, True))


def _logsumexp(x, axis, keepdims):
    m = _max(x, axis, True)
    m = np.where(np.isfinite(m), m, 0)
    y = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return y if keepdims else np.squeeze(y, axis=axis)


def _mean(x, axis, keepdims):
    """np.mean, except that the mean of an empty set is 0 (onnxruntime's answer), not nan."""
    n = np.prod([x.shape[a] for a in (range(x.ndim) if axis is None else np.atleast_1d(axis))], dtype=np.int64)
    s = np.sum(x, axis=axis, keepdims=keepdims)
    return (s / max(int(n), 1)).astype(s.dtype) if n == 0 else np.mean(x, axis=axis, keepdims=keepdims)


REDUCE_MATH: dict[str, Callable] = {
    "ReduceSum": lambda x, axis, k: np.sum(x, axis=axis, keepdims=k),
    "ReduceMean": lambda x, axis, k: _mean(x, axis, k),
    "ReduceMax": _max,
    "ReduceMin": _min,
    "ReduceProd": lambda x, axis, k: np.prod(x, axis=axis, keepdims=k),
    "ReduceL1": lambda x, axis, k: np.sum(np.abs(x), axis=axis, keepdims=k),
    "ReduceL2": lambda x, axis, k: np.sqrt(np.sum(x * x, axis=axis, keepdims=k)),
    "ReduceLogSum": lambda x, axis, k: np.log(np.sum(x, axis=axis, keepdims=k)),
    "ReduceLogSumExp": _logsumexp,
    "ReduceSumSquare": lambda x, axis, k: np.sum(x * x, axis=axis, keepdims=k),
}



class Reduction:
    """What a reduce kernel twin sees: the input at one output index, over the reduced axes.

    `over(fn, op, tag)` is `op` over the reduced axes of `fn(x)` (x: the widened input at
    the reduce vars, named `<tag><axis>` so nested reductions never share a var); with no
    axis to reduce (noop_with_empty_axes) it is `fn(x)` itself. `count` is the number of
    elements reduced (an i64 expression)."""

    def __init__(self, x: K.Buffer, axes: tuple[int, ...], keepdims: int, out_vars, run_time: frozenset = frozenset()):
        self.x, self.axes = x, axes
        kept = [a for a in range(x.rank) if a not in axes]
        self._index = {a: out_vars[a] for a in kept} if keepdims else dict(zip(kept, out_vars))
        count = canon(_fold(lambda a, b: a * b, [x.shape[a] for a in axes], 1))
        self.count: Expr = K.dim_to_expr(count)
        #: the count may be 0 at run time (it has a run-time symbol, e.g. NonZero's count)
        self.may_be_empty = any(str(s) in run_time for s in getattr(count, "free_symbols", ()))

    def over(self, fn: Callable, op: str = "sum", tag: str = "r") -> Expr:
        vs = {a: Var(f"{tag}{a}") for a in self.axes}
        idx = tuple(self._index[a] if a in self._index else vs[a] for a in range(self.x.rank))
        body = fn(kwiden(self.x[idx]))
        if not vs:
            return body
        return K.reduce(op, [(vs[a], self.x.shape[a]) for a in self.axes], body)

    def sum(self, fn: Callable = lambda x: x) -> Expr:
        return self.over(fn, "sum")

    def mean(self, fn: Callable = lambda x: x) -> Expr:
        s = kfloat(self.sum(fn))
        # an empty set (a run-time count of 0) has mean 0, as onnxruntime gives, not 0/0
        count = K.maximum(self.count, 1) if self.may_be_empty else self.count
        return s / K.cast(count, s.dtype)


def _finite_or_zero(m: Expr) -> Expr:
    return K.select(K.unary("isinf", m) | K.unary("isnan", m), K.cast(0, m.dtype), m)


def _k_logsumexp(r: Reduction) -> Expr:
    m = _finite_or_zero(r.over(kfloat, "max", tag="m"))
    return K.log(r.over(lambda x: K.exp(kfloat(x) - m), "sum", tag="s")) + m


#: kernel twins of REDUCE_MATH; integer inputs of the float math (L2, LogSum...) compute in f64
REDUCE_KERNEL: dict[str, Callable[[Reduction], Expr]] = {
    "ReduceSum": lambda r: r.sum(),
    "ReduceMean": lambda r: r.mean(),
    "ReduceMax": lambda r: r.over(lambda x: x, "max"),
    "ReduceMin": lambda r: r.over(lambda x: x, "min"),
    "ReduceProd": lambda r: r.over(lambda x: x, "prod"),
    "ReduceL1": lambda r: r.sum(abs),
    "ReduceL2": lambda r: K.sqrt(kfloat(r.sum(lambda x: x * x))),
    "ReduceLogSum": lambda r: K.log(kfloat(r.sum())),
    "ReduceLogSumExp": _k_logsumexp,
    "ReduceSumSquare": lambda r: r.sum(lambda x: x * x),
}

#: value rules: how to combine two elements (integer shape arithmetic)
_REDUCE_VALUE = {"ReduceSum": lambda a, b: a + b, "ReduceProd": lambda a, b: a * b,
                 "ReduceMax": sympy.Max, "ReduceMin": sympy.Min}


def reduce_values(arr: np.ndarray, axes: tuple[int, ...], keepdims: int, combine) -> np.ndarray | None:
    """Reduce an object array of Dims over `axes` with a binary `combine`."""
    n = arr.ndim - len(axes)
    moved = np.moveaxis(arr, axes, range(n, arr.ndim))
    lead = moved.shape[:n]
    flat = moved.reshape(lead + (-1,))
    if flat.shape[-1] == 0:
        return None
    out = np.empty(lead, dtype=object)
    for idx in np.ndindex(lead):
        out[idx] = canon(_fold(combine, list(flat[idx])))
    return out.reshape(reduced_shape(arr.shape, axes, keepdims)) if keepdims else out


def _runtime_axes(ctx: InferCtx) -> bool:
    return len(ctx.in_types) > 1 and ctx.known_ints(1) is None


def _runtime_axes_shape(ctx: InferCtx) -> tuple:
    """The result shape when only the run knows the axes (their count is static)."""
    t, at = ctx.in_types[0], ctx.in_types[1]
    if at.rank != 1:
        raise ctx.error(f"axes must be 1-D, got {at}")
    n, keep = at.shape[0], ctx.attr("keepdims", 1)
    if isinstance(n, int) and n == 0:
        axes = reduce_axes([], t.rank, ctx.attr("noop_with_empty_axes", 0), ctx.error)
        return reduced_shape(t.shape, axes, keep)
    why = "reduced or kept as the run-time axes say"
    if keep:
        return tuple(d if isinstance(d, int) and d == 1 else fresh_dim(ctx, "reduced", f"dim {i} {why}", 0, i)
                     for i, d in enumerate(t.shape))
    if not isinstance(n, int) or n > t.rank:
        raise ctx.error(f"keepdims = 0 needs a static count of at most {t.rank} axes, got {at}")
    return tuple(fresh_dim(ctx, "reduced", f"dim {i} of the result: {why}", 0, i) for i in range(t.rank - n))


def _axes_lower(ctx) -> tuple[int, ...]:
    rank = ctx.inputs[0].rank
    if len(ctx.inputs) > 1:
        axes = ctx.const_value(1)
        if axes is None and canon(ctx.inputs[1].numel()) == 0:
            axes = []
        elif axes is None:
            known = ctx.known_value(1)
            if known is None or not all(isinstance(canon(a), int) for a in known.reshape(-1)):
                raise ctx.unsupported("reduce axes known only at run time")
            axes = [canon(a) for a in known.reshape(-1)]
        axes = [int(a) for a in np.asarray(axes).reshape(-1)]
    else:
        axes = ctx.attr("axes")
    return reduce_axes(axes, rank, ctx.attr("noop_with_empty_axes", 0), ctx.unsupported)


def _reduce_op(name: str) -> None:
    math = REDUCE_MATH[name]
    kernel = REDUCE_KERNEL[name]

    def infer(ctx: InferCtx):
        t = ctx.in_types[0]
        if _runtime_axes(ctx):
            return [t.with_shape(_runtime_axes_shape(ctx))]
        return [t.with_shape(reduced_shape(t.shape, _axes_infer(ctx), ctx.attr("keepdims", 1)))]

    def reference(ctx: RefCtx, x, *args):
        axes = _axes_ref(ctx, x, args)
        return [cast_out(ctx, math(widen(x), axes, bool(ctx.attr("keepdims", 1))))]

    def value(ctx: InferCtx):
        v = ctx.known(0)
        if v is None or _runtime_axes(ctx):
            return None
        axes = _axes_infer(ctx)
        arr = np.asarray(v, dtype=object)
        return [reduce_values(arr, axes, ctx.attr("keepdims", 1), _REDUCE_VALUE[name])]

    def lower(ctx) -> None:
        x, y = ctx.inputs[0], ctx.out(0)
        axes, keep = _axes_lower(ctx), ctx.attr("keepdims", 1)
        late = frozenset(ctx.program.late_dims)
        ctx.compute(y, lambda *o: K.cast(kernel(Reduction(x, axes, keep, o, late)), y.dtype))

    define(f"onnx.{name}", infer=infer, reference=reference, value=value if name in _REDUCE_VALUE else None,
           lower=lower, kind="reduction", arity=(1, 2), math=math, kernel=kernel)


for _name in REDUCE_MATH:
    _reduce_op(_name)


# ---- ArgMax / ArgMin -----------------------------------------------------------------------------


def arg_reduce(x, axis: int, keepdims: bool, select_last: bool, find: Callable) -> np.ndarray:
    """ArgMax/ArgMin: the first (or last) index of the extreme value along `axis`."""
    if select_last:
        idx = x.shape[axis] - 1 - find(np.flip(x, axis), axis=axis)
    else:
        idx = find(x, axis=axis)
    idx = idx.astype(np.int64)
    return np.expand_dims(idx, axis) if keepdims else idx


def _along(x: K.Buffer, o, axis: int, at) -> Expr:
    """x at the output index `o` (same rank as x) with position `at` on `axis`."""
    return x[tuple(o[:axis]) + (at,) + tuple(o[axis + 1:])]


def k_arg_reduce(x: K.Buffer, o, axis: int, keepdims: bool, select_last: bool, op: str) -> Expr:
    """Kernel twin of arg_reduce at output index `o`; `op` is "argmax" or "argmin"."""
    o = list(o)
    if not keepdims:
        o.insert(axis, K.Const(0, DType.i64))
    k, n = Var("k"), K.dim_to_expr(x.shape[axis])
    if select_last:  # the last extreme = the first one scanning backwards
        return n - 1 - K.reduce(op, [(k, n)], kwiden(_along(x, o, axis, n - 1 - k)))
    return K.reduce(op, [(k, n)], kwiden(_along(x, o, axis, k)))


def _arg_op(name: str, find: Callable) -> None:
    def infer(ctx: InferCtx):
        t = ctx.in_types[0]
        axis = normalize_axes([ctx.attr("axis", 0)], t.rank, ctx.error)
        return [TensorType(DType.i64, reduced_shape(t.shape, axis, ctx.attr("keepdims", 1)))]

    def reference(ctx: RefCtx, x):
        axis = int(ctx.attr("axis", 0)) % x.ndim
        keep, last = bool(ctx.attr("keepdims", 1)), bool(ctx.attr("select_last_index", 0))
        return [arg_reduce(widen(x), axis, keep, last, find)]

    def lower(ctx) -> None:
        x, y = ctx.inputs[0], ctx.out(0)
        axis = int(ctx.attr("axis", 0)) % x.rank
        keep, last = bool(ctx.attr("keepdims", 1)), bool(ctx.attr("select_last_index", 0))
        n = x.shape[axis]
        if {str(s) for s in getattr(n, "free_symbols", ())} & ctx.program.late_dims:
            # a run-time count may be 0: no index to give (onnxruntime fails too), so the kernel checks
            ctx.compute(y, lambda *o: K.check(K.dim_to_expr(n) >= 1, k_arg_reduce(x, o, axis, keep, last,
                                                                                   name.lower()), K.ERR_ASSERT))
            return
        ctx.compute(y, lambda *o: k_arg_reduce(x, o, axis, keep, last, name.lower()))

    define(f"onnx.{name}", infer=infer, reference=reference, lower=lower, kind="reduction", arity=1,
           math=find)


_arg_op("ArgMax", np.argmax)
_arg_op("ArgMin", np.argmin)


# ---- Softmax family (opset 13: along one axis) ---------------------------------------------------


def softmax(x, axis: int):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def log_softmax(x, axis: int):
    s = x - np.max(x, axis=axis, keepdims=True)
    return s - np.log(np.sum(np.exp(s), axis=axis, keepdims=True))


def hardmax(x, axis: int):
    idx = np.expand_dims(np.argmax(x, axis=axis), axis)
    y = np.zeros_like(x)
    np.put_along_axis(y, idx, 1, axis=axis)
    return y


def _row(x: K.Buffer, o, axis: int, tag: str) -> tuple[Var, Expr, Expr]:
    """A reduce var over `axis`, its extent, and the widened input at it."""
    v = Var(tag)
    return v, K.dim_to_expr(x.shape[axis]), kwiden(_along(x, o, axis, v))


def _inline(fn: Callable, hint: str) -> Callable:
    """Row statistics as sub-reductions of the consuming expression (the fused form)."""
    return fn


def k_softmax(x: K.Buffer, o, axis: int, stat: Callable = _inline) -> Expr:
    """Kernel twin of softmax at output index `o`. `stat(fn, hint)` turns a per-row
    statistic `fn(o)` into what the body reads (inline, or a load of a staged temp)."""

    def row_max(o):
        c, n, xc = _row(x, o, axis, "c")
        return K.rmax([(c, n)], xc)

    m = stat(row_max, "rowmax")

    def row_sum(o):
        d, n, xd = _row(x, o, axis, "d")
        return K.rsum([(d, n)], K.exp(xd - m(o)))

    return K.exp(kwiden(x[o]) - m(o)) / stat(row_sum, "rowsum")(o)


def k_log_softmax(x: K.Buffer, o, axis: int, stat: Callable = _inline) -> Expr:
    def row_max(o):
        c, n, xc = _row(x, o, axis, "c")
        return K.rmax([(c, n)], xc)

    m = stat(row_max, "rowmax")

    def row_log_sum(o):
        d, n, xd = _row(x, o, axis, "d")
        return K.log(K.rsum([(d, n)], K.exp(xd - m(o))))

    return (kwiden(x[o]) - m(o)) - stat(row_log_sum, "rowlogsum")(o)


def k_hardmax(x: K.Buffer, o, axis: int, stat: Callable = _inline) -> Expr:
    """Whether `o` is the first max of its row (a bool: the lowering casts it to 0 / 1)."""

    def row_argmax(o):
        c, n, xc = _row(x, o, axis, "c")
        return K.argmax(c, n, xc)

    return o[axis].eq(stat(row_argmax, "rowargmax")(o))


def _staged(ctx, x: K.Buffer, axis: int) -> Callable:
    """Row statistics written to temps (shape: x without `axis`), one compute each."""
    rest = x.shape[:axis] + x.shape[axis + 1:]

    def stat(fn: Callable, hint: str) -> Callable:
        vs = [Var(f"i{k}") for k in range(len(rest))]
        body = fn(tuple(vs[:axis]) + (K.Const(0, DType.i64),) + tuple(vs[axis:]))
        t = ctx.temp(body.dtype, rest, hint)
        ctx.program.compute(t, lambda *ix: body, names=[v.name for v in vs])
        return lambda o: t[tuple(o[:axis]) + tuple(o[axis + 1:])]

    return stat


def _axis_op(name: str, math: Callable, kernel: Callable, kind: str = "reduction") -> None:
    def infer(ctx: InferCtx):
        t = ctx.in_types[0]
        normalize_axes([ctx.attr("axis", -1)], t.rank, ctx.error)
        return [t]

    def reference(ctx: RefCtx, x):
        return [cast_out(ctx, math(widen(x), int(ctx.attr("axis", -1)) % max(x.ndim, 1)))]

    def lower(ctx) -> None:
        """One fused compute when the axis is the innermost (its row statistics then run
        once per row, hoisted out of the loop over the axis); otherwise the statistics go
        to temps first, so they are not recomputed for every element of the row."""
        x, y = ctx.inputs[0], ctx.out(0)
        axis = int(ctx.attr("axis", -1)) % x.rank
        innermost = all(isinstance(d, int) and d == 1 for d in x.shape[axis + 1:])
        stat = _inline if innermost else _staged(ctx, x, axis)
        ctx.compute(y, lambda *o: K.cast(kernel(x, o, axis, stat), y.dtype))

    define(f"onnx.{name}", infer=infer, reference=reference, lower=lower, kind=kind, arity=1, math=math,
           kernel=kernel)


_axis_op("Softmax", softmax, k_softmax)
_axis_op("LogSoftmax", log_softmax, k_log_softmax)
_axis_op("Hardmax", hardmax, k_hardmax)


# ---- CumSum / CumProd ----------------------------------------------------------------------------


def cumulative(x, axis: int, exclusive: bool = False, reverse: bool = False, op: str = "sum"):
    """numpy CumSum (op "sum") / CumProd (op "prod"); exclusive starts from the identity."""
    if reverse:
        x = np.flip(x, axis)
    y = (np.cumsum if op == "sum" else np.cumprod)(x, axis=axis, dtype=x.dtype)
    if exclusive:
        y = np.roll(y, 1, axis=axis)
        first = [slice(None)] * x.ndim
        first[axis] = slice(0, 1)
        y[tuple(first)] = 0 if op == "sum" else 1
    return np.flip(y, axis) if reverse else y


def cumsum(x, axis: int, exclusive: bool = False, reverse: bool = False):
    return cumulative(x, axis, exclusive, reverse, "sum")


def cumprod(x, axis: int, exclusive: bool = False, reverse: bool = False):
    return cumulative(x, axis, exclusive, reverse, "prod")


def k_cumulative(x: K.Buffer, o, axis: int, exclusive: bool = False, reverse: bool = False,
                 op: str = "sum") -> Expr:
    """Kernel twin of `cumulative` at output index `o`: `op` over a prefix (suffix if
    reverse) of the axis whose extent depends on the position `i` on the axis (an empty
    range gives the op's identity)."""
    i, n, k = o[axis], K.dim_to_expr(x.shape[axis]), Var("k")
    if reverse:  # positions i (i + 1 if exclusive) .. n - 1
        first = i + 1 if exclusive else i
        return K.reduce(op, [(k, n - first)], kwiden(_along(x, o, axis, first + k)))
    return K.reduce(op, [(k, i if exclusive else i + 1)], kwiden(_along(x, o, axis, k)))


def k_cumsum(x: K.Buffer, o, axis: int, exclusive: bool = False, reverse: bool = False) -> Expr:
    return k_cumulative(x, o, axis, exclusive, reverse, "sum")


def k_cumprod(x: K.Buffer, o, axis: int, exclusive: bool = False, reverse: bool = False) -> Expr:
    return k_cumulative(x, o, axis, exclusive, reverse, "prod")


def _cum_lower(op: str) -> Callable:
    def lower(ctx) -> None:
        """The axis is usually a constant; one only the run knows picks among the per-axis
        bodies with a select (out of range: the kernel fails with ERR_INDEX)."""
        x, y = ctx.inputs[0], ctx.out(0)
        excl, rev = bool(ctx.attr("exclusive", 0)), bool(ctx.attr("reverse", 0))
        axis = ctx.const_value(1)
        if axis is None:
            known = ctx.known_value(1)
            if known is not None and isinstance(canon(known.reshape(-1)[0]), int):
                axis = canon(known.reshape(-1)[0])
        if axis is not None:
            ax = int(np.asarray(axis).reshape(-1)[0]) % x.rank
            ctx.compute(y, lambda *o: K.cast(k_cumulative(x, o, ax, excl, rev, op), y.dtype))
            return
        a = ctx.inputs[1]

        def body(*o):
            ax = K.wrap_index(a[(0,) * a.rank], x.rank)
            e = k_cumulative(x, o, x.rank - 1, excl, rev, op)
            for d in range(x.rank - 2, -1, -1):
                e = K.select(ax.eq(d), k_cumulative(x, o, d, excl, rev, op), e)
            return K.cast(e, y.dtype)

        ctx.compute(y, body)

    return lower


def _cumsum_infer(ctx: InferCtx):
    t, a = ctx.in_types
    if a.rank > 1 or (a.rank == 1 and a.shape[0] != 1):
        raise ctx.error(f"axis must be a scalar or a 1-element tensor, got {a}")
    axis = ctx.known_ints(1)
    if axis is not None:
        normalize_axes(axis, t.rank, ctx.error)
    return [t]


def _cum_ref(op: str) -> Callable:
    def reference(ctx: RefCtx, x, axis):
        ax = int(np.asarray(axis).reshape(-1)[0]) % x.ndim
        return [cast_out(ctx, cumulative(widen(x), ax, bool(ctx.attr("exclusive", 0)),
                                         bool(ctx.attr("reverse", 0)), op))]

    return reference


define("onnx.CumSum", infer=_cumsum_infer, reference=_cum_ref("sum"), lower=_cum_lower("sum"), kind="opaque",
       arity=2, math=cumsum, kernel=k_cumsum)
define("onnx.CumProd", infer=_cumsum_infer, reference=_cum_ref("prod"), lower=_cum_lower("prod"),
       kind="opaque", arity=2, math=cumprod, kernel=k_cumprod)


# ---- bucketing: a reduction over a padded axis masks it with the reduction's identity;
# those marked keeps_zero keep a zero row zero and a finite row finite
for _name, _identity, _keeps_zero in (
        ("ReduceSum", 0.0, True), ("ReduceL1", 0.0, True), ("ReduceL2", 0.0, True), ("ReduceSumSquare", 0.0, True),
        ("ReduceLogSum", 0.0, False), ("ReduceMax", -math.inf, True), ("ReduceMin", math.inf, True),
        ("ReduceProd", 1.0, False), ("ReduceLogSumExp", -math.inf, False)):
    set_pad(PadRule("reduce", identity=_identity, keeps_zero=_keeps_zero), f"onnx.{_name}")
set_pad(PadRule("mean", keeps_zero=True), "onnx.ReduceMean")  # sum / the true count
set_pad(PadRule("softmax", result_fill=0.0, finite=True), "onnx.Softmax")
set_pad(PadRule("softmax", result_fill=-math.inf), "onnx.LogSoftmax")
set_pad(PadRule("softmax", result_fill=0.0), "onnx.Hardmax")
set_pad(PadRule("argreduce", identity=-math.inf), "onnx.ArgMax")
set_pad(PadRule("argreduce", identity=math.inf), "onnx.ArgMin")
set_pad(PadRule("cumsum"), "onnx.CumSum")

set_cost(lambda op: 4 * op.results[0].type.numel(), "onnx.Softmax", "onnx.LogSoftmax")  # max, exp, sum, div

# the largest / smallest of dims cast to float is exact (elementwise.py's float_values): torchvision's
# detection transform pads images to a stride multiple of the largest side, computed in float
for _name in ("ReduceMax", "ReduceMin"):
    get_opdef(f"onnx.{_name}").float_values = True
