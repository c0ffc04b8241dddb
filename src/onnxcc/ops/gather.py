"""Gather, GatherElements, GatherND: symbolic shape rules, value propagation (Gather of a
`Shape` result picks dims), numpy references, and lowerings to one index-mapping compute
each. Every data-dependent index goes through `wrap_index` (negative indices count from
the end; an index out of range makes the kernel fail with ERR_INDEX instead of reading
stray memory); a compile-time scalar index is folded (`x[:, 0]`, `Gather(Shape(x), 1)`)."""

from __future__ import annotations

import numpy as np

from ..errors import UnsupportedOp
from ..ir import canon
from ..kernel import dim_to_expr, wrap_index
from .registry import OpDef, register
from .shape_util import emit, lowered_value, nonneg, norm_axis, value_shape_ok
from .traits import PadRule, set_pad


def _norm_indices(idx: np.ndarray, dim: int) -> np.ndarray:
    idx = np.asarray(idx).astype(np.int64)
    return np.where(idx < 0, idx + dim, idx)


@register("onnx.Gather")
class GatherOp(OpDef):
    arity = 2
    kind = "injective"
    float_values = True  # it moves elements (see elementwise.py)

    def infer(self, ctx):
        x, idx = ctx.in_types
        axis = norm_axis(ctx, ctx.attr("axis", 0), x.rank)
        ints, dim = ctx.known_ints(1), x.shape[axis]
        if ints is not None and isinstance(dim, int):
            bad = [i for i in ints if not -dim <= i < dim]
            if bad:
                raise ctx.error(f"index {bad[0]} out of range for axis {axis} of size {dim}")
        return [x.with_shape(x.shape[:axis] + idx.shape + x.shape[axis + 1:])]

    def value(self, ctx):
        v, ints = ctx.known(0), ctx.known_ints(1)
        if v is None or ints is None or not value_shape_ok(ctx.op.results[0].type):
            return None
        axis = ctx.attr("axis", 0) % v.ndim
        idx = _norm_indices(np.array(ints).reshape(ctx.in_types[1].shape), v.shape[axis])
        return [np.take(v, idx, axis=axis)]

    def lower(self, ctx):
        x, idx = ctx.inputs
        axis = ctx.attr("axis", 0) % x.rank
        r = idx.rank

        d = x.shape[axis]
        fixed = lowered_value(ctx, 1) if r == 0 else None
        fixed = None if fixed is None else canon(fixed.reshape(-1)[0])
        if fixed is not None:  # a compile-time scalar index (x[:, 0], Gather(Shape(x), 1)...)
            sign = nonneg(fixed)
            fixed = None if sign is None else fixed if sign else canon(fixed + d)
        if fixed is not None:
            static = isinstance(d, int) and isinstance(fixed, int) and 0 <= fixed < d
            k = dim_to_expr(fixed)
            k = k if static else wrap_index(k, d, negative=False)  # only the run knows it is in range

        def body(ix):
            at = k if fixed is not None else wrap_index(idx[ix[axis:axis + r]], d)
            return x[ix[:axis] + (at,) + ix[axis + r:]]

        emit(ctx, ctx.out(0), body)

    def reference(self, ctx, x, idx):
        axis = ctx.attr("axis", 0) % x.ndim
        return [np.take(x, _norm_indices(idx, x.shape[axis]), axis=axis)]


@register("onnx.GatherElements")
class GatherElementsOp(OpDef):
    arity = 2

    def infer(self, ctx):
        x, idx = ctx.in_types
        if x.rank != idx.rank:
            raise ctx.error(f"indices rank {idx.rank} differs from data rank {x.rank}")
        norm_axis(ctx, ctx.attr("axis", 0), x.rank)
        return [x.with_shape(idx.shape)]

    def lower(self, ctx):
        x, idx = ctx.inputs
        axis = ctx.attr("axis", 0) % x.rank

        def body(ix):
            k = wrap_index(idx[ix], x.shape[axis])
            return x[ix[:axis] + (k,) + ix[axis + 1:]]

        emit(ctx, ctx.out(0), body)

    def reference(self, ctx, x, idx):
        axis = ctx.attr("axis", 0) % x.ndim
        return [np.take_along_axis(x, _norm_indices(idx, x.shape[axis]), axis=axis)]


@register("onnx.GatherND")
class GatherNDOp(OpDef):
    arity = 2

    def infer(self, ctx):
        x, idx = ctx.in_types
        b = ctx.attr("batch_dims", 0)
        last = idx.shape[-1] if idx.rank else None
        if not isinstance(last, int):
            raise UnsupportedOp("GatherND", "", ctx.loc, "the last indices dim must be static")
        if b + last > x.rank:
            raise ctx.error(f"batch_dims {b} + index length {last} exceeds data rank {x.rank}")
        for i in range(b):
            ctx.require_eq(x.shape[i], idx.shape[i], f"batch dim {i} of data and indices")
        return [x.with_shape(idx.shape[:-1] + x.shape[b + last:])]

    def lower(self, ctx):
        x, idx = ctx.inputs
        b = ctx.attr("batch_dims", 0)
        last = idx.shape[-1]
        q = idx.rank - 1  # output dims [0, q) index the indices tensor

        def body(ix):
            picked = tuple(wrap_index(idx[ix[:q] + (k,)], x.shape[b + k]) for k in range(last))
            return x[ix[:b] + picked + ix[q:]]

        emit(ctx, ctx.out(0), body)

    def reference(self, ctx, x, idx):
        b = ctx.attr("batch_dims", 0)
        last = idx.shape[-1]
        batch = int(np.prod(x.shape[:b], dtype=np.int64))
        xr = x.reshape((batch,) + x.shape[b:])
        ir = idx.reshape(batch, -1, last).astype(np.int64)
        dims = np.array(x.shape[b:b + last], dtype=np.int64)
        ir = np.where(ir < 0, ir + dims, ir)
        rows = [xr[i][tuple(ir[i, j])] for i in range(batch) for j in range(ir.shape[1])]
        out_shape = idx.shape[:-1] + x.shape[b + last:]
        if not rows:
            return [np.zeros(out_shape, dtype=x.dtype)]
        return [np.stack(rows).reshape(out_shape)]


# bucketing: a gather moves rows of its data, safe at the padded size
set_pad(PadRule("gather"), "onnx.Gather")
