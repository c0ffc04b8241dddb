"""onnxruntime's contrib ops: what its graph optimiser (and exporters built on it) leave in
models, with the semantics onnxruntime documents and its CPU kernels compute.

com.microsoft.FusedMatMul            alpha * op(A) @ op(B); transA/transB swap the last two dims,
                                     transBatchA/B move dim 0 behind the batch dims first
com.microsoft.Gelu / BiasGelu        erf Gelu of X (of A + B)
com.microsoft.FastGelu               tanh-approximated Gelu of X (+ optional bias)
com.microsoft.QuickGelu              X * sigmoid(alpha * X), alpha = 1.702
com.microsoft.SkipLayerNormalization LayerNorm over the last dim of S = input + skip (+ bias),
                                     * gamma (+ beta); outputs Y, mean, inv_std_var, S
onnx.SimplifiedLayerNormalization    RMS norm (onnxruntime registers it in the ONNX domain);
                                     outputs Y, inv_std_var
com.microsoft.SkipSimplifiedLayerNormalization  RMS norm of S = input + skip (+ bias) * gamma;
                                     outputs Y, (mean: refused when used), inv_std_var, S
com.microsoft.RotaryEmbedding        see contrib_rotary.py
com.microsoft.Attention, MultiHeadAttention   see contrib_attention.py
com.microsoft.MatMulNBits            see contrib_quant.py

Each one is a composition of ops onnxcc already lowers, so each lowering reuses theirs:
FusedMatMul is MatMul's compute over permuted loads, the Gelus are onnx.Gelu's kernel twin,
the normalizations are LayerNormalization's / RMSNormalization's statistics.
"""

from __future__ import annotations

import numpy as np

from ..ir import DType, TensorType
from ..kernel import Const, Var, broadcast_indices, cast, sigmoid
from . import contrib_attention, contrib_quant  # noqa: F401
from .contrib_rotary import refusal
from .elementwise import cast_out, kwiden, operand, results_between, same_dtype, unidirectional, widen
from .matmul import matmul_compute, matmul_shape
from .norm import moments, rms_lower, rms_norm
from .registry import InferCtx, RefCtx, define, get_opdef, onnx_inputs

# contrib_attention and contrib_quant register their ops on import (this module is the family's
# entry point in ops/__init__.py)
MS = "com.microsoft."


# ---- FusedMatMul ---------------------------------------------------------------------------------


def batch_perm(rank: int, trans: int, trans_batch: int) -> list[int]:
    """The permutation that turns an operand into what FusedMatMul multiplies: dim k of the
    effective operand is dim perm[k] of the given one."""
    if rank < 2:
        return list(range(rank))
    last = (rank - 1, 0) if trans else (0, rank - 1)
    if trans_batch:
        return [*range(1, rank - 1), *last]
    return [*range(rank - 2), *((rank - 1, rank - 2) if trans else (rank - 2, rank - 1))]


def _fmm_perms(attr, ra: int, rb: int) -> tuple[list[int], list[int]]:
    return (batch_perm(ra, attr("transA", 0), attr("transBatchA", 0)),
            batch_perm(rb, attr("transB", 0), attr("transBatchB", 0)))


def fused_matmul(a, b, alpha=1.0, trans_a=0, trans_b=0, trans_batch_a=0, trans_batch_b=0):
    pa, pb = batch_perm(a.ndim, trans_a, trans_batch_a), batch_perm(b.ndim, trans_b, trans_batch_b)
    return alpha * np.matmul(np.transpose(a, pa), np.transpose(b, pb))


def _fmm_infer(ctx: InferCtx):
    dt = same_dtype(ctx)
    ta, tb = ctx.in_types
    if (ctx.attr("transBatchA", 0) or ctx.attr("transBatchB", 0)) and not ta.rank == tb.rank >= 3:
        raise ctx.error(f"transBatchA / transBatchB need operands of one rank >= 3, got {ta} and {tb}")
    pa, pb = _fmm_perms(ctx.attr, ta.rank, tb.rank)
    sa, sb = tuple(ta.shape[p] for p in pa), tuple(tb.shape[p] for p in pb)
    return [TensorType(dt, matmul_shape(ctx, sa, sb))]


def _fmm_ref(ctx: RefCtx, a, b):
    pa, pb = _fmm_perms(ctx.attr, a.ndim, b.ndim)
    y = float(ctx.attr("alpha", 1.0)) * np.matmul(np.transpose(widen(a), pa), np.transpose(widen(b), pb))
    return [cast_out(ctx, y)]


class _Scaled:
    """A LowerCtx stand-in for matmul_compute whose computes scale the contraction by alpha
    outside the rsum (an epilogue, as Gemm's alpha)."""

    def __init__(self, ctx, alpha: float, dt: DType):
        self.ctx, self.alpha, self.dt = ctx, alpha, dt

    def compute(self, out, fn) -> None:
        self.ctx.compute(out, lambda *ix: Const(self.alpha, self.dt) * fn(*ix))


def _permuted(buf, perm: list[int]):
    """`idx -> buf[...]` for an index into the permuted operand."""
    inv = [perm.index(k) for k in range(len(perm))]
    return lambda idx: buf[tuple(idx[inv[k]] for k in range(len(perm)))]


def _fmm_lower(ctx) -> None:
    a, b = ctx.inputs
    y = ctx.out(0)
    if not y.dtype.is_float:
        raise refusal(ctx.op, f"dtype {y.dtype.value}")
    pa, pb = _fmm_perms(ctx.attr, a.rank, b.rank)
    alpha = float(ctx.attr("alpha", 1.0))
    target = ctx if alpha == 1.0 else _Scaled(ctx, alpha, y.dtype)
    matmul_compute(target, y, tuple(a.shape[p] for p in pa), tuple(b.shape[p] for p in pb),
                   _permuted(a, pa), _permuted(b, pb))


define(MS + "FusedMatMul", infer=_fmm_infer, reference=_fmm_ref, lower=_fmm_lower, kind="matmul", arity=2,
       math=fused_matmul)


# ---- the Gelu family -----------------------------------------------------------------------------

_GELU = get_opdef("onnx.Gelu")


def _approx(kind: str):
    """An attribute getter for onnx.Gelu's math / kernel twin: approximate = kind."""
    return lambda name, default=None: kind if name == "approximate" else default


def _quick_alpha(attr) -> float:
    return float(attr("alpha", 1.702))


# name -> (numpy of the widened operands, kernel twin of the widened operands, arity)
_GELUS = {
    "Gelu": (lambda a, x: _GELU.math(x, _approx("none")), lambda a, x: _GELU.kernel(x, _approx("none")), 1),
    "BiasGelu": (lambda a, x, b: _GELU.math(x + b, _approx("none")),
                 lambda a, x, b: _GELU.kernel(x + b, _approx("none")), 2),
    "FastGelu": (lambda a, x, b=None: _GELU.math(x if b is None else x + b, _approx("tanh")),
                 lambda a, x, b=None: _GELU.kernel(x if b is None else x + b, _approx("tanh")), (1, 2)),
    "QuickGelu": (lambda a, x: x / (1.0 + np.exp(-_quick_alpha(a) * x)),
                  lambda a, x: x * sigmoid(_quick_alpha(a) * x), 1),
}


def _gelu_op(name: str, fn, kfn, arity) -> None:
    def infer(ctx: InferCtx):
        x = ctx.in_types[0]
        dt = same_dtype(ctx)
        if not dt.is_float:
            raise ctx.error(f"expects a float dtype, got {dt.value}")
        if len(ctx.in_types) > 1:  # the bias: 1-D of the last dim (broadcasts to X)
            unidirectional(ctx, x.shape, ctx.in_types[1].shape, "bias")
        return [x]

    def reference(ctx: RefCtx, *xs):
        return [cast_out(ctx, fn(ctx.attr, *(widen(x).astype(np.float64) for x in xs)))]

    def lower(ctx) -> None:
        y = ctx.out(0)
        n = len(ctx.inputs)
        def body(*ix):
            return cast(kfn(ctx.attr, *(kwiden(operand(ctx, i, ix)) for i in range(n))), y.dtype)

        ctx.compute(y, body)

    define(MS + name, infer=infer, reference=reference, lower=lower, kind="elementwise", arity=arity, math=fn,
           kernel=kfn)


for _n, (_f, _k, _a) in _GELUS.items():
    _gelu_op(_n, _f, _k, _a)


# ---- SkipLayerNormalization and the simplified (RMS) forms ---------------------------------------


def _stat_dtype(dt: DType) -> DType:
    """The statistics' dtype (onnxruntime's U): f64 stays, everything else computes in f32."""
    return DType.f64 if dt is DType.f64 else DType.f32


def _skip_infer(ctx: InferCtx, names: tuple[str, ...]):
    """Shared shape rule: input [B, S, H] or [S, H]; skip like it, [1, S, H] or [S, H]; the 1-D
    params are [H]; outputs Y, mean, inv_std_var ([.., 1] each) and the sum S (input's type)."""
    items = dict(zip(names, onnx_inputs(ctx.op, list(ctx.in_types)), strict=False))
    x, skip = items["input"], items["skip"]
    if x.rank not in (2, 3) or skip.rank not in (2, 3):  # as onnxruntime's kernels require
        raise ctx.error(f"input and skip must be 2-D or 3-D, got {x} and {skip}")
    dt = same_dtype(ctx)
    unidirectional(ctx, x.shape, skip.shape, "skip")
    for name in names[2:]:
        t = items.get(name)
        if t is not None:
            if t.rank != 1:
                raise ctx.error(f"{name} must be 1-D of the hidden size, got {t}")
            ctx.require_eq(t.shape[0], x.shape[-1], f"{name} length vs input dim -1")
    stat = TensorType(_stat_dtype(dt), (*x.shape[:-1], 1))
    return [x.with_dtype(dt), stat, stat, x.with_dtype(dt)][: len(ctx.op.results)]


_SLN = ("input", "skip", "gamma", "beta", "bias")
_SSLN = ("input", "skip", "gamma", "bias")


def skip_sum(x, skip, bias):
    s = x + skip
    return s if bias is None else s + bias


def skip_layer_norm(x, skip, gamma, beta, bias, epsilon: float):
    """(Y, mean, inv_std_var, S) in float64-free numpy: the statistics over the last dim."""
    s = skip_sum(x, skip, bias)
    st = np.float64 if x.dtype == np.float64 else np.float32
    ss = s.astype(st)
    mean = ss.mean(axis=-1, keepdims=True)
    inv = 1.0 / np.sqrt(((ss - mean) ** 2).mean(axis=-1, keepdims=True) + epsilon)
    y = (ss - mean) * inv * gamma.astype(st)
    return (y if beta is None else y + beta.astype(st)), mean, inv, s


def _sln_ref(ctx: RefCtx, *args):
    a = dict(zip(_SLN, onnx_inputs(ctx.op, [widen(v) for v in args]) + [None] * 5, strict=False))
    outs = skip_layer_norm(a["input"], a["skip"], a["gamma"], a["beta"], a["bias"],
                           float(ctx.attr("epsilon", 1e-12)))
    return [cast_out(ctx, o, i) for i, o in enumerate(outs[: len(ctx.op.results)])]


def _skip_sum_lower(ctx, items: dict):
    """S = input + skip (+ bias) into result 3 when the node has it, else into a temp."""
    x, skip, bias = items["input"], items["skip"], items.get("bias")
    s = ctx.out(3) if len(ctx.op.results) > 3 else ctx.temp(x.dtype, x.shape, "skip_sum")

    def body(*ix):
        v = x[ix] + skip[broadcast_indices(ix, skip.shape)]
        return v if bias is None else v + bias[(ix[-1],)]

    ctx.compute(s, body)
    return s


def _sln_lower(ctx) -> None:
    """S (a buffer), then Y = (S - mean) * inv_std * gamma + beta over the last dim, one
    compute whose statistics the codegen hoists per row; mean and inv_std_var recompute them."""
    items = dict(zip(_SLN, onnx_inputs(ctx.op, list(ctx.inputs)), strict=False))
    s = _skip_sum_lower(ctx, items)
    gamma, beta = items["gamma"], items.get("beta")
    y = ctx.out(0)
    st = _stat_dtype(y.dtype)
    eps = float(ctx.attr("epsilon", 1e-12))
    r = Var("r")
    hdim = s.shape[-1]

    def stats(ix):
        return moments(lambda vs: cast(s[(*ix[:-1], vs[0])], st), [(r, hdim)], ctx.dim(hdim), eps, st)

    def y_body(*ix):
        mean, inv = stats(ix)
        v = (cast(s[ix], st) - mean) * inv * cast(gamma[(ix[-1],)], st)
        return cast(v if beta is None else v + cast(beta[(ix[-1],)], st), y.dtype)

    ctx.compute(y, y_body)
    for k in (1, 2):
        if len(ctx.op.results) > k:
            out = ctx.out(k)
            ctx.compute(out, lambda *ix, k=k, out=out: cast(stats(ix)[k - 1], out.dtype))


define(MS + "SkipLayerNormalization", infer=lambda ctx: _skip_infer(ctx, _SLN), reference=_sln_ref,
       lower=_sln_lower, kind="reduction", arity=(3, 5), num_results=None, verify=results_between(1, 4),
       math=skip_layer_norm)


def _ssln_ref(ctx: RefCtx, *args):
    a = dict(zip(_SSLN, onnx_inputs(ctx.op, [widen(v) for v in args]) + [None] * 4, strict=False))
    s = skip_sum(a["input"], a["skip"], a["bias"])
    st = np.float64 if s.dtype == np.float64 else np.float32
    y, inv = rms_norm(s, a["gamma"], s.ndim - 1, float(ctx.attr("epsilon", 1e-12)), st)
    # the mean output has no value in onnxruntime; the lowering refuses it when it is used
    outs = [y, s.astype(st).mean(axis=-1, keepdims=True), inv, s]
    return [cast_out(ctx, o, i) for i, o in enumerate(outs[: len(ctx.op.results)])]


def _ssln_lower(ctx) -> None:
    items = dict(zip(_SSLN, onnx_inputs(ctx.op, list(ctx.inputs)), strict=False))
    if len(ctx.op.results) > 1 and ctx.op.results[1].uses:
        raise refusal(ctx.op, "output 1 (mean) is not computed by onnxruntime for the simplified form")
    s = _skip_sum_lower(ctx, items)
    y = ctx.out(0)
    st = _stat_dtype(y.dtype)
    eps = float(ctx.attr("epsilon", 1e-12))
    inv = ctx.out(2) if len(ctx.op.results) > 2 else None
    rms_lower(ctx, s, items["gamma"], s.rank - 1, eps, st, y, inv)
    if len(ctx.op.results) > 1:  # unused (checked above): a defined value all the same
        ctx.compute(ctx.out(1), lambda *ix: Const(0.0, ctx.out(1).dtype))


define(MS + "SkipSimplifiedLayerNormalization", infer=lambda ctx: _skip_infer(ctx, _SSLN),
       reference=_ssln_ref, lower=_ssln_lower, kind="reduction", arity=(3, 4), num_results=None,
       verify=results_between(1, 4), math=rms_norm)


def _simplified_infer(ctx: InferCtx):
    x = ctx.in_types[0]
    dt = same_dtype(ctx)
    axis = ctx.attr("axis", -1)
    if not -x.rank <= axis < x.rank:
        raise ctx.error(f"axis {axis} out of range for rank {x.rank}")
    axis %= x.rank
    unidirectional(ctx, x.shape[axis:], ctx.in_types[1].shape, "scale")
    stat = TensorType(_stat_dtype(dt), x.shape[:axis] + (1,) * (x.rank - axis))
    return [x.with_dtype(dt), stat][: len(ctx.op.results)]


def _simplified_ref(ctx: RefCtx, x, scale):
    x = widen(x)
    st = np.float64 if x.dtype == np.float64 else np.float32
    y, inv = rms_norm(x, widen(scale), ctx.attr("axis", -1) % x.ndim, float(ctx.attr("epsilon", 1e-5)), st)
    return [cast_out(ctx, o, i) for i, o in enumerate([y, inv][: len(ctx.op.results)])]


def _simplified_lower(ctx) -> None:
    x, scale = ctx.inputs
    y = ctx.out(0)
    rms_lower(ctx, x, scale, ctx.attr("axis", -1) % x.rank, float(ctx.attr("epsilon", 1e-5)),
              _stat_dtype(y.dtype), y, ctx.out(1) if len(ctx.op.results) > 1 else None)


define("onnx.SimplifiedLayerNormalization", infer=_simplified_infer, reference=_simplified_ref,
       lower=_simplified_lower, kind="reduction", arity=2, num_results=None, verify=results_between(1, 2),
       math=rms_norm)


