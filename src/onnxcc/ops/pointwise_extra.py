"""Pointwise ops kept out of elementwise.py: BitCast (opset 26) and Shrink (opset 9).

BitCast reinterprets each element's bits as another type of the same width. It lowers to an
integer copy between unsigned-integer views of both buffers (`LowerCtx.bits_view`), so no
float conversion touches the bits; fusion keeps the producer of such a view apart (its body
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


#: the unsigned integer type of each byte width: BitCast copies bits as these
_UINT = {1: DType.u8, 2: DType.u16, 4: DType.u32, 8: DType.u64}


def _bitcast_lower(ctx) -> None:
    x, y = ctx.inputs[0], ctx.out(0)
    if x.dtype is y.dtype:
        ctx.alias(0, 0)
        return
    if x.dtype.bits < 8:  # packed: a byte holds several elements
        raise ctx.unsupported(f"{x.dtype.value} -> {y.dtype.value} (packed sub-byte types) is not supported")
    # copy as unsigned integers between views of both buffers: a float type's load or store
    # would convert (bf16 and f16 compute in f32), which could quiet a signalling NaN
    uint = _UINT[x.dtype.itemsize]
    src = x if x.dtype is uint else ctx.bits_view(x, uint, "bits_in")
    dst = y if y.dtype is uint else ctx.bits_view(y, uint, "bits_out")
    if y.dtype is DType.bool:  # a bool holds 0 or 1: any non-zero byte is true
        ctx.compute(dst, lambda *ix: K.cast(src[ix].ne(0), uint))
    else:
        ctx.compute(dst, lambda *ix: src[ix])


# small_types: the 8-bit floats copy as bytes like any other type
define("onnx.BitCast", infer=_bitcast_infer, reference=_bitcast_ref, lower=_bitcast_lower, kind="opaque", arity=1,
       small_types=True)


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


# ---- Bernoulli: y = (u < p), u uniform in [0, 1) -------------------------------------------------
#
# No kernel holds random state, so u is a counter-based hash of the element's flat position
# and the seed (murmur3's 32-bit finalizer): independent-looking draws, the same for a given
# seed on every call (without a seed, seed 0). The numpy reference draws the same bits, so
# the interpreter and the native library agree element for element. Dropout's training mask
# draws from the same stream (`hash_uniform`, `k_hash_uniform`).

_M1, _M2, _GOLDEN = 0x85EBCA6B, 0xC2B2AE35, 0x9E3779B9


def _fmix32_py(h: int) -> int:
    h &= 0xFFFFFFFF
    h ^= h >> 16
    h = (h * _M1) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * _M2) & 0xFFFFFFFF
    return h ^ (h >> 16)


def seed_key(seed) -> int:
    """The 32-bit key a `seed` attribute (int or float; absent: 0) selects."""
    return _fmix32_py(int(float(seed)) * _GOLDEN + 1)


def _key(ctx) -> int:
    return seed_key(ctx.attr("seed", 0.0))


def _bernoulli_dtype(ctx) -> DType:
    dt = ctx.attr("dtype", None)
    return ctx.in_types[0].dtype if dt is None else onnx_dtype(dt)


def _bernoulli_infer(ctx: InferCtx) -> list[TensorType]:
    x = ctx.in_types[0]
    if not x.dtype.is_float or x.dtype.is_small:
        raise ctx.error(f"input must hold float probabilities, got {x.dtype.value}")
    to = _bernoulli_dtype(ctx)
    if to.is_small:
        raise ctx.error(f"dtype {to.value} is not supported")
    return [TensorType(to, x.shape)]


def hash_uniform(n: int, key: int) -> np.ndarray:
    """u for flat positions 0..n-1 under `key`: multiples of 2**-24 in [0, 1), as f64."""
    h = (np.arange(n, dtype=np.uint64) * _GOLDEN & 0xFFFFFFFF).astype(np.uint32) ^ np.uint32(key)
    h ^= h >> np.uint32(16)
    h *= np.uint32(_M1)
    h ^= h >> np.uint32(13)
    h *= np.uint32(_M2)
    h ^= h >> np.uint32(16)
    return (h >> np.uint32(8)).astype(np.float64) * 2.0 ** -24


def _bernoulli_ref(ctx: RefCtx, x):
    u = hash_uniform(x.size, _key(ctx)).reshape(x.shape)
    return [(u < np.asarray(x, dtype=np.float64)).astype(ctx.out_type().dtype.np)]


def k_hash_uniform(ix: tuple, shape, key: int) -> K.Expr:
    """The kernel twin of `hash_uniform`: u (f64) of the element at `ix` of `shape`."""
    u32 = DType.u32

    def c(v: int) -> K.Expr:
        return K.Const(v, u32)

    flat = K.flatten_index(ix, shape) if ix else K.Const(0, DType.i64)
    h = K.cast(flat, u32) * c(_GOLDEN) ^ c(key)
    h = h ^ (h >> c(16))
    h = h * c(_M1)
    h = h ^ (h >> c(13))
    h = h * c(_M2)
    h = h ^ (h >> c(16))
    return K.cast(h >> c(8), DType.f64) * 2.0 ** -24


def _bernoulli_lower(ctx) -> None:
    x, y = ctx.inputs[0], ctx.out(0)
    key = _key(ctx)

    def body(*ix):
        return K.cast(k_hash_uniform(ix, x.shape, key) < K.cast(x[ix], DType.f64), y.dtype)

    ctx.compute(y, body)


define("onnx.Bernoulli", infer=_bernoulli_infer, reference=_bernoulli_ref, lower=_bernoulli_lower,
       kind="elementwise", arity=1, pure=False)
