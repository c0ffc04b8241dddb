"""Helpers shared by the shape-family op modules (shape.py, misc.py, control_flow.py, reduce.py):
symbolic dim arithmetic for shape rules, and folding known values into lowerings."""

from __future__ import annotations

import numpy as np
import sympy

from ..ir import Dim, DType, TensorType, canon, identical, prove_le_implied
from ..kernel import Expr, cast, dim_to_expr, lift
from .cc import const_array
from .registry import InferCtx, RefCtx

I64 = DType.i64
#: values of small integer results are propagated up to this many elements (as the pass does)
MAX_VALUE = 64


# ---- helpers shared by the shape-family modules ----------------------------------------------

def simplify(symbols, d: Dim) -> Dim:
    """Drop Max/Min arguments the symbol ranges prove dominated (e.g. Min(seq, 2**63-1) -> seq)."""
    d = canon(d)
    if d is None or isinstance(d, int) or not d.has(sympy.Max, sympy.Min):
        return d
    args = [simplify(symbols, a) for a in d.args]
    minmax = [a for a in args if isinstance(a, (sympy.Max, sympy.Min))]
    if isinstance(d, sympy.Add) and len(minmax) == 1:  # a + Max(b, c) -> Max(a + b, a + c)
        mm = minmax[0]
        rest = sympy.Add(*[a for a in args if a is not mm])
        return simplify(symbols, mm.func(*[rest + x for x in mm.args]))
    if isinstance(d, sympy.Mul) and len(args) == 2 and len(minmax) == 1:  # k * Max(..), k an integer
        k = sympy.sympify(args[0] if args[1] is minmax[0] else args[1])
        if k.is_Integer and k != 0:  # NOTE: a fraction inside Max / Min has no kernel form
            func = minmax[0].func if k > 0 else (sympy.Min if isinstance(minmax[0], sympy.Max) else sympy.Max)
            return simplify(symbols, func(*[k * x for x in minmax[0].args]))
    if isinstance(d, (sympy.Max, sympy.Min)):
        is_max = isinstance(d, sympy.Max)

        def dominated(a, b):  # a can be dropped in favour of b
            return symbols.prove_le(a, b) is True if is_max else symbols.prove_le(b, a) is True

        kept: list = []
        for a in args:
            if any(dominated(a, b) for b in kept):
                continue
            kept = [b for b in kept if not dominated(b, a)]
            kept.append(a)
        return canon(d.func(*kept))
    return canon(d.func(*args))


def fresh_dim(ctx: InferCtx, hint: str, why: str, result: int = 0, dim: int = 0, current: Dim = None) -> sympy.Symbol:
    """A fresh symbol for a dim only the run can tell, reused when this node made it before.

    Shape inference may run more than once; the op's existing type at the same position (or
    `current`, for block args) keeps the symbol this node introduced, so reruns are stable.
    """
    if current is None and result < len(ctx.op.results):
        shape = ctx.op.results[result].type.shape
        current = shape[dim] if dim < len(shape) else None
    mark = f'node "{ctx.loc}":'
    if isinstance(current, sympy.Symbol) and current.name in ctx.symbols \
            and ctx.symbols[current.name].origin.startswith(mark):
        return current
    return ctx.symbols.fresh(hint, origin=f"{mark} {why}")


def norm_axis(ctx: InferCtx, axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < rank:
        raise ctx.error(f"{what} {axis} out of range for rank {rank}")
    return axis % rank if rank else 0


def known_dims(ctx: InferCtx, i: int) -> list[Dim] | None:
    """Operand i's propagated value, flattened, as a list of Dims (None if not known)."""
    v = ctx.known(i) if i is not None else None
    if v is None:
        return None
    out = [canon(x) for x in np.asarray(v, dtype=object).reshape(-1)]
    return None if any(x is None for x in out) else out


def const_value(ctx: InferCtx, i: int | None) -> np.ndarray | None:
    """Operand i as a numpy array when it is a literal constant (any dtype), else None."""
    if i is None or i >= len(ctx.op.operands):
        return None
    v = ctx.op.operands[i]
    owner = getattr(v, "op", None)
    if owner is not None and owner.name == "cc.const":
        try:
            return np.asarray(const_array(owner, ctx.module))
        except KeyError:
            return None
    ints = ctx.known_ints(i)
    return None if ints is None else np.array(ints, dtype=np.int64).reshape(v.type.shape)


def obj(items, shape) -> np.ndarray:
    """An object array of Dims with the given static shape."""
    a = np.empty(len(items), dtype=object)
    a[:] = [canon(x) for x in items]
    return a.reshape(shape)


def value_shape_ok(t: TensorType) -> bool:
    return t.is_static and t.dtype.is_int and int(np.prod(t.shape, dtype=np.int64)) <= MAX_VALUE


def prod(dims) -> Dim:
    n: Dim = 1
    for d in dims:
        if d is None:
            return None
        n = n * d
    return canon(n)


def divides(symbols, a: Dim, b: int) -> bool:
    """Whether b provably divides a, using the symbols' multiple_of facts."""
    subs = {}
    for s in sympy.sympify(a).free_symbols:
        info = symbols.infos.get(s.name)
        if info is not None and info.multiple_of > 1:
            subs[s] = info.multiple_of * sympy.Dummy(integer=True, positive=True)
    q = sympy.cancel(sympy.sympify(a).subs(subs) / b)
    return q.is_integer is True


def exact_div(ctx: InferCtx, a: Dim, b: Dim, why: str) -> Dim:
    """a / b where the rule needs b to divide a: exact, proved, or a recorded constraint."""
    if a is None or b is None:
        return None
    if isinstance(b, int) and b == 0:
        raise ctx.error(f"{why}: division by a zero dim")
    if isinstance(a, int) and isinstance(b, int):
        if a % b:
            raise ctx.error(f"{why}: {a} is not divisible by {b}")
        return a // b
    q = canon(sympy.cancel(sympy.sympify(a) / sympy.sympify(b)))
    if isinstance(q, int) or q.is_integer:
        return q
    if isinstance(b, int) and divides(ctx.symbols, a, b):
        return canon(sympy.floor(q))
    ctx.require(sympy.Eq(sympy.Mod(a, b), 0), f"{why} ({a} divisible by {b})")
    return canon(sympy.floor(q))


def is_negative(symbols, x: Dim, facts=()) -> bool | None:
    """Whether x < 0 for every value of the symbols (None: cannot tell). `facts`: the
    module's constraints, which the run checks: `e >= k` (k >= 0) proves e nonnegative where
    the symbols' ranges alone do not (a conv's `floor(L/5) - 1 >= 1` for a Slice ending at a
    length read from its output's Shape)."""
    if isinstance(x, int):
        return x < 0
    if symbols.prove_le(0, x) is True or _nonneg_by(facts, x) or prove_le_implied(symbols, 0, x, facts) is True:
        return False
    if symbols.prove_le(x, -1) is True:
        return True
    return None


def _nonneg_by(facts, x: Dim) -> bool:
    for c in facts:
        e = c.expr
        if isinstance(e, (sympy.GreaterThan, sympy.StrictGreaterThan)):
            g = e.lhs - e.rhs
        elif isinstance(e, (sympy.LessThan, sympy.StrictLessThan)):
            g = e.rhs - e.lhs
        else:
            continue
        diff = sympy.expand(sympy.sympify(x) - g)  # x = g + diff with g >= 0
        if diff.is_Number and diff >= 0:
            return True
    return False


def slice_dim(symbols, d: Dim, start: Dim, end: Dim, step: int, facts=()) -> Dim:
    """Length of x[start:end:step] on a dim of size d, ONNX clamping rules; None if unknown.
    `facts`: the module's constraints (see `is_negative`)."""
    if all(isinstance(v, int) for v in (d, start, end)):
        sl = onnx_slice(d, start, end, step)
        return len(range(d)[sl])
    if d is None or not isinstance(step, int) or step == 0:
        return None
    ns, ne = is_negative(symbols, start, facts), is_negative(symbols, end, facts)
    if ns is None or ne is None:
        return None
    s = start + d if ns else start
    e = end + d if ne else end
    # NOTE: the clamp of start to d (step > 0) or of end to d - 1 (step < 0) is left out:
    # where it would bind, the length is <= 0 either way, and the final Max(0, ..) decides.
    if step > 0:
        s, e = sympy.Max(0, s), sympy.Max(0, sympy.Min(e, d))
    else:
        s, e = sympy.Max(0, sympy.Min(s, d - 1)), sympy.Max(-1, e)
    s, e = simplify(symbols, s), simplify(symbols, e)
    return simplify(symbols, sympy.Max(0, sympy.ceiling(sympy.sympify(e - s) / step)))


def static_ints(ctx: RefCtx, a) -> list[int]:
    return [int(x) for x in np.asarray(a).reshape(-1)]


# ---- lowering helpers (shared with misc.py) -------------------------------------------------------

def emit(ctx, buf, body_fn) -> None:
    """`buf[ix] = body_fn(ix)` over buf's whole shape; `ix` is a tuple of Vars i0, i1, ...
    (empty for a rank-0 buffer)."""
    vs = tuple(ctx.vars(buf.rank))
    body = lift(body_fn(vs), buf.dtype)
    if buf.rank == 0:
        ctx.program.compute(buf, body)
    else:
        ctx.program.compute(buf, lambda *_: body, names=[v.name for v in vs])


def scalar(buf) -> Expr:
    """The single element of a scalar-like buffer (rank 0, or shape [1], [1, 1], ...)."""
    return buf[(0,) * buf.rank]


def lowered_value(ctx, i: int | None) -> np.ndarray | None:
    """Operand i's value as far as the compiler knows it (object array of Dims): literal
    integer constant data, the value shape inference propagated, or a folded `cc.dims`; None
    when only the run can tell."""
    if i is None or i >= len(ctx.op.operands):
        return None
    v = ctx.op.operands[i]
    c = ctx.const_value(i)
    if c is not None:
        c = np.asarray(c)
        return obj([int(x) for x in c.reshape(-1)], c.shape) if c.dtype.kind in "iub" else None
    k = ctx.known_value(i)
    if k is not None:
        return np.asarray(k, dtype=object)
    owner = getattr(v, "op", None)
    if owner is not None and owner.name == "cc.dims" and v.type.is_static:
        return obj(list(owner.attrs["dims"]), v.type.shape)
    return None


def lowered_ints(ctx, i: int | None, what: str) -> list[int] | None:
    """Operand i as compile-time ints (None if the operand is absent); unsupported otherwise."""
    if i is None or i >= len(ctx.op.operands):
        return None
    v = lowered_value(ctx, i)
    vals = None if v is None else [canon(x) for x in v.reshape(-1)]
    if vals is None or not all(isinstance(x, int) for x in vals):
        raise ctx.unsupported(f"{what} must be known at compile time")
    return vals


def value_expr(ctx, i: int, k: int) -> Expr:
    """Element k of 1-D integer operand i as an i64 expression: folded when the compiler knows
    it, else loaded at run time."""
    v = lowered_value(ctx, i)
    if v is not None:
        d = canon(v.reshape(-1)[k])
        if d is not None:
            return dim_to_expr(d)
    b = ctx.inputs[i]
    return cast(b[(k,)] if b.rank == 1 else b[(0,) * b.rank], I64)


def same_dim(a: Dim, b: Dim) -> bool:
    """Whether two dims are provably equal (structurally, after canonicalisation)."""
    return identical(a, b)


def nonneg(x: Expr | Dim) -> bool | None:
    """Sign of a compile-time start/pad: True (>= 0), False (< 0) or None (decided at run time)."""
    if isinstance(x, Expr):
        return None
    if isinstance(x, int):
        return x >= 0
    e = sympy.sympify(x)
    if e.is_nonnegative:
        return True
    if e.is_negative:
        return False
    return None


def onnx_slice(d: int, start: int, end: int, step: int) -> slice:
    """The python slice equal to ONNX's start/end/step on a dim of size d.

    ONNX clamps differently from python: with a negative step a start before the first
    element clamps to 0 (python gives an empty slice), and an end of -1 means "past the front".
    """
    start = start + d if start < 0 else start
    end = end + d if end < 0 else end
    if step > 0:
        return slice(min(max(start, 0), d), min(max(end, 0), d), step)
    start, end = min(max(start, 0), d - 1), min(max(end, -1), d - 1)
    if d == 0:
        return slice(0, 0, step)
    return slice(start, None if end < 0 else end, step)
