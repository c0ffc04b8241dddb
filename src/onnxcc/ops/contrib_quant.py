"""com.microsoft.MatMulNBits: Y = A @ dequant(B)^T (+ bias), B block-quantized along K.

  A            float [.., K]
  B            uint8 [N, k_blocks, blob]   k_blocks = ceil(K / block_size), blob = block_size * bits / 8;
                                           codes packed low bits first along K
  scales       float [N * k_blocks] or [N, k_blocks]
  zero_points  uint8, packed like B, one row of ceil(k_blocks * bits / 8) bytes per n (default
               2^(bits-1)); or float [N, k_blocks], unpacked
  g_idx        refused;  bias float [N]
  dequant(B)[n, k] = (code(n, k) - zero_point(n, k // block_size)) * scale(n, k // block_size)

When B, scales and zero points are compile-time constants (the usual case: they are weights)
the lowering dequantizes them at compile time into a float [K, N] constant and the product is
MatMul's compute (the packed GEMM). Otherwise the codes are decoded inside the contraction.
accuracy_level (onnxruntime may quantize A to int8 for the product) is ignored: the product
is computed in A's float dtype.
"""

from __future__ import annotations

import numpy as np
import sympy

from ..ir import DType, TensorType, canon
from ..kernel import Const, Var, cast, rsum
from .contrib_rotary import refusal
from .elementwise import cast_out, widen
from .matmul import matmul_compute
from .registry import InferCtx, RefCtx, define, onnx_inputs

_NAMES = ("A", "B", "scales", "zero_points", "g_idx", "bias")


def _inputs(op, items: list) -> dict:
    vals = onnx_inputs(op, items)
    return {n: vals[i] if i < len(vals) else None for i, n in enumerate(_NAMES)}


def _geometry(attr) -> tuple[int, int, int, int, int]:
    """(K, N, bits, block_size, k_blocks) from the attributes."""
    k, n, bits, block = (int(attr(a, d)) for a, d in (("K", 0), ("N", 0), ("bits", 4), ("block_size", 0)))
    return k, n, bits, block, -(-k // block) if block else 0


def _unpack(raw: np.ndarray, bits: int) -> np.ndarray:
    """uint8 [..., m] -> codes [..., m * 8 / bits], low bits first."""
    mask = (1 << bits) - 1
    per = 8 // bits
    parts = [(raw.astype(np.int32) >> (bits * i)) & mask for i in range(per)]
    return np.stack(parts, axis=-1).reshape(*raw.shape[:-1], raw.shape[-1] * per)


def dequantize_nbits(b, scales, zero_points, k: int, n: int, bits: int, block: int) -> np.ndarray:
    """The float [N, K] matrix that B, scales and zero points stand for."""
    kb = -(-k // block)
    codes = _unpack(b.reshape(n, kb, -1), bits).astype(np.float64)  # [N, kb, block]
    sc = widen(scales).reshape(n, kb).astype(np.float64)
    if zero_points is None:
        zp = np.full((n, kb), float(1 << (bits - 1)))
    elif zero_points.dtype == np.uint8:
        zp = _unpack(zero_points.reshape(n, -1), bits)[:, :kb].astype(np.float64)
    else:
        zp = widen(zero_points).reshape(n, kb).astype(np.float64)
    deq = (codes - zp[..., None]) * sc[..., None]
    return deq.reshape(n, kb * block)[:, :k]


def matmul_nbits(a, b, scales, zero_points, bias, k: int, n: int, bits: int, block: int):
    y = a.astype(np.float64) @ dequantize_nbits(b, scales, zero_points, k, n, bits, block).T
    return y if bias is None else y + bias


def _infer(ctx: InferCtx):
    a = _inputs(ctx.op, list(ctx.in_types))
    k, n, bits, block, kb = _geometry(ctx.attr)
    if bits not in (2, 4, 8):
        raise refusal(ctx.op, f"bits = {bits} (2, 4 or 8 are supported)")
    if k < 1 or n < 1 or block < 16 or block & (block - 1):
        raise ctx.error(f"needs K, N >= 1 and block_size a power of 2 >= 16, got K={k} N={n} "
                        f"block_size={block}")
    if a["g_idx"] is not None:
        raise refusal(ctx.op, "input 'g_idx'")
    x, w = a["A"], a["B"]
    if not x.dtype.is_float:
        raise ctx.error(f"A must be float, got {x.dtype.value}")
    ctx.require_eq(x.shape[-1], k, "A dim -1 vs attribute K")
    if w.dtype is not DType.u8:
        raise ctx.error(f"B must be uint8, got {w.dtype.value}")
    blob = block * bits // 8
    if w.rank == 3:
        for i, (d, want) in enumerate(zip(w.shape, (n, kb, blob), strict=True)):
            ctx.require_eq(d, want, f"B dim {i}")
    else:
        ctx.require_eq(canon(sympy.prod(list(w.shape))), n * kb * blob, "B size vs N * k_blocks * blob")
    ctx.require_eq(canon(sympy.prod(list(a["scales"].shape))), n * kb, "scales size vs N * k_blocks")
    zp = a["zero_points"]
    if zp is not None:
        per_row = -(-kb * bits // 8) if zp.dtype is DType.u8 else kb
        ctx.require_eq(canon(sympy.prod(list(zp.shape))), n * per_row, "zero_points size")
    if a["bias"] is not None:
        ctx.require_eq(a["bias"].shape[-1], n, "bias length vs attribute N")
    return [TensorType(x.dtype, (*x.shape[:-1], n))]


def _ref(ctx: RefCtx, *args):
    a = _inputs(ctx.op, list(args))
    k, n, bits, block, _ = _geometry(ctx.attr)
    bias = None if a["bias"] is None else widen(a["bias"])
    return [cast_out(ctx, matmul_nbits(widen(a["A"]), a["B"], a["scales"], a["zero_points"], bias, k, n, bits,
                                       block))]


class _Biased:
    def __init__(self, ctx, bias):
        self.ctx, self.bias = ctx, bias

    def compute(self, out, fn) -> None:
        b = self.bias
        self.ctx.compute(out, lambda *ix: fn(*ix) if b is None else fn(*ix) + cast(b[(ix[-1],)], out.dtype))


def _const(ctx, buf):
    return None if buf is None else ctx.const_value(ctx.inputs.index(buf))


def _lower(ctx) -> None:
    a = _inputs(ctx.op, list(ctx.inputs))
    x, y = a["A"], ctx.out(0)
    k, n, bits, block, kb = _geometry(ctx.attr)
    target = _Biased(ctx, a["bias"])
    consts = [_const(ctx, a[name]) for name in ("B", "scales", "zero_points")]
    zp_known = a["zero_points"] is None or consts[2] is not None
    if consts[0] is not None and consts[1] is not None and zp_known:
        w = dequantize_nbits(consts[0], consts[1], consts[2], k, n, bits, block).T  # [K, N]
        wk = ctx.const(np.ascontiguousarray(w).astype(y.dtype.np), "nbits_w")
        matmul_compute(target, y, x.shape, (k, n), lambda i: x[i], lambda i: wk[i])
        return
    _decode_lower(ctx, a, target, x, y, k, n, bits, block, kb)


def _decode_lower(ctx, a, target, x, y, k, n, bits, block, kb) -> None:
    """Codes decoded inside the contraction: B[n, kk // block, (kk % block) // per] shifted
    right by bits * (kk % per), masked; zero point and scale per (n, block)."""
    i32, i64, dt = DType.i32, DType.i64, y.dtype
    per, mask = 8 // bits, (1 << bits) - 1
    w, sc, zp = a["B"], a["scales"], a["zero_points"]
    rows_zp = -(-kb * bits // 8)

    def flat(buf, idx):  # an element of a buffer of any rank by its flat row-major index
        if buf.rank == 1:
            return buf[(idx,)]
        dims = list(buf.shape)
        out, rest = [], idx
        for d in reversed(dims[1:]):
            out.append(rest % d)
            rest = rest // d
        return buf[(rest, *reversed(out))]

    def nibble(byte, shift):
        return (cast(byte, i32) >> shift) & Const(mask, i32)

    def deq(col, kk):
        blk = kk // block
        blob = block * bits // 8
        code = nibble(flat(w, (col * kb + blk) * blob + (kk % block) // per), cast((kk % per) * bits, i32))
        if zp is None:
            z = Const(float(1 << (bits - 1)), dt)
        elif zp.dtype is DType.u8:
            z = cast(nibble(flat(zp, col * rows_zp + blk // per), cast((blk % per) * bits, i32)), dt)
        else:
            z = cast(flat(zp, col * kb + blk), dt)
        return (cast(code, dt) - z) * cast(flat(sc, col * kb + blk), dt)

    r = Var("k")

    def body(*ix):
        return rsum([(r, k)], x[(*ix[:-1], r)] * deq(ix[-1], cast(r, i64)))

    target.compute(y, body)


define("com.microsoft.MatMulNBits", infer=_infer, reference=_ref, lower=_lower, kind="matmul", arity=(3, 6),
       math=matmul_nbits)
