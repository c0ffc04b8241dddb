"""Pointwise ops kept out of elementwise.py: BitCast (opset 26) and Shrink (opset 9).

BitCast reinterprets each element's bits as another type of the same width. It lowers to a
copy out of a view of the input's memory typed as the target (`LowerCtx.bits_view`), so no
bit manipulation is spelled out; fusion keeps the producer of such a view apart (its body
computes values of the source type). A bool target is the one exception: a bool must hold
0 or 1, so any non-zero byte reads as true.
"""

from __future__ import annotations

import numpy as np

from .. import kernel as K
from ..ir import DType, TensorType
from .dtypes import onnx_dtype
from .registry import InferCtx, RefCtx, define

# ---- BitCast ------------------------------------------------------------------------------------

def _bitcast_target(ctx, fail) -> DType:
    to = ctx.attr("to", None)
    if to is None:
        raise fail("attribute 'to' is required")
    try:
        return onnx_dtype(to)
    except ValueError as e:
        raise fail(str(e)) from None


def _bitcast_infer(ctx: InferCtx) -> list[TensorType]:
    x = ctx.in_types[0]
    to = _bitcast_target(ctx, ctx.error)
    if to.bits != x.dtype.bits:
        raise ctx.error(f"BitCast needs the same bit width: {x.dtype.value} has {x.dtype.bits} bits, "
                        f"{to.value} has {to.bits}")
    return [TensorType(to, x.shape)]


def _bitcast_ref(ctx: RefCtx, x):
    to = ctx.out_type().dtype
    if to is DType.bool:
        return [np.asarray(x).view(np.uint8) != 0]
    return [np.array(x).view(to.np)]  # np.array keeps a 0-d input 0-d (ascontiguousarray would not)


def _bitcast_lower(ctx) -> None:
    x, y = ctx.inputs[0], ctx.out(0)
    if y.dtype is DType.bool:
        src = ctx.bits_view(x, DType.u8)
        ctx.compute(y, lambda *ix: src[ix].ne(0))
        return
    if x.dtype is y.dtype:
        ctx.alias(0, 0)
        return
    src = ctx.bits_view(x, y.dtype)
    ctx.compute(y, lambda *ix: src[ix])


define("onnx.BitCast", infer=_bitcast_infer, reference=_bitcast_ref, lower=_bitcast_lower, kind="opaque", arity=1)


# ---- Shrink: x < -lambd -> x + bias, x > lambd -> x - bias, else 0 ---------------------------------

def _shrink_infer(ctx: InferCtx) -> list[TensorType]:
    x = ctx.in_types[0]
    if x.dtype is DType.bool or x.dtype.is_small:
        raise ctx.error(f"input must be numeric, got {x.dtype.value}")
    return [x]


def shrink(x, lambd: float, bias: float):
    xf = np.asarray(x, dtype=np.float64)
    return np.where(xf < -lambd, xf + bias, np.where(xf > lambd, xf - bias, 0.0)).astype(x.dtype)


def _shrink_ref(ctx: RefCtx, x):
    return [shrink(x, float(ctx.attr("lambd", 0.5)), float(ctx.attr("bias", 0.0)))]


def _shrink_lower(ctx) -> None:
    x, y = ctx.inputs[0], ctx.out(0)
    lambd, bias = float(ctx.attr("lambd", 0.5)), float(ctx.attr("bias", 0.0))

    def body(*ix):
        # f64 holds every input type's values (int64 beyond 2**53 aside) and both attributes
        v = K.cast(x[ix], DType.f64)
        r = K.select(v < -lambd, v + bias, K.select(v > lambd, v - bias, K.Const(0.0, DType.f64)))
        return K.cast(r, y.dtype)

    ctx.compute(y, body)


define("onnx.Shrink", infer=_shrink_infer, reference=_shrink_ref, lower=_shrink_lower, kind="elementwise",
       arity=1, math=shrink)
