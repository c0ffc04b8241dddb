"""CausalConvWithState (opset 27): the stateful causal depthwise 1-D convolution of Mamba and
Gated DeltaNet blocks (Concat(past_state, input) -> depthwise Conv -> Slice, fused).

    input [B, C, L], weight [C, 1, k], bias [C]?, past_state [B, C, k-1]? (zeros when absent)
    padded  = concat(past_state, input) along the length   [B, C, L + k - 1]
    output  = act(sum_j weight[c, 0, j] * padded[b, c, l + j] + bias[c])   [B, C, L]
    present_state = the last k - 1 positions of padded      [B, C, k - 1]

act is none, or silu / swish (x * sigmoid(x)), applied to the convolution rounded to the
input's dtype (as the reference does). The lowering never builds `padded`: both results read
past_state or input directly, depending on the position, so the convolution is one compute
(a k-term sum per element that fusion can vectorise along L) and the state one copy.
"""

from __future__ import annotations

import numpy as np
import sympy

from ..ir import DType, TensorType, canon
from ..kernel import Const, cast, rsum, select, sigmoid
from .elementwise import cast_out, kwiden, results_between, widen
from .registry import InferCtx, RefCtx, define, onnx_inputs
from .traits import set_cost

_FLOATS = (DType.f16, DType.bf16, DType.f32)
_ACTS = ("none", "silu", "swish")


def _act(attr, error) -> str:
    act = attr("activation", "none")
    if act not in _ACTS:
        raise error(f"activation must be one of {', '.join(_ACTS)}, got {act!r}")
    return act


def _infer(ctx: InferCtx):
    x, w, bias, past = (onnx_inputs(ctx.op, list(ctx.in_types)) + [None] * 4)[:4]
    _act(ctx.attr, ctx.error)
    if x.dtype not in _FLOATS:
        raise ctx.error(f"input must be float, float16 or bfloat16, got {x.dtype.value}")
    for name, t in (("weight", w), ("bias", bias), ("past_state", past)):
        if t is not None and t.dtype is not x.dtype:
            raise ctx.error(f"{name} must be {x.dtype.value} like input, got {t.dtype.value}")
    if x.rank != 3 or w.rank != 3:
        raise ctx.error(f"input and weight must be 3-D ([B, C, L] and [C, 1, k]), got {x} and {w}")
    b, c, _ = x.shape
    ctx.require_eq(w.shape[0], c, "weight dim 0 vs channels")
    ctx.require_eq(w.shape[1], 1, "weight dim 1 (depthwise)")
    k = w.shape[2]
    ctx.require(sympy.Ge(sympy.sympify(k), 1), "kernel size >= 1")
    state = canon(sympy.sympify(k) - 1)
    if bias is not None:
        if bias.rank != 1:
            raise ctx.error(f"bias must be 1-D [C], got {bias}")
        ctx.require_eq(bias.shape[0], c, "bias length vs channels")
    if past is not None:
        if past.rank != 3:
            raise ctx.error(f"past_state must be 3-D [B, C, k-1], got {past}")
        for i, (d, want) in enumerate(zip(past.shape, (b, c, state), strict=True)):
            ctx.require_eq(d, want, f"past_state dim {i}")
    return [x, TensorType(x.dtype, (b, c, state))][:len(ctx.op.results)]


def causal_conv(x, w, bias, past, act: str, dtype) -> tuple[np.ndarray, np.ndarray]:
    """numpy CausalConvWithState on widened arrays; `dtype` is the dtype results round to."""
    bsz, ch, n = x.shape
    k = w.shape[2]
    if past is None:
        past = np.zeros((bsz, ch, k - 1), x.dtype)
    padded = np.concatenate([past, x], axis=2)
    y = np.zeros((bsz, ch, n), np.float64)
    for j in range(k):
        y += w[None, :, 0, j, None].astype(np.float64) * padded[:, :, j:j + n]
    if bias is not None:
        y += bias[None, :, None]
    y = y.astype(dtype).astype(x.dtype)  # the convolution rounds to the input's dtype first
    if act != "none":
        y = y * (1.0 / (1.0 + np.exp(-y)))
    return y, padded[:, :, n:]


def _ref(ctx: RefCtx, *args):
    x, w, bias, past = (onnx_inputs(ctx.op, list(args)) + [None] * 4)[:4]
    dt = ctx.out_type(0).dtype.np
    y, state = causal_conv(widen(x), widen(w), None if bias is None else widen(bias),
                           None if past is None else widen(past), _act(ctx.attr, ValueError), dt)
    return [cast_out(ctx, y, 0), cast_out(ctx, state, 1)][:len(ctx.op.results)]


def _lower(ctx) -> None:
    x, w, bias, past = (onnx_inputs(ctx.op, list(ctx.inputs)) + [None] * 4)[:4]
    act = _act(ctx.attr, ctx.unsupported)
    k = w.shape[2]
    if not isinstance(k, int):
        raise ctx.unsupported(f"a symbolic kernel size ({k})")
    n = ctx.dim(x.shape[2])
    i64 = DType.i64
    zero = Const(0, i64)
    y = ctx.out(0)

    def padded(b, c, p):
        """padded[b, c, p] without building it: past_state (or 0) left of k - 1, else input."""
        from_x = kwiden(x[b, c, select(p >= k - 1, p - (k - 1), zero)])
        if k == 1:
            return from_x
        head = kwiden(past[b, c, select(p < k - 1, p, zero)]) if past is not None else Const(0.0, DType.f32)
        return select(p < k - 1, head, from_x)

    j = ctx.vars(1, "j")[0]

    def conv(b, c, pos):
        acc = rsum([(j, k)], kwiden(w[c, zero, j]) * padded(b, c, pos + j))
        if bias is not None:
            acc = acc + kwiden(bias[(c,)])
        v = kwiden(cast(acc, y.dtype))  # round to the input's dtype before the activation
        if act != "none":
            v = v * sigmoid(v)
        return cast(v, y.dtype)

    ctx.compute(y, conv)
    if len(ctx.op.results) > 1:
        st = ctx.out(1)
        ctx.compute(st, lambda b, c, s: cast(padded(b, c, s + n), st.dtype))


define("onnx.CausalConvWithState", infer=_infer, reference=_ref, lower=_lower, kind="opaque", arity=(2, 4),
       num_results=None, verify=results_between(1, 2), math=causal_conv)
# k multiply-adds per output element
set_cost(lambda op: 2 * sympy.sympify(op.operands[1].type.shape[2]) * op.results[0].type.numel(),
         "onnx.CausalConvWithState")
