"""The compute expression language: index variables, loads, arithmetic, selects, reductions.

Every op lowers to a `Compute` whose body is an `Expr` tree over index variables, e.g.

    C[b, i, j] = sum(k < K: A[b, i, k] * B[k, j])

Nodes are frozen, hashable dataclasses with a `dtype`; structurally equal trees compare
equal (the hash is cached on the node, so DAGs built by inlining stay cheap to hash). Build
them with Python operators (`a + b`, `x * 2.0`, `i < 4`, `a & b`), `.eq()` / `.ne()` for
equality, and the helpers below (`select`, `cast`, `rsum`, `wrap_index`, ...).

Semantics worth knowing (all follow numpy unless noted):
- `div` is true division for floats and FLOOR division for ints; `floordiv` / `mod` floor
  (Python) semantics, `truncdiv` / `rem` C semantics. Integer division by zero makes the
  kernel return `ERR_DIV_ZERO` instead of trapping.
- comparisons yield `bool`; `and`/`or`/`xor`/`not` are logical on bool, bitwise on ints.
- `max`/`min` propagate NaN; `round` rounds half to even.
- f16/bf16 values are computed in f32 and rounded where they are stored or cast.
- A `Select` whose arms load memory is evaluated lazily (only the taken arm runs), so
  `select(i < 4, A[i], B[i - 4])` never reads out of bounds.
- `Check(cond, value, code)` is `value`, after making the kernel return `code` when `cond`
  is false (gather index checks).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

import numpy as np
import sympy

from onnxcc.ir import Dim, DType

from .dim_expand import expanded

# Error codes a kernel returns (0 = success). The runtime maps them to messages.
ERR_INDEX = 2
ERR_DIV_ZERO = 3
ERR_ASSERT = 4
ERR_CAPACITY = 5  # a grown loop state passed its capacity: the dispatcher re-runs with more
ERROR_MESSAGES = {
    ERR_INDEX: "index out of range",
    ERR_DIV_ZERO: "integer division by zero",
    ERR_ASSERT: "kernel assertion failed",
    ERR_CAPACITY: "capacity exceeded",
}

I64 = DType.i64
BOOL = DType.bool

# ---- op tables ----------------------------------------------------------------------------

#: binary op -> (infix symbol or None for call syntax, precedence; higher binds tighter)
BINARY_OPS: dict[str, tuple[str | None, int]] = {
    "add": ("+", 6), "sub": ("-", 6),
    "mul": ("*", 7), "div": ("/", 7), "floordiv": ("//", 7), "mod": ("%", 7),
    "truncdiv": (None, 9), "rem": (None, 9),
    "max": (None, 9), "min": (None, 9), "pow": (None, 9),
    "lt": ("<", 1), "le": ("<=", 1), "gt": (">", 1), "ge": (">=", 1), "eq": ("==", 1), "ne": ("!=", 1),
    "and": ("&", 4), "or": ("|", 2), "xor": ("^", 3),
    "shl": ("<<", 5), "shr": (">>", 5),
}
COMPARISONS = frozenset({"lt", "le", "gt", "ge", "eq", "ne"})
LOGICAL = frozenset({"and", "or", "xor"})
INT_ONLY_BINARY = frozenset({"shl", "shr"})
DIVISIONS = frozenset({"div", "floordiv", "mod", "truncdiv", "rem"})

#: unary ops valid on floats only (ints are rejected at construction)
FLOAT_UNARY = frozenset({
    "sqrt", "exp", "log", "tanh", "erf", "sigmoid", "recip", "sin", "cos", "tan", "asin", "acos",
    "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "softplus", "isnan", "isinf",
})
#: unary ops valid on any numeric dtype (identity-like on ints where that makes sense)
NUMERIC_UNARY = frozenset({"neg", "abs", "floor", "ceil", "round", "trunc", "sign", "relu"})
UNARY_OPS = FLOAT_UNARY | NUMERIC_UNARY | {"not"}
BOOL_RESULT_UNARY = frozenset({"isnan", "isinf"})

REDUCE_OPS = frozenset({"sum", "prod", "max", "min", "argmax", "argmin"})


# ---- the node base class ------------------------------------------------------------------


class Expr:
    """Base of all expression nodes. Subclasses are frozen dataclasses made by `_node`."""

    dtype: DType
    _keyfields: ClassVar[tuple[str, ...]] = ()

    # identity: structural, hash cached on the node
    def _key(self) -> tuple:
        return tuple(getattr(self, n) for n in self._keyfields)

    def __hash__(self) -> int:
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash((type(self).__name__, self._key()))
            object.__setattr__(self, "_hash", h)
        return h

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if type(self) is not type(other) or hash(self) != hash(other):
            return False
        return self._key() == other._key()  # type: ignore[attr-defined]

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __bool__(self) -> bool:
        raise TypeError(f"an expression has no truth value (use select / .eq): {self}")

    def __str__(self) -> str:
        from .expr_text import format_shared  # the printer imports the nodes: bound at call time

        text, defs = format_shared(self, free_vars(self))
        return text if not defs else f"{text} where {', '.join(f'{n} = {d}' for n, d in defs)}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}<{self}>"

    # arithmetic
    def __add__(self, o): return binary("add", self, o)
    def __radd__(self, o): return binary("add", o, self)
    def __sub__(self, o): return binary("sub", self, o)
    def __rsub__(self, o): return binary("sub", o, self)
    def __mul__(self, o): return binary("mul", self, o)
    def __rmul__(self, o): return binary("mul", o, self)
    def __truediv__(self, o): return binary("div", self, o)
    def __rtruediv__(self, o): return binary("div", o, self)
    def __floordiv__(self, o): return binary("floordiv", self, o)
    def __rfloordiv__(self, o): return binary("floordiv", o, self)
    def __mod__(self, o): return binary("mod", self, o)
    def __rmod__(self, o): return binary("mod", o, self)
    def __pow__(self, o): return binary("pow", self, o)
    def __rpow__(self, o): return binary("pow", o, self)
    def __neg__(self): return unary("neg", self)
    def __abs__(self): return unary("abs", self)
    # comparisons (equality is structural: use .eq / .ne to build a comparison)
    def __lt__(self, o): return binary("lt", self, o)
    def __le__(self, o): return binary("le", self, o)
    def __gt__(self, o): return binary("gt", self, o)
    def __ge__(self, o): return binary("ge", self, o)
    def eq(self, o) -> Expr: return binary("eq", self, o)
    def ne(self, o) -> Expr: return binary("ne", self, o)
    # logical / bitwise
    def __and__(self, o): return binary("and", self, o)
    def __rand__(self, o): return binary("and", o, self)
    def __or__(self, o): return binary("or", self, o)
    def __ror__(self, o): return binary("or", o, self)
    def __xor__(self, o): return binary("xor", self, o)
    def __rxor__(self, o): return binary("xor", o, self)
    def __invert__(self): return unary("not", self)
    def __lshift__(self, o): return binary("shl", self, o)
    def __rshift__(self, o): return binary("shr", self, o)

    def cast(self, dtype: DType) -> Expr:
        return cast(self, dtype)


def _node(cls):
    """Make `cls` a frozen node dataclass; identity = its init fields."""
    cls = dataclass(frozen=True, eq=False, repr=False)(cls)
    cls._keyfields = tuple(f.name for f in fields(cls) if f.init)
    return cls


def _set(obj: Any, name: str, value: Any) -> None:
    object.__setattr__(obj, name, value)


# ---- leaves -------------------------------------------------------------------------------


@_node
class Var(Expr):
    """An index variable (i64), bound by a Compute's domain or a Reduce."""

    name: str
    dtype: DType = field(init=False, default=I64)


@_node
class SymRef(Expr):
    """The run-time value of a model symbol (i64, >= 1)."""

    name: str
    dtype: DType = field(init=False, default=I64)


@_node
class Const(Expr):
    """A scalar constant; `value` is normalised to bool / int / float by dtype."""

    value: Any
    dtype: DType

    def __post_init__(self):
        v = self.value
        if isinstance(v, np.generic):
            v = v.item()
        if self.dtype is DType.bool:
            v = bool(v)
        elif self.dtype.is_float:
            v = float(v)
        else:
            if isinstance(v, float) and not v.is_integer():
                raise TypeError(f"constant {v} is not an integer but dtype is {self.dtype.value}")
            v = int(v)
        _set(self, "value", v)

    def _key(self) -> tuple:
        v = self.value
        # NOTE: 0.0 == -0.0 and nan != nan in Python; key floats by their bits instead
        return (v.hex() if isinstance(v, float) else v, self.dtype)


# ---- interior nodes -----------------------------------------------------------------------


@_node
class Load(Expr):
    """`buffer[indices]`; every index is an i64 expression. `dtype` is the buffer's dtype."""

    buffer: str
    indices: tuple[Expr, ...]
    dtype: DType

    def __post_init__(self):
        idx = tuple(_index(i) for i in self.indices)
        _set(self, "indices", idx)


@_node
class Binary(Expr):
    op: str
    a: Expr
    b: Expr
    dtype: DType = field(init=False)

    def __post_init__(self):
        if self.op not in BINARY_OPS:
            raise ValueError(f"unknown binary op {self.op!r}")
        a, b = self.a, self.b
        if a.dtype is not b.dtype:
            raise TypeError(f"binary {self.op}: dtype mismatch {a.dtype.value} vs {b.dtype.value} "
                            f"in ({a}) {self.op} ({b})")
        dt = a.dtype
        if self.op in LOGICAL and dt.is_float:
            raise TypeError(f"binary {self.op} needs bool or int operands, got {dt.value}")
        if self.op in INT_ONLY_BINARY and not dt.is_int:
            raise TypeError(f"binary {self.op} needs int operands, got {dt.value}")
        if dt is DType.bool and self.op not in LOGICAL | {"eq", "ne", "max", "min"}:
            raise TypeError(f"binary {self.op} is not defined on bool")
        _set(self, "dtype", BOOL if self.op in COMPARISONS else dt)


@_node
class Unary(Expr):
    op: str
    a: Expr
    dtype: DType = field(init=False)

    def __post_init__(self):
        if self.op not in UNARY_OPS:
            raise ValueError(f"unknown unary op {self.op!r}")
        dt = self.a.dtype
        if self.op in FLOAT_UNARY and not dt.is_float:
            raise TypeError(f"unary {self.op} needs a float operand, got {dt.value}")
        if self.op in NUMERIC_UNARY and dt is DType.bool:
            raise TypeError(f"unary {self.op} is not defined on bool")
        _set(self, "dtype", BOOL if self.op in BOOL_RESULT_UNARY else dt)


@_node
class Cast(Expr):
    """Numeric conversion (numpy `astype` semantics; float->int saturates, NaN -> 0)."""

    a: Expr
    dtype: DType


@_node
class Select(Expr):
    """`cond ? a : b`; evaluated lazily when an arm touches memory or can fail."""

    cond: Expr
    a: Expr
    b: Expr
    dtype: DType = field(init=False)

    def __post_init__(self):
        if self.cond.dtype is not BOOL:
            raise TypeError(f"select condition must be bool, got {self.cond.dtype.value}: {self.cond}")
        if self.a.dtype is not self.b.dtype:
            raise TypeError(f"select arms differ: {self.a.dtype.value} vs {self.b.dtype.value}")
        _set(self, "dtype", self.a.dtype)


@_node
class Check(Expr):
    """`value`, but the kernel returns `code` (nonzero) when `cond` is false."""

    cond: Expr
    value: Expr
    code: int = ERR_INDEX
    dtype: DType = field(init=False)

    def __post_init__(self):
        if self.cond.dtype is not BOOL:
            raise TypeError(f"check condition must be bool, got {self.cond.dtype.value}")
        _set(self, "dtype", self.value.dtype)


@_node
class Reduce(Expr):
    """`op` over the box `vars` (each `(Var, extent)`, extent an i64 Expr that may use outer
    vars and earlier vars of this reduce) of `body`, starting from `init` (default: the op's
    identity). argmax/argmin take exactly one var and give the i64 index of the first
    max/min (numpy semantics, NaN counts as max)."""

    op: str
    vars: tuple[tuple[Var, Expr], ...]
    body: Expr
    init: Expr | None = None
    dtype: DType = field(init=False)

    def __post_init__(self):
        if self.op not in REDUCE_OPS:
            raise ValueError(f"unknown reduce op {self.op!r}")
        vs = tuple((v if isinstance(v, Var) else Var(v), _index(e if isinstance(e, Expr) else dim_to_expr(e)))
                   for v, e in self.vars)
        if not vs:
            raise ValueError("a reduce needs at least one var")
        _set(self, "vars", vs)
        if self.op in ("argmax", "argmin"):
            if len(vs) != 1:
                raise ValueError(f"{self.op} reduces over exactly one var, got {len(vs)}")
            _set(self, "dtype", I64)
        else:
            if self.body.dtype is BOOL and self.op in ("sum", "prod"):
                raise TypeError(f"reduce {self.op} over bool: cast the body first")
            _set(self, "dtype", self.body.dtype)
        if self.init is not None:
            init = lift(self.init, self.body.dtype)
            if init.dtype is not self.body.dtype:
                raise TypeError(f"reduce init dtype {init.dtype.value} != body dtype {self.body.dtype.value}")
            _set(self, "init", init)


# ---- construction helpers -----------------------------------------------------------------

Scalar = bool | int | float
ExprLike = Expr | bool | int | float


def lift(x: ExprLike, like: DType) -> Expr:
    """Wrap a Python number as a Const of dtype `like` (expressions pass through)."""
    if isinstance(x, Expr):
        return x
    if isinstance(x, (bool, np.bool_)):
        return Const(bool(x), like if like is not DType.bool else DType.bool)
    if isinstance(x, (int, np.integer)):
        return Const(int(x), like)
    if isinstance(x, (float, np.floating)):
        if not like.is_float:
            raise TypeError(f"float constant {x} used with {like.value} operand")
        return Const(float(x), like)
    if isinstance(x, sympy.Basic):  # a symbolic dim used as a value
        return cast(dim_to_expr(x), like)
    raise TypeError(f"cannot use {x!r} ({type(x).__name__}) in an expression")


def _index(x: ExprLike) -> Expr:
    e = lift(x, I64)
    if e.dtype is not I64:
        raise TypeError(f"indices and extents must be i64, got {e.dtype.value}: {e} (cast it)")
    return e


def const(value: Scalar, dtype: DType) -> Const:
    return Const(value, dtype)


def _both(a: ExprLike, b: ExprLike) -> tuple[Expr, Expr]:
    if isinstance(a, Expr):
        return a, lift(b, a.dtype)
    if isinstance(b, Expr):
        return lift(a, b.dtype), b
    if isinstance(a, sympy.Basic) or isinstance(b, sympy.Basic):
        return lift(a, I64), lift(b, I64)
    raise TypeError("at least one operand must be an expression")


_FOLD = {
    "add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y,
    "floordiv": lambda x, y: x // y, "mod": lambda x, y: x % y,
    "max": max, "min": min,
}


def binary(op: str, a: ExprLike, b: ExprLike) -> Expr:
    """Build `a op b`, lifting numbers and folding integer identities (x+0, x*1, 3*4, ...)."""
    a, b = _both(a, b)
    if a.dtype.is_int and a.dtype is b.dtype:
        ca = a.value if isinstance(a, Const) else None
        cb = b.value if isinstance(b, Const) else None
        if (ca is not None and cb is not None and a.dtype is I64 and op in _FOLD
                and not (op in DIVISIONS and cb == 0)):
            return Const(_FOLD[op](ca, cb), a.dtype)
        if (op in ("add", "sub") and cb == 0) or (op in ("mul", "floordiv", "div", "truncdiv") and cb == 1):
            return a
        if (op == "add" and ca == 0) or (op == "mul" and ca == 1):
            return b
        if op == "mul" and (ca == 0 or cb == 0):
            return Const(0, a.dtype)
    return Binary(op, a, b)


def unary(op: str, a: Expr) -> Expr:
    return Unary(op, a)


def cast(a: ExprLike, dtype: DType) -> Expr:
    """Convert to `dtype` (no-op when it already has it)."""
    if not isinstance(a, Expr):
        return lift(a, dtype)
    if a.dtype is dtype:
        return a
    if isinstance(a, Const) and a.dtype.is_int and dtype.is_int:
        return Const(a.value, dtype)
    return Cast(a, dtype)


def select(cond: Expr, a: ExprLike, b: ExprLike) -> Expr:
    """`cond ? a : b` (ONNX Where); numbers take the other arm's dtype."""
    a, b = _both(a, b)
    if isinstance(cond, Const):
        return a if cond.value else b
    return Select(cond, a, b)


def maximum(a: ExprLike, b: ExprLike) -> Expr:
    return binary("max", a, b)


def minimum(a: ExprLike, b: ExprLike) -> Expr:
    return binary("min", a, b)


def power(a: ExprLike, b: ExprLike) -> Expr:
    return binary("pow", a, b)


def truncdiv(a: ExprLike, b: ExprLike) -> Expr:
    return binary("truncdiv", a, b)


def rem(a: ExprLike, b: ExprLike) -> Expr:
    return binary("rem", a, b)


def logical_not(a: Expr) -> Expr:
    return Unary("not", a)


def exp(x: Expr) -> Expr: return Unary("exp", x)
def log(x: Expr) -> Expr: return Unary("log", x)
def sqrt(x: Expr) -> Expr: return Unary("sqrt", x)
def tanh(x: Expr) -> Expr: return Unary("tanh", x)
def erf(x: Expr) -> Expr: return Unary("erf", x)
def sigmoid(x: Expr) -> Expr: return Unary("sigmoid", x)
def relu(x: Expr) -> Expr: return Unary("relu", x)
def floor(x: Expr) -> Expr: return Unary("floor", x)
def ceil(x: Expr) -> Expr: return Unary("ceil", x)


def _axes(vars: Iterable[tuple[Var | str, Expr | Dim]]) -> tuple[tuple[Var, Expr], ...]:
    out = []
    for v, ext in vars:
        out.append((v if isinstance(v, Var) else Var(v), ext if isinstance(ext, Expr) else dim_to_expr(ext)))
    return tuple(out)


def reduce(op: str, vars: Iterable[tuple[Var | str, Expr | Dim]], body: Expr,
           init: ExprLike | None = None) -> Reduce:
    """`op` of `body` over `vars` = [(var, extent), ...]; extents may be Dims or Exprs."""
    return Reduce(op, _axes(vars), body, None if init is None else lift(init, body.dtype))


def rsum(vars, body: Expr, init: ExprLike | None = None) -> Reduce: return reduce("sum", vars, body, init)
def rprod(vars, body: Expr, init: ExprLike | None = None) -> Reduce: return reduce("prod", vars, body, init)
def rmax(vars, body: Expr, init: ExprLike | None = None) -> Reduce: return reduce("max", vars, body, init)
def rmin(vars, body: Expr, init: ExprLike | None = None) -> Reduce: return reduce("min", vars, body, init)
def argmax(var: Var | str, extent, body: Expr) -> Reduce: return reduce("argmax", [(var, extent)], body)
def argmin(var: Var | str, extent, body: Expr) -> Reduce: return reduce("argmin", [(var, extent)], body)


def check(cond: Expr, value: Expr, code: int = ERR_INDEX) -> Expr:
    if isinstance(cond, Const) and cond.value:
        return value
    return Check(cond, value, code)


def wrap_index(idx: Expr, extent: Expr | Dim, *, negative: bool = True, checked: bool = True) -> Expr:
    """Normalise a data-dependent index into `[0, extent)`: add `extent` to negative values
    (ONNX Gather semantics) and, if `checked`, make the kernel fail with ERR_INDEX when the
    result is still out of range."""
    idx = cast(idx, I64)
    n = extent if isinstance(extent, Expr) else dim_to_expr(extent)
    if negative:
        idx = select(idx < 0, idx + n, idx)
    if checked:
        idx = check((idx >= 0) & (idx < n), idx, ERR_INDEX)
    return idx


def clamp(x: ExprLike, lo: ExprLike, hi: ExprLike) -> Expr:
    return minimum(maximum(x, lo), hi)


def broadcast_indices(out_idx: Iterable[ExprLike], in_shape: Iterable[Dim]) -> tuple[Expr, ...]:
    """Indices into an input of a numpy-broadcasting op: the trailing `len(in_shape)` output
    indices, with 0 for input dims that are the constant 1. (Whether a symbolic dim is 1 is
    decided before lowering: versions specialise it.)"""
    out = [lift(i, I64) for i in out_idx]
    shape = list(in_shape)
    if len(shape) > len(out):
        raise ValueError(f"input rank {len(shape)} exceeds output rank {len(out)}")
    tail = out[len(out) - len(shape):]
    return tuple(Const(0, I64) if (isinstance(d, int) and d == 1) else i for i, d in zip(tail, shape))


def flatten_index(idx: Iterable[ExprLike], shape: Iterable[Dim]) -> Expr:
    """The row-major flat position of `idx` in `shape`."""
    flat: Expr = Const(0, I64)
    for i, d in zip(idx, shape):
        flat = binary("add", binary("mul", flat, dim_to_expr(d)), lift(i, I64))
    return flat


def unflatten_index(flat: ExprLike, shape: Iterable[Dim]) -> tuple[Expr, ...]:
    """The index in `shape` of row-major position `flat` (Reshape lowers as
    `Y[o...] = X[unflatten_index(flatten_index(o, Y.shape), X.shape)]`)."""
    dims = [dim_to_expr(d) for d in shape]
    rest = lift(flat, I64)
    out: list[Expr] = []
    for k in range(len(dims) - 1, -1, -1):
        if k == 0:
            out.append(rest)
        else:
            out.append(binary("mod", rest, dims[k]))
            rest = binary("floordiv", rest, dims[k])
    return tuple(reversed(out))


# ---- dims -> expressions ------------------------------------------------------------------


def dim_to_expr(d: Dim) -> Expr:
    """Turn a dim (int or sympy integer expression) into an i64 Expr: symbols become SymRefs,
    floor/ceiling of rational expressions become exact integer floor divisions, Mod/Max/Min
    map to mod/max/min."""
    if isinstance(d, (int, np.integer)):
        return Const(int(d), I64)
    if isinstance(d, Expr):
        return d
    return _sympy_to_expr(sympy.sympify(d))


@functools.lru_cache(maxsize=1 << 14)
def _sympy_to_expr(e: sympy.Expr) -> Expr:
    # memoised: a model's dims repeat (every kernel of a version recomputes the workspace
    # offsets and the conv output sizes), and `together` / `expand` on nested floors cost
    # milliseconds each; the result is an immutable tree
    if e.is_Integer:
        return Const(int(e), I64)
    if e.is_Symbol:
        return SymRef(e.name)
    if isinstance(e, (sympy.floor, sympy.ceiling)):
        num, den = _quotient(e.args[0])
        if isinstance(den, Const) and den.value == 1:
            return num
        if isinstance(e, sympy.ceiling):  # ceil(n/d) == floor((n + d - 1)/d) for integer n, d > 0
            num = binary("sub", binary("add", num, den), Const(1, I64))
        return binary("floordiv", num, den)
    if e.is_Rational or e.is_Add or e.is_Mul:
        num, den = _as_fraction(e)
        if den != 1:
            raise ValueError(f"dim {e} is not an integer expression")
        return num
    if e.is_Pow and e.exp.is_Integer and int(e.exp) > 0:
        base = _sympy_to_expr(e.base)
        out = base
        for _ in range(int(e.exp) - 1):
            out = out * base
        return out
    if isinstance(e, sympy.Mod):
        return binary("mod", _sympy_to_expr(e.args[0]), _sympy_to_expr(e.args[1]))
    if isinstance(e, (sympy.Max, sympy.Min)):
        return _chain("max" if isinstance(e, sympy.Max) else "min", [_sympy_to_expr(a) for a in e.args])
    if isinstance(e, sympy.Piecewise):  # per-range memory plans: (value, condition) pairs
        *pieces, (last, cond) = e.args
        if cond is not sympy.true:
            raise ValueError(f"dim {e}: a Piecewise needs a final `True` piece")
        out = _sympy_to_expr(last)
        for value, c in reversed(pieces):
            out = select(_condition_to_expr(c), _sympy_to_expr(value), out)
        return out
    raise ValueError(f"cannot turn dim {e} ({type(e).__name__}) into a kernel expression")


_RELATIONS = {"<=": "le", "<": "lt", ">=": "ge", ">": "gt", "==": "eq", "!=": "ne"}


def _chain(op: str, args: list[Expr]) -> Expr:
    """`a op b op c ...`, left to right (sympy's n-ary Max/Min/And/Or as binary nodes)."""
    out = args[0]
    for a in args[1:]:
        out = binary(op, out, a)
    return out


def _condition_to_expr(c) -> Expr:
    """A sympy boolean over integer dims as a bool Expr: relations (`seq <= 128`, also with
    rational sides such as `seq/2 <= 4`), `And` / `Or` / `Not` of them (sympy merges the
    conditions of equal neighbouring Piecewise parts into an `Or`) and the constants."""
    if c is sympy.true or c is sympy.false or isinstance(c, (bool, np.bool_)):
        return Const(bool(c), BOOL)
    if isinstance(c, (sympy.And, sympy.Or)):
        return _chain("and" if isinstance(c, sympy.And) else "or", [_condition_to_expr(a) for a in c.args])
    if isinstance(c, sympy.Not):
        return logical_not(_condition_to_expr(c.args[0]))
    if isinstance(c, sympy.core.relational.Relational) and c.rel_op in _RELATIONS:
        op = _RELATIONS[c.rel_op]
        (a, da), (b, db) = _as_fraction(c.lhs), _as_fraction(c.rhs)
        if da == 1 and db == 1:
            return binary(op, a, b)
        # lhs - rhs == num / den with den > 0, so `lhs op rhs` is exactly `num op 0`
        num, _ = _as_fraction(sympy.sympify(c.lhs) - sympy.sympify(c.rhs))
        return binary(op, num, Const(0, I64))
    raise ValueError(f"cannot turn condition {c} ({type(c).__name__}) into a kernel expression")


def condition_to_expr(c) -> Expr:
    """A sympy condition over integer dims (a constraint, a guard) as a bool Expr."""
    return _condition_to_expr(c)


def _quotient(e: sympy.Expr) -> tuple[Expr, Expr]:
    """Write a rational function of dims as (integer numerator, positive denominator) Exprs:
    `s6*s81/s33` (a reshape's -1 dim between inputs with their own symbols) as well as
    `(seq + 1)/2`. Symbols are positive, so the denominator is too."""
    num, den = sympy.fraction(sympy.together(e))
    if den.is_Integer:
        n, d = _as_fraction(num)
        return n, Const(d * int(den), I64)
    n, d = _as_fraction(num)
    den_expr = _sympy_to_expr(den)
    return n, den_expr if d == 1 else binary("mul", den_expr, d)


def _as_fraction(e: sympy.Expr) -> tuple[Expr, int]:
    """Write a rational-coefficient polynomial as `(integer Expr) / den` exactly."""
    e = _expand(e)
    terms = sympy.Add.make_args(e)
    den = 1
    for t in terms:
        coeff, _ = t.as_coeff_Mul()
        den = math.lcm(den, int(sympy.Rational(coeff).q))
    out: Expr = Const(0, I64)
    # symbolic terms first, so `N - 1` prints as such rather than `-1 + N`
    for t in sorted(terms, key=lambda t: t.is_Number):
        coeff, rest = t.as_coeff_Mul()
        c = sympy.Rational(coeff) * den
        assert c.q == 1
        c = int(c)
        neg = c < 0 and not (isinstance(out, Const) and out.value == 0)
        mag = -c if neg else c
        term: Expr = Const(mag, I64) if rest == 1 else binary("mul", _product(rest), mag)
        out = binary("sub" if neg else "add", out, term)
    return out, den


def _expand(e: sympy.Expr) -> sympy.Expr:
    """`sympy.expand(e)` over the polynomial structure only: every function application
    (floor, ceiling, Mod, Max, Min, Piecewise) is left as it is, and its arguments are
    converted on their own. expand would rebuild them through their evaluating constructors:
    sympy's Max compares every pair of its arguments symbolically (seconds on a convnet's
    workspace size, which the memory plan builds unevaluated) and floor asks the assumptions
    of its whole argument again (0.4 s on mobilenet_v3's scratch offset). Multiplied out
    without sympy.expand where it can be (kernel/dim_expand.py)."""
    out = expanded(e)
    if out is not None:
        return out
    opaque = _applications(e)
    if not opaque:
        return sympy.expand(e)
    stand_in = {a: sympy.Dummy(integer=True) for a in opaque}
    back = {v: k for k, v in stand_in.items()}
    return sympy.expand(e.xreplace(stand_in)).xreplace(back)


def _applications(e: sympy.Expr) -> set[sympy.Expr]:
    """The outermost function applications in `e` (not those inside them)."""
    out: set[sympy.Expr] = set()
    todo = [e]
    while todo:
        a = todo.pop()
        if isinstance(a, (sympy.Function, sympy.Max, sympy.Min)):
            out.add(a)
        else:
            todo.extend(a.args)
    return out


def _product(e: sympy.Expr) -> Expr:
    out: Expr = Const(1, I64)
    for f in sympy.Mul.make_args(e):
        out = binary("mul", out, _sympy_to_expr(f))
    return out


# ---- traversal ----------------------------------------------------------------------------


def children(e: Expr) -> tuple[Expr, ...]:
    """Direct sub-expressions, in evaluation order."""
    if isinstance(e, Load):
        return e.indices
    if isinstance(e, Binary):
        return (e.a, e.b)
    if isinstance(e, (Unary, Cast)):
        return (e.a,)
    if isinstance(e, Select):
        return (e.cond, e.a, e.b)
    if isinstance(e, Check):
        return (e.cond, e.value)
    if isinstance(e, Reduce):
        exts = tuple(x for _, x in e.vars)
        return exts + (e.body,) + ((e.init,) if e.init is not None else ())
    return ()


def walk(e: Expr) -> Iterator[Expr]:
    """Every structurally distinct node once, children before parents."""
    seen: set[Expr] = set()
    stack: list[tuple[Expr, bool]] = [(e, False)]
    while stack:
        n, done = stack.pop()
        if done:
            yield n
            continue
        if n in seen:
            continue
        seen.add(n)
        stack.append((n, True))
        for c in reversed(children(n)):
            if c not in seen:
                stack.append((c, False))


def outside_reductions(e: Expr) -> Iterator[Expr]:
    """Every structurally distinct node of `e` that is not inside a reduction, once, parents
    before children; a reduction is yielded but its extents, body and init are not entered
    (what runs once per evaluation of `e`, the reductions as opaque values)."""
    seen: set[Expr] = set()
    stack = [e]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        yield n
        if not isinstance(n, Reduce):
            stack.extend(children(n))


def _memo(e: Expr, key: str, combine: Callable[[Expr], Any]) -> Any:
    """`combine(n)` cached on every node of `e` under `key`, children first (combine reads
    the children's cached values). A walk stops at a node that has it: the passes ask again
    after each rewrite, and a rewritten body is mostly subtrees they asked about before."""
    if key not in e.__dict__:
        stack: list[tuple[Expr, bool]] = [(e, False)]
        while stack:
            n, done = stack.pop()
            if key in n.__dict__:
                continue
            if not done:
                stack.append((n, True))
                stack.extend((c, False) for c in children(n) if key not in c.__dict__)
                continue
            _set(n, key, combine(n))
    return e.__dict__[key]


def _free_vars_of(n: Expr) -> frozenset[str]:
    if isinstance(n, Var):
        return frozenset((n.name,))
    if isinstance(n, Reduce):
        s: frozenset[str] = frozenset()
        bound: set[str] = set()
        for v, ext in n.vars:
            s |= free_vars(ext) - bound
            bound.add(v.name)
        s |= free_vars(n.body) - bound
        if n.init is not None:
            s |= free_vars(n.init)
        return s
    return frozenset().union(*(free_vars(c) for c in children(n)))


def free_vars(e: Expr) -> frozenset[str]:
    """Names of the index vars `e` depends on (bound reduce vars excluded); cached on nodes."""
    return _memo(e, "_fv", _free_vars_of)


def _loads_of(n: Expr) -> frozenset[str]:
    own = frozenset((n.buffer,)) if isinstance(n, Load) else frozenset()
    return own.union(*(c.__dict__["_br"] for c in children(n)))


def buffers_read(e: Expr) -> set[str]:
    """Names of the buffers `e` loads from (a new set, the caller's to change); cached on
    nodes."""
    return set(_memo(e, "_br", _loads_of))


def symbols_used(e: Expr) -> set[str]:
    return {n.name for n in walk(e) if isinstance(n, SymRef)}


def rebuild(e: Expr, new_children: tuple[Expr, ...]) -> Expr:
    """A copy of `e` with its children replaced (same order as `children`)."""
    if isinstance(e, Load):
        return Load(e.buffer, new_children, e.dtype)
    if isinstance(e, Binary):
        return Binary(e.op, *new_children)
    if isinstance(e, Unary):
        return Unary(e.op, new_children[0])
    if isinstance(e, Cast):
        return Cast(new_children[0], e.dtype)
    if isinstance(e, Select):
        return Select(*new_children)
    if isinstance(e, Check):
        return Check(new_children[0], new_children[1], e.code)
    if isinstance(e, Reduce):
        k = len(e.vars)
        vs = tuple((v, x) for (v, _), x in zip(e.vars, new_children[:k]))
        init = new_children[k + 1] if e.init is not None else None
        return Reduce(e.op, vs, new_children[k], init)
    return e


def replace_nodes(e: Expr, new: Callable[[Expr], Expr | None]) -> Expr:
    """`e` with every node `n` for which `new(n)` is not None replaced by it, each node judged
    as it is in `e` (bottom up over `walk`, no recursion: fused bodies can be deep), so a
    matching node wins over its children; `transform` instead judges each node with its
    children already rewritten. The row matchers' rewrite (kernel/rownorm.py, rowstage.py)."""
    memo: dict[Expr, Expr] = {}
    for n in walk(e):
        hit = new(n)
        if hit is not None:
            memo[n] = hit
            continue
        kids = children(n)
        built = tuple(memo[k] for k in kids)
        memo[n] = n if all(x is y for x, y in zip(kids, built, strict=True)) else rebuild(n, built)
    return memo[e]


def transform(e: Expr, fn: Callable[[Expr], Expr | None]) -> Expr:
    """Rebuild `e` bottom-up; `fn(node)` (children already transformed) returns a
    replacement or None to keep it. Memoised, so shared subtrees stay shared. Does not
    rename bound vars: use `substitute` to replace variables."""
    memo: dict[Expr, Expr] = {}
    for n in walk(e):
        kids = children(n)
        new_kids = tuple(memo[c] for c in kids)
        m = n if all(a is b for a, b in zip(kids, new_kids)) else rebuild(n, new_kids)
        r = fn(m)
        memo[n] = m if r is None else r
    return memo[e]


_fresh_counter = [0]


def fresh_var(hint: str = "r") -> Var:
    _fresh_counter[0] += 1
    return Var(f"{hint}.{_fresh_counter[0]}")


def substitute(e: Expr, mapping: Mapping[str, ExprLike]) -> Expr:
    """Replace free index vars by expressions (capture-avoiding: a reduce var that would
    capture a free var of a replacement is renamed). Fusion inlines a producer with
    `substitute(producer.body, dict(zip(producer_var_names, load.indices)))`."""
    m = {k: lift(v, I64) for k, v in mapping.items()}
    if not m:
        return e
    incoming: set[str] = set()
    for v in m.values():
        incoming |= free_vars(v)
    memo: dict[tuple[int, frozenset], Expr] = {}

    def go(n: Expr, env: Mapping[str, Expr]) -> Expr:
        if not (free_vars(n) & env.keys()):
            return n
        key = (id(n), frozenset(env.items()))
        hit = memo.get(key)
        if hit is not None:
            return hit
        if isinstance(n, Var):
            out = env[n.name]
        elif isinstance(n, Reduce):
            env2 = dict(env)
            new_vars = []
            for v, ext in n.vars:
                ext2 = go(ext, env2)
                if v.name in incoming:
                    nv = fresh_var(v.name.split(".")[0])
                    env2[v.name] = nv
                    v = nv
                else:
                    env2.pop(v.name, None)
                new_vars.append((v, ext2))
            body = go(n.body, env2)
            init = go(n.init, env) if n.init is not None else None
            out = Reduce(n.op, tuple(new_vars), body, init)
        else:
            kids = children(n)
            new = tuple(go(c, env) for c in kids)
            out = n if all(a is b for a, b in zip(kids, new)) else rebuild(n, new)
        memo[key] = out
        return out

    return go(e, m)


def inline_load(e: Expr, buffer: str, vars: Iterable[Var | str], body: Expr) -> Expr:
    """Replace every `buffer[idx...]` in `e` by `body` with `vars` := `idx` (fusion of a
    producer `buffer[vars] = body` into the consumer expression `e`)."""
    names = [v.name if isinstance(v, Var) else v for v in vars]

    def fn(n: Expr) -> Expr | None:
        if isinstance(n, Load) and n.buffer == buffer:
            if len(n.indices) != len(names):
                raise ValueError(f"load {n} has rank {len(n.indices)}, producer has {len(names)} vars")
            return substitute(body, dict(zip(names, n.indices)))
        return None

    return transform(e, fn)
