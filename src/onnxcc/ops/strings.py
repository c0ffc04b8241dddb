"""The string ops: Equal on strings, StringConcat, RegexFullMatch, and LabelEncoder's string
tables (ml.py calls `lower_label_strings`).

String elements are `const char *` in memory (DType.string, 64 bits; codegen/c/strings.py
has the ABI). The numeric part of a lowering stays ordinary computes (broadcasting copies
pointers, a table's numeric values are gathered from a const buffer); the string work is
one `CallStmt` into runtime/onnxcc_strings.c. Tables and patterns travel as u8 const buffers
of NUL-terminated UTF-8 plus an i64 buffer of where each string starts, so strings picked
from them point into the library's constants (valid while it is loaded).

Ops that only move elements (Identity, Reshape, Concat, Gather, Slice, Transpose, ...) take
strings through their ordinary lowerings: a load and a store of a string element move its
pointer. They are marked here (`OpDef.strings`), where the reason for the mark lives.
"""

from __future__ import annotations

import re

import numpy as np

from .. import kernel as K
from ..errors import UnsupportedOp
from ..ir import DType, TensorType, canon
from ..kernel import Buffer, CallStmt, dim_to_expr
from .registry import InferCtx, RefCtx, define, get_opdef
from .strings_cast import lower_string_cast
from .strings_regex import PatternError, translate

S = DType.string

#: ops whose lowerings only load and store elements (or make views), so strings pass as pointers
MOVES_ELEMENTS = ("Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Concat", "Split",
                  "Slice", "Gather", "GatherElements", "GatherND", "Expand", "Tile", "Where",
                  # these read only the dims
                  "Shape", "Size")


def _numel(shape) -> K.Expr:
    n = 1
    for d in shape:
        n = canon(n * d)
    return dim_to_expr(n)


def broadcast_to(ctx, buf: Buffer, shape) -> Buffer:
    """`buf` stretched numpy-style to `shape` (a copy of its pointers when it differs)."""
    shape = tuple(canon(d) for d in shape)
    if tuple(buf.shape) == shape:
        return buf
    t = ctx.temp(buf.dtype, shape, "bcast")
    ctx.compute(t, lambda *ix: buf[K.broadcast_indices(ix, buf.shape)])
    return t


def string_table(ctx, strings, what: str) -> tuple[Buffer, Buffer]:
    """(u8 blob of the strings NUL-terminated, i64 start of each) as const buffers."""
    data, starts = bytearray(), []
    for s in strings:
        b = str(s).encode("utf-8")
        if b"\0" in b:
            raise ctx.unsupported(f"{what} holds a NUL character, which C strings cannot carry")
        starts.append(len(data))
        data += b + b"\0"
    return (ctx.const(np.frombuffer(bytes(data), np.uint8).copy(), "strs"),
            ctx.const(np.asarray(starts, np.int64), "starts"))


def _call(ctx, fn: str, sizes, buffers, outs) -> None:
    ctx.program.body.append(CallStmt(fn, tuple(sizes), tuple(b.name for b in buffers), tuple(b.name for b in outs)))


def _str_operands(ctx) -> tuple[Buffer, Buffer, Buffer]:
    y = ctx.out(0)
    return broadcast_to(ctx, ctx.inputs[0], y.shape), broadcast_to(ctx, ctx.inputs[1], y.shape), y


def _binary_infer(ctx: InferCtx, out: DType) -> list[TensorType]:
    a, b = ctx.in_types
    if a.dtype is not S or b.dtype is not S:
        raise ctx.error(f"takes two string tensors, got {a.dtype.value} and {b.dtype.value}")
    return [TensorType(out, ctx.broadcast(a.shape, b.shape))]


def _objects(fn, *arrays) -> np.ndarray:
    return np.asarray(np.frompyfunc(fn, len(arrays), 1)(*arrays), dtype=object)


# ---- Equal on strings -------------------------------------------------------------------------

def lower_string_equal(ctx) -> None:
    a, b, y = _str_operands(ctx)
    _call(ctx, "onnxcc_str_equal", [_numel(y.shape)], [a, b, y], [y])


def _with_strings(name: str, lower_strings) -> None:
    """onnx.<name>'s lowering, with a string path: string operands or results go to `lower_strings`."""
    d = get_opdef(f"onnx.{name}")
    if d is None or getattr(d, "_string_path", False):
        return
    numeric = d.lower

    def lower(ctx) -> None:
        if S in (ctx.in_type(0).dtype, ctx.out_type(0).dtype):
            lower_strings(ctx)
        else:
            numeric(ctx)

    d.lower = lower  # type: ignore[method-assign]
    d.strings = True
    d._string_path = True  # type: ignore[attr-defined]


# ---- StringConcat (opset 20) ------------------------------------------------------------------

def _concat_lower(ctx) -> None:
    a, b, y = _str_operands(ctx)
    _call(ctx, "onnxcc_str_concat", [_numel(y.shape)], [a, b, y], [y])


define("onnx.StringConcat", infer=lambda ctx: _binary_infer(ctx, S),
       reference=lambda ctx, a, b: [_objects(lambda x, z: str(x) + str(z), a, b)],
       lower=_concat_lower, kind="broadcast", arity=2, numpy_broadcast=True, strings=True)


# ---- RegexFullMatch (opset 20) ----------------------------------------------------------------

def _pattern(ctx, fail):
    p = ctx.attr("pattern")
    if not isinstance(p, str):
        raise fail("needs the string attribute `pattern`")
    try:
        return translate(p)
    except PatternError as e:
        raise fail(f"pattern: {e}") from None


def _unsupported(ctx):
    return lambda msg: UnsupportedOp(ctx.op.opname, ctx.op.dialect, ctx.op.loc, msg)


def _regex_infer(ctx: InferCtx) -> list[TensorType]:
    x = ctx.in_types[0]
    if x.dtype is not S:
        raise ctx.error(f"X is {x.dtype.value}, expected str")
    if not isinstance(ctx.attr("pattern"), str):
        raise ctx.error("needs the string attribute `pattern`")
    return [x.with_dtype(DType.bool)]


def _regex_ref(ctx: RefCtx, x):
    # a pattern outside the translatable subset: refused here too (Python's `re` is not RE2)
    pat = re.compile(_pattern(ctx, _unsupported(ctx)).python, re.ASCII)
    return [np.vectorize(lambda s: pat.fullmatch(str(s)) is not None, otypes=[np.bool_])(x).reshape(x.shape)]


def _regex_lower(ctx) -> None:
    t = _pattern(ctx, ctx.unsupported)
    x, y = ctx.inputs[0], ctx.out(0)
    pattern = ctx.const(np.frombuffer(t.posix.encode() + b"\0", np.uint8).copy(), "pattern")
    _call(ctx, "onnxcc_str_regex_full_match", [_numel(y.shape), K.Const(int(t.byte_sensitive), DType.i64)],
          [x, pattern, y], [y])


define("onnx.RegexFullMatch", infer=_regex_infer, reference=_regex_ref, lower=_regex_lower,
       kind="elementwise", arity=1, strings=True)


# ---- LabelEncoder's string tables -----------------------------------------------------------------

def string_ids(ctx, x: Buffer, keys: list) -> Buffer:
    """An i64 temp of x's shape: each element's position in `keys` (distinct strings), else -1.
    The keys go in strcmp order (their UTF-8 bytes) for a binary search: vocabularies can be large."""
    idx = ctx.temp(DType.i64, x.shape, "key")
    order = sorted(range(len(keys)), key=lambda k: str(keys[k]).encode("utf-8"))
    blob, starts = string_table(ctx, [keys[k] for k in order], "a key")
    slots = ctx.const(np.asarray(order, np.int64), "slots")
    _call(ctx, "onnxcc_str_index", [_numel(x.shape), K.Const(len(keys), DType.i64)], [x, blob, starts, slots, idx],
          [idx])
    return idx


def lower_label_strings(ctx, keys: np.ndarray, vdt: DType, vals: np.ndarray, default) -> None:
    """y = vals[k] where x == keys[k], else default, with string keys or values (or both):
    the key's position by a runtime lookup (string keys) or a select chain (numeric keys),
    the value by a gather (numeric values) or a runtime pick (string values)."""
    x, y = ctx.inputs[0], ctx.out(0)
    n = _numel(x.shape)
    if x.dtype is S:
        idx = string_ids(ctx, x, keys.tolist())
    else:
        idx = ctx.temp(DType.i64, x.shape, "key")

        def find(*ix):
            xv = x[ix]
            e: K.Expr = K.Const(-1, DType.i64)
            for k, key in enumerate(keys.tolist()):
                hit = K.unary("isnan", xv) if isinstance(key, float) and np.isnan(key) else xv.eq(key)
                e = K.select(hit, K.Const(k, DType.i64), e)
            return e

        ctx.compute(idx, find)
    if vdt is S:
        blob, starts = string_table(ctx, [*vals.tolist(), default], "a value")
        _call(ctx, "onnxcc_str_pick", [n, K.Const(len(vals), DType.i64)], [idx, blob, starts, y], [y])
        return
    table = ctx.const(vals.astype(vdt.np), "values")

    def pick(*ix):
        k = idx[ix]
        return K.select(k >= 0, table[(K.maximum(k, 0),)], K.Const(default, vdt))

    ctx.compute(y, pick)


# ---- ops that move elements take strings ------------------------------------------------------------

def mark_string_ops() -> None:
    """Mark the registered ops that take strings (ops/__init__.py calls it once every family
    is registered)."""
    for name in MOVES_ELEMENTS:
        d = get_opdef(f"onnx.{name}")
        if d is not None:
            d.strings = True
    _with_strings("Equal", lower_string_equal)
    for name in ("Cast", "CastLike"):
        _with_strings(name, _lower_cast_strings)


def _lower_cast_strings(ctx) -> None:
    if ctx.in_type(0).dtype is ctx.out_type(0).dtype:  # str -> str: the value itself
        ctx.alias(0, 0)
        return
    lower_string_cast(ctx)


__all__ = ["MOVES_ELEMENTS", "broadcast_to", "lower_label_strings", "lower_string_equal", "mark_string_ops",
           "string_ids", "string_table"]
