"""Reductions: ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSum/LogSumExp/SumSquare, ArgMax/ArgMin,
Softmax/LogSoftmax/Hardmax (opset 13 semantics: one axis) and CumSum.

Reduce axes come from the second operand when present (ReduceSum from opset 13, the others
from 18) and from the `axes` attribute otherwise. Axes only the run knows (a graph input)
still work: the result rank follows from keepdims and the axes' length, and each dim that
may or may not be reduced becomes a fresh data-dependent symbol.
Sum/Prod/Max/Min also propagate values, so `Shape -> ReduceProd` gives a symbolic count.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import reduce as _fold

import numpy as np
import sympy

from ..ir import DType, TensorType, canon
from .elementwise import cast_out, widen
from .registry import InferCtx, RefCtx, define
from .shape import fresh_dim

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


REDUCE_MATH: dict[str, Callable] = {
    "ReduceSum": lambda x, axis, k: np.sum(x, axis=axis, keepdims=k),
    "ReduceMean": lambda x, axis, k: np.mean(x, axis=axis, keepdims=k),
    "ReduceMax": _max,
    "ReduceMin": _min,
    "ReduceProd": lambda x, axis, k: np.prod(x, axis=axis, keepdims=k),
    "ReduceL1": lambda x, axis, k: np.sum(np.abs(x), axis=axis, keepdims=k),
    "ReduceL2": lambda x, axis, k: np.sqrt(np.sum(x * x, axis=axis, keepdims=k)),
    "ReduceLogSum": lambda x, axis, k: np.log(np.sum(x, axis=axis, keepdims=k)),
    "ReduceLogSumExp": _logsumexp,
    "ReduceSumSquare": lambda x, axis, k: np.sum(x * x, axis=axis, keepdims=k),
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


def _reduce_op(name: str) -> None:
    math = REDUCE_MATH[name]

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

    define(f"onnx.{name}", infer=infer, reference=reference, value=value if name in _REDUCE_VALUE else None,
           kind="reduction", arity=(1, 2), math=math)


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


def _arg_op(name: str, find: Callable) -> None:
    def infer(ctx: InferCtx):
        t = ctx.in_types[0]
        axis = normalize_axes([ctx.attr("axis", 0)], t.rank, ctx.error)
        return [TensorType(DType.i64, reduced_shape(t.shape, axis, ctx.attr("keepdims", 1)))]

    def reference(ctx: RefCtx, x):
        axis = int(ctx.attr("axis", 0)) % x.ndim
        keep, last = bool(ctx.attr("keepdims", 1)), bool(ctx.attr("select_last_index", 0))
        return [arg_reduce(widen(x), axis, keep, last, find)]

    define(f"onnx.{name}", infer=infer, reference=reference, kind="reduction", arity=1, math=find)


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


def _axis_op(name: str, math: Callable, kind: str = "reduction") -> None:
    def infer(ctx: InferCtx):
        t = ctx.in_types[0]
        normalize_axes([ctx.attr("axis", -1)], t.rank, ctx.error)
        return [t]

    def reference(ctx: RefCtx, x):
        return [cast_out(ctx, math(widen(x), int(ctx.attr("axis", -1)) % max(x.ndim, 1)))]

    define(f"onnx.{name}", infer=infer, reference=reference, kind=kind, arity=1, math=math)


_axis_op("Softmax", softmax)
_axis_op("LogSoftmax", log_softmax)
_axis_op("Hardmax", hardmax)


# ---- CumSum --------------------------------------------------------------------------------------


def cumsum(x, axis: int, exclusive: bool = False, reverse: bool = False):
    if reverse:
        x = np.flip(x, axis)
    y = np.cumsum(x, axis=axis, dtype=x.dtype)
    if exclusive:
        y = np.roll(y, 1, axis=axis)
        first = [slice(None)] * x.ndim
        first[axis] = slice(0, 1)
        y[tuple(first)] = 0
    return np.flip(y, axis) if reverse else y


def _cumsum_infer(ctx: InferCtx):
    t, a = ctx.in_types
    if a.rank > 1 or (a.rank == 1 and a.shape[0] != 1):
        raise ctx.error(f"axis must be a scalar or a 1-element tensor, got {a}")
    axis = ctx.known_ints(1)
    if axis is not None:
        normalize_axes(axis, t.rank, ctx.error)
    return [t]


def _cumsum_ref(ctx: RefCtx, x, axis):
    ax = int(np.asarray(axis).reshape(-1)[0]) % x.ndim
    return [cast_out(ctx, cumsum(widen(x), ax, bool(ctx.attr("exclusive", 0)), bool(ctx.attr("reverse", 0))))]


define("onnx.CumSum", infer=_cumsum_infer, reference=_cumsum_ref, kind="opaque", arity=2, math=cumsum)
