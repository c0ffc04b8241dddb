"""Ops whose result size is a count of the data: NonZero, Compress.

Each result dim that only the data decides is a run-time symbol (a fresh symbol with the
range it can have, 0..the count of candidates). The lowering computes the count first,
binds the symbol right there (`bind_symbol`: a `SetSymbol` with `bind`, kernel/control.py),
then fills the result in one sequential pass over the candidates: a loop whose body writes
candidate t at position `pos` when it is kept, and bumps `pos`. Everything after the
binding computes on the true count; the buffer is allocated for the bound.
"""

from __future__ import annotations

import numpy as np
import sympy

from ..ir import DType, TensorType
from ..kernel import (
    Expr,
    IfStmt,
    LoopStmt,
    Var,
    WriteAt,
    cast,
    dim_to_expr,
    rsum,
    unflatten_index,
)
from .registry import OpDef, register
from .shape_util import fresh_dim, norm_axis

I64 = DType.i64


def count_symbol(ctx, hint: str, why: str, bound, result: int = 0, dim: int = 0) -> sympy.Symbol:
    """A run-time symbol for a count of the data: range [0, bound] (bound when it is known)."""
    n = fresh_dim(ctx, hint, why, result, dim)
    info = ctx.symbols[n.name]
    info.lo = 0
    if isinstance(bound, int):
        info.hi = min(info.hi, max(bound, 1))
    return n


def _numel(shape) -> object:
    out = 1
    for d in shape:
        out = out * d
    return out


def select_pass(ctx, count_name: str, n_candidates, keep, write) -> None:
    """Count the candidates t < n_candidates with `keep(t)`, bind run-time symbol
    `count_name` to it, then run `write(pos, t)` (statements) for each kept t in order,
    pos = 0, 1, ...  `keep(t)` is a bool Expr of the i64 Expr t."""
    p, L = ctx.program, ctx.lowerer
    cnt = ctx.temp(I64, (), "count")
    m = Var(f"m_{cnt.name}")
    p.compute(cnt, rsum([(m, n_candidates)], cast(keep(m), I64)))
    L.bind_symbol(ctx.op, count_name, n_candidates, cnt[()])
    pos = ctx.temp(I64, (), "pos")
    nxt = ctx.temp(I64, (), "pos_next")
    t = ctx.temp(I64, (), "cand")
    p.compute(pos, dim_to_expr(0))
    body = [IfStmt(keep(t[()]), [*write(pos[()], t[()])])]
    with L.into(body[0].then_body):
        p.compute(nxt, pos[()] + 1)
        p.compute(pos, nxt[()])
    p.body.append(LoopStmt(body, index=t.name, trips=dim_to_expr(n_candidates)))


# ---- NonZero -------------------------------------------------------------------------------

@register("onnx.NonZero")
class NonZeroOp(OpDef):
    arity = 1

    def infer(self, ctx):
        x = ctx.in_types[0]
        numel = x.numel()
        n = count_symbol(ctx, "nonzero", "count of nonzero elements (data-dependent)", numel, 0, 1)
        return [TensorType(I64, (max(x.rank, 1), n))]

    def lower(self, ctx):
        x, out = ctx.inputs[0], ctx.out(0)
        shape = x.shape
        numel = _numel(shape)

        def at(t: Expr) -> Expr:
            return x[unflatten_index(t, shape)] if shape else x[()]

        def keep(t: Expr) -> Expr:
            return _nonzero(at(t))

        def write(pos: Expr, t: Expr):
            coords = unflatten_index(t, shape) if shape else (dim_to_expr(0),)
            return [WriteAt(out.name, (), (dim_to_expr(d), pos), cast(c, I64)) for d, c in enumerate(coords)]

        select_pass(ctx, str(ctx.out_type(0).shape[1]), numel, keep, write)

    def reference(self, ctx, x):
        return [np.array(np.nonzero(np.atleast_1d(x) if x.ndim == 0 else x), dtype=np.int64)]


def _nonzero(v: Expr) -> Expr:
    """v != 0 as a bool Expr (bool values: themselves)."""
    if v.dtype is DType.bool:
        return v
    return v.ne(cast(0, v.dtype))


# ---- Compress ------------------------------------------------------------------------------

@register("onnx.Compress")
class CompressOp(OpDef):
    arity = 2

    def infer(self, ctx):
        x, c = ctx.in_types[0], ctx.in_types[1]
        if c.rank != 1:
            raise ctx.error(f"condition must be 1-D, got {c}")
        if c.dtype is not DType.bool:
            raise ctx.error(f"condition must be bool, got {c.dtype.value}")
        axis = ctx.attr("axis")
        if axis is None:
            n = count_symbol(ctx, "compress", "count of kept elements (data-dependent)", _min_int(c.shape[0],
                             x.numel()), 0, 0)
            return [TensorType(x.dtype, (n,))]
        axis = norm_axis(ctx, axis, x.rank)
        n = count_symbol(ctx, "compress", "count of kept slices (data-dependent)",
                         _min_int(c.shape[0], x.shape[axis]), 0, axis)
        return [TensorType(x.dtype, (*x.shape[:axis], n, *x.shape[axis + 1:]))]

    def lower(self, ctx):
        x, c, out = ctx.inputs[0], ctx.inputs[1], ctx.out(0)
        axis = ctx.attr("axis")
        rt = ctx.out_type(0)
        if axis is None:
            n_cand = sympy.Min(c.shape[0], _numel(x.shape))
            name = str(rt.shape[0])

            def write(pos, t):
                src = x[unflatten_index(t, x.shape)] if x.shape else x[()]
                return [WriteAt(out.name, (), (pos,), src)]
        else:
            axis %= x.rank
            n_cand = sympy.Min(c.shape[0], x.shape[axis])
            name = str(rt.shape[axis])

            def write(pos, t):
                vs = [Var(f"w{j}_{out.name}") for j in range(x.rank)]
                dom = tuple((v, d) for j, (v, d) in enumerate(zip(vs, x.shape)) if j != axis)
                idx = [*vs[:axis], t, *vs[axis + 1:]]
                oidx = (*vs[:axis], pos, *vs[axis + 1:])
                return [WriteAt(out.name, dom, oidx, x[tuple(idx)])]

        select_pass(ctx, name, _simplify(n_cand), lambda t: c[(t,)], write)

    def reference(self, ctx, x, c):
        axis = ctx.attr("axis")
        c = np.asarray(c, dtype=bool).reshape(-1)
        # entries past the axis (or the element count) are ignored, as onnxruntime does
        c = c[:x.size] if axis is None else c[:x.shape[axis]]
        return [np.compress(c, x, axis=axis)]


def _min_int(a, b):
    return min(a, b) if isinstance(a, int) and isinstance(b, int) else (a if isinstance(a, int) else b)


def _simplify(d):
    d = sympy.sympify(d)
    return int(d) if d.is_Integer else d


__all__ = ["CompressOp", "NonZeroOp", "count_symbol", "select_pass"]
