"""Bucketing ops: padding a symbolic dim up to a bucket size and back, and masking padding.

A bucket version takes inputs at their TRUE sizes, pads the bucketed dim to the static
bucket size, runs the graph at that size and cuts the outputs back (passes/bucketize.py).
The true length always comes from the call's own symbol values (the dispatcher passes
them to every version), never from a static extent:

cc.pad_dim(x)   {axis, size, fill}   y has dim `axis` = size; y[.., i, ..] = i < x.dim(axis) ? x : fill
cc.unpad_dim(x) {axis, len}          y = x[.., :len, ..]: the leading true-length slice
cc.mask_dim(x)  {axis, fill, len}    y = x with positions i >= len along `axis` set to fill
cc.true_len()   {len}                a scalar of the result dtype: `len` evaluated at run time

`len` is a dim expression over the module's symbols written as TEXT ("seq", "256*seq"), so
that cloning a body with the substitution `seq -> 64` (which rewrites every type and dim
attribute) leaves it meaning the true, run-time value.
"""

from __future__ import annotations

import numpy as np
import sympy

from .. import kernel as K
from ..ir import Dim, DType, TensorType, canon, evaluate, sym
from .registry import InferCtx, OpDef, RefCtx, register
from .traits import PadRule, set_pad


def parse_len(text: str) -> sympy.Expr | int:
    """A `len` attribute ("seq", "256*seq") as a dim over the canonical symbols."""
    e = sympy.sympify(text)
    return canon(e.xreplace({s: sym(s.name) for s in e.free_symbols}))


def fill_scalar(fill: float, dtype: DType):
    """`fill` as a value of `dtype`: +-inf saturate to the integer range, bools are fill != 0."""
    if dtype is DType.bool:
        return bool(fill)
    if dtype.is_float:
        return float(fill)
    info = np.iinfo(dtype.np)
    if np.isinf(fill):
        return int(info.max if fill > 0 else info.min)
    return int(fill)


def _axis(ctx, rank: int) -> int:
    axis = ctx.attr("axis")
    if axis is None or not -rank <= int(axis) < rank:
        raise ctx.error(f"attribute 'axis' must be in [{-rank}, {rank}), got {axis}")
    return int(axis) % rank


def _true_len(ctx: RefCtx) -> int:
    return evaluate(parse_len(ctx.attr("len")), ctx.env)


def _kfill(fill: float, dtype: DType) -> K.Expr:
    return K.const(fill_scalar(fill, dtype), dtype)


def _lower_filled_past(ctx, n: Dim) -> None:
    """The result is operand 0 below index `n` along the `axis` attribute, `fill` from there
    on (pad_dim: the input's length; mask_dim: the true length)."""
    x, y = ctx.inputs[0], ctx.out(0)
    axis = ctx.attr("axis") % y.rank
    end = ctx.dim(n)
    fill = _kfill(ctx.attr("fill", 0.0), y.dtype)
    ctx.compute(y, lambda *ix: K.select(ix[axis] < end, x[ix], fill))


@register("cc.pad_dim")
class PadDimOp(OpDef):
    arity = 1
    kind = "injective"

    def infer(self, ctx: InferCtx):
        t = ctx.in_types[0]
        axis = _axis(ctx, t.rank)
        size = ctx.attr("size")
        if not isinstance(size, int) or size < 1:
            raise ctx.error(f"attribute 'size' must be a positive integer, got {size!r}")
        return [t.with_shape((*t.shape[:axis], size, *t.shape[axis + 1:]))]

    def reference(self, ctx: RefCtx, x):
        axis, size = ctx.attr("axis") % x.ndim, ctx.attr("size")
        n = x.shape[axis]
        if n > size:
            raise ValueError(f"true length {n} exceeds the bucket size {size}")
        widths = [(0, size - n if a == axis else 0) for a in range(x.ndim)]
        fill = fill_scalar(ctx.attr("fill", 0.0), ctx.out_type().dtype)
        return [np.pad(x, widths, constant_values=fill)]

    def lower(self, ctx) -> None:
        x = ctx.inputs[0]
        _lower_filled_past(ctx, x.shape[ctx.attr("axis") % x.rank])


@register("cc.unpad_dim")
class UnpadDimOp(OpDef):
    arity = 1
    kind = "injective"

    def infer(self, ctx: InferCtx):
        t = ctx.in_types[0]
        axis = _axis(ctx, t.rank)
        return [t.with_shape((*t.shape[:axis], parse_len(ctx.attr("len")), *t.shape[axis + 1:]))]

    def reference(self, ctx: RefCtx, x):
        axis, n = ctx.attr("axis") % x.ndim, _true_len(ctx)
        if n > x.shape[axis]:
            raise ValueError(f"true length {n} exceeds the padded extent {x.shape[axis]}")
        return [np.ascontiguousarray(np.take(x, np.arange(n), axis=axis))]

    def lower(self, ctx) -> None:
        x, y = ctx.inputs[0], ctx.out(0)
        ctx.compute(y, lambda *ix: x[ix])


@register("cc.mask_dim")
class MaskDimOp(OpDef):
    arity = 1
    kind = "elementwise"

    def infer(self, ctx: InferCtx):
        t = ctx.in_types[0]
        _axis(ctx, t.rank)
        return [t]

    def reference(self, ctx: RefCtx, x):
        axis, n = ctx.attr("axis") % x.ndim, _true_len(ctx)
        keep = (np.arange(x.shape[axis]) < n).reshape([-1 if a == axis else 1 for a in range(x.ndim)])
        fill = fill_scalar(ctx.attr("fill", 0.0), ctx.out_type().dtype)
        return [np.where(keep, x, np.asarray(fill, dtype=x.dtype))]

    def lower(self, ctx) -> None:
        _lower_filled_past(ctx, parse_len(ctx.attr("len")))


@register("cc.true_len")
class TrueLenOp(OpDef):
    arity = 0
    kind = "injective"

    def infer(self, ctx: InferCtx):
        t = ctx.op.results[0].type
        if t.rank != 0:
            raise ctx.error(f"result must be a scalar, got {t}")
        parse_len(ctx.attr("len"))
        return [TensorType(t.dtype, ())]

    def reference(self, ctx: RefCtx):
        return [np.array(_true_len(ctx), dtype=ctx.out_type().dtype.np)]

    def lower(self, ctx) -> None:
        y = ctx.out(0)
        n = ctx.dim(parse_len(ctx.attr("len")))
        ctx.compute(y, lambda: K.cast(n, y.dtype))


# ---- bucketing: a mask of a padded dim
set_pad(PadRule("mask", finite=True), "cc.mask_dim")
