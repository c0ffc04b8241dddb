"""Unique: the distinct values (or slices along `axis`) of a tensor, sorted or in order of
first occurrence, with the index of each first occurrence, the inverse map and the counts.

The count of distinct values is a run-time symbol (data_dependent.py). The lowering is
all computes over the K candidates (elements, or slices along the axis), O(K^2 * slice),
correct rather than fast:

    first[t]  = the first t' equal to t                      (t is new when first[t] == t)
    n         = how many t are new                           -> bound mid-run
    rank[t]   = how many new t' come before t                (by value when sorted, else by position)
    indices[j] = the new t whose rank is j;  Y = x at indices;  inverse[t] = rank[first[t]]
    counts[j] = how many t have first[t] == indices[j]
"""

from __future__ import annotations

import numpy as np

from ..ir import DType, TensorType
from ..kernel import Expr, Var, cast, dim_to_expr, minimum, rmin, rsum, select, unflatten_index
from .data_dependent import count_symbol
from .registry import OpDef, register
from .shape_util import emit, norm_axis

I64 = DType.i64


def _layout(x_shape, axis):
    """(K candidates, the shape of one candidate slice) for x with this axis (None: the
    elements of the flattened x)."""
    if axis is None:
        k = 1
        for d in x_shape:
            k = k * d
        return k, ()
    return x_shape[axis], (*x_shape[:axis], *x_shape[axis + 1:])


@register("onnx.Unique")
class UniqueOp(OpDef):
    arity = 1
    num_results = 4

    def infer(self, ctx):
        x = ctx.in_types[0]
        axis = ctx.attr("axis")
        if axis is not None:
            axis = norm_axis(ctx, axis, x.rank)
        k, _ = _layout(x.shape, axis)
        n = count_symbol(ctx, "unique", "count of distinct values (data-dependent)", k, 0, 0 if axis is None else axis)
        y = (n,) if axis is None else (*x.shape[:axis], n, *x.shape[axis + 1:])
        return [TensorType(x.dtype, y), TensorType(I64, (n,)), TensorType(I64, (k,)), TensorType(I64, (n,))]

    def lower(self, ctx):
        x = ctx.inputs[0]
        axis = ctx.attr("axis")
        if axis is not None:
            axis %= x.rank
        k, others = _layout(x.shape, axis)
        s = 1
        for d in others:
            s = s * d
        p = ctx.program

        def elem(t: Expr, q: Expr | None) -> Expr:
            if axis is None:
                return x[unflatten_index(t, x.shape)] if x.shape else x[()]
            o = list(unflatten_index(q, others)) if others else []
            return x[(*o[:axis], t, *o[axis:])]

        def same(a: Expr, b: Expr) -> Expr:
            if axis is None or not others:
                return elem(a, None).eq(elem(b, None)) if axis is None else dim_to_expr(1).eq(1)
            q = Var(f"q_{id(a)}_{id(b)}")
            return rsum([(q, s)], cast(elem(a, q).ne(elem(b, q)), I64)).eq(0)

        def less(a: Expr, b: Expr) -> Expr:
            if axis is None:
                return elem(a, None) < elem(b, None)
            if not others:
                return dim_to_expr(0).eq(1)
            q = Var(f"d_{id(a)}_{id(b)}")
            fd = rmin([(q, s)], select(elem(a, q).ne(elem(b, q)), q, dim_to_expr(s)))
            at = minimum(fd, dim_to_expr(s) - 1)
            return (fd < dim_to_expr(s)) & (elem(a, at) < elem(b, at))

        first = ctx.temp(I64, (k,), "uniq_first")
        u = Var("u_first")
        emit(ctx, first, lambda ix: rmin([(u, k)], select(same(u, ix[0]), u, dim_to_expr(k))))
        cnt = ctx.temp(I64, (), "uniq_count")
        c = Var("c_count")
        p.compute(cnt, rsum([(c, k)], cast(first[(c,)].eq(c), I64)))
        name = str(ctx.out_type(1).shape[0])
        ctx.lowerer.bind_symbol(ctx.op, name, k, cnt[()])
        rank = ctx.temp(I64, (k,), "uniq_rank")
        r = Var("r_before")
        sort = ctx.attr("sorted", 1)
        emit(ctx, rank, lambda ix: rsum([(r, k)], cast(first[(r,)].eq(r) & (less(r, ix[0]) if sort else r < ix[0]),
                                                       I64)))
        y, idx, inv, counts = (ctx.out(i) for i in range(4))
        w = Var("w_new")
        emit(ctx, idx, lambda ix: rsum([(w, k)], select(first[(w,)].eq(w) & rank[(w,)].eq(ix[0]), w,
                                                        dim_to_expr(0))))
        if axis is None:
            emit(ctx, y, lambda ix: elem(idx[(ix[0],)], None))
        else:
            emit(ctx, y, lambda ix: x[(*ix[:axis], idx[(ix[axis],)], *ix[axis + 1:])])
        emit(ctx, inv, lambda ix: rank[(first[(ix[0],)],)])
        v = Var("v_count")
        emit(ctx, counts, lambda ix: rsum([(v, k)], cast(first[(v,)].eq(idx[(ix[0],)]), I64)))

    def reference(self, ctx, x):
        axis = ctx.attr("axis")
        y, idx, inv, cnt = np.unique(x, return_index=True, return_inverse=True, return_counts=True, axis=axis)
        inv = inv.reshape(-1)
        if not ctx.attr("sorted", 1):  # order of first occurrence
            order = np.argsort(idx, kind="stable")
            remap = np.empty_like(order)
            remap[order] = np.arange(len(order))
            y = np.take(y, order, axis=0 if axis is None else axis)
            idx, cnt, inv = idx[order], cnt[order], remap[inv]
        return [y, idx.astype(np.int64), inv.astype(np.int64), cnt.astype(np.int64)]
