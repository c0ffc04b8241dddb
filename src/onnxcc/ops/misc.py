"""Leftover data-movement ops: Pad, Trilu, OneHot, DepthToSpace, SpaceToDepth, ScatterND,
ScatterElements, TopK, EyeLike, ReverseSequence, CenterCropPad; also
MeanVarianceNormalization and Swish (kept here so the norm and elementwise families stay
untouched).

Shape rules follow the same habits as shape.py: targets read from propagated values where
the ONNX form computes them at run time, fresh symbols (with an origin naming the node)
where only the run can tell, and divisibility needs recorded as constraints.

Lowerings are single computes (TopK: two, with a rank temp). Scatters write every output
element as `select(some update targets it, update, data)`, with a reduction over the updates
(O(updates) per element: correct, not fast). NonZero lives in data_dependent.py.
"""

from __future__ import annotations

import numpy as np
import sympy

from ..ir import DType, TensorType, canon
from ..kernel import (
    ERR_ASSERT,
    Expr,
    cast,
    check,
    clamp,
    dim_to_expr,
    flatten_index,
    fresh_var,
    maximum,
    minimum,
    rmax,
    rmin,
    rprod,
    rsum,
    select,
    sigmoid,
    sqrt,
    unflatten_index,
    wrap_index,
)
from ..kernel import (
    Const as KConst,
)
from .dtypes import onnx_dtype
from .pad_reflect import reflect_index, single_reflection_ok
from .registry import OpDef, onnx_inputs, register
from .scatter_push import scatter_writes
from .shape import (
    I64,
    emit,
    exact_div,
    fresh_dim,
    known_dims,
    lowered_ints,
    norm_axis,
    same_dim,
    scalar,
    scalar_operand,
    value_expr,
)
from .traits import PadRule, set_pad


def _ints(a) -> list[int]:
    return [int(x) for x in np.asarray(a).reshape(-1)]


# ---- Pad ------------------------------------------------------------------------------------

def _pad_axes(rank: int, axes) -> list[int]:
    return list(range(rank)) if axes is None else [a % rank for a in axes]


@register("onnx.Pad")
class PadOp(OpDef):
    arity = (1, 4)

    def infer(self, ctx):
        x = ctx.in_types[0]
        mode = ctx.attr("mode", "constant")
        if mode not in ("constant", "reflect", "edge", "wrap"):
            raise ctx.error(f"unknown mode {mode!r}; expected constant, reflect, edge or wrap")
        if "pads" in ctx.op.attrs:  # opset < 11
            pads, axes = list(ctx.attr("pads")), None
        else:
            pos = onnx_inputs(ctx.op, list(range(len(ctx.op.operands)))) + [None] * 4
            pads = known_dims(ctx, pos[1])
            axes = None if pos[3] is None else ctx.known_ints(pos[3])
            if pos[3] is not None and axes is None:
                return [x.with_shape([fresh_dim(ctx, "pad", f"pad of dim {i} not known at compile time", 0, i)
                                      for i in range(x.rank)])]
        axes = [norm_axis(ctx, a, x.rank) for a in _pad_axes(x.rank, axes)]
        out = list(x.shape)
        if pads is None:
            for a in axes:
                out[a] = fresh_dim(ctx, "pad", f"pads of dim {a} not known at compile time", 0, a)
            return [x.with_shape(out)]
        if len(pads) != 2 * len(axes):
            raise ctx.error(f"pads has {len(pads)} entries, expected {2 * len(axes)} (begin and end per axis)")
        for k, a in enumerate(axes):
            if out[a] is None:
                continue
            d = canon(out[a] + pads[k] + pads[k + len(axes)])
            if ctx.symbols.prove_le(0, d) is False:
                raise ctx.error(f"padding dim {a} of size {out[a]} by {pads[k]}, {pads[k + len(axes)]} "
                                f"leaves a negative size")
            out[a] = d
        return [x.with_shape(out)]

    def lower(self, ctx):
        # Negative pads crop first, then the mode fills from the cropped range (as onnxruntime
        # does; it matters for wrap). Per padded axis: lo = the crop at the front, n = the
        # cropped length, and output index o reads cropped position o - max(begin, 0).
        x, y = ctx.inputs[0], ctx.out(0)
        mode = ctx.attr("mode", "constant")
        if "pads" in ctx.op.attrs:  # opset < 11
            pads = list(ctx.attr("pads"))
            axes = list(range(x.rank))
            pad_of = [dim_to_expr(p) for p in pads]
            value = KConst(ctx.attr("value", 0.0), x.dtype)
        else:
            pos = onnx_inputs(ctx.op, list(range(len(ctx.op.operands)))) + [None] * 4
            axes = [a % x.rank for a in (lowered_ints(ctx, pos[3], "pad axes") or range(x.rank))]
            pad_of = [value_expr(ctx, pos[1], k) for k in range(2 * len(axes))]
            value = KConst(0, x.dtype) if pos[2] is None else scalar(ctx.inputs[pos[2]])
        spans = {}
        for k, a in enumerate(axes):
            b, e = pad_of[k], pad_of[k + len(axes)]
            if _is_zero(b) and _is_zero(e):
                continue
            lo = maximum(0 - b, 0)  # NOTE: `0 - b` folds when b is a constant, `-b` does not
            spans[a] = (maximum(b, 0), lo, dim_to_expr(x.shape[a]) - lo - maximum(0 - e, 0))
        symbols = None if ctx.lowerer is None else ctx.lowerer.module.symbols
        single = {a: mode == "reflect" and single_reflection_ok(symbols, ctx.in_type(0).shape[a], pad_of[k],
                                                                  pad_of[k + len(axes)])
                  for k, a in enumerate(axes)}

        def body(ix):
            src, inside = [], None
            for k in range(x.rank):
                if k not in spans:
                    src.append(ix[k])
                    continue
                shift, lo, n = spans[k]
                i = ix[k] - shift
                if mode == "constant":
                    ok = (i >= 0) & (i < n)
                    inside = ok if inside is None else inside & ok
                elif mode == "edge":
                    i = clamp(i, 0, n - 1)
                elif mode == "wrap":
                    i = i % n
                else:
                    i = reflect_index(i, n, single[k])
                src.append(lo + i)
            v = x[tuple(src)]
            return v if inside is None else select(inside, v, value)

        emit(ctx, y, body)

    def reference(self, ctx, x, *rest):
        mode = ctx.attr("mode", "constant")
        if "pads" in ctx.op.attrs:
            pads, value, axes = list(ctx.attr("pads")), ctx.attr("value", 0.0), None
        else:
            args = onnx_inputs(ctx.op, [x, *rest]) + [None] * 4
            pads = _ints(args[1])
            value = 0 if args[2] is None else np.asarray(args[2]).reshape(-1)[0]
            axes = None if args[3] is None else _ints(args[3])
        axes = _pad_axes(x.ndim, axes)
        n = len(axes)
        widths = [(0, 0)] * x.ndim
        for k, a in enumerate(axes):
            widths[a] = (pads[k], pads[k + n])
        # negative pads crop first, then the rest pads the cropped tensor (onnxruntime's order)
        crop = tuple(slice(-min(b, 0), x.shape[i] + min(e, 0)) for i, (b, e) in enumerate(widths))
        grow = [(max(b, 0), max(e, 0)) for b, e in widths]
        kw = {"constant_values": value} if mode == "constant" else {}
        return [np.pad(x[crop], grow, mode=mode, **kw)]


def _is_zero(e) -> bool:
    return isinstance(e, KConst) and e.value == 0


# ---- Trilu, EyeLike ---------------------------------------------------------------------------

@register("onnx.Trilu")
class TriluOp(OpDef):
    arity = (1, 2)
    kind = "injective"

    def infer(self, ctx):
        x = ctx.in_types[0]
        if x.rank < 2:
            raise ctx.error(f"input must have rank >= 2, got {x}")
        return [x]

    def lower(self, ctx):
        x = ctx.inputs[0]
        k = value_expr(ctx, 1, 0) if len(ctx.inputs) > 1 else 0
        upper = ctx.attr("upper", 1)

        def body(ix):
            diff = ix[-1] - ix[-2]
            return select(diff >= k if upper else diff <= k, x[ix], KConst(0, x.dtype))

        emit(ctx, ctx.out(0), body)

    def reference(self, ctx, x, *rest):
        k = int(np.asarray(rest[0]).reshape(-1)[0]) if rest else 0
        return [np.triu(x, k) if ctx.attr("upper", 1) else np.tril(x, k)]


@register("onnx.EyeLike")
class EyeLikeOp(OpDef):
    arity = 1

    def _dtype(self, ctx, x: DType) -> DType:
        dt = ctx.attr("dtype", None)
        return x if dt is None else onnx_dtype(dt)

    def infer(self, ctx):
        x = ctx.in_types[0]
        if x.rank != 2:
            raise ctx.error(f"input must have rank 2, got {x}")
        return [x.with_dtype(self._dtype(ctx, x.dtype))]

    def lower(self, ctx):
        y, k = ctx.out(0), ctx.attr("k", 0)
        emit(ctx, y, lambda ix: select((ix[1] - ix[0]).eq(k), KConst(1, y.dtype), KConst(0, y.dtype)))

    def reference(self, ctx, x):
        return [np.eye(x.shape[0], x.shape[1], ctx.attr("k", 0), dtype=ctx.out_type().dtype.np)]


# ---- OneHot -----------------------------------------------------------------------------------

@register("onnx.OneHot")
class OneHotOp(OpDef):
    arity = 3

    def infer(self, ctx):
        idx, _, vals = ctx.in_types
        rank = idx.rank + 1
        axis = norm_axis(ctx, ctx.attr("axis", -1), rank)
        depth = scalar_operand(ctx, 1)
        if isinstance(depth, float):
            depth = int(depth)
        if depth is None:
            depth = fresh_dim(ctx, "depth", "one-hot depth not known at compile time", 0, axis)
        elif isinstance(depth, int) and depth < 1:
            raise ctx.error(f"depth must be >= 1, got {depth}")
        shape = list(idx.shape)
        shape.insert(axis, depth)
        return [TensorType(vals.dtype, tuple(shape))]

    def lower(self, ctx):
        idx, _, vals = ctx.inputs
        y = ctx.out(0)
        axis = ctx.attr("axis", -1) % y.rank
        depth = dim_to_expr(y.shape[axis])
        off, on = vals[(0,)], vals[(1,)]

        def body(ix):
            i = cast(idx[ix[:axis] + ix[axis + 1:]], I64)
            i = select(i < 0, i + depth, i)  # out of range: all "off", no error
            return select(i.eq(ix[axis]), on, off)

        emit(ctx, y, body)

    def reference(self, ctx, idx, depth, vals):
        depth = int(np.asarray(depth).reshape(-1)[0])
        idx = np.asarray(idx).astype(np.int64)
        idx = np.where(idx < 0, idx + depth, idx)
        hot = idx[..., None] == np.arange(depth)
        axis = ctx.attr("axis", -1) % (idx.ndim + 1)
        hot = np.moveaxis(hot, -1, axis)
        off, on = np.asarray(vals).reshape(-1)[:2]
        return [np.where(hot, on, off).astype(vals.dtype)]


# ---- DepthToSpace, SpaceToDepth -------------------------------------------------------------

class _BlockMoveOp(OpDef):
    """DepthToSpace / SpaceToDepth: b x b blocks of an NCHW tensor between the channels and
    the plane, in DCR (depth-column-row) or CRD order."""

    arity = 1
    kind = "injective"

    def infer(self, ctx):
        x = ctx.in_types[0]
        if x.rank != 4:
            raise ctx.error(f"input must be NCHW (rank 4), got {x}")
        return [x.with_shape(self.moved_shape(ctx, x.shape, ctx.attr("blocksize")))]

    def moved_shape(self, ctx, shape: tuple, b: int) -> list:
        raise NotImplementedError

    @staticmethod
    def dcr(ctx) -> bool:
        return ctx.attr("mode", "DCR") == "DCR"


@register("onnx.DepthToSpace")
class DepthToSpaceOp(_BlockMoveOp):
    def moved_shape(self, ctx, shape, b):
        n, c, h, w = shape
        c2 = exact_div(ctx, c, b * b, f"depth-to-space channels by blocksize {b}^2")
        return [n, c2, None if h is None else h * b, None if w is None else w * b]

    def lower(self, ctx):
        x, y = ctx.inputs[0], ctx.out(0)
        b = ctx.attr("blocksize")
        c2 = dim_to_expr(y.shape[1])
        dcr = self.dcr(ctx)

        def body(ix):
            n, c, h, w = ix
            bh, bw = h % b, w % b
            ch = (bh * b + bw) * c2 + c if dcr else (c * b + bh) * b + bw
            return x[n, ch, h // b, w // b]

        emit(ctx, y, body)

    def reference(self, ctx, x):
        b = ctx.attr("blocksize")
        n, c, h, w = x.shape
        if self.dcr(ctx):
            t = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
        else:
            t = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
        return [t.reshape(n, c // (b * b), h * b, w * b)]


@register("onnx.SpaceToDepth")
class SpaceToDepthOp(_BlockMoveOp):
    def moved_shape(self, ctx, shape, b):
        n, c, h, w = shape
        h2 = exact_div(ctx, h, b, f"space-to-depth height by blocksize {b}")
        w2 = exact_div(ctx, w, b, f"space-to-depth width by blocksize {b}")
        return [n, None if c is None else c * b * b, h2, w2]

    def lower(self, ctx):
        x, y = ctx.inputs[0], ctx.out(0)
        b = ctx.attr("blocksize")
        c = dim_to_expr(x.shape[1])
        dcr = self.dcr(ctx)

        def body(ix):
            n, oc, h, w = ix
            if dcr:  # oc = (bh * b + bw) * C + c
                blk, ci = oc // c, oc % c
            else:  # CRD: oc = c * b * b + bh * b + bw
                blk, ci = oc % (b * b), oc // (b * b)
            return x[n, ci, h * b + blk // b, w * b + blk % b]

        emit(ctx, y, body)

    def reference(self, ctx, x):
        b = ctx.attr("blocksize")
        n, c, h, w = x.shape
        perm = (0, 3, 5, 1, 2, 4) if self.dcr(ctx) else (0, 1, 3, 5, 2, 4)  # CRD: opset 24
        t = x.reshape(n, c, h // b, b, w // b, b).transpose(perm)
        return [t.reshape(n, c * b * b, h // b, w // b)]


# ---- ScatterND, ScatterElements -----------------------------------------------------------------

_REDUCE = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _scatter(out: np.ndarray, index: tuple, updates: np.ndarray, reduction: str) -> np.ndarray:
    if reduction == "none":
        out[index] = updates
    elif reduction in _REDUCE:
        _REDUCE[reduction].at(out, index, updates)
    else:
        raise ValueError(f"unknown reduction {reduction!r}")
    return out


def _scatter_value(red: str, old: Expr, box, match: Expr, update, q: tuple, qshape) -> Expr:
    """The output element of a scatter: `old` combined with the updates whose target is this
    element. `box` = [(var, extent)] runs over the update positions `q` (shape `qshape`),
    `match` says whether position q targets this element, `update(at)` loads the update at
    index tuple `at`. Without a reduction the last matching update wins (ONNX leaves duplicate
    indices undefined there)."""
    dt = old.dtype
    if red == "none":
        last = rmax(box, select(match, flatten_index(q, qshape), KConst(-1, I64)))
        at = unflatten_index(last, qshape) if q else ()
        return select(last >= 0, update(at), old)
    if red in ("add", "mul"):
        unit = KConst(0 if red == "add" else 1, dt)
        acc = (rsum if red == "add" else rprod)(box, select(match, update(q), unit))
        return old + acc if red == "add" else old * acc
    if red in ("max", "min"):
        if dt.is_float:
            far = float("-inf") if red == "max" else float("inf")
        elif dt is DType.bool:
            far = red != "max"
        else:
            info = np.iinfo(dt.np)
            far = int(info.min if red == "max" else info.max)
        acc = (rmax if red == "max" else rmin)(box, select(match, update(q), KConst(far, dt)))
        return maximum(old, acc) if red == "max" else minimum(old, acc)
    raise ValueError(f"unknown scatter reduction {red!r}")


@register("onnx.ScatterND")
class ScatterNDOp(OpDef):
    arity = 3

    def infer(self, ctx):
        x, idx, upd = ctx.in_types
        last = idx.shape[-1] if idx.rank else None
        if isinstance(last, int):
            if last > x.rank:
                raise ctx.error(f"index length {last} exceeds data rank {x.rank}")
            want = idx.shape[:-1] + x.shape[last:]
            if upd.rank != len(want):
                raise ctx.error(f"updates must have rank {len(want)}, got {upd}")
            for i, (a, b) in enumerate(zip(upd.shape, want)):
                ctx.require_eq(a, b, f"updates dim {i}")
        return [x]

    def lower(self, ctx):
        x, idx, upd = ctx.inputs
        y = ctx.out(0)
        last = idx.shape[-1]
        batch = idx.shape[:-1]
        red = ctx.attr("reduction", "none")
        if red == "none":  # push form: output + updates work instead of output x updates
            scatter_writes(ctx, y, x, (*batch, *x.shape[last:]),
                           lambda s: tuple(wrap_index(idx[(*s[:len(batch)], k)], x.shape[k]) for k in range(last))
                           + s[len(batch):], lambda s: upd[s])
            return
        qs = [fresh_var("q") for _ in batch] or [fresh_var("q")]
        q = tuple(qs[:len(batch)])
        box = list(zip(qs, batch)) if batch else [(qs[0], 1)]

        def body(ix):
            match = None
            for k in range(last):
                t = wrap_index(idx[q + (k,)], x.shape[k]).eq(ix[k])
                match = t if match is None else match & t
            if match is None:  # an empty index tuple replaces the whole tensor
                match = KConst(True, DType.bool)
            return _scatter_value(red, x[ix], box, match,
                                  lambda at: upd[at + ix[last:]], q, batch)

        emit(ctx, y, body)

    def reference(self, ctx, x, idx, upd):
        idx = np.asarray(idx).astype(np.int64)
        last = idx.shape[-1]
        idx = np.where(idx < 0, idx + np.array(x.shape[:last]), idx).reshape(-1, last)
        upd = upd.reshape((idx.shape[0],) + x.shape[last:])
        return [_scatter(x.copy(), tuple(idx.T), upd, ctx.attr("reduction", "none"))]


@register("onnx.ScatterElements")
class ScatterElementsOp(OpDef):
    arity = 3

    def infer(self, ctx):
        x, idx, upd = ctx.in_types
        if not x.rank == idx.rank == upd.rank:
            raise ctx.error(f"data, indices and updates must have one rank, got {x}, {idx}, {upd}")
        norm_axis(ctx, ctx.attr("axis", 0), x.rank)
        for i, (a, b) in enumerate(zip(idx.shape, upd.shape)):
            ctx.require_eq(a, b, f"indices and updates dim {i}")
        return [x]

    def lower(self, ctx):
        x, idx, upd = ctx.inputs
        y = ctx.out(0)
        axis = ctx.attr("axis", 0) % x.rank
        red = ctx.attr("reduction", "none")
        if red == "none":
            scatter_writes(ctx, y, x, idx.shape,
                           lambda s: (*s[:axis], wrap_index(idx[s], x.shape[axis]), *s[axis + 1:]),
                           lambda s: upd[s])
            return
        m = fresh_var("m")

        def body(ix):
            p = ix[:axis] + (m,) + ix[axis + 1:]
            match = wrap_index(idx[p], x.shape[axis]).eq(ix[axis])
            inside = None  # indices / updates may be smaller than data off the axis
            for k in range(x.rank):
                if k != axis and not same_dim(idx.shape[k], x.shape[k]):
                    t = ix[k] < dim_to_expr(idx.shape[k])
                    inside = t if inside is None else inside & t
            v = _scatter_value(red, x[ix], [(m, idx.shape[axis])], match,
                               lambda at: upd[ix[:axis] + at + ix[axis + 1:]], (m,), (idx.shape[axis],))
            return v if inside is None else select(inside, v, x[ix])

        emit(ctx, y, body)

    def reference(self, ctx, x, idx, upd):
        axis = ctx.attr("axis", 0) % x.ndim
        idx = np.asarray(idx).astype(np.int64)
        idx = np.where(idx < 0, idx + x.shape[axis], idx)
        grid = list(np.indices(idx.shape, sparse=True))
        grid[axis] = idx
        full = tuple(np.broadcast_to(g, idx.shape) for g in grid)
        return [_scatter(x.copy(), full, upd, ctx.attr("reduction", "none"))]


# ---- TopK (NonZero: data_dependent.py) ------------------------------------------------

@register("onnx.TopK")
class TopKOp(OpDef):
    arity = 2
    num_results = 2

    def infer(self, ctx):
        x = ctx.in_types[0]
        axis = norm_axis(ctx, ctx.attr("axis", -1), x.rank)
        k = known_dims(ctx, 1)
        if k is None or len(k) != 1:
            kd = fresh_dim(ctx, "topk", "top-k count not known at compile time", 0, axis)
        else:
            kd = k[0]
            if isinstance(kd, int) and kd < 0:
                raise ctx.error(f"k must be >= 0, got {kd}")
            if ctx.symbols.prove_le(kd, x.shape[axis]) is not True:
                ctx.require(sympy.Le(kd, x.shape[axis]), f"top-k count {kd} within axis {axis} ({x.shape[axis]})")
        shape = x.shape[:axis] + (kd,) + x.shape[axis + 1:]
        return [x.with_shape(shape), TensorType(I64, shape)]

    def lower(self, ctx):
        x = ctx.inputs[0]
        vals, inds = ctx.out(0), ctx.out(1)
        axis = ctx.attr("axis", -1) % x.rank
        largest = ctx.attr("largest", 1)
        n = x.shape[axis]
        # rank[.., j, ..] = how many elements precede x[.., j, ..] in the order (ties: lower index first)
        rank = ctx.temp(I64, x.shape, "topk_rank")
        m = fresh_var("m")

        def rank_body(ix):
            xj = x[ix]
            xm = x[ix[:axis] + (m,) + ix[axis + 1:]]
            before = (xm > xj) if largest else (xm < xj)
            before = before | (xm.eq(xj) & (m < ix[axis]))
            return rsum([(m, n)], cast(before, I64))

        emit(ctx, rank, rank_body)
        j = fresh_var("j")
        emit(ctx, inds, lambda ix: rsum([(j, n)], select(
            rank[ix[:axis] + (j,) + ix[axis + 1:]].eq(ix[axis]), j, KConst(0, I64))))
        if set(map(str, sympy.sympify(n).free_symbols)) & ctx.program.late_dims:
            # n is a run-time count (NonZero...), maybe 0: `k <= n` could not be proved or
            # checked before the run (symbols are positive to sympy), so the kernel checks it
            k = dim_to_expr(vals.shape[axis])
            emit(ctx, vals, lambda ix: check(k <= dim_to_expr(n), x[ix[:axis] + (inds[ix],) + ix[axis + 1:]],
                                             ERR_ASSERT))
            return
        emit(ctx, vals, lambda ix: x[ix[:axis] + (inds[ix],) + ix[axis + 1:]])

    def reference(self, ctx, x, k):
        k = int(np.asarray(k).reshape(-1)[0])
        axis = ctx.attr("axis", -1) % x.ndim
        xm = np.moveaxis(x, axis, -1)
        if ctx.attr("largest", 1):  # descending; ties keep the lower index first
            order = np.argsort(xm[..., ::-1], axis=-1, kind="stable")[..., ::-1]
            order = xm.shape[-1] - 1 - order
        else:
            order = np.argsort(xm, axis=-1, kind="stable")
        idx = order[..., :k]
        vals = np.take_along_axis(xm, idx, axis=-1)
        return [np.moveaxis(vals, -1, axis), np.moveaxis(idx, -1, axis).astype(np.int64)]


# ---- ReverseSequence --------------------------------------------------------------------------

@register("onnx.ReverseSequence")
class ReverseSequenceOp(OpDef):
    """Reverse the first `sequence_lens[b]` steps along `time_axis` of every batch entry `b`
    (along `batch_axis`); the steps after that stay in place."""

    arity = 2
    kind = "injective"

    def _axes(self, ctx, rank: int) -> tuple[int, int]:
        t, b = ctx.attr("time_axis", 0), ctx.attr("batch_axis", 1)
        if sorted((t, b)) != [0, 1]:
            raise ctx.error(f"time_axis and batch_axis must be 0 and 1 in some order, got {t}, {b}")
        return t, b

    def infer(self, ctx):
        x, lens = ctx.in_types
        if x.rank < 2:
            raise ctx.error(f"input must have rank >= 2, got {x}")
        _, b = self._axes(ctx, x.rank)
        if lens.rank != 1 or lens.dtype is not DType.i64:
            raise ctx.error(f"sequence_lens must be a 1-D int64 tensor, got {lens}")
        ctx.require_eq(lens.shape[0], x.shape[b], "sequence_lens length == batch size")
        return [x]

    def lower(self, ctx):
        x, lens = ctx.inputs
        t, b = self._axes(ctx, x.rank)

        def body(ix):
            n = clamp(cast(lens[(ix[b],)], I64), 0, dim_to_expr(x.shape[t]))
            src = select(ix[t] < n, n - 1 - ix[t], ix[t])
            return x[tuple(src if k == t else v for k, v in enumerate(ix))]

        emit(ctx, ctx.out(0), body)

    def reference(self, ctx, x, lens):
        t, b = self._axes(ctx, x.ndim)
        y = x.copy()
        for k, n in enumerate(np.asarray(lens).reshape(-1)):
            n = int(min(max(n, 0), x.shape[t]))
            src = [slice(None)] * x.ndim
            src[b], src[t] = k, slice(None, n)
            y[tuple(src)] = np.flip(x[tuple(src)], axis=t - (1 if b < t else 0))
        return [y]


# ---- MeanVarianceNormalization, Swish ------------------------------------------------------------

#: the spec's function body adds this to the standard deviation (not to the variance)
_MVN_EPS = 1e-9


def mean_variance_normalization(x, axes):
    """(x - E[x]) / (sqrt(E[x^2] - E[x]^2) + 1e-9) over `axes`, as the spec's function body."""
    mean = np.mean(x, axis=axes, keepdims=True)
    var = np.mean(x * x, axis=axes, keepdims=True) - mean * mean
    return (x - mean) / (np.sqrt(var) + x.dtype.type(_MVN_EPS))


@register("onnx.MeanVarianceNormalization")
class MeanVarianceNormalizationOp(OpDef):
    arity = 1
    kind = "reduction"

    def _axes(self, ctx, rank: int) -> tuple[int, ...]:
        axes = ctx.attr("axes", [0, 2, 3])
        out = []
        for a in axes:
            if not -rank <= a < rank:
                raise ctx.error(f"axis {a} out of range for rank {rank}")
            out.append(a % rank)
        if len(set(out)) != len(out):
            raise ctx.error(f"repeated axes {list(axes)}")
        return tuple(sorted(out))

    def infer(self, ctx):
        x = ctx.in_types[0]
        if not x.dtype.is_float:
            raise ctx.error(f"input must be a float tensor, got {x.dtype.value}")
        self._axes(ctx, x.rank)
        return [x]

    def lower(self, ctx):
        """The statistics over `axes` into two temps over the kept dims (the mean, and the
        spec's denominator sqrt(E[x^2] - mean^2) + 1e-9), then one elementwise compute. Written
        inside the per-element compute, the sums were hoisted out of the innermost loop only:
        recomputed per row, 22x onnxruntime's time on (2, 32, 56, 56)."""
        x = ctx.inputs[0]
        axes = self._axes(ctx, x.rank)
        y = ctx.out(0)
        dt = DType.f32 if x.dtype in (DType.f16, DType.bf16) else x.dtype
        count = cast(dim_to_expr(canon(sympy.prod([x.shape[a] for a in axes]))), dt)
        kept = [k for k in range(x.rank) if k not in axes]

        def over(o, tag, fn):
            vs = {a: fresh_var(f"{tag}{a}") for a in axes}
            at = dict(zip(kept, o))
            v = cast(x[tuple(vs[k] if k in vs else at[k] for k in range(x.rank))], dt)
            return rsum([(vs[a], x.shape[a]) for a in axes], fn(v)) if axes else fn(v)

        mean_t = ctx.temp(dt, [x.shape[k] for k in kept], "mvn_mean")
        den_t = ctx.temp(dt, [x.shape[k] for k in kept], "mvn_den")
        emit(ctx, mean_t, lambda o: over(o, "m", lambda v: v) / count)

        def den(o):
            mean = mean_t[o]
            return sqrt(over(o, "s", lambda v: v * v) / count - mean * mean) + KConst(_MVN_EPS, dt)

        emit(ctx, den_t, den)

        def body(ix):
            o = tuple(ix[k] for k in kept)
            return cast((cast(x[ix], dt) - mean_t[o]) / den_t[o], y.dtype)

        emit(ctx, y, body)

    def reference(self, ctx, x):
        xw = x.astype(np.float32) if x.dtype == np.float16 else x
        return [mean_variance_normalization(xw, self._axes(ctx, x.ndim)).astype(x.dtype)]


@register("onnx.Swish")
class SwishOp(OpDef):
    """x * sigmoid(alpha * x)."""

    arity = 1
    kind = "elementwise"

    def infer(self, ctx):
        x = ctx.in_types[0]
        if not x.dtype.is_float:
            raise ctx.error(f"input must be a float tensor, got {x.dtype.value}")
        return [x]

    def lower(self, ctx):
        x, y = ctx.inputs[0], ctx.out(0)
        alpha = float(ctx.attr("alpha", 1.0))
        dt = DType.f32 if x.dtype in (DType.f16, DType.bf16) else x.dtype

        def body(ix):
            v = cast(x[ix], dt)
            return cast(v * sigmoid(v * KConst(alpha, dt)), y.dtype)

        emit(ctx, y, body)

    def reference(self, ctx, x):
        xw = x.astype(np.float32) if x.dtype == np.float16 else x
        alpha = xw.dtype.type(ctx.attr("alpha", 1.0))
        return [(xw / (1 + np.exp(-alpha * xw))).astype(x.dtype)]


# ---- CenterCropPad ------------------------------------------------------------------------------

@register("onnx.CenterCropPad")
class CenterCropPadOp(OpDef):
    """Each listed axis becomes its target length: a longer input is cropped around its center
    (the window starting at floor((in - target) / 2)), a shorter one zero-padded on both sides
    (floor((target - in) / 2) before it, the odd pixel after). The targets come from the
    `shape` input: known at compile time, or a data-dependent dim (not compiled)."""

    arity = 2
    kind = "injective"

    def _axes(self, ctx, rank: int) -> list[int]:
        axes = ctx.attr("axes", None)
        axes = list(range(rank)) if axes is None else [norm_axis(ctx, a, rank) for a in axes]
        if len(set(axes)) != len(axes):
            raise ctx.error(f"repeated axes {axes}")
        return axes

    def infer(self, ctx):
        x, s = ctx.in_types
        axes = self._axes(ctx, x.rank)
        if s.rank != 1 or not s.dtype.is_int:
            raise ctx.error(f"shape must be a 1-D integer tensor, got {s}")
        ctx.require_eq(s.shape[0], len(axes), "shape length == number of axes")
        known = ctx.known_ints(1)
        if known is not None and any(v < 0 for v in known):
            raise ctx.error(f"negative target dims {known}")
        out = list(x.shape)
        for k, a in enumerate(axes):
            out[a] = known[k] if known is not None else \
                fresh_dim(ctx, f"crop{a}", "target from the shape input", dim=a)
        return [x.with_shape(tuple(out))]

    def lower(self, ctx):
        x, y = ctx.inputs[0], ctx.out(0)
        axes = self._axes(ctx, x.rank)
        zero = KConst(False if x.dtype is DType.bool else 0, x.dtype)

        def body(ix):
            src, inside = list(ix), None
            for a in axes:
                n, t = dim_to_expr(x.shape[a]), dim_to_expr(y.shape[a])
                s = select(n >= t, ix[a] + (n - t) // 2, ix[a] - (t - n) // 2)
                ok = (s >= 0) & (s < n)
                src[a], inside = s, ok if inside is None else inside & ok
            v = x[tuple(src)]
            return v if inside is None else select(inside, v, zero)

        emit(ctx, y, body)

    def reference(self, ctx, x, shape):
        axes = self._axes(ctx, x.ndim)
        out_shape = list(x.shape)
        for a, t in zip(axes, np.asarray(shape).reshape(-1)):
            out_shape[a] = int(t)
        y = np.zeros(out_shape, x.dtype)
        src, dst = [slice(None)] * x.ndim, [slice(None)] * x.ndim
        for a in axes:
            n, t = x.shape[a], out_shape[a]
            if n >= t:
                st = (n - t) // 2
                src[a], dst[a] = slice(st, st + t), slice(0, t)
            else:
                st = (t - n) // 2
                src[a], dst[a] = slice(0, n), slice(st, st + n)
        y[tuple(dst)] = x[tuple(src)]
        return [y]


# ---- bucketing
set_pad(PadRule("pad"), "onnx.Pad")
