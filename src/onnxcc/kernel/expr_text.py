"""The text form of compute expressions (kernel/expr.py's nodes): what `Expr.__str__`, the
kernel program's printer and error messages show, and what kernel/parser.py reads back.
Python-like infix with Python's precedence (comparisons never chain), calls for the rest:
`A[i, k] * 2.0`, `select(i < 4, A[i], B[i - 4])`, `sum(k < K: A[i, k])`, `f16(x)`;
constants not f32 / i64 carry their type (`3:i32`, `0.5:f64`)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from onnxcc.ir import DType

from . import expr as E

_ATOM = 10


def format_const(c: E.Const) -> str:
    v = c.value
    if c.dtype is DType.bool:
        return "true" if v else "false"
    if c.dtype.is_float:
        s = "nan" if math.isnan(v) else ("inf" if v == math.inf else "-inf" if v == -math.inf else repr(v))
        return s if c.dtype is DType.f32 else f"{s}:{c.dtype.value}"
    return str(v) if c.dtype is DType.i64 else f"{v}:{c.dtype.value}"


def format_expr(e: E.Expr, names: Mapping[E.Expr, str] | None = None) -> str:
    """Text of `e`; sub-expressions in `names` print as that name (see `format_shared`)."""
    return _fmt(e, names or {})[0]


def format_shared(e: E.Expr, bound: Iterable[str] = (), min_size: int = 6) -> tuple[str, list[tuple[str, str]]]:
    """Text of `e` with big sub-expressions that occur more than once (as fusion makes
    them) printed once: returns (text, [(name, definition), ...]) with names `$0, $1, ...`,
    definitions in dependency order. Only sub-expressions over the vars in `bound` are
    named, so every name is well defined where the text uses it."""
    scope = set(bound)
    uses: dict[E.Expr, int] = {}
    size: dict[E.Expr, int] = {}
    order = list(E.walk(e))
    for n in order:
        kids = E.children(n)
        size[n] = 1 + sum(size[c] for c in kids)
        for c in kids:
            uses[c] = uses.get(c, 0) + 1
    names: dict[E.Expr, str] = {}
    defs: list[tuple[str, str]] = []
    for n in order:
        if n is e or isinstance(n, (E.Var, E.Const, E.SymRef)) or uses.get(n, 0) < 2:
            continue
        if (isinstance(n, E.Reduce) or size[n] >= min_size) and E.free_vars(n) <= scope:
            text = format_expr(n, names)
            names[n] = f"${len(defs)}"
            defs.append((names[n], text))
    return format_expr(e, names), defs


def _fmt(e: E.Expr, names: Mapping[E.Expr, str]) -> tuple[str, int]:
    """Text and precedence of `e` (Python-like precedence, comparisons never chain)."""
    if names and e in names:
        return names[e], _ATOM
    if isinstance(e, (E.Var, E.SymRef)):
        return e.name, _ATOM
    if isinstance(e, E.Const):
        s = format_const(e)
        return s, (_ATOM if not s.startswith("-") else 8)

    def sub(x: E.Expr) -> str:
        return _fmt(x, names)[0]

    if isinstance(e, E.Load):
        return f"{e.buffer}[{', '.join(sub(i) for i in e.indices)}]", _ATOM
    if isinstance(e, E.Binary):
        sym_, prec = E.BINARY_OPS[e.op]
        if sym_ is None:
            return f"{e.op}({sub(e.a)}, {sub(e.b)})", _ATOM
        a, pa = _fmt(e.a, names)
        b, pb = _fmt(e.b, names)
        if pa < prec or (prec == 1 and pa == 1):
            a = f"({a})"
        if pb <= prec:  # left-associative: parenthesise an equal-precedence right operand
            b = f"({b})"
        return f"{a} {sym_} {b}", prec
    if isinstance(e, E.Unary):
        if e.op in ("neg", "not"):
            a, pa = _fmt(e.a, names)
            return f"{'-' if e.op == 'neg' else '~'}{a if pa >= 8 else f'({a})'}", 8
        return f"{e.op}({sub(e.a)})", _ATOM
    if isinstance(e, E.Cast):
        return f"{e.dtype.value}({sub(e.a)})", _ATOM
    if isinstance(e, E.Select):
        return f"select({sub(e.cond)}, {sub(e.a)}, {sub(e.b)})", _ATOM
    if isinstance(e, E.Check):
        code = "" if e.code == E.ERR_INDEX else f", code={e.code}"
        return f"check({sub(e.cond)}, {sub(e.value)}{code})", _ATOM
    if isinstance(e, E.Reduce):
        axes = ", ".join(f"{v.name} < {sub(x)}" for v, x in e.vars)
        init = "" if e.init is None else f", init={sub(e.init)}"
        return f"{e.op}({axes}{init}: {sub(e.body)})", _ATOM
    raise TypeError(f"not an expression: {e!r}")
