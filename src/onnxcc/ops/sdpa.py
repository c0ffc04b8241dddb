"""cc.sdpa: the attention chain exporters write, as one op the CPU runs fused over key blocks.

    Y = MatMul(Softmax(step_n(... step_1(MatMul(Q, Kt)))), V)        Softmax over the last axis

what torch and Hugging Face exports spell as MatMul(Q, Transpose(K)) [* or / a scale]
[+ an additive mask] [Where(mask, x, fill)] -> Softmax(axis=-1) -> MatMul(., V). The
attention-chain pass (passes/attention_chain.py) builds it where that chain's
intermediate values have no other users; it is never imported from ONNX.

    %y = cc.sdpa(%q, %k, %v, %c, %mask) {k_perm = [0, 2, 3, 1], steps = ["mul", "add"]}

Operands: Q `[*qb, S, D]`, K, V `[*vb, T, Dv]`, then each step's operands in order. K is
Kt `[*kb, D, T]` itself, or (with `k_perm`) the tensor whose `Transpose(K, k_perm)` is Kt,
so the kernel reads K where it lies (consecutive head elements adjacent) instead of a
transposed copy. Steps, applied to the scores `x` in order, each exactly the graph op it
came from (so the rewrite changes nothing but the order of the dot products' additions):

    mul c          x * c             add m      x + m
    div c          x / c             sub m      x - m
    where_keep cond, f               Where(cond, x, f)
    where_fill cond, f               Where(cond, f, x)

Every step operand broadcasts into the scores' shape without growing it. `causal = c`: the
score of every key after `row + c` is not the steps' but `masked = [a, m]`'s, `a*X + m` of
the raw score X (the constant m where a == 0; without `masked`, -inf): the pass sets both
where it proved, passes/attention_causal.py, that the chain's own masks give those keys
exactly that score, and drops the steps that then change nothing at the other keys. The CPU
kernel skips the key blocks after the rows it runs where it proves at run time that they
add nothing (a non-finite X, value or row max brings them back: codegen/cpu/flash_guard.py).
The softmax is the
plain one (ONNX's and onnxruntime's): a row whose scores are all -inf is NaN. Result
`[*b, S, Dv]`, `b` the scores' batch dims (V's batch dims broadcast into them). f32 and
f64 only: half precision rounds every intermediate of the chain, which the fused kernel
(computing in f32 throughout) would not reproduce.

The lowering is one compute, `flash_core` over the keys (kernel/flash.py); on the CPU the
schedule runs it as blocks of keys with an online softmax and the [S, T] scores never
exist (codegen/cpu/flash.py); elsewhere it is correct plain loops.
"""

from __future__ import annotations

import numpy as np

from ..ir import DType, TensorType
from ..kernel import Const, Expr, Var, broadcast_indices, rsum, select
from ..kernel.flash import flash_core
from .elementwise import cast_out
from .matmul import matmul_shape
from .reduce import softmax
from .registry import InferCtx, RefCtx, define

STEP_ARITY = {"mul": 1, "div": 1, "add": 1, "sub": 1, "where_keep": 2, "where_fill": 2}


def apply_steps(x, steps, operands, at, choose):
    """The score `x` after `steps`, each reading its operands through `at(operand)`; `choose(c,
    a, b)` is the select (`c ? a : b`) of the two Where forms. One reading of the steps for
    the kernel lowering (Exprs) and the causal proof (sympy, passes/attention_causal.py)."""
    it = iter(operands)
    for st in steps:
        a = at(next(it))
        if st == "mul":
            x = x * a
        elif st == "div":
            x = x / a
        elif st == "add":
            x = x + a
        elif st == "sub":
            x = x - a
        else:
            f = at(next(it))
            x = choose(a, x, f) if st == "where_keep" else choose(a, f, x)
    return x
"""operands each score step reads"""

_FLOATS = (DType.f32, DType.f64)


def _steps(op) -> tuple[str, ...]:
    steps = tuple(op.attrs.get("steps", ()))
    bad = [s for s in steps if s not in STEP_ARITY]
    if bad:
        raise ValueError(f"cc.sdpa: unknown score step {bad[0]!r} (known: {', '.join(STEP_ARITY)})")
    return steps


def kt_shape(k_shape: tuple, perm) -> tuple:
    """The shape of Kt: K's, or K's transposed by `perm`."""
    return tuple(k_shape) if perm is None else tuple(k_shape[p] for p in perm)


def _infer(ctx: InferCtx):
    try:
        steps = _steps(ctx.op)
    except ValueError as e:
        raise ctx.error(str(e)) from None
    need = 3 + sum(STEP_ARITY[s] for s in steps)
    if len(ctx.in_types) != need:
        raise ctx.error(f"steps {list(steps)} need {need} operands, got {len(ctx.in_types)}")
    q, k, v = ctx.in_types[:3]
    if q.dtype not in _FLOATS or k.dtype is not q.dtype or v.dtype is not q.dtype:
        raise ctx.error(f"Q, K and V must share an f32 or f64 dtype, got {q.dtype.value}, {k.dtype.value}, "
                        f"{v.dtype.value}")
    causal = ctx.attr("causal")
    if causal is not None and (isinstance(causal, bool) or not isinstance(causal, int)):
        raise ctx.error(f"causal must be an integer offset, got {causal!r}")
    masked = ctx.attr("masked")
    if masked is not None and (causal is None or len(masked) != 2):
        raise ctx.error(f"masked must be [a, m] beside causal, got {masked!r}")
    perm = ctx.attr("k_perm")
    if perm is not None and sorted(perm) != list(range(k.rank)):
        raise ctx.error(f"k_perm {list(perm)} is not a permutation of K's {k.rank} axes")
    if q.rank < 2 or k.rank < 2 or v.rank < 2:
        raise ctx.error(f"Q, K and V must have rank >= 2, got {q.rank}, {k.rank}, {v.rank}")
    scores = matmul_shape(ctx, q.shape, kt_shape(k.shape, perm))
    kinds = [kind for st in steps for kind in (("num",) if STEP_ARITY[st] == 1 else ("bool", "num"))]
    for i, (t, kind) in enumerate(zip(ctx.in_types[3:], kinds, strict=True)):
        want = DType.bool if kind == "bool" else q.dtype
        if t.dtype is not want:
            raise ctx.error(f"step operand {i} must be {want.value}, got {t.dtype.value}")
        if t.rank > len(scores):
            raise ctx.error(f"step operand {i} has rank {t.rank}, more than the scores' {len(scores)}")
        grown = ctx.broadcast(scores, t.shape)
        for a, b in zip(grown, scores, strict=True):
            ctx.require_eq(a, b, f"step operand {i} broadcasts into the scores")
    y = matmul_shape(ctx, scores, v.shape)
    return [TensorType(q.dtype, y)]


# ---- numpy reference: the chain, op by op ------------------------------------------------------

def sdpa_chain(q, k, v, extra: list, steps, perm, causal=None, masked=None) -> np.ndarray:
    """The graph ops the op stands for, each rounded to the dtype as they would be; with
    `causal`, the keys after each row + causal score `masked` (a*X + m, X the raw score; m
    alone where a == 0; -inf without it) before the softmax."""
    kt = k if perm is None else np.transpose(k, perm)
    raw = x = np.matmul(q, kt)
    it = iter(extra)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        for s in steps:
            if s == "mul":
                x = x * next(it)
            elif s == "div":
                x = x / next(it)
            elif s == "add":
                x = x + next(it)
            elif s == "sub":
                x = x - next(it)
            else:
                cond, fill = next(it), next(it)
                x = np.where(cond, x, fill) if s == "where_keep" else np.where(cond, fill, x)
            x = x.astype(q.dtype, copy=False)
        if causal is not None:
            rows, keys = np.arange(x.shape[-2])[:, None], np.arange(x.shape[-1])[None, :]
            a, m = masked_score(masked)
            fill = np.asarray(m, x.dtype) if a == 0 else (raw * np.asarray(a, x.dtype) + np.asarray(m, x.dtype))
            x = np.where(keys > rows + int(causal), fill.astype(x.dtype, copy=False), x)
        p = softmax(x, -1).astype(q.dtype, copy=False)
    return np.matmul(p, v)


def _reference(ctx: RefCtx, q, k, v, *extra):
    return [cast_out(ctx, sdpa_chain(q, k, v, list(extra), _steps(ctx.op), ctx.attr("k_perm"), ctx.attr("causal"),
                                     ctx.attr("masked")))]


def masked_score(masked) -> tuple[float, float]:
    """(a, m) of the `masked` attribute: a masked key's score is a*X + m (m alone at a == 0)."""
    return (0.0, float("-inf")) if masked is None else (float(masked[0]), float(masked[1]))


# ---- lowering: one flash_core compute ------------------------------------------------------------

def _lower(ctx) -> None:
    qb, kb, vb, *extra = ctx.inputs
    steps = _steps(ctx.op)
    perm = ctx.attr("k_perm")
    y = ctx.out(0)
    acc = y.dtype
    nb = y.rank - 2
    kt_dims = kt_shape(kb.shape, perm)
    d_len, t_len = kt_dims[-2], kt_dims[-1]
    e = Var("e")

    def kt(batch, ei, ti) -> Expr:
        idx = (*broadcast_indices(batch, kt_dims[:-2]), ei, ti)
        if perm is None:
            return kb[idx]
        k_idx: list = [None] * len(perm)
        for j, p in enumerate(perm):
            k_idx[p] = idx[j]
        return kb[tuple(k_idx)]

    def raw(batch, s, t) -> Expr:
        qi = (*broadcast_indices(batch, qb.shape[:-2]), s, e)
        return rsum([(e, d_len)], qb[qi] * kt(batch, e, t))

    def score(batch, s, t) -> Expr:
        at = (*batch, s, t)
        return apply_steps(raw(batch, s, t), steps, extra, lambda a: a[broadcast_indices(at, a.shape)], select)

    causal = ctx.attr("causal")
    a, m = masked_score(ctx.attr("masked"))

    def masked(batch, s, t) -> Expr:
        """The score, the masked keys' own after row + causal (the fused kernel skips them
        where they add nothing: kernel/flash.py `Flash.causal`)."""
        x = score(batch, s, t)
        if causal is None:
            return x
        fill = Const(m, acc) if a == 0 else raw(batch, s, t) * Const(a, acc) + Const(m, acc)
        return select(t > s + int(causal), fill, x)

    def body(*ix) -> Expr:
        batch, s, w = ix[:nb], ix[nb], ix[nb + 1]
        vbatch = broadcast_indices(batch, vb.shape[:-2])
        return flash_core(lambda t: masked(batch, s, t), lambda t: vb[(*vbatch, t, w)], t_len, acc, guarded=False)

    ctx.compute(y, body)


define("cc.sdpa", infer=_infer, reference=_reference, lower=_lower, kind="opaque", arity=None)
