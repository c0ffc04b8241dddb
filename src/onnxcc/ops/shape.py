"""Shape and data-movement ops: symbolic shape rules, value propagation, numpy references.

Shape, Size, Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Concat, Split, Slice, Expand,
Tile, Range, ConstantOfShape, Identity (Gather, GatherElements and GatherND: gather.py).

Value propagation is what makes exported shape chains work: `Shape(x)` yields the object
array of x's dims, Gather / Slice / Concat / Unsqueeze / ... move those dims around, and
Reshape / Expand / Tile / ConstantOfShape read their target from the propagated value, so

    Shape(x) -> Gather(0) -> Unsqueeze -> Concat([.., 4, 64]) -> Reshape

gives `f32[batch, seq, 4, 64]` rather than a shape full of unknowns. The helpers at the top
(`simplify`, `fresh_dim`, `exact_div`, `slice_dim`, ...) are shared with misc.py and
control_flow.py.

Lowerings: Reshape, Flatten, Squeeze, Unsqueeze and Identity are views (no copy); the rest
are one index-mapping compute each. Extents always come from the result types (which are
symbolic); what else a lowering needs (Slice starts, Pad pads...) is folded when the
compiler knows it (`lowered_value`: constants, propagated values, `cc.dims`) and loaded from
the operand at run time otherwise. Data-dependent indices go through `wrap_index`, so an
out-of-range index makes the kernel fail with ERR_INDEX instead of reading stray memory.
"""

from __future__ import annotations

import numpy as np
import sympy

from ..errors import UnsupportedOp
from ..ir import Dim, DType, TensorType, canon, identical
from ..kernel import (
    Const as KConst,
)
from ..kernel import (
    broadcast_indices,
    cast,
    dim_to_expr,
    flatten_index,
    select,
    unflatten_index,
)
from .registry import OpDef, RefCtx, get_opdef, onnx_inputs, register

# shared helpers, re-exported: misc.py and control_flow.py import them from here
from .shape_util import (  # noqa: F401
    I64,
    MAX_VALUE,
    const_value,
    divides,
    emit,
    exact_div,
    fresh_dim,
    is_negative,
    known_dims,
    lowered_ints,
    lowered_value,
    nonneg,
    norm_axis,
    obj,
    onnx_slice,
    prod,
    same_dim,
    scalar,
    simplify,
    slice_dim,
    static_ints,
    value_expr,
    value_shape_ok,
)
from .slice_run import bind_lengths, may_run_empty, slice_start, slice_symbol, span_bound
from .traits import PadRule, set_canonical, set_pad

# ---- Shape, Size, Identity ----------------------------------------------------------------

def _shape_range(ctx, rank: int) -> tuple[int, int]:
    start, end = ctx.attr("start", 0), ctx.attr("end", None)
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = rank if end is None else min(max(end + rank if end < 0 else end, 0), rank)
    return start, max(start, end)


@register("onnx.Shape")
class ShapeOp(OpDef):
    arity = 1

    def infer(self, ctx):
        s, e = _shape_range(ctx, ctx.in_types[0].rank)
        return [TensorType(I64, (e - s,))]

    def value(self, ctx):
        shape = ctx.in_types[0].shape
        s, e = _shape_range(ctx, len(shape))
        dims = shape[s:e]
        return None if any(d is None for d in dims) else [obj(dims, (len(dims),))]

    def lower(self, ctx):
        x, y = ctx.inputs[0], ctx.out(0)
        s, e = _shape_range(ctx, x.rank)
        dims = [dim_to_expr(d) for d in x.shape[s:e]]

        def body(ix):
            if not dims:
                return 0
            out = dims[-1]
            for j in range(len(dims) - 2, -1, -1):
                out = select(ix[0].eq(j), dims[j], out)
            return out

        emit(ctx, y, body)

    def reference(self, ctx, x):
        s, e = _shape_range(ctx, x.ndim)
        return [np.array(x.shape[s:e], dtype=np.int64)]


@register("onnx.Size")
class SizeOp(OpDef):
    arity = 1

    def infer(self, ctx):
        return [TensorType(I64, ())]

    def value(self, ctx):
        n = ctx.in_types[0].numel()
        return None if n is None else [obj([n], ())]

    def lower(self, ctx):
        emit(ctx, ctx.out(0), lambda ix: dim_to_expr(ctx.inputs[0].numel()))

    def reference(self, ctx, x):
        return [np.array(x.size, dtype=np.int64)]


def view_or_copy(ctx) -> None:
    """Result 0 is operand 0 with another shape (Reshape, Flatten, Squeeze, Unsqueeze): a view.

    Where the element counts are equal only under a recorded constraint (torch's legacy
    exporter bakes a traced length into some reshape targets: f32[seq, batch, 64] to
    [5, 4*batch, 16], valid only for seq == 5; a Squeeze of a dim a version's guard makes 1),
    checked at run time, a view must still have provably the same size as its buffer, so
    copy through the row-major flat index instead."""
    x, y = ctx.in_type(0), ctx.out_type(0)
    if identical(x.numel(), y.numel()):
        ctx.alias(0, 0)
        return
    src = ctx.inputs[0]
    emit(ctx, ctx.out(0), lambda ix: src[unflatten_index(flatten_index(ix, y.shape), x.shape)])


class IdentityOp(OpDef):
    arity = 1
    kind = "elementwise"

    def infer(self, ctx):
        return [ctx.in_types[0]]

    def value(self, ctx):
        return [ctx.known(0)]

    def lower(self, ctx):
        ctx.alias(0, 0)

    def reference(self, ctx, x):
        return [x]


if get_opdef("onnx.Identity") is None:  # the elementwise family may define it first
    register("onnx.Identity")(IdentityOp)


# ---- Reshape, Flatten, Squeeze, Unsqueeze, Transpose --------------------------------------------

def _check_symbolic_target(ctx, x: TensorType, i: int, t: Dim, allowzero: int) -> None:
    """A computed target entry must not be -1 at run time, nor 0 where 0 would mean "copy
    the input dim" and that dim is not the same value anyway."""
    if ctx.symbols.prove_le(0, t) is not True:
        ctx.require(sympy.Ge(t, 0), f"reshape target dim {i} must not be negative")
    if allowzero or ctx.symbols.prove_le(1, t) is True:
        return
    if i < x.rank and ctx.symbols.prove_eq(x.shape[i], t) is True:
        return
    ctx.require(sympy.Ge(t, 1), f"reshape target dim {i} must not be 0 (copy)")


class _ViewOp(OpDef):
    """Operand 0 in another shape (Reshape, Flatten, Squeeze, Unsqueeze): a view where the
    element counts are provably equal (`view_or_copy`), and a small tensor's known values
    carried over in the result's shape."""

    arity = 1
    kind = "injective"

    def value(self, ctx):
        v, t = ctx.known(0), ctx.op.results[0].type
        if v is None or not value_shape_ok(t):
            return None
        return [np.asarray(v, dtype=object).reshape(t.shape)]

    def lower(self, ctx):
        view_or_copy(ctx)


@register("onnx.Reshape")
class ReshapeOp(_ViewOp):
    arity = 2
    size_operands = (1,)

    def infer(self, ctx):
        x, tt = ctx.in_types
        if tt.rank != 1 or tt.shape[0] is None or not isinstance(tt.shape[0], int):
            raise UnsupportedOp("Reshape", "", ctx.loc, f"target shape of type {tt} has no static length")
        target = known_dims(ctx, 1)
        if target is None:  # last resort: the run decides every dim
            return [x.with_shape([fresh_dim(ctx, "reshape", f"reshape target dim {i} not known at compile time",
                                            0, i) for i in range(tt.shape[0])])]
        allowzero = ctx.attr("allowzero", 0)
        out: list = []
        infer_at = None
        for i, t in enumerate(target):
            if isinstance(t, int) and t == 0 and not allowzero:
                if i >= x.rank:
                    raise ctx.error(f"target dim {i} is 0 (copy) but the input has rank {x.rank}")
                out.append(x.shape[i])
            elif isinstance(t, int) and t == -1:
                if infer_at is not None:
                    raise ctx.error(f"target has more than one -1 (dims {infer_at} and {i})")
                infer_at = i
                out.append(None)
            elif isinstance(t, int) and t < 0:
                raise ctx.error(f"target dim {i} is {t}; expected -1, 0 or a positive size")
            else:
                if not isinstance(t, int):
                    _check_symbolic_target(ctx, x, i, t, allowzero)
                out.append(t)
        numel = x.numel()
        if infer_at is not None:
            rest = prod(d for j, d in enumerate(out) if j != infer_at)
            q = exact_div(ctx, numel, rest, f"reshape of {x} to {target}: the -1 dim")
            if q is None:
                q = fresh_dim(ctx, "reshape", "reshape -1 dim of an input with unknown dims", 0, infer_at)
            out[infer_at] = q
        elif numel is not None:
            ctx.require_eq(numel, prod(out), f"reshape element count of {x} to {target}")
        return [x.with_shape(out)]

    def reference(self, ctx, x, shape):
        shape = static_ints(ctx, shape)
        if not ctx.attr("allowzero", 0):
            shape = [x.shape[i] if s == 0 else s for i, s in enumerate(shape)]
        return [x.reshape(shape)]


@register("onnx.Flatten")
class FlattenOp(_ViewOp):

    def infer(self, ctx):
        x = ctx.in_types[0]
        axis = ctx.attr("axis", 1)
        if not -x.rank <= axis <= x.rank:
            raise ctx.error(f"axis {axis} out of range for rank {x.rank}")
        axis = axis + x.rank if axis < 0 else axis
        return [x.with_shape([prod(x.shape[:axis]), prod(x.shape[axis:])])]

    def reference(self, ctx, x):
        axis = ctx.attr("axis", 1)
        axis = axis + x.ndim if axis < 0 else axis
        return [x.reshape(int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:])))]


class _AxesUnknown(Exception):
    pass


def _axes(ctx, i: int = 1) -> list[int] | None:
    """Axes from the `axes` attribute (old opsets) or operand i (opset 13+); None if absent."""
    if "axes" in ctx.op.attrs:
        return list(ctx.attr("axes"))
    if i >= len(ctx.op.operands):
        return None
    v = ctx.known_ints(i)
    if v is None:
        raise _AxesUnknown
    return v


def _unknown_axes_result(ctx, x: TensorType, sign: int) -> list[TensorType]:
    """Squeeze / Unsqueeze with axes only the run knows: the rank follows from the axes'
    length, every dim is the run's to tell (last resort)."""
    t = ctx.in_types[1]
    if t.rank != 1 or not isinstance(t.shape[0], int):
        raise UnsupportedOp(ctx.op.opname, "", ctx.loc, f"axes of type {t} have no static length")
    rank = x.rank + sign * t.shape[0]
    return [x.with_shape([fresh_dim(ctx, ctx.op.opname.lower(), f"dim {i}: axes not known at compile time", 0, i)
                          for i in range(rank)])]


def _ref_axes(ctx: RefCtx, args) -> list[int] | None:
    if "axes" in ctx.op.attrs:
        return list(ctx.attr("axes"))
    return static_ints(ctx, args[0]) if args else None


class _AxesOp(_ViewOp):
    """Squeeze / Unsqueeze: dims dropped / inserted at the axes of the `axes` attribute (old
    opsets) or operand 1; `rank_step` dims per axis, -1 or 1."""

    arity = (1, 2)
    rank_step = 0

    def infer(self, ctx):
        x = ctx.in_types[0]
        try:
            axes = _axes(ctx)
        except _AxesUnknown:
            return _unknown_axes_result(ctx, x, self.rank_step)
        return self.infer_axes(ctx, x, axes)

    def infer_axes(self, ctx, x: TensorType, axes: list[int] | None) -> list[TensorType]:
        raise NotImplementedError


@register("onnx.Squeeze")
class SqueezeOp(_AxesOp):
    rank_step = -1

    def infer_axes(self, ctx, x, axes):
        if axes is None:  # squeeze every dim that is 1; a symbol is kept and must not be 1
            out = []
            for i, d in enumerate(x.shape):
                if isinstance(d, int) and d == 1:
                    continue
                if d is not None and not isinstance(d, int) and ctx.symbols.prove_le(2, d) is not True:
                    ctx.require(sympy.Ne(d, 1), f"squeeze without axes keeps dim {i} ({d}), so it must not be 1")
                out.append(d)
            return [x.with_shape(out)]
        axes = {norm_axis(ctx, a, x.rank) for a in axes}
        for a in axes:
            ctx.require_eq(x.shape[a], 1, f"squeeze of dim {a}")
        return [x.with_shape([d for i, d in enumerate(x.shape) if i not in axes])]

    def reference(self, ctx, x, *rest):
        axes = _ref_axes(ctx, rest)
        if axes is None:
            return [np.squeeze(x)]
        return [np.squeeze(x, axis=tuple(a % x.ndim for a in axes))]


@register("onnx.Unsqueeze")
class UnsqueezeOp(_AxesOp):
    rank_step = 1

    def infer_axes(self, ctx, x, axes):
        if axes is None:
            raise ctx.error("unsqueeze needs axes")
        rank = x.rank + len(axes)
        axes = sorted(norm_axis(ctx, a, rank) for a in axes)
        if len(set(axes)) != len(axes):
            raise ctx.error(f"repeated axes {axes}")
        it = iter(x.shape)
        return [x.with_shape([1 if i in axes else next(it) for i in range(rank)])]

    def reference(self, ctx, x, *rest):
        axes = _ref_axes(ctx, rest)
        rank = x.ndim + len(axes)
        axes = {a % rank for a in axes}
        it = iter(x.shape)
        return [x.reshape([1 if i in axes else next(it) for i in range(rank)])]


def _perm(ctx, rank: int) -> list[int]:
    perm = ctx.attr("perm", None)
    return list(range(rank))[::-1] if perm is None else list(perm)


@register("onnx.Transpose")
class TransposeOp(OpDef):
    arity = 1
    kind = "injective"

    def infer(self, ctx):
        x = ctx.in_types[0]
        perm = _perm(ctx, x.rank)
        if sorted(perm) != list(range(x.rank)):
            raise ctx.error(f"perm {perm} is not a permutation of the {x.rank} input dims")
        return [x.with_shape([x.shape[p] for p in perm])]

    def value(self, ctx):
        v = ctx.known(0)
        return None if v is None else [np.transpose(v, _perm(ctx, v.ndim))]

    def lower(self, ctx):
        x = ctx.inputs[0]
        perm = [p % x.rank for p in _perm(ctx, x.rank)]
        inv = [perm.index(k) for k in range(x.rank)]
        emit(ctx, ctx.out(0), lambda ix: x[tuple(ix[inv[k]] for k in range(x.rank))])

    def reference(self, ctx, x):
        return [np.transpose(x, _perm(ctx, x.ndim))]


# ---- Concat, Split ------------------------------------------------------------------------------

def concat_offsets(parts, axis: int) -> list:
    """where each part starts along `axis`, and the total last"""
    offsets = [0]
    for b in parts:
        offsets.append(canon(offsets[-1] + b.shape[axis]))
    return offsets


def concat_select(parts, axis: int, ix):
    """element `ix` of the concatenation of the buffers `parts` along `axis`: a balanced tree
    of lazy selects (kernel/conv_concat.py rebuilds it to recognise a Concat's compute)"""
    offsets = concat_offsets(parts, axis)

    def pick(lo, hi):  # parts lo..hi-1
        if hi - lo == 1:
            at = ix[axis] - dim_to_expr(offsets[lo])
            return parts[lo][ix[:axis] + (at,) + ix[axis + 1:]]
        mid = (lo + hi) // 2
        return select(ix[axis] < dim_to_expr(offsets[mid]), pick(lo, mid), pick(mid, hi))

    return pick(0, len(parts))


@register("onnx.Concat")
class ConcatOp(OpDef):
    arity = (1, None)
    kind = "injective"

    def infer(self, ctx):
        ts = ctx.in_types
        rank = ts[0].rank
        for i, t in enumerate(ts):
            if t.rank != rank:
                raise ctx.error(f"input {i} has rank {t.rank}, expected {rank} like input 0")
        axis = norm_axis(ctx, ctx.attr("axis"), rank)
        out = list(ts[0].shape)
        for i, t in enumerate(ts[1:], 1):
            for j in range(rank):
                if j != axis:
                    out[j] = ctx.require_eq(out[j], t.shape[j], f"concat input {i} dim {j}")
        out[axis] = _sum(t.shape[axis] for t in ts)
        return [ts[0].with_shape(out)]

    def value(self, ctx):
        vs = [ctx.known(i) for i in range(len(ctx.op.operands))]
        if any(v is None for v in vs) or not value_shape_ok(ctx.op.results[0].type):
            return None
        return [np.concatenate(vs, axis=ctx.attr("axis") % vs[0].ndim)]

    def lower(self, ctx):
        y = ctx.out(0)
        axis = ctx.attr("axis") % y.rank
        parts = [b for b in ctx.inputs if not (isinstance(b.shape[axis], int) and b.shape[axis] == 0)]
        emit(ctx, y, lambda ix: concat_select(parts or ctx.inputs[:1], axis, ix))

    def reference(self, ctx, *xs):
        return [np.concatenate(xs, axis=ctx.attr("axis"))]


def _sum(dims) -> Dim:
    total: Dim = 0
    for d in dims:
        if d is None:
            return None
        total = total + d
    return canon(total)


def _split_sizes(ctx, dim: Dim, n: int) -> list[Dim]:
    """Sizes of an unspecified split into n parts (equal, or ONNX 18's smaller last part)."""
    if "num_outputs" not in ctx.op.attrs:
        q = exact_div(ctx, dim, n, f"split of dim {dim} into {n} equal parts")
        return [q] * n
    if isinstance(dim, int):
        chunk = -(-dim // n)
    else:
        chunk = canon(sympy.ceiling(sympy.sympify(dim) / n))
    return [chunk] * (n - 1) + [canon(dim - (n - 1) * chunk)]


@register("onnx.Split")
class SplitOp(OpDef):
    arity = (1, 2)
    num_results = None

    def _sizes(self, ctx) -> tuple[int, list]:
        x = ctx.in_types[0]
        axis = norm_axis(ctx, ctx.attr("axis", 0), x.rank)
        n = len(ctx.op.results)
        split = ctx.attr("split", None)
        if split is None and len(ctx.op.operands) > 1:
            split = known_dims(ctx, 1)
            if split is None:
                return axis, [fresh_dim(ctx, "split", f"split size {i} not known at compile time", i, axis)
                              for i in range(n)]
        if split is None:
            k = ctx.attr("num_outputs", n)
            if k != n:  # the spec: num_outputs is the number of outputs
                raise ctx.error(f"num_outputs is {k}, but the node has {n} outputs")
            return axis, _split_sizes(ctx, x.shape[axis], k)
        if len(split) != n:
            raise ctx.error(f"split has {len(split)} sizes for {n} outputs")
        ctx.require_eq(x.shape[axis], _sum(split), f"sum of split sizes along axis {axis}")
        return axis, list(split)

    def infer(self, ctx):
        x = ctx.in_types[0]
        axis, sizes = self._sizes(ctx)
        return [x.with_shape(x.shape[:axis] + (s,) + x.shape[axis + 1:]) for s in sizes]

    def value(self, ctx):
        v = ctx.known(0)
        if v is None or not all(value_shape_ok(r.type) for r in ctx.op.results):
            return None
        axis = ctx.attr("axis", 0) % v.ndim
        bounds = np.cumsum([r.type.shape[axis] for r in ctx.op.results])[:-1]
        return list(np.split(v, bounds, axis=axis))

    def lower(self, ctx):
        x = ctx.inputs[0]
        axis = ctx.attr("axis", 0) % x.rank
        off: Dim = 0
        for k in range(len(ctx.op.results)):
            y = ctx.out(k)
            o = dim_to_expr(off)
            emit(ctx, y, lambda ix, o=o: x[ix[:axis] + (ix[axis] + o,) + ix[axis + 1:]])
            off = canon(off + y.shape[axis])

    def reference(self, ctx, x, *rest):
        axis = ctx.attr("axis", 0) % x.ndim
        n = len(ctx.op.results)
        split = ctx.attr("split", None)
        if split is None and rest:
            split = static_ints(ctx, rest[0])
        if split is None:
            d, k = x.shape[axis], ctx.attr("num_outputs", n)
            chunk = d // k if d % k == 0 else d // k + 1
            split = [chunk] * (k - 1) + [d - chunk * (k - 1)]
        return list(np.split(x, np.cumsum(split)[:-1], axis=axis))


# ---- Slice ----------------------------------------------------------------------------------

def slice_params(ctx) -> tuple:
    """(starts, ends, axes, steps) as lists of Dims (starts/ends/axes/steps may be None)."""
    if "starts" in ctx.op.attrs:  # opset < 10
        starts, ends = list(ctx.attr("starts")), list(ctx.attr("ends"))
        axes = ctx.attr("axes", None)
        return starts, ends, (None if axes is None else list(axes)), [1] * len(starts), len(starts)
    pos = onnx_inputs(ctx.op, list(range(len(ctx.op.operands)))) + [None] * 5
    n = ctx.in_types[1].shape[0] if ctx.in_types[1].rank == 1 else 1
    if not isinstance(n, int):  # how many axes are sliced is not known yet (a body typed early)
        return None, None, None, None, n
    starts, ends = known_dims(ctx, pos[1]), known_dims(ctx, pos[2])
    axes = list(range(n)) if pos[3] is None else ctx.known_ints(pos[3])
    steps = [1] * n if pos[4] is None else ctx.known_ints(pos[4])
    return starts, ends, axes, steps, n


@register("onnx.Slice")
class SliceOp(OpDef):
    arity = (1, 5)
    kind = "injective"

    def infer(self, ctx):
        x = ctx.in_types[0]
        starts, ends, axes, steps, _n = slice_params(ctx)
        if axes is None:  # the run decides which dims are sliced
            return [x.with_shape([fresh_dim(ctx, "slice", f"dim {i}: slice axes not known at compile time", 0, i)
                                  for i in range(x.rank)])]
        axes = [norm_axis(ctx, a, x.rank) for a in axes]
        if len(set(axes)) != len(axes):
            raise ctx.error(f"repeated axes {axes}")
        out = list(x.shape)
        for k, a in enumerate(axes):
            if steps is not None and steps[k] == 0:
                raise ctx.error(f"step of axis {a} is 0")
            d = None
            if starts is not None and ends is not None and steps is not None:
                d = slice_dim(ctx.symbols, x.shape[a], starts[k], ends[k], steps[k], ctx.module.constraints)
                d = None if may_run_empty(ctx, x.shape[a], d) else d
            out[a] = d if d is not None else slice_symbol(ctx, x.shape[a], a, span_bound(ctx))
        return [x.with_shape(out)]

    def value(self, ctx):
        v = ctx.known(0)
        if v is None or not value_shape_ok(ctx.op.results[0].type):
            return None
        starts, ends, axes, steps, _n = slice_params(ctx)
        if starts is None or ends is None or steps is None:
            return None
        if not all(isinstance(s, int) for s in starts + ends):
            return None
        axes = list(range(len(starts))) if axes is None else axes
        return [v[_slices(v.shape, starts, ends, axes, steps)]]

    def lower(self, ctx):
        x, y = ctx.inputs[0], ctx.out(0)
        if "starts" in ctx.op.attrs:  # opset < 10
            starts = list(ctx.attr("starts"))
            n = len(starts)
            axes = ctx.attr("axes", None)
            axes = list(range(n)) if axes is None else list(axes)
            steps = [1] * n
        else:
            pos = onnx_inputs(ctx.op, list(range(len(ctx.op.operands)))) + [None] * 5
            t = ctx.in_type(pos[1])
            n = t.shape[0] if t.rank == 1 else 1
            known = lowered_value(ctx, pos[1])
            known = None if known is None else [canon(v) for v in known.reshape(-1)]
            if known is not None and all(v is not None for v in known):  # Dims, so they fold
                starts = known
            else:  # loaded at run time; the result type gives the extents (or a run-time symbol)
                starts = [value_expr(ctx, pos[1], k) for k in range(n)]
            ends = [value_expr(ctx, pos[2], k) for k in range(n)]
            axes = lowered_ints(ctx, pos[3], "slice axes") or list(range(n))
            steps = lowered_ints(ctx, pos[4], "slice steps") or [1] * n
        index: dict[int, tuple] = {}
        for s, a, st in zip(starts, axes, steps):
            a %= x.rank
            if st == 0:
                raise ctx.unsupported(f"step of axis {a} is 0")
            index[a] = (slice_start(s, x.shape[a], st), st)

        def body(ix):
            out = []
            for k in range(x.rank):
                if k in index:
                    s, st = index[k]
                    out.append(s + ix[k] * st)
                else:
                    out.append(ix[k])
            return x[tuple(out)]

        if "starts" not in ctx.op.attrs:
            bind_lengths(ctx, x, index, {a % x.rank: e for a, e in zip(axes, ends)})
        emit(ctx, y, body)

    def reference(self, ctx, x, *rest):
        if "starts" in ctx.op.attrs:
            starts, ends = list(ctx.attr("starts")), list(ctx.attr("ends"))
            axes = ctx.attr("axes", None)
            steps = [1] * len(starts)
        else:
            args = onnx_inputs(ctx.op, [x, *rest]) + [None] * 5
            starts, ends = static_ints(ctx, args[1]), static_ints(ctx, args[2])
            axes = None if args[3] is None else static_ints(ctx, args[3])
            steps = [1] * len(starts) if args[4] is None else static_ints(ctx, args[4])
        axes = list(range(len(starts))) if axes is None else list(axes)
        return [x[_slices(x.shape, starts, ends, axes, steps)]]


def _slices(shape, starts, ends, axes, steps) -> tuple:
    sl = [slice(None)] * len(shape)
    for s, e, a, st in zip(starts, ends, axes, steps):
        a %= len(shape)
        sl[a] = onnx_slice(shape[a], int(s), int(e), int(st))
    return tuple(sl)


# ---- Expand, Tile ---------------------------------------------------------------------------

@register("onnx.Expand")
class ExpandOp(OpDef):
    arity = 2
    kind = "broadcast"
    broadcast_shape_operands = (1,)

    def infer(self, ctx):
        x, st = ctx.in_types
        target = known_dims(ctx, 1)
        if target is None:
            n = st.shape[0] if st.rank == 1 else None
            if not isinstance(n, int):
                raise UnsupportedOp("Expand", "", ctx.loc, f"target shape of type {st} has no static length")
            rank = max(n, x.rank)
            padded = (1,) * (rank - x.rank) + x.shape
            out = [d if isinstance(d, int) and d > 1 else
                   fresh_dim(ctx, "expand", f"expand target dim {i} not known at compile time", 0, i)
                   for i, d in enumerate(padded)]
            return [x.with_shape(out)]
        return [x.with_shape(ctx.broadcast(x.shape, tuple(target)))]

    def value(self, ctx):
        v, t = ctx.known(0), ctx.op.results[0].type
        if v is None or not value_shape_ok(t):
            return None
        return [np.broadcast_to(v, t.shape).copy()]

    def lower(self, ctx):
        x = ctx.inputs[0]
        emit(ctx, ctx.out(0), lambda ix: x[broadcast_indices(ix, x.shape)])

    def reference(self, ctx, x, shape):
        out = np.broadcast_shapes(x.shape, tuple(static_ints(ctx, shape)))
        return [np.broadcast_to(x, out).copy()]


@register("onnx.Tile")
class TileOp(OpDef):
    arity = 2
    size_operands = (1,)

    def infer(self, ctx):
        x = ctx.in_types[0]
        reps = known_dims(ctx, 1)
        if reps is None:
            return [x.with_shape([fresh_dim(ctx, "tile", f"tile repeats of dim {i} not known at compile time", 0, i)
                                  for i in range(x.rank)])]
        if len(reps) != x.rank:
            raise ctx.error(f"repeats has {len(reps)} entries for an input of rank {x.rank}")
        return [x.with_shape([None if d is None else canon(d * r) for d, r in zip(x.shape, reps)])]

    def value(self, ctx):
        v, reps = ctx.known(0), ctx.known_ints(1)
        if v is None or reps is None or not value_shape_ok(ctx.op.results[0].type):
            return None
        return [np.tile(v, reps)]

    def lower(self, ctx):
        x, y = ctx.inputs[0], ctx.out(0)

        def at(i, d, od):
            if isinstance(d, int) and d == 1:
                return 0
            return i if same_dim(d, od) else i % dim_to_expr(d)

        emit(ctx, y, lambda ix: x[tuple(at(i, d, od) for i, d, od in zip(ix, x.shape, y.shape))])

    def reference(self, ctx, x, reps):
        return [np.tile(x, static_ints(ctx, reps))]


# ---- Range, ConstantOfShape ---------------------------------------------------------------------

def scalar_operand(ctx, i) -> Dim | float | None:
    """A scalar operand's value: a Dim from value propagation, or a literal constant."""
    dims = known_dims(ctx, i)
    if dims is not None and len(dims) == 1:  # a tracked float constant is an exact rational: a float
        return float(dims[0]) if isinstance(dims[0], sympy.Rational) else dims[0]
    c = const_value(ctx, i)
    if c is not None and c.size == 1:
        x = c.reshape(-1)[0]
        return int(x) if c.dtype.kind in "iu" else float(x)
    return None


@register("onnx.Range")
class RangeOp(OpDef):
    arity = 3

    def _len(self, ctx) -> Dim:
        start, limit, delta = (scalar_operand(ctx, i) for i in range(3))
        if start is None or limit is None or delta is None:
            return None
        if all(isinstance(v, (int, float)) for v in (start, limit, delta)):
            if delta == 0:
                raise ctx.error("delta is 0")
            return max(0, int(np.ceil((limit - start) / delta)))
        start, limit, delta = (int(v) if isinstance(v, float) and v.is_integer() else v
                               for v in (start, limit, delta))
        if any(isinstance(v, float) for v in (start, limit, delta)):
            return None
        if isinstance(delta, int) and delta == 0:
            raise ctx.error("delta is 0")
        n = sympy.Max(0, sympy.ceiling(sympy.sympify(limit - start) / delta))
        return simplify(ctx.symbols, n)

    def infer(self, ctx):
        n = self._len(ctx)
        if n is None:
            n = fresh_dim(ctx, "range", "range length not known at compile time")
        return [TensorType(ctx.in_types[0].dtype, (n,))]

    def value(self, ctx):
        t = ctx.op.results[0].type
        start, delta = known_dims(ctx, 0), known_dims(ctx, 2)
        if start is None or delta is None or not value_shape_ok(t):
            return None
        return [obj([start[0] + i * delta[0] for i in range(t.shape[0])], t.shape)]

    def lower(self, ctx):
        start, _, delta = ctx.inputs
        y = ctx.out(0)
        emit(ctx, y, lambda ix: scalar(start) + cast(ix[0], y.dtype) * scalar(delta))

    def reference(self, ctx, start, limit, delta):
        dt = ctx.out_type().dtype.np
        n = max(0, int(np.ceil((limit.item() - start.item()) / delta.item())))
        return [(start.item() + np.arange(n) * delta.item()).astype(dt)]


def _fill_value(ctx) -> np.ndarray:
    v = ctx.attr("value", None)
    return np.zeros(1, dtype=np.float32) if v is None else np.asarray(v)


@register("onnx.ConstantOfShape")
class ConstantOfShapeOp(OpDef):
    arity = 1
    size_operands = (0,)

    def infer(self, ctx):
        dt = DType.from_np(_fill_value(ctx).dtype)
        shape = known_dims(ctx, 0)
        if shape is None:
            st = ctx.in_types[0]
            n = st.shape[0] if st.rank == 1 else None
            if not isinstance(n, int):
                raise UnsupportedOp("ConstantOfShape", "", ctx.loc, f"shape input of type {st} has no static length")
            shape = [fresh_dim(ctx, "fill", f"shape dim {i} not known at compile time", 0, i) for i in range(n)]
        for i, d in enumerate(shape):
            if isinstance(d, int) and d < 0:
                raise ctx.error(f"dim {i} is negative ({d})")
        return [TensorType(dt, tuple(shape))]

    def value(self, ctx):
        t = ctx.op.results[0].type
        fill = _fill_value(ctx)
        if fill.dtype.kind not in "iu" or not value_shape_ok(t):
            return None
        n = int(np.prod(t.shape, dtype=np.int64))
        return [obj([int(fill.reshape(-1)[0])] * n, t.shape)]

    def lower(self, ctx):
        fill = _fill_value(ctx).reshape(-1)[0].item()
        y = ctx.out(0)
        emit(ctx, y, lambda ix: KConst(fill, y.dtype))

    def reference(self, ctx, shape):
        fill = _fill_value(ctx)
        return [np.full(static_ints(ctx, shape), fill.reshape(-1)[0], dtype=fill.dtype)]


# ---- bucketing: views, data movement and the shape reads (operands read as a shape are
# safe at the padded size)
set_pad(PadRule("view", shape_operands=(1,)), "onnx.Reshape")
set_pad(PadRule("view"), "onnx.Flatten", "onnx.Squeeze", "onnx.Unsqueeze")
set_pad(PadRule("transpose"), "onnx.Transpose")
set_pad(PadRule("concat"), "onnx.Concat")
set_pad(PadRule("split"), "onnx.Split")
set_pad(PadRule("slice", shape_operands=(1, 2)), "onnx.Slice")
set_pad(PadRule("expand", shape_operands=(1,)), "onnx.Expand")
set_pad(PadRule("constant_of_shape", shape_operands=(0,)), "onnx.ConstantOfShape")
set_pad(PadRule("passthrough"), "onnx.Shape", "onnx.Size")

# ---- canonical patterns
set_canonical("same-type-identity", "onnx.Reshape", "onnx.Expand", "onnx.Squeeze", "onnx.Unsqueeze", "onnx.Flatten")
set_canonical("transpose", "onnx.Transpose")


def _same_pred(p):
    """A one-element bool reshaped stands for the same condition (control_flow.dim_predicate)."""
    return p.pred(0)


for _name in ("Squeeze", "Unsqueeze", "Reshape", "Flatten"):
    get_opdef(f"onnx.{_name}").predicate = _same_pred


for _name in ("Squeeze", "Unsqueeze", "Reshape", "Flatten", "Concat"):
    get_opdef(f"onnx.{_name}").float_values = True  # they move elements (see elementwise.py)
