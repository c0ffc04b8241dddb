"""SwiGLU (opset 28): the gated activation of transformer MLPs, Y = A * sigmoid(alpha * A) * B.

A (the gate) and B (the value) have the same shape and dtype; the op does not broadcast. The
lowering is one elementwise compute (half precision computes in f32, as the reference does), so
fusion folds it into the GEMM epilogues of the two projections that feed it.
"""

from __future__ import annotations

import numpy as np

from ..ir import DType
from ..kernel import cast, sigmoid
from .elementwise import cast_out, kwiden, widen
from .registry import InferCtx, RefCtx, define
from .traits import FINITE_ELEMENTWISE, set_pad

_FLOATS = (DType.f16, DType.bf16, DType.f32, DType.f64)


def swiglu(a: np.ndarray, b: np.ndarray, alpha: float) -> np.ndarray:
    """numpy SwiGLU on already widened arrays."""
    return a * (1.0 / (1.0 + np.exp(-alpha * a))) * b


def _infer(ctx: InferCtx):
    a, b = ctx.in_types
    if a.dtype is not b.dtype:
        raise ctx.error(f"A and B must have one dtype, got {a.dtype.value} and {b.dtype.value}")
    if a.dtype not in _FLOATS:
        raise ctx.error(f"A must be a float tensor, got {a.dtype.value}")
    if a.rank != b.rank:
        raise ctx.error(f"A and B must have the same shape (no broadcasting), got {a} and {b}")
    shape = tuple(ctx.require_eq(x, y, f"A and B dim {i} (no broadcasting)")
                  for i, (x, y) in enumerate(zip(a.shape, b.shape, strict=True)))
    return [a.with_shape(shape)]


def _ref(ctx: RefCtx, a, b):
    return [cast_out(ctx, swiglu(widen(a), widen(b), float(ctx.attr("alpha", 1.0))))]


def _lower(ctx) -> None:
    a, b = ctx.inputs
    y = ctx.out(0)
    alpha = float(ctx.attr("alpha", 1.0))

    def body(*ix):
        av, bv = kwiden(a[ix]), kwiden(b[ix])
        gate = sigmoid(av * alpha) if alpha != 1.0 else sigmoid(av)
        return cast(av * gate * bv, y.dtype)

    ctx.compute(y, body)


define("onnx.SwiGLU", infer=_infer, reference=_ref, lower=_lower, kind="elementwise", arity=2, math=swiglu)
# bucketing: finite gates and values give finite results at padded positions
set_pad(FINITE_ELEMENTWISE, "onnx.SwiGLU")
