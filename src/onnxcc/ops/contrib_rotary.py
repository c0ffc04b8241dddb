"""Rotary positional embeddings (RoPE): onnx.RotaryEmbedding (opset 23) and onnxruntime's
com.microsoft.RotaryEmbedding, one shape rule, reference and lowering for both.

The two ops compute the same rotation and differ in their signatures:
  onnx           (X, cos_cache, sin_cache, position_ids?)   X: [B, N, S, H] or [B, S, N*H]
                 without position_ids the caches are [B, S, rot/2], with them [max_pos, rot/2]
  com.microsoft  (X, position_ids, cos_cache, sin_cache)    X: [B, N, S, H] or [B, S, N*H]
                 position_ids is [B, S] or the offset form [1] (position = offset + s);
                 without num_heads a 3-D X has head size 2 * cos_cache dim -1

Within each head the first `rot` elements (rotary_embedding_dim, 0 = the head size) rotate as
pairs (d, d + rot/2), or (2j, 2j + 1) when interleaved, by the angle whose cos / sin the caches
hold for the token's position; the rest pass through.
"""

from __future__ import annotations

import numpy as np
import sympy

from ..errors import UnsupportedOp
from ..ir import DType, TensorType, canon
from ..kernel import Const, broadcast_indices, cast, rem, select, wrap_index
from .elementwise import cast_out, kwiden, widen
from .registry import InferCtx, RefCtx, define, onnx_inputs


def refusal(op, detail: str) -> UnsupportedOp:
    """An UnsupportedOp naming the op with its full domain (com.microsoft, not com)."""
    domain, _, name = op.name.rpartition(".")
    return UnsupportedOp(name, "" if domain == "onnx" else domain, op.loc, detail)


def rotary(x, cos, sin, pos, *, interleaved: bool, rot: int, heads: int):
    """numpy RoPE. x: [B, N, S, H] or [B, S, N*H] (`heads` = N); pos: [B, S] positions into
    caches of [max_pos, rot/2], or None when the caches are already [B, S, rot/2]."""
    shape = x.shape
    x4 = x.transpose(0, 2, 1, 3) if x.ndim == 4 else x.reshape(shape[0], shape[1], heads, -1)  # [B,S,N,H]
    rot = rot or x4.shape[-1]
    if pos is not None:
        cos, sin = cos[pos], sin[pos]
    rows = (*x4.shape[:2], rot // 2)
    cos, sin = np.broadcast_to(cos, rows), np.broadcast_to(sin, rows)
    c, s = cos[:, :, None, :], sin[:, :, None, :]
    xr = x4[..., :rot]
    x1, x2 = (xr[..., 0::2], xr[..., 1::2]) if interleaved else (xr[..., :rot // 2], xr[..., rot // 2:])
    real, imag = c * x1 - s * x2, s * x1 + c * x2
    out = x4.copy()
    if interleaved:
        out[..., 0:rot:2], out[..., 1:rot:2] = real, imag
    else:
        out[..., :rot // 2], out[..., rot // 2:rot] = real, imag
    return out.transpose(0, 2, 1, 3) if x.ndim == 4 else out.reshape(shape)


class _Sig:
    """One node's RoPE signature, the same for both domains."""

    def __init__(self, op, items: list):
        self.ms = op.name.startswith("com.microsoft.")
        if self.ms:
            x, pos, cos, sin = (onnx_inputs(op, items) + [None] * 4)[:4]
        else:
            x, cos, sin, pos = (onnx_inputs(op, items) + [None] * 4)[:4]
        self.x, self.pos, self.cos, self.sin = x, pos, cos, sin
        a = op.attrs
        self.interleaved = bool(a.get("interleaved", 0))
        self.heads = int(a.get("num_heads", 0))
        self.rot = int(a.get("rotary_embedding_dim", 0))
        if self.ms and float(a.get("scale", 1.0)) != 1.0:
            raise refusal(op, f"scale = {a.get('scale')} (onnxruntime's CPU kernel ignores it)")
        if self.ms and int(a.get("is_packed_batching", 0)):
            raise refusal(op, "is_packed_batching = 1")


def _head_size(ctx, sig: _Sig, x_shape, cos_shape):
    """The head size H (a Dim) of X; 3-D X needs num_heads (or, for com.microsoft without a
    rotary dim, the cache width)."""
    if len(x_shape) == 4:
        return x_shape[3]
    if sig.heads > 0:
        hidden = x_shape[2]
        if isinstance(hidden, int) and hidden % sig.heads:
            raise ctx.error(f"hidden size {hidden} not divisible by num_heads {sig.heads}")
        if not isinstance(hidden, int):
            ctx.require(sympy.Eq(sympy.Mod(hidden, sig.heads), 0),
                        f"hidden size divisible by num_heads {sig.heads}")
        return canon(sympy.sympify(hidden) / sig.heads)
    if sig.ms and sig.rot == 0:
        return canon(2 * sympy.sympify(cos_shape[-1]))
    raise ctx.error("a 3-D input needs the num_heads attribute")


def _infer(ctx: InferCtx):
    sig = _Sig(ctx.op, list(ctx.in_types))
    x, cos, sin, pos = sig.x, sig.cos, sig.sin, sig.pos
    if x.rank not in (3, 4):
        raise ctx.error(f"input must be 3-D or 4-D, got {x}")
    if cos.dtype is not x.dtype or sin.dtype is not x.dtype:
        raise ctx.error(f"cos / sin caches must be {x.dtype.value}, "
                        f"got {cos.dtype.value} / {sin.dtype.value}")
    h = _head_size(ctx, sig, x.shape, cos.shape)
    rot = sig.rot or h
    if isinstance(rot, int) and rot % 2:
        raise ctx.error(f"rotary dim {rot} must be even")
    b, s = x.shape[0], x.shape[2] if x.rank == 4 else x.shape[1]
    ctx.require(sympy.Le(sympy.sympify(rot), sympy.sympify(h)), "rotary_embedding_dim <= head size")
    for name, t in (("cos_cache", cos), ("sin_cache", sin)):
        ctx.require_eq(t.shape[-1], canon(sympy.sympify(rot) / 2), f"{name} dim -1 vs rotary dim / 2")
        if pos is None and (t.rank != 3 or ctx.symbols.prove_eq(t.shape[1], s) is False):
            raise ctx.error(f"without position_ids {name} must be [batch, seq, rot/2], got {t}")
        if pos is not None and t.rank != 2:
            raise ctx.error(f"with position_ids {name} must be [max_position, rot/2], got {t}")
    if pos is None:
        _broadcast_bs(ctx, (b, s), cos.shape[:2], "cos_cache")
    elif pos.dtype not in (DType.i64, DType.i32):
        raise ctx.error(f"position_ids must be int64, got {pos.dtype.value}")
    elif pos.rank == 2:
        _broadcast_bs(ctx, (b, s), pos.shape, "position_ids")
    elif not (sig.ms and pos.rank == 1 and ctx.symbols.prove_eq(pos.shape[0], 1) is True):
        raise ctx.error(f"position_ids must be [batch, seq]{' or [1]' if sig.ms else ''}, got {pos}")
    return [TensorType(x.dtype, x.shape)]


def _broadcast_bs(ctx: InferCtx, target: tuple, src: tuple, what: str) -> None:
    for i, (t, d) in enumerate(zip(target, src, strict=True)):
        if not (isinstance(d, int) and d == 1):
            ctx.require_eq(t, d, f"{what} dim {i}")


def _ref(ctx: RefCtx, *args):
    sig = _Sig(ctx.op, list(args))
    x = widen(sig.x)
    pos = sig.pos
    s = x.shape[2] if x.ndim == 4 else x.shape[1]
    if pos is not None and pos.ndim == 1:  # the offset form: positions offset + 0 .. S-1
        pos = np.broadcast_to(int(pos[0]) + np.arange(s), (x.shape[0], s))
    if pos is not None:
        pos = np.broadcast_to(pos, (x.shape[0], s)).astype(np.int64)
        if np.any((pos < 0) | (pos >= sig.cos.shape[0])):
            raise ValueError(f"RotaryEmbedding: position id out of range [0, {sig.cos.shape[0]})")
    heads = sig.heads or (x.shape[-1] // (2 * sig.cos.shape[-1]) if x.ndim == 3 else 0)
    y = rotary(x, widen(sig.cos), widen(sig.sin), pos, interleaved=sig.interleaved, rot=sig.rot, heads=heads)
    return [cast_out(ctx, y)]


def _lower(ctx) -> None:
    """One elementwise compute: each output element reads X at itself and at its rotation
    partner in the same head (d +- rot/2, or d +- 1 interleaved) and the cos / sin cache row
    of its position (gathered through position_ids, bounds-checked)."""
    sig = _Sig(ctx.op, list(ctx.inputs))
    x, cos, sin, pos = sig.x, sig.cos, sig.sin, sig.pos
    y = ctx.out(0)
    h = _head_size(ctx, sig, x.shape, cos.shape)
    if not isinstance(h, int):
        raise refusal(ctx.op, f"a symbolic head size ({h})")
    i64 = DType.i64

    def row_of(b, s, j):
        if pos is None:
            return (*broadcast_indices((b, s), cos.shape[:2]), j)
        if pos.rank == 2:
            p = cast(pos[broadcast_indices((b, s), pos.shape)], i64)
        else:  # the offset form
            p = cast(pos[(Const(0, i64),)], i64) + s
        return (wrap_index(p, cos.shape[0], negative=False), j)

    rope_compute(ctx, x, y, cos, sin, h, sig.rot or h, sig.interleaved, row_of)


def rope_compute(ctx, x, y, cos, sin, h: int, rot: int, interleaved: bool, row_of) -> None:
    """y = RoPE(x) as one compute; x is [B, N, S, H] or [B, S, N*H] (head size `h`), and
    `row_of(b, s, j)` is the cos / sin cache index of token (b, s), pair j."""
    half = rot // 2
    i64 = DType.i64

    def body(*ix):
        if x.rank == 4:
            b, s, d = ix[0], ix[2], ix[3]

            def at(dd):
                return (ix[0], ix[1], ix[2], dd)
        else:
            b, s, col = ix
            d = rem(col, Const(h, i64))

            def at(dd):
                return (b, s, col + (dd - d))
        if interleaved:
            first = rem(d, Const(2, i64)).eq(Const(0, i64))
            partner, j = select(first, d + 1, d - 1), d // 2
        else:
            first = d < half
            partner, j = select(first, d + half, d - half), select(first, d, d - half)
        inside = None if rot == h else d < rot
        if inside is not None:  # elements past the rotary dim pass through: keep their loads in range
            partner, j = select(inside, partner, d), select(inside, j, Const(0, i64))
        row = row_of(b, s, j)
        c, sn = kwiden(cos[row]), kwiden(sin[row])
        xv, xp = kwiden(x[ix]), kwiden(x[at(partner)])
        out = xv * c + select(first, -sn, sn) * xp
        if inside is not None:
            out = select(inside, out, xv)
        return cast(out, y.dtype)

    ctx.compute(y, body)


for _name in ("onnx.RotaryEmbedding", "com.microsoft.RotaryEmbedding"):
    define(_name, infer=_infer, reference=_ref, lower=_lower, kind="injective", arity=(3, 4), math=rotary)
