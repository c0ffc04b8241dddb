"""TensorScatter (opset 24): the functional KV-cache update of decoder attention.

present_cache = past_cache with, for every batch row b and every prefix index, the `L`
positions write_indices[b] .. write_indices[b] + L - 1 along `axis` replaced by update's
positions 0 .. L - 1 (mode "circular": the positions wrap modulo the cache length M).
write_indices is absent for prefill (all zeros). In "linear" mode a write past the cache
end (write_indices[b] < 0 or write_indices[b] + L > M) is an error, never a dropped write.

The lowering is one gather-style compute over the cache: each output element asks which update
position lands on it (its cache index minus the row's write index, wrapped when circular) and
reads update there or keeps past_cache; no scatter, so the compute parallelises like a copy.
"""

from __future__ import annotations

import numpy as np
import sympy

from ..ir import DType
from ..kernel import Const, cast, check, rem, select
from .registry import InferCtx, RefCtx, define, onnx_inputs

_MODES = ("linear", "circular")


def _axis(attr, rank: int, error) -> int:
    axis = int(attr("axis", -2))
    if not -rank <= axis < rank:
        raise error(f"axis {axis} is out of range for rank {rank}")
    axis %= rank
    if axis == 0:
        raise error("axis must not be 0 (the batch dim)")
    return axis


def _mode(attr, error) -> str:
    mode = attr("mode", "linear")
    if mode not in _MODES:
        raise error(f"mode must be 'linear' or 'circular', got {mode!r}")
    return mode


def _infer(ctx: InferCtx):
    past, update, idx = (onnx_inputs(ctx.op, list(ctx.in_types)) + [None] * 3)[:3]
    if update.dtype is not past.dtype:
        raise ctx.error(f"update must be {past.dtype.value} like past_cache, got {update.dtype.value}")
    if update.rank != past.rank:
        raise ctx.error(f"update must have past_cache's rank {past.rank}, got {update}")
    axis = _axis(ctx.attr, past.rank, ctx.error)
    _mode(ctx.attr, ctx.error)
    for i, (p, u) in enumerate(zip(past.shape, update.shape, strict=True)):
        if i == axis:
            ctx.require(sympy.Ge(sympy.sympify(p), sympy.sympify(u)), "update's sequence length <= the cache length")
        else:
            ctx.require_eq(p, u, f"past_cache and update dim {i}")
    if idx is not None:
        if idx.dtype is not DType.i64 or idx.rank != 1:
            raise ctx.error(f"write_indices must be 1-D int64, got {idx}")
        ctx.require_eq(idx.shape[0], past.shape[0], "write_indices length vs batch size")
    return [past]


def tensor_scatter(past: np.ndarray, update: np.ndarray, idx: np.ndarray | None, axis: int,
                   mode: str) -> np.ndarray:
    """numpy TensorScatter; axis already normalised."""
    m, n = past.shape[axis], update.shape[axis]
    idx = np.zeros(past.shape[0], np.int64) if idx is None else idx.astype(np.int64)
    out = past.copy()
    for b in range(past.shape[0]):
        w = int(idx[b])
        if mode == "linear" and (w < 0 or w + n > m):
            raise ValueError(f"TensorScatter: write index {w} + sequence length {n} is outside the cache "
                             f"length {m} (mode 'linear')")
        pos = (w + np.arange(n)) % m if mode == "circular" else w + np.arange(n)
        dst = np.moveaxis(out[b], axis - 1, 0)  # a view: writes land in out
        dst[pos] = np.moveaxis(update[b], axis - 1, 0)
    return out


def _ref(ctx: RefCtx, *args):
    past, update, idx = (onnx_inputs(ctx.op, list(args)) + [None] * 3)[:3]
    axis = _axis(ctx.attr, past.ndim, ValueError)
    return [tensor_scatter(past, update, idx, axis, _mode(ctx.attr, ValueError))]


def _lower(ctx) -> None:
    past, update, idx = (onnx_inputs(ctx.op, list(ctx.inputs)) + [None] * 3)[:3]
    y = ctx.out(0)
    axis = _axis(ctx.attr, past.rank, ctx.unsupported)
    circular = _mode(ctx.attr, ctx.unsupported) == "circular"
    m, n = ctx.dim(past.shape[axis]), ctx.dim(update.shape[axis])
    i64 = DType.i64

    def body(*ix):
        c = ix[axis]
        if idx is None:
            u = c
        else:
            w = cast(idx[(ix[0],)], i64)
            if not circular:  # a write past the cache end is the caller's error (ERR_INDEX)
                w = check((w >= 0) & (w + n <= m), w)
            u = c - w
        if circular:
            u = rem(u, m)
            u = select(u < 0, u + m, u)
        inside = (u < n) if circular or idx is None else (u >= 0) & (u < n)
        safe = select(inside, u, Const(0, i64))  # keep the update load in range where it is unused
        src = update[tuple(safe if k == axis else v for k, v in enumerate(ix))]
        return select(inside, src, past[ix])

    ctx.compute(y, body)


define("onnx.TensorScatter", infer=_infer, reference=_ref, lower=_lower, kind="injective", arity=(2, 3),
       math=tensor_scatter)
