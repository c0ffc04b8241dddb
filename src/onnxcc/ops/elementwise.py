"""Elementwise ONNX ops: unary math and activations, broadcasting binary ops, variadic
Min/Max/Sum/Mean, Where, Cast/CastLike, Clip, Dropout (inference) and PRelu.

Table-driven: `unary(...)` and `binary(...)` turn one math function each into an OpDef.
A math function takes the (f16 -> f32 widened) numpy operands and `attr`, the op's
attribute getter, and returns the result; the factory casts it to the result dtype.
Value rules (`value=`) take the InferCtx and one element per operand (a Dim) and return
the result element or None; they make integer shape arithmetic propagate symbolically
(bool results are tracked as 0/1, so Equal -> Where chains fold too).

Every OpDef here also carries `math`, its numpy math function, for reuse by lowering and
constant folding. The helpers at the top (widen, cast_out, same_dtype, unidirectional,
results_between, map_values) are shared by the other compute families.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import reduce

import numpy as np
import sympy

from ..errors import UnsupportedOp, VerifyError
from ..ir import DType, TensorType, canon
from .dtypes import onnx_dtype
from .registry import InferCtx, RefCtx, define, onnx_inputs

# ---- shared helpers (also used by reduce / matmul / nn) ---------------------------------------


def widen(x: np.ndarray) -> np.ndarray:
    """Compute half precision in float32 (as onnxruntime does), everything else as is."""
    return x.astype(np.float32) if x.dtype == np.float16 else x


def cast_out(ctx: RefCtx, y, i: int = 0) -> np.ndarray:
    """Cast a computed result to result i's dtype."""
    dt = ctx.out_type(i).dtype
    y = np.asarray(y)
    return y if dt is DType.bf16 else y.astype(dt.np, copy=False)


def same_dtype(ctx: InferCtx, indices=None) -> DType:
    """The common dtype of the given operands (all by default); error if they differ."""
    types = [ctx.in_types[i] for i in (indices if indices is not None else range(len(ctx.in_types)))]
    dt = types[0].dtype
    for t in types[1:]:
        if t.dtype is not dt:
            raise ctx.error(f"operand dtypes differ: expected {dt.value}, got {t.dtype.value}")
    return dt


def unidirectional(ctx: InferCtx, target: tuple, src: tuple, what: str) -> None:
    """Check that `src` broadcasts to `target` without changing it (ONNX unidirectional)."""
    if len(src) > len(target):
        raise ctx.error(f"{what}: rank {len(src)} does not broadcast to rank {len(target)}")
    off = len(target) - len(src)
    for i, d in enumerate(src):
        if isinstance(d, int) and d == 1:
            continue
        ctx.require_eq(target[off + i], d, f"{what} dim {i}")


def results_between(lo: int, hi: int) -> Callable:
    """An OpDef.verify for ops with a variable number of results (optional outputs)."""

    def verify(op) -> None:
        if not lo <= len(op.results) <= hi:
            raise VerifyError(f"expects {lo} to {hi} results, got {len(op.results)}", op)

    return verify


def map_values(ctx: InferCtx, fn: Callable, operands) -> list[np.ndarray | None] | None:
    """Apply a per-element value rule over the (broadcast) known values of `operands`."""
    arrays = [ctx.known(i) for i in operands]
    if any(a is None for a in arrays):
        return None
    arrays = np.broadcast_arrays(*[np.asarray(a, dtype=object) for a in arrays])
    out = np.empty(arrays[0].shape, dtype=object)
    for idx in np.ndindex(out.shape):
        v = fn(ctx, *(a[idx] for a in arrays))
        if v is None:
            return None
        out[idx] = canon(v)
    return [out]


def _static(*xs) -> bool:
    return all(isinstance(canon(x), int) for x in xs)


def _nonneg(ctx: InferCtx, x) -> bool:
    return ctx.symbols.prove_le(0, x) is True


def _truth(p) -> int | None:
    return None if p is None else int(bool(p))


# ---- unary -------------------------------------------------------------------------------------


def unary(name: str, fn: Callable, *, out: DType | Callable | None = None, value: Callable | None = None,
          kind: str = "elementwise") -> None:
    """Register onnx.<name>: y = fn(x, attr); `out` fixes the result dtype (or computes it)."""

    def infer(ctx: InferCtx) -> list[TensorType]:
        t = ctx.in_types[0]
        dt = out(ctx) if callable(out) else (out or t.dtype)
        return [t.with_dtype(dt)]

    def reference(ctx: RefCtx, x):
        return [cast_out(ctx, fn(widen(x), ctx.attr))]

    def val(ctx: InferCtx):
        return map_values(ctx, value, [0])

    define(f"onnx.{name}", infer=infer, reference=reference, value=val if value else None,
           kind=kind, arity=1, math=fn)


def _erf(x):
    return np.frompyfunc(math.erf, 1, 1)(x.astype(np.float64)).astype(np.float64)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _softplus(x):
    return np.logaddexp(0, x)


def _gelu(x, attr):
    if attr("approximate", "none") == "tanh":
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def _elu(x, a):
    alpha = float(a("alpha", 1.0))
    return np.where(x < 0, alpha * (np.exp(x) - 1.0), x)


def _selu(x, a):
    alpha = float(a("alpha", 1.67326319217681884765625))
    gamma = float(a("gamma", 1.05070102214813232421875))
    return gamma * np.where(x > 0, x, alpha * np.exp(x) - alpha)


def _celu(x, a):
    alpha = float(a("alpha", 1.0))
    return np.maximum(x, 0) + np.minimum(0, alpha * (np.exp(x / alpha) - 1.0))


def _hard_sigmoid(x, a):
    return np.clip(float(a("alpha", 0.2)) * x + float(a("beta", 0.5)), 0, 1)


def _is_inf(x, a):
    neg, pos = a("detect_negative", 1), a("detect_positive", 1)
    return (np.isposinf(x) & bool(pos)) | (np.isneginf(x) & bool(neg))


def _cast(x, a):
    return x.astype(onnx_dtype(a("to")).np)


def _cast_value(ctx: InferCtx, v):
    to = onnx_dtype(ctx.attr("to"))
    if to is DType.bool:
        p = ctx.symbols.prove_eq(v, 0)
        return None if p is None else int(not p)
    return v if to.is_int else None


def _cast_to(ctx: InferCtx) -> DType:
    try:
        return onnx_dtype(ctx.attr("to"))
    except ValueError as e:
        raise ctx.error(f"attribute 'to': {e}") from None


def _abs_value(ctx, v):
    return v if _nonneg(ctx, v) else (abs(canon(v)) if _static(v) else sympy.Abs(v))


def _relu_value(ctx, v):
    return v if _nonneg(ctx, v) else sympy.Max(v, 0)


def _sign_value(ctx, v):
    s = canon(sympy.sign(v))
    return s if isinstance(s, int) else None


_NOATTR = {
    "Neg": np.negative, "Abs": np.abs, "Sqrt": np.sqrt, "Reciprocal": np.reciprocal, "Exp": np.exp,
    "Log": np.log, "Tanh": np.tanh, "Sigmoid": _sigmoid, "Floor": np.floor, "Ceil": np.ceil,
    "Round": np.round, "Sign": np.sign, "Sin": np.sin, "Cos": np.cos, "Tan": np.tan, "Asin": np.arcsin,
    "Acos": np.arccos, "Atan": np.arctan, "Sinh": np.sinh, "Cosh": np.cosh, "Asinh": np.arcsinh,
    "Acosh": np.arccosh, "Atanh": np.arctanh, "Softplus": _softplus,
    "Softsign": lambda x: x / (1 + np.abs(x)), "Relu": lambda x: np.maximum(x, 0),
    "Mish": lambda x: x * np.tanh(_softplus(x)), "Erf": _erf, "BitwiseNot": np.invert,
}
_VALUE_RULES = {"Neg": lambda ctx, v: -v, "Abs": _abs_value, "Relu": _relu_value, "Sign": _sign_value}

for _n, _f in _NOATTR.items():
    unary(_n, (lambda f: lambda x, attr: f(x))(_f), value=_VALUE_RULES.get(_n))

unary("Gelu", _gelu)
unary("Elu", _elu)
unary("Selu", _selu)
unary("Celu", _celu)
unary("LeakyRelu", lambda x, a: np.where(x < 0, float(a("alpha", 0.01)) * x, x))
unary("ThresholdedRelu", lambda x, a: np.where(x > float(a("alpha", 1.0)), x, 0))
unary("HardSigmoid", _hard_sigmoid)
unary("HardSwish", lambda x, a: x * np.clip(x / 6.0 + 0.5, 0, 1))
unary("IsNaN", lambda x, a: np.isnan(x), out=DType.bool)
unary("IsInf", _is_inf, out=DType.bool)
unary("Not", lambda x, a: np.logical_not(x), value=lambda ctx, v: _truth(None if not _static(v) else not v))
unary("Identity", lambda x, a: x, value=lambda ctx, v: v)
unary("Cast", _cast, out=_cast_to, value=_cast_value)


# ---- binary (numpy broadcasting) -----------------------------------------------------------------


def binary(name: str, fn: Callable, *, out: DType | None = None, value: Callable | None = None,
           kind: str = "broadcast", check_dtypes: bool = True) -> None:
    """Register onnx.<name>: y = fn(a, b, attr) with multidirectional broadcasting."""

    def infer(ctx: InferCtx) -> list[TensorType]:
        dt = same_dtype(ctx) if check_dtypes else ctx.in_types[0].dtype
        shape = ctx.broadcast(ctx.in_types[0].shape, ctx.in_types[1].shape)
        return [TensorType(out or dt, shape)]

    def reference(ctx: RefCtx, a, b):
        return [cast_out(ctx, fn(widen(a), widen(b), ctx.attr))]

    def val(ctx: InferCtx):
        return map_values(ctx, value, [0, 1])

    define(f"onnx.{name}", infer=infer, reference=reference, value=val if value else None,
           kind=kind, arity=2, math=fn)


def int_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """ONNX integer Div: the quotient truncated toward zero (C semantics)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.floor_divide(a, b)
        fix = (np.remainder(a, b) != 0) & ((a < 0) != (b < 0))
    return q + fix.astype(q.dtype)


def _div(a, b, attr):
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":
        return int_div(a, b)
    return a / b


def _div_value(ctx, a, b):
    if _static(a, b):
        a, b = canon(a), canon(b)
        return None if b == 0 else int_div(np.int64(a), np.int64(b)).item()
    if _nonneg(ctx, a) and ctx.symbols.prove_le(1, b) is True:
        return sympy.floor(sympy.sympify(a) / b)
    return None


def _mod(a, b, attr):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.fmod(a, b) if attr("fmod", 0) else np.mod(a, b)


def _mod_value(ctx, a, b):
    if _static(b) and canon(b) == 0:
        return None
    if ctx.attr("fmod", 0) and not (_nonneg(ctx, a) and _nonneg(ctx, b)):
        return None
    return sympy.Mod(a, b)


def _pow(a, b, attr):
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":
        return np.power(a, b.astype(a.dtype))
    if a.dtype.kind in "iu":  # integer base, float exponent: compute in double, cast back
        return np.power(a.astype(np.float64), b)
    return np.power(a, b.astype(a.dtype))


def _bitshift(a, b, attr):
    b = b.astype(a.dtype)
    return np.left_shift(a, b) if attr("direction") == "LEFT" else np.right_shift(a, b)


def _cmp(prove: Callable):
    return lambda ctx, a, b: _truth(prove(ctx.symbols, a, b))


binary("Add", lambda a, b, t: a + b, value=lambda ctx, a, b: a + b)
binary("Sub", lambda a, b, t: a - b, value=lambda ctx, a, b: a - b)
binary("Mul", lambda a, b, t: a * b, value=lambda ctx, a, b: a * b)
binary("Div", _div, value=_div_value)
binary("Mod", _mod, value=_mod_value)
binary("Pow", _pow, check_dtypes=False)
binary("Equal", lambda a, b, t: a == b, out=DType.bool, value=_cmp(lambda s, a, b: s.prove_eq(a, b)))
binary("Less", lambda a, b, t: a < b, out=DType.bool, value=_cmp(lambda s, a, b: s.prove_le(a, b - 1)))
binary("Greater", lambda a, b, t: a > b, out=DType.bool, value=_cmp(lambda s, a, b: s.prove_le(b, a - 1)))
binary("LessOrEqual", lambda a, b, t: a <= b, out=DType.bool, value=_cmp(lambda s, a, b: s.prove_le(a, b)))
binary("GreaterOrEqual", lambda a, b, t: a >= b, out=DType.bool,
       value=_cmp(lambda s, a, b: s.prove_le(b, a)))
binary("And", lambda a, b, t: np.logical_and(a, b), out=DType.bool,
       value=lambda ctx, a, b: int(bool(a) and bool(b)) if _static(a, b) else None)
binary("Or", lambda a, b, t: np.logical_or(a, b), out=DType.bool,
       value=lambda ctx, a, b: int(bool(a) or bool(b)) if _static(a, b) else None)
binary("Xor", lambda a, b, t: np.logical_xor(a, b), out=DType.bool,
       value=lambda ctx, a, b: int(bool(a) != bool(b)) if _static(a, b) else None)
binary("BitShift", _bitshift)
binary("BitwiseAnd", lambda a, b, t: np.bitwise_and(a, b))
binary("BitwiseOr", lambda a, b, t: np.bitwise_or(a, b))
binary("BitwiseXor", lambda a, b, t: np.bitwise_xor(a, b))


# ---- PRelu: slope broadcasts to X (unidirectional) ---------------------------------------------


def prelu(x, slope):
    return np.where(x < 0, slope * x, x)


def _prelu_infer(ctx: InferCtx):
    dt = same_dtype(ctx)
    unidirectional(ctx, ctx.in_types[0].shape, ctx.in_types[1].shape, "slope")
    return [ctx.in_types[0].with_dtype(dt)]


define("onnx.PRelu", infer=_prelu_infer, kind="broadcast", arity=2, math=prelu,
       reference=lambda ctx, x, s: [cast_out(ctx, prelu(widen(x), widen(s)))])


# ---- variadic Min / Max / Sum / Mean -----------------------------------------------------------


def variadic(name: str, combine: Callable, *, mean: bool = False, value: Callable | None = None) -> None:
    def infer(ctx: InferCtx):
        dt = same_dtype(ctx)
        return [TensorType(dt, ctx.broadcast(*(t.shape for t in ctx.in_types)))]

    def reference(ctx: RefCtx, *xs):
        y = reduce(combine, [widen(x) for x in xs])
        return [cast_out(ctx, y / len(xs) if mean else y)]

    def val(ctx: InferCtx):
        return map_values(ctx, lambda c, *vs: reduce(value, vs), range(len(ctx.in_types)))

    define(f"onnx.{name}", infer=infer, reference=reference, value=val if value else None,
           kind="broadcast", arity=(1, None), math=combine)


variadic("Min", np.minimum, value=sympy.Min)
variadic("Max", np.maximum, value=sympy.Max)
variadic("Sum", np.add, value=lambda a, b: a + b)
variadic("Mean", np.add, mean=True)


# ---- Where ---------------------------------------------------------------------------------------


def _where_infer(ctx: InferCtx):
    if ctx.in_types[0].dtype is not DType.bool:
        raise ctx.error(f"condition must be bool, got {ctx.in_types[0].dtype.value}")
    dt = same_dtype(ctx, [1, 2])
    return [TensorType(dt, ctx.broadcast(*(t.shape for t in ctx.in_types)))]


def _where_value(ctx: InferCtx):
    if ctx.known_ints(0) is None:  # the condition must be decided (0/1) everywhere
        return None
    return map_values(ctx, lambda _, c, x, y: x if c else y, [0, 1, 2])


define("onnx.Where", infer=_where_infer, value=_where_value, kind="broadcast", arity=3, math=np.where,
       reference=lambda ctx, c, x, y: [cast_out(ctx, np.where(c, x, y))])


# ---- CastLike, Clip, Dropout ---------------------------------------------------------------------

define("onnx.CastLike", kind="broadcast", arity=2,
       infer=lambda ctx: [ctx.in_types[0].with_dtype(ctx.in_types[1].dtype)],
       reference=lambda ctx, x, like: [cast_out(ctx, x)],
       value=lambda ctx: map_values(ctx, lambda _, v: v, [0]) if ctx.in_types[1].dtype.is_int else None)


def clip(x, lo=None, hi=None):
    """ONNX Clip: where min > max every element becomes max."""
    if lo is not None:
        x = np.maximum(x, lo)
    if hi is not None:
        x = np.minimum(x, hi)
    return x


def _clip_bounds(op_attr, items: list) -> tuple:
    """(min, max) as operands (opset >= 11) or attributes (older); None when absent."""
    lo, hi = (items + [None, None])[1:3]
    if lo is None and op_attr("min") is not None:
        lo = op_attr("min")
    if hi is None and op_attr("max") is not None:
        hi = op_attr("max")
    return lo, hi


def _clip_infer(ctx: InferCtx):
    items = onnx_inputs(ctx.op, list(ctx.in_types))
    for name, t in zip(("min", "max"), items[1:]):
        if t is not None and t.rank != 0 and t.shape != (1,):
            raise ctx.error(f"{name} must be a scalar, got shape {t}")
    same_dtype(ctx)
    return [ctx.in_types[0]]


def _clip_ref(ctx: RefCtx, *args):
    lo, hi = _clip_bounds(ctx.attr, onnx_inputs(ctx.op, list(args)))
    x = widen(args[0])
    return [cast_out(ctx, clip(x, *(None if v is None else np.asarray(v).reshape(()) for v in (lo, hi))))]


def _clip_value(ctx: InferCtx):
    idx = (onnx_inputs(ctx.op, list(range(len(ctx.in_types)))) + [None, None])[1:3]
    bounds = [None if i is None else ctx.known(i) for i in idx]
    if any(i is not None and b is None for i, b in zip(idx, bounds)):
        return None
    lo, hi = (None if b is None else b.reshape(-1)[0] for b in bounds)

    def rule(_, v):
        v = v if lo is None else sympy.Max(v, lo)
        return v if hi is None else sympy.Min(v, hi)

    return map_values(ctx, rule, [0])


define("onnx.Clip", infer=_clip_infer, reference=_clip_ref, value=_clip_value, kind="broadcast",
       arity=(1, 3), math=clip)


def _dropout_infer(ctx: InferCtx):
    t = ctx.in_types[0]
    return [t, t.with_dtype(DType.bool)][: len(ctx.op.results)]


def _dropout_ref(ctx: RefCtx, *args):
    x, ratio, training = (onnx_inputs(ctx.op, list(args)) + [None, None])[:3]
    if training is not None and bool(np.asarray(training).reshape(-1)[0]) and \
            (ratio is None or float(np.asarray(ratio).reshape(-1)[0]) != 0):
        raise UnsupportedOp("Dropout", "", ctx.op.loc, "training_mode true (random masking) is not supported")
    # inference: the output is the input, the mask all true
    return [x, np.ones(x.shape, dtype=bool)][: len(ctx.op.results)]


define("onnx.Dropout", infer=_dropout_infer, reference=_dropout_ref, kind="elementwise", arity=(1, 3),
       num_results=None, verify=results_between(1, 2))
