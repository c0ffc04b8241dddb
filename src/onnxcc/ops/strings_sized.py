"""The string ops whose result size the data decides: StringNormalizer (stopwords removed)
and StringSplit (as many columns as the most substrings of any element).

Each such dim is a run-time symbol (data_dependent.py's `count_symbol`): a first runtime call
computes what decides it, the lowering binds the symbol right there (`bind_symbol`), and a
second call writes the result compact in its true shape, inside an allocation made for the
bound. StringSplit's column count is bounded by `maxsplit` + 1 where that is given; without it
nothing in the model bounds it, so the build allocates for SPLIT_CAP columns, or for the
symbol's upper bound where `--dim NAME=1:N` narrowed it, and a call whose input splits into
more fails with a message saying so (never a cut result).

Text rules, native: case changes and case-insensitive comparisons fold ASCII letters only;
splitting at whitespace (no delimiter) takes text whose only whitespace is spaces: the spec
(and the reference here, Python's str.split) splits at any whitespace, onnxruntime at spaces
only, so text with tabs or newlines is refused natively rather than given either answer. An element
where the ASCII-only rule could answer differently (a non-ASCII byte there) is refused at run
time with a message, never changed partly. Locales: any but Turkish and Azeri (tr, az),
whose i/I case mapping differs from ASCII's, which are refused.
"""

from __future__ import annotations

import numpy as np

from .. import kernel as K
from ..errors import UnsupportedOp
from ..ir import DType, TensorType
from ..ir.dims import INT_MAX
from ..kernel import CallStmt
from .data_dependent import count_symbol
from .registry import InferCtx, RefCtx, define
from .strings import string_table

S = DType.string
#: StringSplit's columns without maxsplit or --dim (each element of the input costs this many
#: pointers of the output's allocation)
SPLIT_CAP = 32
_ACTIONS = {"NONE": 0, "LOWER": 1, "UPPER": 2}


def _numel(shape) -> K.Expr:
    n = 1
    for d in shape:
        n = n * d
    return K.dim_to_expr(n)


def _call(ctx, fn: str, sizes, buffers, outs) -> None:
    ctx.program.body.append(CallStmt(fn, tuple(sizes), tuple(b.name for b in buffers), tuple(b.name for b in outs)))


def _i64(v: int) -> K.Expr:
    return K.Const(int(v), DType.i64)


def _unsupported(ctx):
    return lambda msg: UnsupportedOp(ctx.op.opname, ctx.op.dialect, ctx.op.loc, msg)


# ---- StringNormalizer (opset 10) --------------------------------------------------------------------

def _norm_attrs(ctx, fail) -> tuple[int, bool, list[str]]:
    """(case action, case sensitive, stopwords), checked."""
    action = ctx.attr("case_change_action", "NONE")
    if action not in _ACTIONS:
        raise fail(f"case_change_action must be one of {', '.join(_ACTIONS)}, got {action!r}")
    locale = str(ctx.attr("locale", "") or "")
    if locale.lower().startswith(("tr", "az")):
        raise fail(f"locale {locale!r}: its i/I case mapping is not ASCII's, which is all onnxcc folds")
    stops = [str(w) for w in (ctx.attr("stopwords") or [])]
    sensitive = bool(ctx.attr("is_case_sensitive", 0))
    return _ACTIONS[action], sensitive, stops


def _norm_infer(ctx: InferCtx) -> list[TensorType]:
    x = ctx.in_types[0]
    if x.dtype is not S:
        raise ctx.error(f"X is {x.dtype.value}, expected str")
    if x.rank not in (1, 2) or (x.rank == 2 and x.shape[0] != 1):
        raise ctx.error(f"X must be [C] or [1, C], got {x}")
    _norm_attrs(ctx, ctx.error)
    width = x.shape[-1]
    n = count_symbol(ctx, "kept", "count of the strings StringNormalizer keeps (data-dependent)",
                     max(width, 1) if isinstance(width, int) else width, 0, x.rank - 1)
    return [TensorType(S, (*x.shape[:-1], n))]


def _norm_ref(ctx: RefCtx, x):
    action, sensitive, stops = _norm_attrs(ctx, _unsupported(ctx))

    def key(s: str) -> str:
        return s if sensitive else s.lower()

    drop = {key(w) for w in stops}
    kept = [str(s) for s in x.reshape(-1) if key(str(s)) not in drop]
    kept = [s.lower() if action == 1 else s.upper() if action == 2 else s for s in kept] or [""]
    out = np.array(kept, dtype=object)
    return [out.reshape(1, -1) if x.ndim == 2 else out]


def _norm_lower(ctx) -> None:
    action, sensitive, stops = _norm_attrs(ctx, ctx.unsupported)
    if not sensitive and any(ord(c) > 127 for w in stops for c in w):
        raise ctx.unsupported("a non-ASCII stopword compared case-insensitively (onnxcc folds ASCII only)")
    x, y = ctx.inputs[0], ctx.out(0)
    n = _numel(x.shape)
    keep = ctx.temp(DType.i64, x.shape, "keep")
    blob, starts = string_table(ctx, stops or [""], "a stopword")
    _call(ctx, "onnxcc_str_keep", [n, _i64(len(stops)), _i64(sensitive)], [x, blob, starts, keep], [keep])
    count = ctx.temp(DType.i64, (), "kept")
    m = K.Var(f"m_{count.name}")
    ctx.compute(count, K.rsum([(m, x.shape[-1])], keep[(*([0] * (x.rank - 1)), m)]))
    # none kept: one empty string (the spec's output for that case)
    ctx.lowerer.bind_symbol(ctx.op, str(ctx.out_type(0).shape[-1]), max(x.shape[-1], 1)
                            if isinstance(x.shape[-1], int) else x.shape[-1], K.maximum(count[()], 1))
    _call(ctx, "onnxcc_str_normalize", [n, _i64(action)], [x, keep, y], [y])


define("onnx.StringNormalizer", infer=_norm_infer, reference=_norm_ref, lower=_norm_lower, arity=1,
       strings=True)


# ---- StringSplit (opset 20) -----------------------------------------------------------------------------

def _split_attrs(ctx) -> tuple[str, int | None]:
    delim = ctx.attr("delimiter")
    maxsplit = ctx.attr("maxsplit")
    return ("" if delim is None else str(delim)), (None if maxsplit is None else int(maxsplit))


def _split_infer(ctx: InferCtx) -> list[TensorType]:
    x = ctx.in_types[0]
    if x.dtype is not S:
        raise ctx.error(f"X is {x.dtype.value}, expected str")
    _, maxsplit = _split_attrs(ctx)
    if maxsplit is not None and maxsplit < 0:
        raise ctx.error(f"maxsplit must be >= 0, got {maxsplit}")
    m = count_symbol(ctx, "splits", "most substrings of any element of StringSplit's input (data-dependent)",
                     None if maxsplit is None else maxsplit + 1, 0, x.rank)
    return [TensorType(S, (*x.shape, m)), TensorType(DType.i64, x.shape)]


def _split_ref(ctx: RefCtx, x):
    delim, maxsplit = _split_attrs(ctx)
    # an empty element has no substrings (onnxruntime's answer; Python's "".split("-") is [""])
    parts = [str(s).split(delim or None, -1 if maxsplit is None else maxsplit) if str(s) else []
             for s in x.reshape(-1)]
    counts = np.array([len(p) for p in parts], dtype=np.int64).reshape(x.shape)
    width = max((len(p) for p in parts), default=0)
    y = np.empty((len(parts), width), dtype=object)
    for k, p in enumerate(parts):
        y[k] = p + [""] * (width - len(p))
    return [y.reshape(*x.shape, width), counts]


def _split_lower(ctx) -> None:
    delim, maxsplit = _split_attrs(ctx)
    x, y, z = ctx.inputs[0], ctx.out(0), ctx.out(1)
    name = str(ctx.out_type(0).shape[-1])
    if maxsplit is not None:
        bound = maxsplit + 1
    else:  # the symbol's range, where --dim narrowed it, else the cap
        hi = ctx.lowerer.module.symbols[name].hi
        bound = hi if hi < INT_MAX else SPLIT_CAP
    n = _numel(x.shape)
    d = ctx.const(np.frombuffer(delim.encode("utf-8") + b"\0", np.uint8).copy(), "delim")
    if "\0" in delim:
        raise ctx.unsupported("the delimiter holds a NUL character, which C strings cannot carry")
    most = ctx.temp(DType.i64, (), "most")
    ms = _i64(-1 if maxsplit is None else maxsplit)
    sym = ctx.const(np.frombuffer(name.encode() + b"\0", np.uint8).copy(), "symbol")  # for the message
    _call(ctx, "onnxcc_str_split_count", [n, ms, _i64(bound)], [x, d, z, most, sym], [z, most])
    ctx.lowerer.bind_symbol(ctx.op, name, bound, most[()])
    _call(ctx, "onnxcc_str_split", [n, ms, K.dim_to_expr(ctx.out_type(0).shape[-1])], [x, d, y], [y])


define("onnx.StringSplit", infer=_split_infer, reference=_split_ref, lower=_split_lower, arity=1,
       num_results=2, strings=True)

__all__: list[str] = []
