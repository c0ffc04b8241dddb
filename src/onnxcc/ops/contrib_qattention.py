"""com.microsoft.QAttention: com.microsoft.Attention whose projection is an 8-bit product.

  input         u8 / i8 [B, S, Hin]          input_scale, input_zero_point: one element
  weight        u8 / i8 [Hin, 3 * D]         weight_scale, weight_zero_point: one element or one
                                              per column
  bias          f32 [3 * D]
  mask_index    [B] (each row's end position) or [B, T] / [B, S, T] raw (0 = masked)
  past          refused (and the present output)
  QKV = f32(sum((x - x_zp) * (w - w_zp))) * (input_scale * weight_scale[col]) + bias[col], as
  onnxruntime's kernel (the integer product exact in i32; on the VNNI GEMM for a constant
  weight), then multi-head scaled dot-product
  attention over Q, K, V (contrib_attention's `lower_sdpa`; masked scores get
  mask_filter_value added, future keys too with unidirectional = 1).
"""

from __future__ import annotations

import math

import numpy as np

from ..ir import DType, TensorType, canon
from ..kernel import Const, cast, select
from .contrib_attention import lower_sdpa, sdpa
from .contrib_rotary import refusal
from .int8_gemm import vnni_matmul
from .int_gemm import per_element
from .matmul import matmul_compute, matmul_integer
from .registry import InferCtx, RefCtx, define, onnx_inputs

_NAMES = ("input", "weight", "bias", "input_scale", "weight_scale", "mask_index", "input_zero_point",
          "weight_zero_point", "past")


def _named(op, items: list) -> dict:
    vals = onnx_inputs(op, items)
    return {n: vals[i] if i < len(vals) else None for i, n in enumerate(_NAMES)}


def _heads(ctx, d) -> tuple[int, int]:
    n = int(ctx.attr("num_heads", 0) or 0)
    if n <= 0:
        raise ctx.error("num_heads must be a positive integer")
    if not isinstance(d, int) or d % n:
        raise refusal(ctx.op, f"a hidden size {d} that is not a constant multiple of num_heads {n}")
    return n, d // n


def _infer(ctx: InferCtx):
    a = _named(ctx.op, list(ctx.in_types))
    x, w, b = a["input"], a["weight"], a["bias"]
    for t, what in ((x, "input"), (w, "weight")):
        if t.dtype not in (DType.u8, DType.i8):
            raise ctx.error(f"{what} must be u8 or i8, got {t.dtype.value}")
    if x.rank != 3 or w.rank != 2 or b.rank != 1:
        raise ctx.error(f"input must be [B, S, Hin], weight [Hin, 3 * D] and bias [3 * D], got {x}, {w}, {b}")
    ctx.require_eq(w.shape[0], x.shape[2], "weight dim 0 vs input dim 2")
    ctx.require_eq(b.shape[0], w.shape[1], "bias length vs weight dim 1")
    if not isinstance(w.shape[1], int) or w.shape[1] % 3:
        raise refusal(ctx.op, f"a weight width {w.shape[1]} that is not a constant multiple of 3")
    _heads(ctx, w.shape[1] // 3)
    if a["past"] is not None or len(ctx.op.results) > 1:
        raise refusal(ctx.op, "past / present (a KV cache)")
    m = a["mask_index"]
    if m is not None and m.rank not in (1, 2, 3):
        raise refusal(ctx.op, f"mask_index of rank {m.rank}")
    if m is not None and m.rank == 1:
        ctx.require_eq(m.shape[0], x.shape[0], "mask_index length vs batch (the [2B] form is refused)")
    return [TensorType(b.dtype, (x.shape[0], x.shape[1], canon(w.shape[1] // 3)))]


def _scale(ctx) -> float | None:
    return float(ctx.attr("scale", 0.0) or 0.0) or None


def _ref(ctx: RefCtx, *args):
    a = _named(ctx.op, list(args))
    x, w = a["input"], a["weight"]
    acc = matmul_integer(x, w, a["input_zero_point"], a["weight_zero_point"])
    ws = np.asarray(a["weight_scale"], np.float32).reshape(-1)
    qkv = acc.astype(np.float32) * (np.float32(np.asarray(a["input_scale"]).reshape(-1)[0]) * ws) + a["bias"]
    d = w.shape[1] // 3
    n, _ = _heads(ctx, d)
    b, s = x.shape[:2]
    fill = np.float32(ctx.attr("mask_filter_value", -10000.0))
    add = np.zeros((b, 1, s, s), np.float32)
    m = a["mask_index"]
    if m is not None:
        t = np.arange(s)
        keep = (t[None, :] < m[:, None])[:, None, None, :] if m.ndim == 1 else \
            (m[:, None, None, :] > 0 if m.ndim == 2 else m[:, None] > 0)
        add = add + np.where(keep, 0, fill)
    if ctx.attr("unidirectional", 0):
        add = add + np.where(np.arange(s)[None, :] > np.arange(s)[:, None], fill, 0)
    out = sdpa(qkv[..., :d], qkv[..., d:2 * d], qkv[..., 2 * d:], n, _scale(ctx), add)
    return [out.astype(np.float32)]


def _lower(ctx) -> None:
    a = _named(ctx.op, list(ctx.inputs))
    x, w, bias = a["input"], a["weight"], a["bias"]
    y = ctx.out(0)
    d = w.shape[1] // 3
    n, hd = _heads(ctx, d)
    i32, f32 = DType.i32, DType.f32
    xz, wz = a["input_zero_point"], a["weight_zero_point"]

    def load_x(ix):
        v = cast(x[ix], i32)
        return v if xz is None else v - cast(per_element(xz, 0), i32)

    def load_w(ix):
        v = cast(w[ix], i32)
        return v if wz is None else v - cast(per_element(wz, ix[-1]), i32)

    acc = ctx.temp(i32, (*x.shape[:2], w.shape[1]), "qkv_acc")
    # a constant weight on the VNNI GEMM (int8_gemm.py): the same exact i32 sums
    if not vnni_matmul(ctx, acc, x, xz, w, wz):
        matmul_compute(ctx, acc, x.shape, w.shape, load_x, load_w)
    qkv = ctx.temp(f32, acc.shape, "qkv")
    xs, ws = a["input_scale"], a["weight_scale"]
    ctx.compute(qkv, lambda b, s, c: cast(acc[(b, s, c)], f32) * (cast(per_element(xs, 0), f32)
                                                                   * cast(per_element(ws, c), f32)) + bias[(c,)])
    fill, zero = Const(float(np.float32(ctx.attr("mask_filter_value", -10000.0))), f32), Const(0.0, f32)
    mask, causal = a["mask_index"], bool(ctx.attr("unidirectional", 0))

    def extra(b, h, s, t):
        out = None
        if mask is not None:
            if mask.rank == 1:
                term = select(cast(t, mask.dtype) < mask[(b,)], zero, fill)
            else:
                mv = mask[(b, t)] if mask.rank == 2 else mask[(b, s, t)]
                term = select(mv > Const(0, mask.dtype), zero, fill)
            out = term
        if causal:
            term = select(t > s, fill, zero)
            out = term if out is None else out + term
        return out

    scale = _scale(ctx) or 1.0 / math.sqrt(hd)
    lower_sdpa(ctx, lambda b, h, s, e: qkv[(b, s, h * hd + e)], lambda b, h, t, e: qkv[(b, t, d + h * hd + e)],
               lambda b, h, t, e: qkv[(b, t, 2 * d + h * hd + e)], (x.shape[0], x.shape[1], x.shape[1]), n, hd, hd,
               scale, extra if (mask is not None or causal) else None, y)


define("com.microsoft.QAttention", infer=_infer, reference=_ref, lower=_lower, kind="opaque", arity=(5, 9))
