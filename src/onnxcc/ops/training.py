"""ai.onnx.preview.training optimizer steps: Adagrad, Adam, Momentum.

Each takes the learning rate R and the step count T (scalars), then n groups of same-shaped
tensors (X..., G..., then the optimizer's state tensors) and returns the updated X... and
state tensors in the same grouped order. They are plain elementwise formulas, computed in
f64 and rounded once to the tensor's type; the scalar inputs are read at run time.
"""

from __future__ import annotations

import numpy as np

from .. import kernel as K
from ..ir import DType, TensorType
from ..kernel import Expr
from .dual_math import KX, NP
from .registry import InferCtx, RefCtx, define

F64 = DType.f64
TRAINING = "ai.onnx.preview.training."


def _group_infer(per: int, n_out: int):
    """Shape rule: R, T, then `per` groups of n tensors (X, G, the state); `n_out` groups of
    n results, each of X_i's type (every tensor of one index i shares X_i's shape)."""

    def infer(ctx: InferCtx) -> list[TensorType]:
        ts = ctx.in_types
        r, t = ts[0], ts[1]
        if not r.dtype.is_float or r.rank > 1 or (r.rank == 1 and r.shape[0] != 1):
            raise ctx.error(f"R must be a float scalar, got {r}")
        if t.dtype is not DType.i64 or t.rank > 1 or (t.rank == 1 and t.shape[0] != 1):
            raise ctx.error(f"T must be an int64 scalar, got {t}")
        rest = ts[2:]
        if not rest or len(rest) % per:
            raise ctx.error(f"expected R, T and {per} groups of tensors, got {len(ts)} inputs")
        n = len(rest) // per
        if len(ctx.op.results) != n * n_out:
            raise ctx.error(f"expected {n * n_out} outputs for {n} tensors, got {len(ctx.op.results)}")
        xs = rest[:n]
        for g in range(1, per):
            for i in range(n):
                o = rest[g * n + i]
                if o.dtype is not xs[i].dtype or o.rank != xs[i].rank:
                    raise ctx.error(f"input {2 + g * n + i} ({o}) does not match X{i} ({xs[i]})")
                for a, b in zip(o.shape, xs[i].shape):
                    ctx.require_eq(a, b, f"input {2 + g * n + i} against X{i}")
        for x in xs:
            if not x.dtype.is_float or x.dtype.is_small:
                raise ctx.error(f"the optimized tensors must be float, got {x.dtype.value}")
        return [xs[i] for _ in range(n_out) for i in range(n)]

    return infer


# ---- the formulas, written once over numpy arrays or kernel expressions (dual_math) ----------------

def adagrad(m, attrs, r, t, x, g, h):
    decay, eps, norm = (attrs("decay_factor", 0.0), attrs("epsilon", 0.0), attrs("norm_coefficient", 0.0))
    rate = r / (t * decay + 1.0)
    gr = x * norm + g
    h_new = h + gr * gr
    x_new = x - rate * gr / (m.sqrt(h_new) + eps)
    return x_new, h_new


def momentum(m, attrs, r, t, x, g, v):
    alpha, beta, norm = attrs("alpha", 0.0), attrs("beta", 0.0), attrs("norm_coefficient", 0.0)
    mode = attrs("mode", "standard")
    gr = x * norm + g
    v_new = v * alpha + m.where(t > 0.0, gr * beta, gr)  # the first step takes the whole gradient
    if mode == "nesterov":
        x_new = x - r * (gr + v_new * alpha)
    else:
        x_new = x - r * v_new
    return x_new, v_new


def adam(m, attrs, r, t, x, g, v, h):
    alpha, beta = attrs("alpha", 0.9), attrs("beta", 0.999)
    eps, norm, post = attrs("epsilon", 0.0), attrs("norm_coefficient", 0.0), attrs("norm_coefficient_post", 0.0)
    gr = x * norm + g
    v_new = v * alpha + gr * (1.0 - alpha)
    h_new = h * beta + gr * gr * (1.0 - beta)
    # bias correction from the second step on (T > 0)
    corrected = r * m.sqrt(1.0 - m.pow_scalar(beta, t)) / (1.0 - m.pow_scalar(alpha, t))
    rate = m.where(t > 0.0, corrected, r)
    x_new = (x - rate * (v_new / (m.sqrt(h_new) + eps))) * (1.0 - post)
    return x_new, v_new, h_new


def _op(name: str, fn, per: int, n_out: int, modes=None) -> None:
    def check_attrs(ctx, fail):
        mode = ctx.attr("mode", "standard")
        if modes is not None and mode not in modes:
            raise fail(f"mode {mode!r} is not one of {', '.join(modes)}")

    base_infer = _group_infer(per, n_out)

    def infer(ctx: InferCtx):
        check_attrs(ctx, ctx.error)
        return base_infer(ctx)

    def reference(ctx: RefCtx, r, t, *rest):
        n = len(rest) // per
        rr = np.float64(np.asarray(r).reshape(-1)[0])
        tt = np.float64(np.asarray(t).reshape(-1)[0])
        outs: list[list[np.ndarray]] = [[] for _ in range(n_out)]
        for i in range(n):
            args = [np.asarray(rest[g * n + i], dtype=np.float64) for g in range(per)]
            res = fn(NP, ctx.attr, rr, tt, *args)
            for k in range(n_out):
                outs[k].append(np.asarray(res[k]).astype(rest[i].dtype))
        return [a for group in outs for a in group]

    def lower(ctx) -> None:
        check_attrs(ctx, ctx.unsupported)
        r_buf, t_buf, *rest = ctx.inputs
        n = len(rest) // per
        for i in range(n):
            for k in range(n_out):
                y = ctx.out(k * n + i)

                def body(*ix, i=i, k=k, y=y) -> Expr:
                    rr = K.cast(r_buf[(0,) * r_buf.rank], F64)
                    tt = K.cast(t_buf[(0,) * t_buf.rank], F64)
                    args = [K.cast(rest[g * n + i][ix], F64) for g in range(per)]
                    return K.cast(fn(KX, ctx.attr, rr, tt, *args)[k], y.dtype)

                ctx.compute(y, body)

    define(TRAINING + name, infer=infer, reference=reference, lower=lower, kind="opaque",
           arity=(2 + per, None), num_results=None, math=fn)


_op("Adagrad", adagrad, per=3, n_out=2)
_op("Momentum", momentum, per=3, n_out=2, modes=("standard", "nesterov"))
_op("Adam", adam, per=4, n_out=3)
