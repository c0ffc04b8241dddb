"""Losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (with its log_prob output).

Both read one class score per element of the target: input (N, C, d1..dk), target (N, d1..dk)
of class indices, optional per-class weight (C). An element whose target equals
`ignore_index` contributes neither loss nor weight. Reductions: none (the per-element loss,
target-shaped), sum, mean (sum of losses / sum of the weights of the counted elements).

Lowering: the loss is one compute; with sum / mean the reductions over every target dim sit
in the body of a rank-0 compute. SoftmaxCrossEntropyLoss first writes log_softmax(scores,
axis 1) to the log_prob result (or a temp when log_prob is not asked for) and takes the NLL
of that. A target outside [0, C) that is not ignored makes the kernel fail with ERR_INDEX.
"""

from __future__ import annotations

import numpy as np

from .. import kernel as K
from ..ir import DType, TensorType
from ..kernel import Expr, Var
from .elementwise import cast_out, kwiden, results_between, widen
from .reduce import k_log_softmax, log_softmax
from .registry import InferCtx, RefCtx, define

_REDUCTIONS = ("none", "sum", "mean")


def nll_loss(x, target, weight, reduction: str, ignore_index):
    """numpy NegativeLogLikelihoodLoss over x (N, C, d...) and target (N, d...)."""
    c = x.shape[1]
    t = target.astype(np.int64)
    keep = np.ones(t.shape, bool) if ignore_index is None else t != ignore_index
    if np.any(keep & ((t < 0) | (t >= c))):
        raise IndexError(f"target class out of range [0, {c})")
    safe = np.where(keep, t, 0)
    picked = np.take_along_axis(x, np.expand_dims(safe, 1), axis=1)[:, 0]
    w = np.ones(c, x.dtype) if weight is None else weight
    wt = np.where(keep, w[safe], 0).astype(x.dtype)
    loss = -picked * wt
    if reduction == "none":
        return loss
    if reduction == "sum":
        return np.sum(loss, dtype=x.dtype)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(np.sum(loss, dtype=x.dtype) / np.sum(wt, dtype=x.dtype))


def _loss_infer(ctx: InferCtx, with_log_prob: bool) -> list[TensorType]:
    x, t = ctx.in_types[0], ctx.in_types[1]
    red = ctx.attr("reduction", "mean")
    if red not in _REDUCTIONS:
        raise ctx.error(f"reduction must be one of {_REDUCTIONS}, got {red!r}")
    if x.rank < 2:
        raise ctx.error(f"input must be (N, C, d...) with rank >= 2, got {x}")
    if not x.dtype.is_float:
        raise ctx.error(f"input must be a float tensor, got {x.dtype.value}")
    if t.dtype not in (DType.i32, DType.i64):
        raise ctx.error(f"target must be int32 or int64, got {t.dtype.value}")
    if t.rank != x.rank - 1:
        raise ctx.error(f"target rank must be input rank - 1 = {x.rank - 1}, got {t}")
    dims = (x.shape[0], *x.shape[2:])
    shape = tuple(ctx.require_eq(a, b, f"target dim {i}") for i, (a, b) in enumerate(zip(dims, t.shape)))
    if len(ctx.in_types) > 2:
        w = ctx.in_types[2]
        if w.rank != 1 or w.dtype is not x.dtype:
            raise ctx.error(f"weight must be a 1-D {x.dtype.value} tensor of C classes, got {w}")
        ctx.require_eq(w.shape[0], x.shape[1], "weight length == C")
    out = TensorType(x.dtype, shape if red == "none" else ())
    res = [out]
    if with_log_prob:
        res.append(x)
    return res[: len(ctx.op.results)]


def _k_nll(ctx, scores: K.Buffer, target: K.Buffer, weight: K.Buffer | None, out: K.Buffer) -> None:
    """out = the NLL of `scores` (a buffer shaped like the input) at the target classes."""
    red = ctx.attr("reduction", "mean")
    ii = ctx.attr("ignore_index")
    c = ctx.dim(scores.shape[1])
    dt = kwiden(scores[(0,) * scores.rank]).dtype

    def terms(ix) -> tuple[Expr, Expr]:
        """(loss, weight) of target element `ix`; both 0 where ignored (nothing is loaded)."""
        t = K.cast(target[ix], DType.i64)
        cls = K.check((t >= 0) & (t < c), t)
        w = K.Const(1.0, dt) if weight is None else kwiden(weight[(cls,)])
        loss = -kwiden(scores[(ix[0], cls, *ix[1:])]) * w
        if ii is None:
            return loss, w
        keep = t.ne(K.Const(int(ii), DType.i64))
        return K.select(keep, loss, K.Const(0.0, dt)), K.select(keep, w, K.Const(0.0, dt))

    if red == "none":
        ctx.compute(out, lambda *ix: K.cast(terms(ix)[0], out.dtype))
        return
    rv = [Var(f"r{k}") for k in range(target.rank)]
    box = list(zip(rv, target.shape))
    loss, _w = terms(tuple(rv))
    total = K.rsum(box, loss)
    if red == "mean":
        wv = [Var(f"w{k}") for k in range(target.rank)]
        total = total / K.rsum(list(zip(wv, target.shape)), terms(tuple(wv))[1])
    ctx.compute(out, lambda: K.cast(total, out.dtype))


def _weight(args: list):
    return args[2] if len(args) > 2 else None


# ---- NegativeLogLikelihoodLoss ---------------------------------------------------------------------


def _nll_ref(ctx: RefCtx, x, t, *rest):
    w = widen(rest[0]) if rest else None
    return [cast_out(ctx, nll_loss(widen(x), t, w, ctx.attr("reduction", "mean"), ctx.attr("ignore_index")))]


def _nll_lower(ctx) -> None:
    _k_nll(ctx, ctx.inputs[0], ctx.inputs[1], _weight(ctx.inputs), ctx.out(0))


define("onnx.NegativeLogLikelihoodLoss", infer=lambda ctx: _loss_infer(ctx, False), reference=_nll_ref,
       lower=_nll_lower, kind="reduction", arity=(2, 3), math=nll_loss)


# ---- SoftmaxCrossEntropyLoss -----------------------------------------------------------------------


def softmax_cross_entropy(x, labels, weight, reduction: str, ignore_index):
    """-> (loss, log_prob)."""
    lp = log_softmax(x, 1)
    return nll_loss(lp, labels, weight, reduction, ignore_index), lp


def _sce_ref(ctx: RefCtx, x, t, *rest):
    w = widen(rest[0]) if rest else None
    loss, lp = softmax_cross_entropy(widen(x), t, w, ctx.attr("reduction", "mean"), ctx.attr("ignore_index"))
    out = [cast_out(ctx, loss)]
    if len(ctx.op.results) > 1:
        out.append(cast_out(ctx, lp, 1))
    return out


def _sce_lower(ctx) -> None:
    x = ctx.inputs[0]
    lp = ctx.out(1) if len(ctx.op.results) > 1 else ctx.temp(x.dtype, x.shape, "logprob")
    ctx.compute(lp, lambda *o: K.cast(k_log_softmax(x, o, 1), lp.dtype))
    _k_nll(ctx, lp, ctx.inputs[1], _weight(ctx.inputs), ctx.out(0))


define("onnx.SoftmaxCrossEntropyLoss", infer=lambda ctx: _loss_infer(ctx, True), reference=_sce_ref,
       lower=_sce_lower, kind="reduction", arity=(2, 3), num_results=None, verify=results_between(1, 2),
       math=softmax_cross_entropy)
