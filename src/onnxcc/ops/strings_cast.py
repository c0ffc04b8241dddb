"""Cast (and CastLike) to and from strings: what the spec defines, and nothing it leaves open.

  str -> float types   plain and scientific literals ("3.14", "-1e-5", "1E8") and, in any
                       case, "INF", "+INF", "-INF", "NaN"; parsed to f32 (f64 for f64) and
                       converted from there, as onnxruntime does
  str -> integer types decimal integer literals ("-12", "+7") inside the type's range
  integers -> str      decimal ("-12")
  refused              anything else the spec calls undefined or leaves open: a string that is
                       not such a literal (a run-time error naming the element), "2.5" to an
                       integer, a value outside the target's range, whitespace around a literal,
                       and floats or bools to strings (no formatting is specified that runtimes
                       share)

Native: a runtime call parses or formats (runtime/onnxcc_strings.c), an ordinary compute
converts between the parsed type and the target.
"""

from __future__ import annotations

import re

import numpy as np

from .. import kernel as K
from ..errors import UnsupportedOp
from ..ir import DType
from ..kernel import CallStmt

S = DType.string
_FLOAT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_INT = re.compile(r"[+-]?\d+")
_SPECIAL = {"inf": np.inf, "+inf": np.inf, "-inf": -np.inf, "nan": np.nan}


def string_cast_problem(src: DType, to: DType) -> str | None:
    """Why Cast src -> to is refused, or None when the module docstring accepts it."""
    if src is S and to is not S and (to.is_small or not (to.is_float or to.is_int)):
        return f"casts from strings to {to.value} are not supported"
    if to is S and src is not S and (src.is_small or not src.is_int):
        return (f"casts from {src.value} to strings are not supported (the spec fixes no formatting runtimes "
                "share; integers are)")
    return None


def _parse(s: str, to: DType):
    if to.is_float:
        if s.lower() in _SPECIAL:
            return _SPECIAL[s.lower()]
        if not _FLOAT.fullmatch(s):
            raise ValueError(f"Cast: {s!r} is not a number literal")
        with np.errstate(over="ignore"):  # the double rounded to f32 (inf past its range), as the runtime
            return float(float(s) if to is DType.f64 else np.float32(float(s)))
    if not _INT.fullmatch(s):
        raise ValueError(f"Cast: {s!r} is not an integer literal")
    v = int(s)
    info = np.iinfo(to.np)
    if not max(info.min, -(2 ** 63)) <= v <= min(info.max, 2 ** 63 - 1):
        raise ValueError(f"Cast: {s!r} is outside the range of {to.value}")
    return v


def cast_strings(x: np.ndarray, to: DType) -> np.ndarray:
    """The reference of a Cast with strings on either side."""
    x = np.asarray(x)
    src = DType.string if x.dtype == object else DType.from_np(x.dtype)
    problem = string_cast_problem(src, to)
    if problem is not None:
        raise UnsupportedOp("Cast", "", "", problem)
    if to is S:
        return np.asarray(np.frompyfunc(lambda v: str(int(v)), 1, 1)(x), dtype=object).reshape(x.shape)
    flat = [_parse(str(s), to) for s in x.reshape(-1)]
    mid = np.float64 if to is DType.f64 else np.float32 if to.is_float else np.int64
    with np.errstate(over="ignore"):  # "1e39" to f32 or f16: inf, as the runtime has it
        return np.asarray(flat, dtype=mid).reshape(x.shape).astype(to.np)


def lower_string_cast(ctx) -> None:
    x, y = ctx.inputs[0], ctx.out(0)
    problem = string_cast_problem(x.dtype, y.dtype)
    if problem is not None:
        raise ctx.unsupported(problem)
    n = 1
    for d in x.shape:
        n = n * d
    n = K.dim_to_expr(n)
    if y.dtype is S:  # integers -> decimal text, through i64 (u64: its bits, read unsigned)
        wide = ctx.temp(DType.i64, x.shape, "wide")
        ctx.compute(wide, lambda *ix: K.cast(x[ix], DType.i64))
        unsigned = K.Const(int(x.dtype is DType.u64), DType.i64)
        ctx.program.body.append(CallStmt("onnxcc_str_from_int", (n, unsigned), (wide.name, y.name), (y.name,)))
        return
    if y.dtype.is_float:
        mid_dt = DType.f64 if y.dtype is DType.f64 else DType.f32
        mid = ctx.temp(mid_dt, x.shape, "parsed")
        wide_flag = K.Const(int(mid_dt is DType.f64), DType.i64)
        ctx.program.body.append(CallStmt("onnxcc_str_to_float", (n, wide_flag), (x.name, mid.name), (mid.name,)))
    else:
        info = np.iinfo(y.dtype.np)
        lo, hi = max(int(info.min), -(2 ** 63)), min(int(info.max), 2 ** 63 - 1)
        mid = ctx.temp(DType.i64, x.shape, "parsed")
        ctx.program.body.append(CallStmt("onnxcc_str_to_int", (n, K.Const(lo, DType.i64), K.Const(hi, DType.i64)),
                                         (x.name, mid.name), (mid.name,)))
    ctx.compute(y, lambda *ix: K.cast(mid[ix], y.dtype))


__all__ = ["cast_strings", "lower_string_cast", "string_cast_problem"]
