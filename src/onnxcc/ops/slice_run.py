"""Slices whose bounds only the run knows.

A Slice whose start or end is computed from data (an EmbeddingBag's offsets gathered at the
loop index, `x[:n]` with `n` an ArgMax) has a result length that is a run-time symbol with
range [0, the sliced dim]. The lowering computes the length from the loaded start and end with
ONNX's clamping rules, binds the symbol right there (`bind_symbol`, as NonZero's count), so the
slice itself and everything after it compute on the true length; buffers are sized for the dim.
"""

from __future__ import annotations

import sympy

from ..ir import Dim, canon
from ..kernel import ERR_ASSERT, Expr, buffers_read, check, clamp, dim_to_expr, maximum, minimum, select, truncdiv
from .shape_util import I64, fresh_dim, nonneg


def slice_symbol(ctx, d: Dim, axis: int, span: int | None = None) -> sympy.Symbol:
    """A fresh run-time symbol for the length of a slice of a dim of size `d` whose bounds
    are not known at compile time: range [0, d] (an empty slice is a valid answer), at most
    `span` when the bounds are one value plus two constants (`span_bound`). A span of 1 is
    typed 1 (an empty slice there, past the end of the offsets, fails the run-time check
    `bind_lengths` emits: an error, never a wrong answer), so the slice can broadcast and
    its one element can start another slice."""
    if span == 1:  # one offset gathered (offsets[i]:offsets[i] + 1): typed 1, checked at run time
        return sympy.Integer(1)
    n = fresh_dim(ctx, "slice", f"slice of dim {axis} not known at compile time", 0, axis)
    info = ctx.symbols[n.name]
    info.lo = 0
    for hi in (d, span):
        if isinstance(hi, int):
            info.hi = min(info.hi, max(hi, 1))
    return n


def may_run_empty(ctx, d: Dim, length: Dim) -> bool:
    """Whether a slice of a dim `d` that a loop re-binds every iteration (a carried value that
    shrinks: x = x[1:]) has a length the shape rule cannot trust: the rules take symbols as
    positive, so x[1:] types as d - 1, which is -1 once the state is empty. Such a length is
    computed at run time instead (clamped, 0 for an empty state) and bound like a data bound."""
    if not isinstance(d, sympy.Symbol) or d.name not in ctx.symbols or canon(length) == canon(d):
        return False
    origin = ctx.symbols[d.name].origin
    return "varies across iterations" in origin and isinstance(canon(length), sympy.Expr) \
        and not isinstance(canon(length), sympy.Symbol)


def _plus_const(ctx, v) -> tuple[object, int]:
    """(base, c) with v = base + c, c a known int (v itself and 0 when it is no such Add)."""
    op = getattr(v, "op", None)
    if op is not None and op.name == "onnx.Add" and len(op.operands) == 2:
        for i in (0, 1):
            c = ctx.value_of(op.operands[1 - i])
            c = canon(c.reshape(-1)[0]) if c is not None and c.size == 1 else None
            if isinstance(c, int):
                return op.operands[i], c
    return v, 0


def span_bound(ctx) -> int | None:
    """At most how many elements x[s:e] (step 1) holds when s and e are the same run-time
    value plus constants, offsets[i]:offsets[i] + 1 as exporters gather one offset: e - s
    before clamping, which negative wrapping and clamping only shrink. None otherwise."""
    ops = ctx.op.operands
    if "starts" in ctx.op.attrs or len(ops) < 3:
        return None
    if len(ops) > 4 and ops[4] is not None:
        steps = ctx.value_of(ops[4])
        if steps is None or any(canon(x) != 1 for x in steps.reshape(-1)):
            return None
    (bs, cs), (be, ce) = _plus_const(ctx, ops[1]), _plus_const(ctx, ops[2])
    return max(ce - cs, 0) if bs is be else None


def slice_start(s, d: Dim, step: int) -> Expr:
    """The first input index of an ONNX slice along a dim of size d (i64 expression): a
    negative start counts from the end, then it is clamped to [0, d] (step > 0) or [0, d - 1]
    (step < 0). Decided at compile time where the start's sign is known."""
    D = dim_to_expr(d)
    hi = D if step > 0 else D - 1
    sign = nonneg(s)
    se = s if isinstance(s, Expr) else dim_to_expr(s)
    if sign is True:
        return se if isinstance(s, int) and s == 0 else minimum(se, hi)
    if sign is False:
        return maximum(se + D, 0)
    return clamp(select(se < 0, se + D, se), 0, hi)


def _slice_end(e, d: Dim, step: int) -> Expr:
    """The end of an ONNX slice (exclusive): negative counts from the end, clamped to [0, d]
    (step > 0) or [-1, d - 1] (step < 0)."""
    D = dim_to_expr(d)
    ee = e if isinstance(e, Expr) else dim_to_expr(e)
    lo, hi = (dim_to_expr(0), D) if step > 0 else (dim_to_expr(-1), D - 1)
    return clamp(select(ee < 0, ee + D, ee), lo, hi)


def bind_lengths(ctx, x, index: dict, ends: dict) -> None:
    """For each sliced axis whose result dim the run decides, compute the length and bind
    its symbol; where the shape rule typed it (a one-offset slice), check it in the start
    index every element reads. `index`: axis -> (start Expr, step) as the lowering computed
    it (updated in place); `ends`: axis -> the end (a Dim or an i64 Expr loaded at run time)."""
    L, y = ctx.lowerer, ctx.out_type(0)
    for a, (start, step) in sorted(index.items()):
        d = y.shape[a]
        end = _slice_end(ends[a], x.shape[a], step)
        # a bound read from a buffer with a length the shape rule typed (`slice_symbol`'s 1)
        typed = isinstance(canon(d), int) and bool(buffers_read(start) or buffers_read(end))
        if L is None or not (typed or (L.is_run_dim(d) and d.name not in ctx.program.run_dims)):
            continue
        span = end - start if step > 0 else start - end
        k = abs(step)
        length = maximum(truncdiv(span + (k - 1), k) if k > 1 else span, 0)
        if typed:  # checked where every element is read: a check computed on its own is dead code
            index[a] = (check(length.eq(dim_to_expr(d)), start, ERR_ASSERT), step)
            continue
        n = ctx.temp(I64, (), "slice_len")
        ctx.program.compute(n, length)
        L.bind_symbol(ctx.op, d.name, x.shape[a], n[()])


__all__ = ["bind_lengths", "may_run_empty", "slice_start", "slice_symbol", "span_bound"]
