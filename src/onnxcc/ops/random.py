"""RandomUniform, RandomUniformLike, RandomNormal, RandomNormalLike.

The draws come from the counter-based hash Bernoulli and Dropout use (pointwise_extra.py,
`hash_uniform` / `k_hash_uniform`): no kernel holds random state, so element i's value is a
function of i and the node's key, the same on every call, and the numpy reference computes
the same bits as the library. The key is the `seed` attribute's; a node without a seed mixes
its location into the key, so two unseeded nodes of the same shape draw different values
(ONNX asks for independent draws there) while each stays reproducible.

Normal draws use the Box-Muller transform on two streams (the second keyed from the first):
z = sqrt(-2 ln(1 - u1)) cos(2 pi u2), with u1 a multiple of 2^-24 below 1, so the log's
argument is never 0 and |z| <= sqrt(-2 ln 2^-24) ~ 5.77.
"""

from __future__ import annotations

import zlib

import numpy as np

from .. import kernel as K
from ..ir import DType, TensorType
from .dtypes import onnx_dtype
from .pointwise_extra import hash_uniform, k_hash_uniform, seed_key
from .registry import InferCtx, RefCtx, define

_SECOND_STREAM = 0x68E31DA4
"""xor'ed into a key to draw Box-Muller's second uniform from an independent stream"""


def _key(ctx) -> int:
    seed = ctx.attr("seed", None)
    if seed is not None:
        return seed_key(seed)
    return seed_key(zlib.crc32(str(ctx.op.loc).encode()) & 0x7FFFFFFF)


def _out_dtype(ctx, like: DType | None, fail) -> DType:
    dt = ctx.attr("dtype", None)
    to = (like or DType.f32) if dt is None else onnx_dtype(dt)
    if not to.is_float or to.is_small:
        raise fail(f"dtype {to.value} is not supported: random draws are f16, bf16, f32 or f64")
    return to


def _infer(like: bool):
    def infer(ctx: InferCtx) -> list[TensorType]:
        if like:
            x = ctx.in_types[0]
            return [TensorType(_out_dtype(ctx, x.dtype if x.dtype.is_float else None, ctx.error), x.shape)]
        shape = ctx.attr("shape", None)
        if shape is None:
            raise ctx.error("attribute 'shape' is required")
        if any(int(d) < 0 for d in shape):
            raise ctx.error(f"shape {list(shape)} has a negative dim")
        return [TensorType(_out_dtype(ctx, None, ctx.error), tuple(int(d) for d in shape))]
    return infer


def _affine(normal: bool) -> tuple[str, str, float, float]:
    """(name of the offset attr, name of the scale attr, their defaults) for each family."""
    return ("mean", "scale", 0.0, 1.0) if normal else ("low", "high", 0.0, 1.0)


def _params(ctx, normal: bool) -> tuple[float, float]:
    """y = a + b * draw: (a, b)."""
    lo_name, hi_name, lo, hi = _affine(normal)
    a, second = float(ctx.attr(lo_name, lo)), float(ctx.attr(hi_name, hi))
    return (a, second) if normal else (a, second - a)


def _ref(normal: bool):
    def reference(ctx: RefCtx, *xs):
        t = ctx.out_type()
        shape = tuple(int(d) for d in (xs[0].shape if xs else t.shape))
        n, key = int(np.prod(shape, dtype=np.int64)), _key(ctx)
        u = hash_uniform(n, key)
        if normal:
            u2 = hash_uniform(n, key ^ _SECOND_STREAM)
            u = np.sqrt(-2.0 * np.log1p(-u)) * np.cos(2.0 * np.pi * u2)
        a, b = _params(ctx, normal)
        return [(a + b * u).reshape(shape).astype(t.dtype.np)]
    return reference


def _lower(normal: bool):
    def lower(ctx) -> None:
        y = ctx.out(0)
        key = _key(ctx)
        a, b = _params(ctx, normal)

        def body(*ix):
            u = k_hash_uniform(ix, y.shape, key)
            if normal:
                u2 = k_hash_uniform(ix, y.shape, key ^ _SECOND_STREAM)
                radius = K.sqrt(K.log(1.0 - u) * -2.0)
                u = radius * K.unary("cos", u2 * (2.0 * np.pi))
            return K.cast(u * b + a, y.dtype)

        ctx.compute(y, body)
    return lower


for _name, _normal, _like in (("RandomUniform", False, False), ("RandomUniformLike", False, True),
                              ("RandomNormal", True, False), ("RandomNormalLike", True, True)):
    define(f"onnx.{_name}", infer=_infer(_like), reference=_ref(_normal), lower=_lower(_normal),
           kind="elementwise" if _like else "opaque", arity=1 if _like else 0, pure=False)
