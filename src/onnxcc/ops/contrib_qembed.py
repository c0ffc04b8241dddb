"""com.microsoft.QEmbedLayerNormalization: BERT's embedding sum and LayerNorm over 8-bit tables.

  input_ids, segment_ids?    i32 [B, S]
  word / position / segment embedding tables (u8 or i8 [rows, H]), gamma, beta (u8 or i8 [H]),
  each with a one-element scale and zero point (segment's optional with its table)
  mask?                      i32 [B, S]
  outputs: layernorm_out f32 [B, S, H]; mask_index_out i32 [B] (the row sums of mask, zeros
  without one)

Every table element is dequantized as it is read, `f32(q - zero_point) * scale`; position ids
are 0..S-1. The LayerNorm is onnxruntime's: mean and mean of squares over H, divided by
`sqrt(mean_sq - mean^2 + epsilon)`, then gamma and beta.
"""

from __future__ import annotations

import numpy as np

from ..ir import DType, TensorType
from ..kernel import Const, Var, cast, rsum, sqrt, wrap_index
from .int_gemm import per_element
from .registry import InferCtx, RefCtx, define, onnx_inputs

_NAMES = ("input_ids", "segment_ids", "word", "position", "segment", "gamma", "beta", "mask",
          "word_scale", "position_scale", "segment_scale", "gamma_scale", "beta_scale",
          "word_zp", "position_zp", "segment_zp", "gamma_zp", "beta_zp")
_TABLES = ("word", "position", "segment", "gamma", "beta")


def _named(op, items: list) -> dict:
    vals = onnx_inputs(op, items)
    return {n: vals[i] if i < len(vals) else None for i, n in enumerate(_NAMES)}


def _infer(ctx: InferCtx):
    a = _named(ctx.op, list(ctx.in_types))
    ids = a["input_ids"]
    if ids.rank != 2 or ids.dtype is not DType.i32:
        raise ctx.error(f"input_ids must be i32 [B, S], got {ids}")
    hidden = a["word"].shape[1] if a["word"].rank == 2 else None
    for t in _TABLES:
        q = a[t]
        if q is None:
            continue
        if q.dtype not in (DType.u8, DType.i8) or q.rank != (1 if t in ("gamma", "beta") else 2):
            raise ctx.error(f"{t} must be a u8 or i8 {'vector' if t in ('gamma', 'beta') else 'table'}, got {q}")
        ctx.require_eq(q.shape[-1], hidden, f"{t} width vs the word embedding's")
        if a[f"{t}_scale"] is None or a[f"{t}_zp"] is None:
            raise ctx.error(f"{t} needs its scale and zero point")
        for p in (a[f"{t}_scale"], a[f"{t}_zp"]):
            if any(not (isinstance(d, int) and d == 1) for d in p.shape):
                raise ctx.error(f"{t}'s scale and zero point must have one element, got {p}")
    if (a["segment_ids"] is None) != (a["segment"] is None):
        raise ctx.error("segment_ids and segment_embedding come together")
    for m in ("segment_ids", "mask"):
        if a[m] is not None:
            ctx.require_eq(a[m].shape[0], ids.shape[0], f"{m} dim 0 vs input_ids")
            ctx.require_eq(a[m].shape[1], ids.shape[1], f"{m} dim 1 vs input_ids")
    b, s = ids.shape
    return [TensorType(DType.f32, (b, s, hidden)), TensorType(DType.i32, (b,))][: len(ctx.op.results)]


def _deq_np(q, scale, zp):
    return (q.astype(np.int32) - np.int32(np.asarray(zp).reshape(-1)[0])).astype(np.float32) * \
        np.float32(np.asarray(scale).reshape(-1)[0])


def _ref(ctx: RefCtx, *args):
    a = _named(ctx.op, list(args))
    t = {n: _deq_np(a[n], a[f"{n}_scale"], a[f"{n}_zp"]) for n in _TABLES if a[n] is not None}
    ids = a["input_ids"]
    for n, i in (("word", ids), ("position", np.arange(ids.shape[1])), ("segment", a["segment_ids"])):
        if i is not None and i.size and (i.min() < 0 or i.max() >= t[n].shape[0]):
            raise ValueError(f"{n} index out of range [0, {t[n].shape[0]})")
    e = t["word"][ids] + t["position"][np.arange(ids.shape[1])][None]
    if a["segment_ids"] is not None:
        e = e + t["segment"][a["segment_ids"]]
    mean = e.mean(-1, keepdims=True, dtype=np.float32)
    var = (e * e).mean(-1, keepdims=True, dtype=np.float32) - mean * mean
    eps = np.float32(ctx.attr("epsilon", 1e-12))
    y = (e - mean) / np.sqrt(var + eps) * t["gamma"] + t["beta"]
    mask = a["mask"]
    mi = mask.sum(-1).astype(np.int32) if mask is not None else np.zeros(ids.shape[0], np.int32)
    return [y.astype(np.float32), mi][: len(ctx.op.results)]


def _lower(ctx) -> None:
    a = _named(ctx.op, list(ctx.inputs))
    ids = a["input_ids"]
    y = ctx.out(0)
    b_, s_, h_ = y.shape
    f32, i32, i64 = DType.f32, DType.i32, DType.i64

    def deq(name, ix):
        q = a[name]
        return cast(cast(q[ix], i32) - cast(per_element(a[f"{name}_zp"], 0), i32), f32) * \
            cast(per_element(a[f"{name}_scale"], 0), f32)

    def row(name, idx):  # a row past its table (an id, or a position >= the table's rows) fails the run
        return wrap_index(cast(idx, i64), a[name].shape[0], negative=False)

    def embed(b, s, h):
        v = deq("word", (row("word", ids[(b, s)]), h)) + deq("position", (row("position", s), h))
        if a["segment_ids"] is not None:
            v = v + deq("segment", (row("segment", a["segment_ids"][(b, s)]), h))
        return v

    e = ctx.temp(f32, (b_, s_, h_), "embed")
    ctx.compute(e, embed)
    hk = Var("hk")
    n = Const(float(h_), f32) if isinstance(h_, int) else cast(ctx.dim(h_), f32)
    mean = ctx.temp(f32, (b_, s_), "mean")
    ctx.compute(mean, lambda b, s: rsum([(hk, h_)], e[(b, s, hk)]) / n)
    msq = ctx.temp(f32, (b_, s_), "mean_sq")
    ctx.compute(msq, lambda b, s: rsum([(hk, h_)], e[(b, s, hk)] * e[(b, s, hk)]) / n)
    eps = Const(float(np.float32(ctx.attr("epsilon", 1e-12))), f32)

    def norm(b, s, h):
        m = mean[(b, s)]
        return (e[(b, s, h)] - m) / sqrt(msq[(b, s)] - m * m + eps) * deq("gamma", (h,)) + deq("beta", (h,))

    ctx.compute(y, norm)
    if len(ctx.op.results) > 1:
        mask, sk = a["mask"], Var("sk")
        out = ctx.out(1)
        if mask is None:
            ctx.compute(out, lambda b: Const(0, i32))
        else:
            ctx.compute(out, lambda b: rsum([(sk, s_)], cast(mask[(b, sk)], i32)))


define("com.microsoft.QEmbedLayerNormalization", infer=_infer, reference=_ref, lower=_lower, kind="opaque",
       arity=(18, 18), num_results=None)
