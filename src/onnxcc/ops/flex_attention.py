"""ai.onnx.preview.FlexAttention (preview opset 1): scaled dot-product attention over 4-D
[B, H, L, E] inputs with two optional user subgraphs, PyTorch's flex_attention:

    scores = (Q @ K^T) * scale          scale defaults to 1 / sqrt(E)
    scores = score_mod(scores)          a region [B, Hq, L, S] -> [B, Hq, L, S] (masks, biases, softcaps)
    probs  = softmax(scores, axis=-1)
    probs  = prob_mod(probs)            a region of the same form
    Y      = probs @ V                  [B, Hq, L, Ev], Q's dtype

Query head h reads kv head h // (Hq / Hkv) (GQA). Scores, probabilities and the final product
are computed in softmax_precision: f32 (f64 for f64 inputs) by default; only float and double
are accepted. The importer records which graph attribute each region came from
(`region_names`), since either may be absent.

The lowering is the fused attention kernel's structure (ops/attention.py): one compute for the
scores (a dot product over E, scale in its epilogue), the subgraph lowered in place over that
buffer (so fusion folds an elementwise score_mod into the score compute's epilogue), the
softmax as a staged row max and probabilities that divide by their own row sum (one exp
per score on the CPU, kernel/rownorm.py), prob_mod lowered in place over them, and the P @ V product written
straight into Y.
"""

from __future__ import annotations

import math

import numpy as np
import sympy

from ..ir import DType, TensorType
from ..kernel import Var, cast, exp, rmax, rsum
from .registry import InferCtx, RefCtx, define
from .traits import set_cost

_MODS = ("score_mod", "prob_mod")
_FLOATS = (DType.f16, DType.bf16, DType.f32, DType.f64)
#: softmax_precision values taken (ONNX TensorProto codes): FLOAT, DOUBLE
_PRECISION = {1: DType.f32, 11: DType.f64}


def _precision(op, in_dtype: DType, error) -> DType:
    p = op.attrs.get("softmax_precision")
    if p is None:
        return DType.f64 if in_dtype is DType.f64 else DType.f32
    if int(p) not in _PRECISION:
        raise error(f"softmax_precision {p} (only 1 = float and 11 = double are supported)")
    return _PRECISION[int(p)]


def _regions(op, error) -> dict[str, int]:
    """{attribute name: region index} of the subgraphs present."""
    names = list(op.attrs.get("region_names", ()))
    if len(names) != len(op.regions):
        raise error(f"{len(op.regions)} subgraphs but region_names {names}")
    for n in names:
        if n not in _MODS:
            raise error(f"unknown subgraph attribute {n!r} (expected score_mod or prob_mod)")
    return {n: i for i, n in enumerate(names)}


def _geometry(ctx: InferCtx):
    q, k, v = ctx.in_types[:3]
    for name, t in (("Q", q), ("K", k), ("V", v)):
        if t.rank != 4:
            raise ctx.error(f"{name} must be 4-D [batch, heads, seq, head], got {t}")
        if t.dtype is not q.dtype or t.dtype not in _FLOATS:
            raise ctx.error(f"{name} must be a float tensor of Q's dtype, got {t}")
    hq, hkv = q.shape[1], k.shape[1]
    if not (isinstance(hq, int) and isinstance(hkv, int)):
        raise ctx.error(f"head counts must be static, got Q {hq} and K {hkv} heads")
    if hq % hkv:
        raise ctx.error(f"Q's {hq} heads must be a multiple of K's {hkv}")
    b = ctx.require_eq(q.shape[0], k.shape[0], "K batch vs Q")
    b = ctx.require_eq(b, v.shape[0], "V batch vs Q")
    ctx.require_eq(v.shape[1], hkv, "V heads vs K")
    s = ctx.require_eq(k.shape[2], v.shape[2], "V sequence vs K")
    ctx.require_eq(k.shape[3], q.shape[3], "K head size vs Q")
    return TensorType(_precision(ctx.op, q.dtype, ctx.error), (b, hq, q.shape[2], s))


class _FlexAttention:
    @staticmethod
    def infer_regions(ctx: InferCtx, infer_block):
        scores = _geometry(ctx)
        changed = False
        for i in _regions(ctx.op, ctx.error).values():
            block = ctx.op.regions[i].block
            if len(block.args) != 1 + len(ctx.in_types) - 3:
                raise ctx.error(f"a subgraph must take exactly one input, region {i} takes "
                                f"{len(block.args) - (len(ctx.in_types) - 3)}")
            block.args[0].type = scores
            ctx.set_known(block.args[0], None)
            for a, j in zip(block.args[1:], range(3, len(ctx.in_types))):  # captured outer values
                a.type = ctx.in_types[j]
                ctx.set_known(a, ctx.known(j))
            changed |= bool(infer_block(block))
        return changed

    @staticmethod
    def infer(ctx: InferCtx):
        scores = _geometry(ctx)
        for name, i in _regions(ctx.op, ctx.error).items():
            term = ctx.op.regions[i].block.terminator
            ys = list(term.operands) if term is not None else []
            if len(ys) != 1 or ys[0].type.dtype is not scores.dtype or ys[0].type.rank != 4:
                raise ctx.error(f"{name} must yield one {scores.dtype.value} tensor of rank 4, got "
                                f"{[str(y.type) for y in ys]}")
            for k, (d, e) in enumerate(zip(ys[0].type.shape, scores.shape, strict=True)):
                ctx.require_eq(d, e, f"{name} result dim {k} vs its input")
        q, v = ctx.in_types[0], ctx.in_types[2]
        return [TensorType(q.dtype, (*scores.shape[:3], v.shape[3]))]


def flex_attention(q, k, v, scale, score_mod=None, prob_mod=None, ct=np.float32) -> np.ndarray:
    """numpy FlexAttention in precision `ct`; the mods are callables on [B, Hq, L, S] arrays."""
    group = q.shape[1] // k.shape[1]
    kk = np.repeat(k, group, axis=1).astype(ct)
    vv = np.repeat(v, group, axis=1).astype(ct)
    scores = (q.astype(ct) @ np.swapaxes(kk, -1, -2)) * ct(scale)
    if score_mod is not None:
        scores = np.asarray(score_mod(scores), ct)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    probs = e / e.sum(axis=-1, keepdims=True)
    if prob_mod is not None:
        probs = np.asarray(prob_mod(probs), ct)
    return (probs @ vv).astype(v.dtype)


def _scale(op, head) -> float:
    s = op.attrs.get("scale")
    return float(s) if s is not None else 1.0 / math.sqrt(head)


def _ref(ctx: RefCtx, q, k, v, *caps):
    regions = _regions(ctx.op, ValueError)
    ct = _precision(ctx.op, ctx.out_type(0).dtype, ValueError).np

    def mod(name):
        if name not in regions:
            return None
        return lambda x: ctx.run_region(regions[name], [x, *caps])[0]

    y = flex_attention(q, k, v, _scale(ctx.op, q.shape[3]), mod("score_mod"), mod("prob_mod"), ct.type)
    return [y.astype(ctx.out_type(0).dtype.np)]


def _lower(ctx) -> None:
    q, k, v = ctx.inputs[:3]
    caps = list(ctx.inputs[3:])
    regions = _regions(ctx.op, ctx.unsupported)
    ct = _precision(ctx.op, q.dtype, ctx.unsupported)
    head = q.shape[3]
    if ctx.op.attrs.get("scale") is None and not isinstance(head, int):
        raise ctx.unsupported("a symbolic head size needs the scale attribute")
    sc = _scale(ctx.op, head)
    group = q.shape[1] // k.shape[1]
    bsz, hq, ql, kl = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    shape = (bsz, hq, ql, kl)
    L, p = ctx.lowerer, ctx.program
    e, t = Var("e"), Var("t")

    def modded(name, buf):
        """buf through the named subgraph, lowered in place (the buffer its yield lands in)."""
        if name not in regions:
            return buf
        stmts, ys = L.lower_region(ctx.op.regions[regions[name]].block, [buf, *caps], [None])
        p.body.extend(stmts)
        return ys[0]

    scores = ctx.temp(ct, shape, "flex_scores")
    ctx.compute(scores, lambda b, h, i, j: rsum([(e, head)], cast(q[b, h, i, e], ct) * cast(
        k[b, h // group, j, e], ct)) * sc)
    x = modded("score_mod", scores)
    row = shape[:3]
    mx = ctx.temp(ct, row, "flex_rowmax")
    ctx.compute(mx, lambda b, h, i: rmax([(t, kl)], x[b, h, i, t]))
    probs = ctx.temp(ct, shape, "flex_probs")
    # the row sum inline: the shape the CPU schedule runs with one exp per score (kernel/rownorm.py)
    ctx.compute(probs, lambda b, h, i, j: exp(x[b, h, i, j] - mx[b, h, i]) / rsum(
        [(t, kl)], exp(x[b, h, i, t] - mx[b, h, i])))
    pr = modded("prob_mod", probs)
    y = ctx.out(0)
    ctx.compute(y, lambda b, h, i, m: cast(rsum([(t, kl)], pr[b, h, i, t] * cast(v[b, h // group, t, m], ct)),
                                           y.dtype))


def _flops(op):
    """Q @ K^T and P @ V (2 per multiply-add) plus the softmax's ~5 per score."""
    q, k, v = (x.type.shape for x in op.operands[:3])
    rows = sympy.sympify(q[0]) * q[1] * q[2] * k[2]
    return rows * (2 * q[3] + 2 * v[3] + 5)


define("ai.onnx.preview.FlexAttention", infer=_FlexAttention.infer, reference=_ref, lower=_lower,
       kind="opaque", arity=(3, None), infer_regions=_FlexAttention.infer_regions, math=flex_attention)
set_cost(_flops, "ai.onnx.preview.FlexAttention")
