"""onnxruntime's fused attention ops, without a KV cache:

com.microsoft.Attention           (input, weights, bias?, mask_index?, past?, attention_bias?)
                                  Q, K, V = split(input @ weights + bias), then multi-head
                                  scaled dot-product attention; outputs output, present
                                  [2, B, N, P + S, H] (past [2, B, N, P, H] then the new K / V;
                                  queries at positions P..)
com.microsoft.MultiHeadAttention  (query, key, value, bias?, key_padding_mask?, attention_bias?,
                                  past_key?, past_value?) Q, K, V given as [B, S|L, N*H]; outputs
                                  output, present_key, present_value [B, N, P + L, H] (the past
                                  [B, N, P, H] rows, then the new ones)
com.microsoft.GroupQueryAttention (query, key, value, past_key?, past_value?, seqlens_k,
                                  total_sequence_length): kv_num_heads K / V heads shared by
                                  groups of query heads, causal. The prompt step (no past):
                                  keys past seqlens_k[b] masked (right padding). With past
                                  [B, Nkv, P, H] (not shared with present): present =
                                  concat(past, new) [B, Nkv, P + S, H], queries at positions
                                  P.., and every row must be full (seqlens_k[b] = P + S - 1).
                                  total_sequence_length must be P + S. Both are checked at
                                  run time (the kernel fails rather than guess a layout).
                                  do_rotary = 1 rotates Q and K (cos / sin caches [max, H/2],
                                  positions P + s) before attention, as RotaryEmbedding does

The mask forms handled: mask_index [B, T] or [B, S, T] (raw: 0 = masked) or [B] (each batch
row's end position: keys t >= end are masked), and key_padding_mask [B, L] (raw); masked
scores get `mask_filter_value` added (-10000 by default), as do future positions when
`unidirectional` = 1. attention_bias is [B | 1, N | 1, S, T]. Everything else
(past_sequence_length, shared past / present buffers, the [2B] start / end mask form, packed
QKV, rotary inside Attention) is refused naming the input.

The lowering composes what onnxcc already has: the projection is MatMul's compute (bias as an
epilogue), the scores a per-head contraction into a [B, N, S, T] temp, the probabilities
Softmax's kernel twin over T, the output a contraction over T. A fused (flash-attention style)
kernel would not materialise the two [B, N, S, T] temps and would make one pass over K and V
per query block; that is a schedule for codegen, not a different meaning.
"""

from __future__ import annotations

import math

import numpy as np
import sympy

from ..ir import DType, TensorType, canon
from ..kernel import (
    ERR_ASSERT,
    Const,
    Var,
    broadcast_indices,
    cast,
    check,
    maximum,
    minimum,
    rsum,
    select,
    wrap_index,
)
from ..kernel.flash import flash_core
from .attention import fuses
from .contrib_rotary import refusal, rope_compute, rotary
from .elementwise import cast_out, widen
from .matmul import matmul_compute
from .reduce import k_softmax
from .registry import InferCtx, RefCtx, define, onnx_inputs

_ATT = ("input", "weights", "bias", "mask_index", "past", "attention_bias", "past_sequence_length")
_MHA = ("query", "key", "value", "bias", "key_padding_mask", "attention_bias", "past_key", "past_value")
_GQA = ("query", "key", "value", "past_key", "past_value", "seqlens_k", "total_sequence_length", "cos_cache",
        "sin_cache", "position_ids", "attention_bias", "head_sink")


def _named(op, items: list, names: tuple) -> dict:
    """ONNX input name -> item (None where absent, trailing ones included)."""
    vals = onnx_inputs(op, items)
    return {n: vals[i] if i < len(vals) else None for i, n in enumerate(names)}


def _refuse_unhandled(op, a: dict, names: tuple[str, ...]) -> None:
    for n in names:
        if a.get(n) is not None:
            raise refusal(op, f"input {n!r} (KV cache / past state) is not supported")


def sdpa(q, k, v, heads: int, scale: float | None, add=None):
    """numpy multi-head attention of q [B, S, N*H], k [B, T, N*H], v [B, T, N*Hv]; `add` is
    added to the scaled scores (broadcast to [B, N, S, T]). Returns [B, S, N*Hv]."""
    b, s, t = q.shape[0], q.shape[1], k.shape[1]
    hq, hv = q.shape[2] // heads, v.shape[2] // heads
    qh = q.reshape(b, s, heads, hq).transpose(0, 2, 1, 3)
    kh = k.reshape(b, t, heads, hq).transpose(0, 2, 1, 3)
    vh = v.reshape(b, t, heads, hv).transpose(0, 2, 1, 3)
    scores = (qh @ kh.transpose(0, 1, 3, 2)) * (1.0 / math.sqrt(hq) if not scale else scale)
    if add is not None:
        scores = scores + add
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    p = e / e.sum(axis=-1, keepdims=True)
    return (p @ vh).transpose(0, 2, 1, 3).reshape(b, s, heads * hv)


def _mask_add(mask, causal: bool, s: int, t: int, fill: float, bias=None, past: int = 0):
    """What gets added to the scores: fill where mask == 0 or (causal) t > past + s, plus bias."""
    add = np.zeros((1, 1, s, t), np.float32)
    if mask is not None and mask.ndim == 1:  # end positions
        add = add + np.where(np.arange(t)[None, None, None, :] < mask[:, None, None, None], 0.0, fill)
    elif mask is not None:
        m = mask[:, None, None, :] if mask.ndim == 2 else mask[:, None, :, :]
        add = add + np.where(m > 0, 0.0, fill)
    if causal:
        add = add + np.where(np.arange(t)[None, :] > past + np.arange(s)[:, None], fill, 0.0)
    return add if bias is None else add + bias


# ---- shape rules ------------------------------------------------------------------------------------


def _heads(ctx: InferCtx) -> int:
    n = ctx.attr("num_heads")
    if not isinstance(n, int) or n < 1:
        raise ctx.error(f"attribute 'num_heads' must be a positive int, got {n!r}")
    return n


def _divisible(ctx: InferCtx, d, n: int, what: str):
    if isinstance(d, int) and d % n:
        raise ctx.error(f"{what} {d} not divisible by num_heads {n}")
    if not isinstance(d, int):
        ctx.require(sympy.Eq(sympy.Mod(d, n), 0), f"{what} divisible by num_heads {n}")


def _check_mask(ctx: InferCtx, m, b, s, t, what: str) -> None:
    if m is None:
        return
    if m.dtype is not DType.i32:
        raise ctx.error(f"{what} must be int32, got {m.dtype.value}")
    if m.rank == 1 and what == "mask_index" and ctx.symbols.prove_eq(m.shape[0], b) is True:
        return
    if m.rank not in (2, 3):
        raise _mask_refusal(ctx, what, m)
    want = (b, t) if m.rank == 2 else (b, s, t)
    for i, (d, w) in enumerate(zip(m.shape, want, strict=True)):
        ctx.require_eq(d, w, f"{what} dim {i}")


def _mask_refusal(ctx, what: str, m):
    return refusal(ctx.op, f"{what} of shape {m} (only [B] end positions or the raw [B, T] / [B, S, T] "
                           "forms)")


def _check_bias(ctx: InferCtx, ab, b, n: int, s, t) -> None:
    if ab is None:
        return
    if ab.rank != 4:
        raise ctx.error(f"attention_bias must be 4-D [B, N, S, T], got {ab}")
    for i, (d, w) in enumerate(zip(ab.shape, (b, n, s, t), strict=True)):
        if not (isinstance(d, int) and d == 1 and i < 2):
            ctx.require_eq(d, w, f"attention_bias dim {i}")


def _att_sizes(ctx, a) -> tuple:
    """(q, k, v) hidden sizes of Attention's packed projection."""
    sizes = ctx.attr("qkv_hidden_sizes")
    w = a["weights"].shape[1]
    if sizes:
        return tuple(int(x) for x in sizes)
    h = canon(sympy.sympify(w) / 3)
    return h, h, h


def _att_infer(ctx: InferCtx):
    a = _named(ctx.op, list(ctx.in_types), _ATT)
    _refuse_unhandled(ctx.op, a, ("past_sequence_length",))
    if ctx.attr("past_present_share_buffer", 0):
        raise refusal(ctx.op, "past_present_share_buffer = 1")
    if ctx.attr("do_rotary", 0):
        raise refusal(ctx.op, "do_rotary = 1")
    x, w = a["input"], a["weights"]
    if x.rank != 3 or w.rank != 2:
        raise ctx.error(f"input must be [B, S, D] and weights [D, 3H], got {x} and {w}")
    n = _heads(ctx)
    hq, hk, hv = _att_sizes(ctx, a)
    ctx.require_eq(w.shape[0], x.shape[2], "weights dim 0 vs input dim 2")
    ctx.require_eq(w.shape[1], canon(sympy.sympify(hq) + hk + hv), "weights dim 1 vs the q + k + v sizes")
    if a["bias"] is not None:
        ctx.require_eq(a["bias"].shape[0], w.shape[1], "bias length vs weights dim 1")
    for d, what in ((hq, "q hidden size"), (hv, "v hidden size")):
        _divisible(ctx, d, n, what)
    ctx.require_eq(hq, hk, "q and k hidden sizes")
    b, s = x.shape[0], x.shape[1]
    hd = canon(sympy.sympify(hk) / n)
    t = s
    past = a["past"]
    if past is not None:
        if hk != hv:
            raise refusal(ctx.op, "past state with different k and v sizes")
        if past.rank != 5:
            raise ctx.error(f"past must be [2, B, N, P, H], got {past}")
        for i, (d, want) in enumerate(zip(past.shape, (2, b, n, past.shape[3], hd), strict=True)):
            ctx.require_eq(d, want, f"past dim {i}")
        t = canon(sympy.sympify(past.shape[3]) + s)
    _check_mask(ctx, a["mask_index"], b, s, t, "mask_index")
    _check_bias(ctx, a["attention_bias"], b, n, s, t)
    out = [TensorType(x.dtype, (b, s, hv))]
    if len(ctx.op.results) > 1:
        if hk != hv:
            raise refusal(ctx.op, "the present output with different k and v sizes")
        out.append(TensorType(x.dtype, (2, b, n, t, hd)))
    return out


def _mha_infer(ctx: InferCtx):
    a = _named(ctx.op, list(ctx.in_types), _MHA)
    for name in _MHA[8:]:
        if a.get(name) is not None:
            raise refusal(ctx.op, f"input {name!r}")
    if (a["past_key"] is None) != (a["past_value"] is None):
        raise ctx.error("past_key and past_value go together")
    q, k, v = a["query"], a["key"], a["value"]
    if k is None or v is None or q.rank != 3 or k.rank != 3 or v.rank != 3:
        raise refusal(ctx.op, "only separate 3-D query, key and value [B, S|L, N*H]")
    n = _heads(ctx)
    b, s, hq = q.shape
    ctx.require_eq(k.shape[0], b, "key dim 0 vs query dim 0")
    ctx.require_eq(v.shape[0], b, "value dim 0 vs query dim 0")
    ctx.require_eq(k.shape[2], hq, "key dim 2 vs query dim 2")
    t = ctx.require_eq(k.shape[1], v.shape[1], "key dim 1 vs value dim 1")
    for d, what in ((hq, "query hidden size"), (v.shape[2], "value hidden size")):
        _divisible(ctx, d, n, what)
    hk, hv = canon(sympy.sympify(hq) / n), canon(sympy.sympify(v.shape[2]) / n)
    if a["past_key"] is not None:
        pk, pv = a["past_key"], a["past_value"]
        if pk.rank != 4 or pv.rank != 4:
            raise refusal(ctx.op, f"past_key / past_value of shapes {pk} / {pv} (only [B, N, P, H])")
        for x, hd, what in ((pk, hk, "past_key"), (pv, hv, "past_value")):
            for i, (d, want) in enumerate(zip(x.shape, (b, n, pk.shape[2], hd), strict=True)):
                ctx.require_eq(d, want, f"{what} dim {i}")
        t = canon(sympy.sympify(pk.shape[2]) + t)
    if a["bias"] is not None:
        ctx.require_eq(a["bias"].shape[0], canon(2 * sympy.sympify(hq) + v.shape[2]), "bias length")
    m = a["key_padding_mask"]
    if m is not None and m.rank != 2:
        raise _mask_refusal(ctx, "key_padding_mask", m)
    _check_mask(ctx, m, b, s, t, "key_padding_mask")
    _check_bias(ctx, a["attention_bias"], b, n, s, t)
    return [TensorType(q.dtype, (b, s, v.shape[2])), TensorType(q.dtype, (b, n, t, hk)),
            TensorType(q.dtype, (b, n, t, hv))][: len(ctx.op.results)]


# ---- references -----------------------------------------------------------------------------------


def _att_ref(ctx: RefCtx, *args):
    a = _named(ctx.op, [None if x is None else widen(x) for x in args], _ATT)
    n = int(ctx.attr("num_heads"))
    hq, hk, _ = _att_sizes(ctx, a)
    qkv = a["input"] @ a["weights"]
    if a["bias"] is not None:
        qkv = qkv + a["bias"]
    q, k, v = qkv[..., :hq], qkv[..., hq:hq + hk], qkv[..., hq + hk:]
    b, s = q.shape[:2]

    def heads(z):  # [B, S, N*H] -> [B, N, S, H]
        return z.reshape(b, z.shape[1], n, -1).transpose(0, 2, 1, 3)

    def merged(z):  # [B, N, T, H] -> [B, T, N*H]
        return z.transpose(0, 2, 1, 3).reshape(b, z.shape[2], -1)

    kh, vh = heads(k), heads(v)
    past = 0 if a["past"] is None else a["past"].shape[3]
    if past:
        kh, vh = np.concatenate([a["past"][0], kh], axis=2), np.concatenate([a["past"][1], vh], axis=2)
    add = _mask_add(a["mask_index"], bool(ctx.attr("unidirectional", 0)), s, past + s,
                    float(ctx.attr("mask_filter_value", -10000.0)), a["attention_bias"], past)
    outs = [sdpa(q, merged(kh), merged(vh), n, float(ctx.attr("scale", 0.0)), add)]
    if len(ctx.op.results) > 1:
        outs.append(np.stack([kh, vh]))
    return [cast_out(ctx, o, i) for i, o in enumerate(outs)]


def _mha_ref(ctx: RefCtx, *args):
    a = _named(ctx.op, [None if x is None else widen(x) for x in args], _MHA)
    n = int(ctx.attr("num_heads"))
    q, k, v = a["query"], a["key"], a["value"]
    if a["bias"] is not None:
        d = q.shape[2]
        q, k, v = q + a["bias"][:d], k + a["bias"][d:2 * d], v + a["bias"][2 * d:]
    b = q.shape[0]
    kh, vh = (z.reshape(b, z.shape[1], n, -1).transpose(0, 2, 1, 3) for z in (k, v))  # [B, N, L, H]
    past = 0 if a["past_key"] is None else a["past_key"].shape[2]
    if past:
        kh, vh = np.concatenate([a["past_key"], kh], axis=2), np.concatenate([a["past_value"], vh], axis=2)

    def merged(z):  # [B, N, T, H] -> [B, T, N*H]
        return z.transpose(0, 2, 1, 3).reshape(b, z.shape[2], -1)

    add = _mask_add(a["key_padding_mask"], bool(ctx.attr("unidirectional", 0)), q.shape[1], kh.shape[2],
                    float(ctx.attr("mask_filter_value", -10000.0)), a["attention_bias"], past)
    outs = [sdpa(q, merged(kh), merged(vh), n, float(ctx.attr("scale", 0.0)), add), kh, vh]
    return [cast_out(ctx, o, i) for i, o in enumerate(outs[: len(ctx.op.results)])]


# ---- lowering -------------------------------------------------------------------------------------


class _Biased:
    """A LowerCtx stand-in for matmul_compute: the projection's bias as an epilogue."""

    def __init__(self, ctx, bias):
        self.ctx, self.bias = ctx, bias

    def compute(self, out, fn) -> None:
        b = self.bias
        self.ctx.compute(out, lambda *ix: fn(*ix) if b is None else fn(*ix) + b[(ix[-1],)])


def _static_head(ctx, d, n: int, what: str) -> int:
    h = canon(sympy.sympify(d) / n)
    if not isinstance(h, int):
        raise refusal(ctx.op, f"a symbolic {what} head size ({h})")
    return h


def lower_sdpa(ctx, q, k, v, dims, heads: int, hq: int, hv: int, scale: float, extra, out) -> None:
    """out[b, s, n*hv + e] = sum_t softmax_t(scale * q(b,n,s,.) . k(b,n,t,.) + extra(b,n,s,t))
    * v(b, n, t, e). `q(b, n, s, d)` etc. give the loads; `dims` = (B, S, T)."""
    b_, s_, t_ = dims
    dt = out.dtype
    d = Var("d")

    def score(b, n, s, t):
        acc = Const(scale, dt) * rsum([(d, hq)], q(b, n, s, d) * k(b, n, t, d))
        return acc if extra is None else acc + extra(b, n, s, t)

    if fuses(ctx, dt, hv, t_):
        # one compute over key blocks, the scores never stored (kernel/flash.py); rows of
        # one head next to each other (blocks of rows share each key load), then copied
        y4 = ctx.temp(dt, (b_, heads, s_, hv), "att_heads")
        ctx.compute(y4, lambda b, n, s, e: flash_core(lambda t: score(b, n, s, t), lambda t: v(b, n, t, e), t_, dt,
                                                      guarded=False))
        ctx.compute(out, lambda b, s, c: y4[(b, c // hv, s, c % hv)])
        return
    scores = ctx.temp(dt, (b_, heads, s_, t_), "att_scores")
    ctx.compute(scores, score)
    probs = ctx.temp(dt, (b_, heads, s_, t_), "att_probs")
    ctx.compute(probs, lambda *o: k_softmax(scores, o, 3))
    t = Var("t")

    def body(b, s, c):
        n, e = c // hv, c % hv
        return rsum([(t, t_)], probs[(b, n, s, t)] * v(b, n, t, e))

    ctx.compute(out, body)


def _extra(ctx, mask, causal: bool, fill: float, bias, dt: DType, past=0):
    """The additive term of the scores, or None: mask fill, causal fill (keys after the
    query's position `past + s`), attention_bias."""
    if mask is None and not causal and bias is None:
        return None
    f = Const(fill, dt)
    zero = Const(0.0, dt)

    def extra(b, n, s, t):
        terms = []
        if mask is not None:
            if mask.rank == 1:  # the batch row's end position
                terms.append(select(cast(t, mask.dtype) < mask[(b,)], zero, f))
            else:
                mv = mask[(b, t)] if mask.rank == 2 else mask[(b, s, t)]
                terms.append(select(mv > Const(0, mask.dtype), zero, f))
        if causal:
            terms.append(select(t > s + ctx.dim(past), f, zero))
        if bias is not None:
            terms.append(cast(bias[broadcast_indices((b, n, s, t), bias.shape)], dt))
        out = terms[0]
        for x in terms[1:]:
            out = out + x
        return out

    return extra


def _att_lower(ctx) -> None:
    a = _named(ctx.op, list(ctx.inputs), _ATT)
    x, w = a["input"], a["weights"]
    y = ctx.out(0)
    n = int(ctx.attr("num_heads"))
    hq_all, hk_all, hv_all = _att_sizes(ctx, a)
    hq, hv = _static_head(ctx, hq_all, n, "q"), _static_head(ctx, hv_all, n, "v")
    if not all(isinstance(z, int) for z in (hq_all, hk_all)):
        raise refusal(ctx.op, "symbolic q / k hidden sizes")
    qkv = ctx.temp(y.dtype, (*x.shape[:2], w.shape[1]), "qkv")
    matmul_compute(_Biased(ctx, a["bias"]), qkv, x.shape, w.shape, lambda i: x[i], lambda i: w[i])
    scale = float(ctx.attr("scale", 0.0)) or 1.0 / math.sqrt(hq)
    past = a["past"]
    p = 0 if past is None else past.shape[3]
    if isinstance(p, int) and p == 0:  # an empty past is no past
        past = None
    extra = _extra(ctx, a["mask_index"], bool(ctx.attr("unidirectional", 0)),
                   float(ctx.attr("mask_filter_value", -10000.0)), a["attention_bias"], y.dtype, p)
    t_dim = canon(sympy.sympify(p) + x.shape[1])
    i64, pd = DType.i64, ctx.dim(p)

    def row(t):  # the projection row of key position t (>= P when there is a past)
        return t if past is None else maximum(t - pd, Const(0, i64))

    def lk(b, h, t, d):
        return qkv[(b, row(t), hq_all + h * hq + d)]

    def lv(b, h, t, e):
        return qkv[(b, row(t), hq_all + hk_all + h * hv + e)]

    def new_kv(kv, b, h, t, d):  # K (kv = 0) or V (kv = 1); present needs equal k / v sizes
        return qkv[(b, row(t), hq_all + kv * hk_all + h * hq + d)]

    if past is not None or len(ctx.op.results) > 1:  # present [2, B, N, P + S, H]: past rows, then new
        shape = (2, x.shape[0], n, t_dim, hq)
        pres = ctx.out(1) if len(ctx.op.results) > 1 else ctx.temp(y.dtype, shape, "present")

        def present(kv, b, h, t, d):
            if past is None:
                return new_kv(kv, b, h, t, d)
            # both loads stay in range whichever side the select takes
            return select(t < pd, past[(kv, b, h, minimum(t, pd - 1), d)], new_kv(kv, b, h, t, d))

        ctx.compute(pres, present)

        def load_pres(kv):
            return lambda b, h, t, d: pres[(Const(kv, i64), b, h, t, d)]

        lk, lv = load_pres(0), load_pres(1)
    lower_sdpa(ctx, lambda b, h, s, d: qkv[(b, s, h * hq + d)], lk, lv, (x.shape[0], x.shape[1], t_dim), n,
               hq, hv, scale, extra, y)


def _mha_lower(ctx) -> None:
    a = _named(ctx.op, list(ctx.inputs), _MHA)
    q, k, v, bias = a["query"], a["key"], a["value"], a["bias"]
    y = ctx.out(0)
    n = int(ctx.attr("num_heads"))
    dq = q.shape[2]
    hq, hv = _static_head(ctx, dq, n, "query"), _static_head(ctx, v.shape[2], n, "value")
    if not isinstance(dq, int):
        raise refusal(ctx.op, f"a symbolic query hidden size ({dq})")

    def load(buf, off):
        if bias is None:
            return lambda b, s, c: buf[(b, s, c)]
        return lambda b, s, c: buf[(b, s, c)] + bias[(c + off,)]

    lq, lk, lv = load(q, 0), load(k, dq), load(v, 2 * dq)
    scale = float(ctx.attr("scale", 0.0)) or 1.0 / math.sqrt(hq)
    pk, pv = a["past_key"], a["past_value"]
    p = 0 if pk is None else pk.shape[2]
    if isinstance(p, int) and p == 0:  # an empty past is no past
        pk = pv = None
    extra = _extra(ctx, a["key_padding_mask"], bool(ctx.attr("unidirectional", 0)),
                   float(ctx.attr("mask_filter_value", -10000.0)), a["attention_bias"], y.dtype, p)
    t_dim = canon(sympy.sympify(p) + k.shape[1])
    i64, pd = DType.i64, ctx.dim(p)
    heads = []  # per K / V: idx (b, h, t, d) -> the element, t over past + new positions
    for i, (ld, hd, past) in enumerate(((lk, hq, pk), (lv, hv, pv))):
        def new(b, h, t, d, ld=ld, hd=hd, past=past):
            return ld(b, t if past is None else maximum(t - pd, Const(0, i64)), h * hd + d)

        if past is None and len(ctx.op.results) <= i + 1:
            heads.append(new)
            continue
        shape = (q.shape[0], n, t_dim, hd)
        out = ctx.out(i + 1) if len(ctx.op.results) > i + 1 else ctx.temp(y.dtype, shape, "kv")

        def present(b, h, t, d, new=new, past=past):
            if past is None:
                return new(b, h, t, d)
            # both loads stay in range whichever side the select takes
            return select(t < pd, past[(b, h, minimum(t, pd - 1), d)], new(b, h, t, d))

        ctx.compute(out, present)
        heads.append(lambda b, h, t, d, out=out: out[(b, h, t, d)])
    lower_sdpa(ctx, lambda b, h, s, d: lq(b, s, h * hq + d), heads[0], heads[1],
               (q.shape[0], q.shape[1], t_dim), n, hq, hv, scale, extra, y)


define("com.microsoft.Attention", infer=_att_infer, reference=_att_ref, lower=_att_lower, kind="opaque",
       arity=(2, 7), num_results=None, math=sdpa)
define("com.microsoft.MultiHeadAttention", infer=_mha_infer, reference=_mha_ref, lower=_mha_lower,
       kind="opaque", arity=(1, 10), num_results=None, math=sdpa)


# ---- GroupQueryAttention (the prompt step) -----------------------------------------------------------


def _gqa_heads(ctx) -> tuple[int, int]:
    n, nkv = ctx.attr("num_heads"), ctx.attr("kv_num_heads")
    if not (isinstance(n, int) and isinstance(nkv, int) and n >= 1 and nkv >= 1 and n % nkv == 0):
        raise ctx.error(f"num_heads ({n!r}) must be a positive multiple of kv_num_heads ({nkv!r})")
    return n, nkv


def _gqa_infer(ctx: InferCtx):
    a = _named(ctx.op, list(ctx.in_types), _GQA)
    if (a["past_key"] is None) != (a["past_value"] is None):
        raise ctx.error("past_key and past_value go together")
    if ctx.attr("past_present_share_buffer", 0):
        raise refusal(ctx.op, "past_present_share_buffer = 1")
    for name in _GQA[9 if ctx.attr("do_rotary", 0) else 7:]:
        if a[name] is not None:
            raise refusal(ctx.op, f"input {name!r}")
    unhandled = (("softcap", 0.0), ("local_window_size", -1), ("smooth_softmax", 0))
    for attr, default in unhandled:
        if ctx.attr(attr, default) != default:
            raise refusal(ctx.op, f"{attr} = {ctx.attr(attr)}")
    q, k, v = a["query"], a["key"], a["value"]
    if k is None or v is None or q.rank != 3 or k.rank != 3 or v.rank != 3:
        raise refusal(ctx.op, "only separate 3-D query, key and value (no packed QKV)")
    n, nkv = _gqa_heads(ctx)
    b, s, dq = q.shape
    _divisible(ctx, dq, n, "query hidden size")
    hd = canon(sympy.sympify(dq) / n)
    for t, what in ((k, "key"), (v, "value")):
        for i, (d, want) in enumerate(zip(t.shape, (b, s, canon(hd * nkv)), strict=True)):
            ctx.require_eq(d, want, f"{what} dim {i}")
    sl, tot = a["seqlens_k"], a["total_sequence_length"]
    if sl is None or tot is None or sl.dtype is not DType.i32 or tot.dtype is not DType.i32:
        raise ctx.error("seqlens_k and total_sequence_length are required int32 inputs")
    if sl.rank != 1:
        raise ctx.error(f"seqlens_k must be [B], got {sl}")
    ctx.require_eq(sl.shape[0], b, "seqlens_k length vs batch")
    if tot.rank > 1 or (tot.rank == 1 and ctx.symbols.prove_eq(tot.shape[0], 1) is not True):
        raise ctx.error(f"total_sequence_length must be a scalar, got {tot}")
    total = s
    if a["past_key"] is not None:
        pk, pv = a["past_key"], a["past_value"]
        if pk.rank != 4 or pv.rank != 4:
            raise refusal(ctx.op, f"past_key / past_value of shapes {pk} / {pv} (only [B, Nkv, P, H])")
        for t, what in ((pk, "past_key"), (pv, "past_value")):
            for i, (d, want) in enumerate(zip(t.shape, (b, nkv, pk.shape[2], hd), strict=True)):
                ctx.require_eq(d, want, f"{what} dim {i}")
        total = canon(sympy.sympify(pk.shape[2]) + s)
    if ctx.attr("do_rotary", 0):
        for name in ("cos_cache", "sin_cache"):
            c = a[name]
            if c is None or c.rank != 2 or c.dtype is not q.dtype:
                raise ctx.error(f"do_rotary = 1 needs {name} [max_positions, head_size / 2] of "
                                f"{q.dtype.value}")
            ctx.require_eq(c.shape[1], canon(sympy.sympify(hd) / 2), f"{name} dim 1 vs head size / 2")
    present = TensorType(q.dtype, (b, nkv, total, hd))
    return [TensorType(q.dtype, (b, s, dq)), present, present][: len(ctx.op.results)]


def _gqa_ref(ctx: RefCtx, *args):
    a = _named(ctx.op, list(args), _GQA)
    q, k, v = (widen(a[x]) for x in ("query", "key", "value"))
    n, nkv = int(ctx.attr("num_heads")), int(ctx.attr("kv_num_heads"))
    b, s, _ = q.shape
    hd = q.shape[2] // n
    past = 0 if a["past_key"] is None else a["past_key"].shape[2]
    if ctx.attr("do_rotary", 0):
        pos = np.broadcast_to(past + np.arange(s), (b, s))
        if np.any(pos >= a["cos_cache"].shape[0]):
            raise ValueError("GroupQueryAttention: a position past the cos / sin caches")
        il = bool(ctx.attr("rotary_interleaved", 0))
        cs, sn = widen(a["cos_cache"]), widen(a["sin_cache"])
        q, k = (rotary(z, cs, sn, pos, interleaved=il, rot=0, heads=nh) for z, nh in ((q, n), (k, nkv)))
    new_k, new_v = (z.reshape(b, s, nkv, hd).transpose(0, 2, 1, 3) for z in (k, v))  # [B, Nkv, S, H]
    if past:
        new_k = np.concatenate([widen(a["past_key"]), new_k], axis=2)
        new_v = np.concatenate([widen(a["past_value"]), new_v], axis=2)
    total, lens = past + s, a["seqlens_k"].astype(np.int64)
    if int(np.asarray(a["total_sequence_length"]).reshape(-1)[0]) != total:
        raise ValueError(f"GroupQueryAttention: total_sequence_length must be {total}")
    if past and np.any(lens != total - 1):
        raise ValueError("GroupQueryAttention: with past state every seqlens_k must be P + S - 1")

    def rep(z):  # [B, Nkv, T, H] -> [B, T, N*H]: each K / V head serves N / Nkv query heads
        return z.repeat(n // nkv, axis=1).transpose(0, 2, 1, 3).reshape(b, total, n * hd)

    t, pos = np.arange(total), past + np.arange(s)
    keys = t[None, None, None, :]
    masked = (keys > pos[None, None, :, None]) | (keys > lens[:, None, None, None])
    add = np.where(masked, -np.inf, 0.0)
    outs = [sdpa(q, rep(new_k), rep(new_v), n, float(ctx.attr("scale", 0.0)), add), new_k, new_v]
    return [cast_out(ctx, o, i) for i, o in enumerate(outs[: len(ctx.op.results)])]


def _gqa_lower(ctx) -> None:
    a = _named(ctx.op, list(ctx.inputs), _GQA)
    q, k, v, sl, tot = (a[x] for x in ("query", "key", "value", "seqlens_k", "total_sequence_length"))
    y = ctx.out(0)
    n, nkv = _gqa_heads(ctx)
    hd = _static_head(ctx, q.shape[2], n, "query")
    group = n // nkv
    scale = float(ctx.attr("scale", 0.0)) or 1.0 / math.sqrt(hd)
    dt = y.dtype
    lowest, zero = Const(float(np.finfo(np.float32).min), dt), Const(0.0, dt)

    i64 = DType.i64
    pk, pv = a["past_key"], a["past_value"]
    past = 0 if pk is None else pk.shape[2]
    if isinstance(past, int) and past == 0:  # an empty past is no past
        pk = pv = None
    p_dim = ctx.dim(past)
    if ctx.attr("do_rotary", 0):  # Q and K rotated into temps first, at positions P + s
        cs, sn = a["cos_cache"], a["sin_cache"]

        def row_of(b, s, j):
            return (wrap_index(s + p_dim, cs.shape[0], negative=False), j)

        rotated = []
        for src in (q, k):
            t = ctx.temp(dt, src.shape, "rope")
            rope_compute(ctx, src, t, cs, sn, hd, hd, bool(ctx.attr("rotary_interleaved", 0)), row_of)
            rotated.append(t)
        q, k = rotated
    total_dim = canon(sympy.sympify(past) + q.shape[1])

    def extra(b, h, s, t):
        lens = cast(sl[(b,)], i64)
        masked = (t > s + p_dim) | (t > lens)  # causal, and keys past the batch row's length
        total = cast(tot[(Const(0, i64),) * tot.rank], i64)
        ok = total.eq(ctx.dim(total_dim))
        if pk is not None:  # with past state every row is full: no per-row placement to guess
            ok = ok & lens.eq(ctx.dim(total_dim) - 1)
        return check(ok, select(masked, lowest, zero), ERR_ASSERT)

    # present K / V [B, Nkv, P + S, H]: the past rows, then the new ones
    presents = []
    for i, (new, old) in enumerate(((k, pk), (v, pv))):
        shape = (q.shape[0], nkv, total_dim, hd)
        buf = ctx.out(i + 1) if len(ctx.op.results) > i + 1 else ctx.temp(dt, shape, "kv")

        def body(b, h, t, d, new=new, old=old):
            if old is None:
                return new[(b, t, h * hd + d)]
            # both loads stay in range whichever side the select takes
            fresh = new[(b, maximum(t - p_dim, Const(0, i64)), h * hd + d)]
            return select(t < p_dim, old[(b, h, minimum(t, p_dim - 1), d)], fresh)

        ctx.compute(buf, body)
        presents.append(buf)
    pkb, pvb = presents
    lower_sdpa(ctx,
               lambda b, h, s, d: q[(b, s, h * hd + d)],
               lambda b, h, t, d: pkb[(b, h // group, t, d)],
               lambda b, h, t, e: pvb[(b, h // group, t, e)],
               (q.shape[0], q.shape[1], total_dim), n, hd, hd, scale, extra, y)


define("com.microsoft.GroupQueryAttention", infer=_gqa_infer, reference=_gqa_ref, lower=_gqa_lower,
       kind="opaque", arity=(3, 12), num_results=None, math=sdpa)
