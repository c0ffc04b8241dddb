"""Attention (ai.onnx opsets 23, 24 and 25's window attributes) as one op.

Inputs Q, K, V (4-D `[batch, heads, seq, head]` or 3-D `[batch, seq, heads*head]` with
`q_num_heads` / `kv_num_heads`), an optional mask (bool: attend where true; float: added),
optional past key/value (concatenated in front of K/V along the sequence), and opset 24's
`nonpad_kv_seqlen` (per-batch count of valid keys in a static cache). Outputs Y, the
present key/value and the QK matrix at the stage `qk_matmul_output_mode` names.

Semantics worth knowing (they follow the ONNX reference, which the node tests check):
- grouped-query attention: query head h reads kv head h // (q_heads // kv_heads);
- causal masking is bottom-right aligned: query i sees key j iff j <= i + offset, offset =
  the past length (internal cache), nonpad_kv_seqlen[b] - q_len (external cache) or 0;
- softcap c > 0 maps scores to c * tanh(score / c) BEFORE the mask is added, so masked
  positions stay -inf;
- a query row whose additive bias is -inf everywhere (nothing to attend) gives zeros, decided
  on the bias and not the scores, so NaN or inf scores in a masked row never leak;
- a mask shorter than the key length is padded with "masked".

The lowering is three computes over one score buffer: scores (a dot product over the head
dim with the scale, softcap and bias as its epilogue), the softmax probabilities (row max
staged per row; `exp(score - max) / rowsum` in the shape the CPU schedule runs as one exp
per score, kernel/rownorm.py), and Y as a dot product of probabilities and values written straight
in Y's layout. 3-D inputs are read through index maps, never transposed into copies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import sympy

from ..ir import Dim, DType, TensorType, canon
from ..kernel import Const, Expr, Var, broadcast_indices, cast, exp, rmax, rsum, select, tanh
from ..kernel.flash import MAX_ROW, flash_core
from .registry import InferCtx, RefCtx, define, onnx_inputs

_INPUTS = ("Q", "K", "V", "attn_mask", "past_key", "past_value", "nonpad_kv_seqlen")
NEG_INF = float("-inf")


# ---- the op's geometry ---------------------------------------------------------------------

@dataclass(frozen=True)
class Geometry:
    """Sizes of one Attention call: batch, query heads, kv heads, query length, new keys,
    past keys, head sizes of Q/K and V; `rank3` when Q/K/V are `[batch, seq, hidden]`."""

    rank3: bool
    batch: Dim
    q_heads: int | Dim
    kv_heads: int | Dim
    q_len: Dim
    new_len: Dim
    past_len: Dim
    head: Dim
    v_head: Dim

    @property
    def kv_len(self) -> Dim:
        return canon(sympy.sympify(self.past_len) + self.new_len)

    @property
    def group(self) -> int:
        """Query heads per kv head (1 without grouped-query attention)."""
        return int(self.q_heads) // int(self.kv_heads)


def _split(hidden: Dim, heads, what: str, fail) -> Dim:
    if not isinstance(heads, int) or heads < 1:
        raise fail(f"3-D inputs need a positive {what} attribute, got {heads!r}")
    if isinstance(hidden, int):
        if hidden % heads:
            raise fail(f"hidden size {hidden} is not a multiple of {heads} heads")
        return hidden // heads
    return canon(sympy.sympify(hidden) / heads)


def geometry(shapes: list, attr, fail) -> tuple[Geometry, Dim]:
    """The call's geometry from the operand shapes (None for absent inputs), and K's head size."""
    q, k, v = shapes[0], shapes[1], shapes[2]
    past = shapes[4]
    if not (len(q) == len(k) == len(v)) or len(q) not in (3, 4):
        raise fail(f"Q, K and V must all be 3-D or all 4-D, got ranks {len(q)}, {len(k)}, {len(v)}")
    if len(q) == 3:
        hq, hkv = attr("q_num_heads"), attr("kv_num_heads")
        g = Geometry(True, q[0], hq, hkv, q[1], k[1], 0, _split(q[2], hq, "q_num_heads", fail),
                     _split(v[2], hkv, "kv_num_heads", fail))
        k_head = _split(k[2], hkv, "kv_num_heads", fail)
    else:
        g = Geometry(False, q[0], q[1], k[1], q[2], k[2], 0, q[3], v[3])
        k_head = k[3]
    if past is not None:
        if len(past) != 4:
            raise fail(f"past_key must be 4-D [batch, kv_heads, past, head], got rank {len(past)}")
        g = Geometry(g.rank3, g.batch, g.q_heads, g.kv_heads, g.q_len, g.new_len, past[2], g.head, g.v_head)
    if not isinstance(g.q_heads, int) or not isinstance(g.kv_heads, int):
        raise fail(f"head counts must be static, got {g.q_heads} query and {g.kv_heads} kv heads")
    if g.q_heads % g.kv_heads:
        raise fail(f"{g.q_heads} query heads are not a multiple of {g.kv_heads} kv heads")
    return g, k_head


# ---- shape rule ------------------------------------------------------------------------------

def _infer(ctx: InferCtx):
    types = onnx_inputs(ctx.op, ctx.in_types)
    types += [None] * (len(_INPUTS) - len(types))
    shapes = [t.shape if t is not None else None for t in types]
    g, k_head = geometry(shapes, ctx.attr, ctx.error)
    q, k, v = types[0], types[1], types[2]
    if k.dtype is not q.dtype or v.dtype is not q.dtype:
        raise ctx.error(f"Q, K and V dtypes differ: {q.dtype.value}, {k.dtype.value}, {v.dtype.value}")
    if (types[4] is None) != (types[5] is None):
        raise ctx.error("past_key and past_value must be given together")
    if types[6] is not None and types[4] is not None:
        raise ctx.error("nonpad_kv_seqlen cannot be combined with past_key / past_value")
    ctx.require_eq(k_head, g.head, "K's head size equals Q's")
    if g.rank3:
        ctx.require_eq(k.shape[0], g.batch, "K's batch equals Q's")
        ctx.require_eq(v.shape[1], g.new_len, "V's sequence length equals K's")
    else:
        for name, t in (("K", k), ("V", v)):
            ctx.require_eq(t.shape[0], g.batch, f"{name}'s batch equals Q's")
        ctx.require_eq(v.shape[1], g.kv_heads, "V's heads equal K's")
        ctx.require_eq(v.shape[2], g.new_len, "V's sequence length equals K's")
    for name, t in (("past_key", types[4]), ("past_value", types[5])):
        if t is not None:
            ctx.require_eq(t.shape[0], g.batch, f"{name}'s batch equals Q's")
            ctx.require_eq(t.shape[1], g.kv_heads, f"{name}'s heads equal the kv heads")
    if types[5] is not None:
        ctx.require_eq(types[5].shape[2], g.past_len, "past_value's length equals past_key's")
        ctx.require_eq(types[5].shape[3], g.v_head, "past_value's head size equals V's")
    if types[3] is not None and types[3].rank > 4:
        raise ctx.error(f"attn_mask has rank {types[3].rank}; at most 4")
    y = (g.batch, g.q_len, g.q_heads * sympy.sympify(g.v_head)) if g.rank3 else \
        (g.batch, g.q_heads, g.q_len, g.v_head)
    outs = [TensorType(q.dtype, tuple(canon(d) for d in y)),
            TensorType(q.dtype, (g.batch, g.kv_heads, g.kv_len, g.head)),
            TensorType(q.dtype, (g.batch, g.kv_heads, g.kv_len, g.v_head)),
            TensorType(q.dtype, (g.batch, g.q_heads, g.q_len, g.kv_len))]
    return outs[: len(ctx.op.results)]


# ---- numpy reference -------------------------------------------------------------------------

def _heads_first(x: np.ndarray, heads: int) -> np.ndarray:
    """[batch, seq, heads*head] -> [batch, heads, seq, head]."""
    b, s, hidden = x.shape
    return x.reshape(b, s, heads, hidden // heads).transpose(0, 2, 1, 3)


def _options(attr) -> dict:
    mode = int(attr("qk_matmul_output_mode", 0))
    if mode not in (0, 1, 2, 3):
        raise ValueError(f"qk_matmul_output_mode must be 0..3, got {mode}")
    return {"causal": bool(attr("is_causal", 0)), "softcap": float(attr("softcap", 0.0)), "mode": mode,
            "scale": attr("scale"), "left": int(attr("left_window_size", -1)),
            "right": int(attr("right_window_size", -1))}


def attention_bias(q_len: int, kv_len: int, mask, nonpad, offset, opts: dict, dtype) -> np.ndarray:
    """The additive bias, broadcastable to [batch, heads, q_len, kv_len]."""
    bias = np.zeros((1, 1, q_len, kv_len), dtype)
    if mask is not None:
        m = mask
        if m.shape[-1] < kv_len:  # a short mask: the missing keys are masked
            pad = [(0, 0)] * (m.ndim - 1) + [(0, kv_len - m.shape[-1])]
            m = np.pad(m, pad, constant_values=False if m.dtype == np.bool_ else -np.inf)
        m = np.where(m, 0.0, -np.inf).astype(dtype) if m.dtype == np.bool_ else m.astype(dtype)
        bias = bias + m.reshape((1,) * (4 - m.ndim) + m.shape)
    i = np.arange(q_len).reshape(q_len, 1)
    j = np.arange(kv_len).reshape(1, kv_len)
    off = np.asarray(offset).reshape(-1, 1, 1, 1)  # per batch (or one for all)
    allowed = np.ones((off.shape[0], 1, q_len, kv_len), bool)
    diff = (i + off) - j  # how far key j lies behind query i's absolute position
    if opts["causal"]:
        allowed &= diff >= 0
    if opts["left"] >= 0:
        allowed &= diff <= opts["left"]
    if opts["right"] >= 0:
        allowed &= -diff <= opts["right"]
    if nonpad is not None:
        allowed &= j < np.asarray(nonpad).reshape(-1, 1, 1, 1)
    return bias + np.where(allowed, 0.0, -np.inf).astype(dtype)


def attention(q, k, v, mask=None, past_k=None, past_v=None, nonpad=None, *, q_heads=None, kv_heads=None,
              **opts):
    """Reference attention; returns (Y, present_key, present_value, qk_output)."""
    rank3 = q.ndim == 3
    if rank3:
        q, k, v = _heads_first(q, q_heads), _heads_first(k, kv_heads), _heads_first(v, kv_heads)
    dt = np.float64 if q.dtype == np.float64 else np.float32
    pk = k if past_k is None else np.concatenate([past_k, k], axis=2)
    pv = v if past_v is None else np.concatenate([past_v, v], axis=2)
    q_len, kv_len = q.shape[2], pk.shape[2]
    group = q.shape[1] // pk.shape[1]
    kk, vv = np.repeat(pk, group, axis=1).astype(dt), np.repeat(pv, group, axis=1).astype(dt)
    scale = opts["scale"] if opts["scale"] is not None else 1.0 / math.sqrt(q.shape[3])
    raw = np.matmul(q.astype(dt), kk.transpose(0, 1, 3, 2)) * dt(scale)
    scores = opts["softcap"] * np.tanh(raw / opts["softcap"]) if opts["softcap"] > 0 else raw
    if past_k is not None:
        offset = past_k.shape[2]
    elif nonpad is not None:
        offset = np.asarray(nonpad) - q_len
    else:
        offset = 0
    bias = attention_bias(q_len, kv_len, mask, nonpad, offset, opts, dt)
    x = scores + bias
    with np.errstate(invalid="ignore", over="ignore"):
        m = np.max(x, axis=-1, keepdims=True)
        e = np.exp(x - np.where(np.isneginf(m), 0.0, m))
        s = np.sum(e, axis=-1, keepdims=True)
        p = e / np.where(s == 0, 1.0, s)
    p = np.where(np.isneginf(np.max(bias, axis=-1, keepdims=True)), 0.0, p)
    qk = {0: raw, 1: scores, 2: x, 3: p}[opts["mode"]]
    y = np.matmul(p, vv)
    if rank3:
        y = y.transpose(0, 2, 1, 3).reshape(y.shape[0], q_len, -1)
    return y, pk, pv, np.broadcast_to(qk, (q.shape[0], q.shape[1], q_len, kv_len))


def _reference(ctx: RefCtx, *operands):
    args = onnx_inputs(ctx.op, list(operands))
    args += [None] * (len(_INPUTS) - len(args))
    outs = attention(*args, q_heads=ctx.attr("q_num_heads"), kv_heads=ctx.attr("kv_num_heads"),
                     **_options(ctx.attr))
    return [np.asarray(o).astype(ctx.out_type(i).dtype.np) for i, o in enumerate(outs[: len(ctx.op.results)])]


# ---- lowering --------------------------------------------------------------------------------

class _Reader:
    """Loads of Q/K/V as 4-D [batch, heads, seq, head] whatever their layout."""

    def __init__(self, buf, rank3: bool, head: Dim):
        self.buf, self.rank3, self.head = buf, rank3, head

    def __call__(self, b, h, s, e) -> Expr:
        if self.rank3:
            return self.buf[(b, s, h * _e(self.head) + e)]
        return self.buf[(b, h, s, e)]


def _e(d: Dim) -> Expr:
    from ..kernel import dim_to_expr

    return dim_to_expr(d)


def _lower(ctx) -> None:
    ins = onnx_inputs(ctx.op, list(ctx.inputs))
    ins += [None] * (len(_INPUTS) - len(ins))
    qb, kb, vb, maskb, past_kb, past_vb, nonpadb = ins
    shapes = [b.shape if b is not None else None for b in ins]
    g, _ = geometry(shapes, ctx.attr, ctx.unsupported)
    opts = _options(ctx.attr)
    n_out = len(ctx.op.results)
    y_dt = ctx.out_type(0).dtype
    acc = DType.f64 if y_dt is DType.f64 else DType.f32
    q = _Reader(qb, g.rank3, g.head)
    k_new, v_new = _Reader(kb, g.rank3, g.head), _Reader(vb, g.rank3, g.v_head)
    P = _e(g.past_len)

    # present key / value: the past, then the new keys (materialised when there is a past,
    # or when the caller wants them; otherwise the new keys are read where they are)
    def present(k: int, past, new: _Reader, head: Dim):
        if past is None and n_out <= k:
            return new
        shape = (g.batch, g.kv_heads, g.kv_len, head)
        out = ctx.out(k) if n_out > k else ctx.temp(past.dtype, shape, "present")
        if past is None:
            ctx.compute(out, lambda b, h, t, e: new(b, h, t, e))
        else:
            ctx.compute(out, lambda b, h, t, e: select(t < P, past[(b, h, t, e)], new(b, h, t - P, e)))
        return lambda b, h, t, e: out[(b, h, t, e)]

    keys = present(1, past_kb, k_new, g.head)
    values = present(2, past_vb, v_new, g.v_head)
    group = g.group

    def kv_head(h):
        return h // group if group > 1 else h

    scale = opts["scale"]
    masked = maskb is not None or opts["causal"] or opts["left"] >= 0 or opts["right"] >= 0 \
        or nonpadb is not None

    def bias(b, h, s, t) -> Expr:
        """The additive bias at one score (0 where attended, -inf where not, plus a float mask)."""
        total: Expr = Const(0.0, acc)
        if maskb is not None:
            mshape = maskb.shape
            idx = broadcast_indices((b, h, s, t)[4 - len(mshape):], mshape)
            short = not (isinstance(mshape[-1], int) and isinstance(g.kv_len, int) and mshape[-1] >= g.kv_len)
            inside = t < _e(mshape[-1]) if short else None
            if maskb.dtype is DType.bool:
                ok = maskb[idx]
                ok = select(inside, ok, Const(False, DType.bool)) if inside is not None else ok
                total = select(ok, Const(0.0, acc), Const(NEG_INF, acc))
            else:
                mv = cast(maskb[idx], acc)
                total = select(inside, mv, Const(NEG_INF, acc)) if inside is not None else mv
        if past_kb is not None:
            offset = P
        elif nonpadb is not None:
            offset = cast(nonpadb[(b,)], DType.i64) - _e(g.q_len)
        else:
            offset = Const(0, DType.i64)
        diff = s + offset - t
        conds = []
        if opts["causal"]:
            conds.append(diff >= 0)
        if opts["left"] >= 0:
            conds.append(diff <= opts["left"])
        if opts["right"] >= 0:
            conds.append(-diff <= opts["right"])
        if nonpadb is not None:
            conds.append(t < cast(nonpadb[(b,)], DType.i64))
        if conds:
            allowed = conds[0]
            for c in conds[1:]:
                allowed = allowed & c
            total = total + select(allowed, Const(0.0, acc), Const(NEG_INF, acc))
        return total

    scores_shape = (g.batch, g.q_heads, g.q_len, g.kv_len)

    sc = scale if scale is not None else 1.0 / math.sqrt(g.head) if isinstance(g.head, int) else None
    if sc is None:
        raise ctx.unsupported("a symbolic head size needs the scale attribute")

    def raw(b, h, s, t) -> Expr:
        """The scaled dot product of query s and key t."""
        ev = Var("e")
        dot = rsum([(ev, g.head)], cast(q(b, h, s, ev), acc) * cast(keys(b, kv_head(h), t, ev), acc))
        return dot * Const(float(sc), acc)

    def scaled(b, h, s, t) -> Expr:
        """The score after the softcap (c * tanh(x / c)), which comes before the mask."""
        x = raw(b, h, s, t)
        if opts["softcap"] > 0:
            c = Const(opts["softcap"], acc)
            x = c * tanh(x / c)
        return x

    def scored(b, h, s, t) -> Expr:
        """The score with its bias: what the softmax normalises."""
        return scaled(b, h, s, t) + bias(b, h, s, t) if masked else scaled(b, h, s, t)

    row = (g.batch, g.q_heads, g.q_len)
    tv = Var("t")
    wants_scores = n_out > 3 and opts["mode"] in (2, 3)
    # (not with a softcap: a masked key's score is then c tanh(x / c) + -inf, NaN for a NaN
    # dot, which only the general path below keeps; the fast path's kernel skips masked keys)
    causal_only = opts["causal"] and opts["softcap"] <= 0 and maskb is None and opts["left"] < 0 \
        and opts["right"] < 0 and nonpadb is None
    if causal_only and not wants_scores and fuses(ctx, acc, g.v_head, g.kv_len):
        # causal alone: keys after row + past are -inf, written as the select the fused
        # kernel reads as causal (kernel/flash.py `Flash.causal`: the blocks after each
        # block of rows are never computed); no row is dead (key 0 is always seen)
        off = P if past_kb is not None else Const(0, DType.i64)
        if n_out > 3:  # modes 0 and 1: the raw or softcapped scores, before the mask
            qk = ctx.out(3)
            stage = raw if opts["mode"] == 0 else scaled
            ctx.compute(qk, lambda b, h, s, t: cast(stage(b, h, s, t), qk.dtype))

        def masked_score(b, h, s, t) -> Expr:
            """A masked key's score as the unfused form has it, the score + -inf: NaN where
            the score is NaN or +inf (onnxruntime's too); the kernel skips such keys only
            where it proves them -inf (codegen/cpu/flash_guard.py)."""
            return raw(b, h, s, t) + Const(NEG_INF, acc)

        def causal_core(b, h, s, vv) -> Expr:
            return flash_core(lambda t: select(t > s + off, masked_score(b, h, s, t), scaled(b, h, s, t)),
                              lambda t: cast(values(b, kv_head(h), t, vv), acc), g.kv_len, acc)

        _write_y(ctx, g, y_dt, causal_core)
        return
    if masked:  # rows with nothing to attend, decided on the bias alone
        dead = ctx.temp(DType.bool, row, "masked_row")
        ctx.compute(dead, lambda b, h, s: rmax([(tv, g.kv_len)], bias(b, h, s, tv)).eq(Const(NEG_INF, acc)))
    if n_out > 3 and opts["mode"] in (0, 1):
        qk = ctx.out(3)
        stage = raw if opts["mode"] == 0 else scaled
        ctx.compute(qk, lambda b, h, s, t: cast(stage(b, h, s, t), qk.dtype))

    if not wants_scores and fuses(ctx, acc, g.v_head, g.kv_len):
        # one compute over key blocks, the scores never stored (kernel/flash.py)
        def fused(b, h, s, vv) -> Expr:
            core = flash_core(lambda t: scored(b, h, s, t),
                              lambda t: cast(values(b, kv_head(h), t, vv), acc), g.kv_len, acc)
            return select(dead[(b, h, s)], Const(0.0, acc), core) if masked else core

        _write_y(ctx, g, y_dt, fused)
        return

    # scores with the bias: the one buffer the softmax reads
    x_buf = ctx.temp(acc, scores_shape, "scores")
    ctx.compute(x_buf, scored)
    if n_out > 3 and opts["mode"] == 2:
        qk = ctx.out(3)
        ctx.compute(qk, lambda b, h, s, t: cast(x_buf[(b, h, s, t)], qk.dtype))

    # softmax over the keys: row max (0 for a row of -inf) staged per row
    mx = ctx.temp(acc, row, "rowmax")

    def safe_max(b, h, s):
        m = rmax([(tv, g.kv_len)], x_buf[(b, h, s, tv)])
        return select(m.eq(Const(NEG_INF, acc)), Const(0.0, acc), m)

    ctx.compute(mx, safe_max)

    def numer(b, h, s, t) -> Expr:
        """exp(score - row max), 0 across a row with nothing to attend (NaN never leaks)."""
        e = exp(x_buf[(b, h, s, t)] - mx[(b, h, s)])
        return select(dead[(b, h, s)], Const(0.0, acc), e) if masked else e

    def prob(b, h, s, t) -> Expr:
        """numer / its row sum (1 where that is 0: a dead row stays 0): the shape the CPU
        schedule runs with one exp per score (kernel/rownorm.py)."""
        u = Var("u")  # the compute's own vars are b, h, s, t
        denom = rsum([(u, g.kv_len)], numer(b, h, s, u))
        return numer(b, h, s, t) / select(denom.eq(Const(0.0, acc)), Const(1.0, acc), denom)

    p_buf = ctx.out(3) if n_out > 3 and opts["mode"] == 3 else ctx.temp(acc, scores_shape, "probs")
    ctx.compute(p_buf, lambda b, h, s, t: cast(prob(b, h, s, t), p_buf.dtype))

    def y_at(b, h, s, vv) -> Expr:
        pv = cast(p_buf[(b, h, s, tv)], acc) * cast(values(b, kv_head(h), tv, vv), acc)
        return rsum([(tv, g.kv_len)], pv)

    y = ctx.out(0)
    if g.rank3:
        vh = _e(g.v_head)
        ctx.compute(y, lambda b, s, j: cast(y_at(b, j // vh, s, j % vh), y_dt))
    else:
        ctx.compute(y, lambda b, h, s, vv: cast(y_at(b, h, s, vv), y_dt))


FLASH_MIN_KV = 256
"""the fewest keys (when their number is static) for which the fused form pays: below
it the score buffer is small and the GEMM-scheduled three computes are faster (measured:
benchmarks/attention.py); a symbolic key length takes the fused form"""


def fuses(ctx, dtype: DType, v_head, kv_len) -> bool:
    """Whether attention computes its result fused over key blocks (kernel/flash.py): where
    the backend runs that form, the scores are f32 or f64, the value head is a static size
    the fused row holds, and the keys are many (FLASH_MIN_KV, or a symbolic count). Callers
    also check that no output needs the scores or probabilities themselves."""
    if not ctx.fused_attention or dtype not in (DType.f32, DType.f64):
        return False
    if not isinstance(v_head, int) or not 0 < v_head <= MAX_ROW:
        return False
    return not isinstance(kv_len, int) or kv_len >= FLASH_MIN_KV


def _write_y(ctx, g: Geometry, y_dt: DType, fused) -> None:
    """Y from `fused(b, h, s, vv)` over [batch, heads, seq, head]: the value head innermost
    (the fused row) and the query rows next (blocks of rows share each key load); a 3-D Y
    `[batch, seq, heads*head]` is computed so and copied over."""
    y = ctx.out(0)
    if not g.rank3:
        ctx.compute(y, lambda b, h, s, vv: cast(fused(b, h, s, vv), y_dt))
        return
    y4 = ctx.temp(y_dt, (g.batch, g.q_heads, g.q_len, g.v_head), "y_heads")
    ctx.compute(y4, lambda b, h, s, vv: cast(fused(b, h, s, vv), y_dt))
    vh = _e(g.v_head)
    ctx.compute(y, lambda b, s, j: y4[(b, j // vh, s, j % vh)])


define("onnx.Attention", infer=_infer, reference=_reference, lower=_lower, kind="opaque", arity=(3, 7),
       num_results=None, math=attention)

