"""The 8-bit requantization shared by the quantized contractions (QLinearMatMul, QLinearConv,
their depthwise kernel int8_depthwise.py, the com.microsoft QLinear ops): the sums scaled in
f32, rounded half to even, offset by the zero point and clamped, as onnxruntime does, so the
result is bit-identical to it."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from .. import kernel as K
from ..ir import DType
from ..kernel import Const, cast, clamp


def qrange(dt: DType) -> tuple[int, int]:
    info = ml_dtypes.iinfo(dt.np) if dt.is_small else np.iinfo(dt.np)
    return int(info.min), int(info.max)


def requant_np(acc: np.ndarray, mult: np.ndarray, zp, dt: DType) -> np.ndarray:
    q = np.rint(acc.astype(np.float32) * mult.astype(np.float32)).astype(np.float64)
    lo, hi = qrange(dt)
    return np.clip(q + np.asarray(zp, np.float64).reshape(()), lo, hi).astype(dt.np)


def requant_expr(acc: K.Expr, mult: K.Expr, zp: K.Expr, dt: DType) -> K.Expr:
    """`requant_np` in f32, which gives the same 8-bit result: round() is an integer in f32;
    below 2**24 adding the zero point (|zp| <= 255) is exact, above it the sum rounds but
    still clamps to the same end of the range (f32 vectors are twice as wide as f64)."""
    lo, hi = qrange(dt)
    if dt.bits > 16:
        q = cast(K.unary("round", cast(acc, DType.f32) * mult), DType.f64) + cast(zp, DType.f64)
        return cast(clamp(q, Const(float(lo), DType.f64), Const(float(hi), DType.f64)), dt)
    q = K.unary("round", cast(acc, DType.f32) * mult) + cast(zp, DType.f32)
    return cast(clamp(q, Const(float(lo), DType.f32), Const(float(hi), DType.f32)), dt)
