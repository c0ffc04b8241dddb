"""Proving an attention chain causal: every key after the query's row is masked out.

The fused kernel can skip the key blocks that lie wholly above the diagonal (kernel/flash.py,
`Flash.causal`) only where that gives the chain's answer. This module proves it on the
graph, symbolically: the score steps (ops/sdpa.py) are evaluated at a generic position
`(batch..., s, t)` with sympy, the raw score a finite real symbol X, each step operand by
following its producers (constants, Expand, Trilu, Range, comparisons, Where, logic,
arithmetic, reshapes that only move 1-dims, zero-based Slices, Transpose, Cast); anything
else (a graph input, an op not listed) is a fresh unknown symbol at every visit, so what is
proved holds for every value it could have.

Proved causal when, for every key `t = s + 1 + u` (u >= 0) the steps give either -inf, or
`a*X + m` with m <= -1e30 (finfo.min masks), and in the second case the diagonal `t = s`
gives `a'*X + m'` with |m'| <= 1e20 (the row keeps a key whose exp is not 0, so a masked
key's `exp(a*X + m - max)` is exactly 0 and it never holds the row max). The kernel then
treats those keys' scores as -inf, which is the same softmax; and a step that is the
identity at every key up to the row (`key <= row`: a mask adding 0, a Where keeping the
score) is dropped, so the kernel reads no mask at all for a plain causal mask.

What a masked key's score is stays part of the op (`masked_score`: `a*X + m` or the constant
`m`, checked against the steps at X = NaN, +inf and -inf too): a NaN or inf score at a masked
key (a NaN or inf in Q or K; X + -inf is NaN at X = +inf) makes the chain's row NaN, a
non-finite value at a masked key its column (P = 0 times inf), and a row whose kept scores
are all -inf under a finfo.min mask is the softmax of its masked scores. The kernel skips a
masked key only where it proves at run time that the key adds exactly nothing
(codegen/cpu/flash_guard.py), and visits every key of the rows where it cannot.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import sympy

from ..ir import DType, Module, Op, Value
from ..ops import onnx_inputs
from .canonicalize import const_value

_MASKED = sympy.Float(-1e30)
_MODERATE = sympy.Float(1e20)
_DEPTH = 40
"""producers followed back from a step operand, at most"""

Idx = tuple


class _Unknown(Exception):
    """A value the evaluator cannot express: the proof fails."""


class _Eval:
    def __init__(self, module: Module):
        self.module = module
        self.fresh = 0

    def unknown(self, v: Value) -> sympy.Basic:
        """A value that may be anything: a new symbol at every visit (sound for 'for all')."""
        self.fresh += 1
        if v.type.dtype is DType.bool:
            return sympy.Symbol(f"unknown{self.fresh}")
        return sympy.Symbol(f"unknown{self.fresh}", real=True, finite=True)

    def at(self, v: Value, idx: Idx, depth: int = 0) -> sympy.Basic:
        """v's element at `idx` (one sympy expression per axis of v)."""
        op = v.owner
        if depth > _DEPTH or not isinstance(op, Op):
            return self.unknown(v)
        rule = _RULES.get(op.name)
        if rule is None:
            return self.unknown(v)
        try:
            return rule(self, op, v, idx, depth + 1)
        except _Unknown:
            return self.unknown(v)

    def operand(self, op: Op, i: int, out_idx: Idx, depth: int) -> sympy.Basic:
        """Operand i of a broadcasting op at the op's output index."""
        x = op.operands[i]
        return self.at(x, broadcast(out_idx, x.type.shape), depth)

    def const(self, v: Value) -> np.ndarray:
        c = const_value(v, self.module)
        if c is None:
            raise _Unknown
        return np.asarray(c)


def broadcast(idx: Idx, shape: tuple) -> Idx:
    """The trailing indices of `idx` for an operand of `shape` (0 where its dim is 1)."""
    tail = idx[len(idx) - len(shape):] if shape else ()
    return tuple(sympy.Integer(0) if d == 1 else i for i, d in zip(tail, shape, strict=True))


def _number(x) -> sympy.Basic:
    x = x.item() if isinstance(x, np.generic) else x
    if isinstance(x, (bool, np.bool_)):
        return sympy.true if x else sympy.false
    if isinstance(x, int):
        return sympy.Integer(x)
    f = float(x)
    if np.isnan(f):
        raise _Unknown
    if np.isinf(f):
        return sympy.oo if f > 0 else -sympy.oo
    return sympy.Float(f)


def _const(ev: _Eval, op: Op, v: Value, idx: Idx, depth: int):
    arr = ev.const(v)
    if arr.size == 1:
        return _number(arr.reshape(-1)[0])
    if all(isinstance(i, sympy.Integer) for i in idx):
        return _number(arr[tuple(int(i) for i in idx)])
    flat = arr.reshape(-1)
    if np.all(flat == flat[0]):
        return _number(flat[0])
    raise _Unknown


def _dims(ev: _Eval, op: Op, v: Value, idx: Idx, depth: int):
    if not idx:  # a scalar: the one dim
        return sympy.sympify(op.attrs["dims"][0])
    if len(idx) != 1 or not isinstance(idx[0], sympy.Integer):
        raise _Unknown
    return sympy.sympify(op.attrs["dims"][int(idx[0])])


def _expand(ev: _Eval, op: Op, v: Value, idx: Idx, depth: int):
    return ev.operand(op, 0, idx, depth)


def _same_but_ones(ev: _Eval, op: Op, v: Value, idx: Idx, depth: int):
    """Reshape / Unsqueeze / Squeeze / Flatten that only add or drop 1-dims."""
    x = op.operands[0]
    src = [(i, d) for i, d in enumerate(x.type.shape) if d != 1]
    dst = [(i, d) for i, d in enumerate(v.type.shape) if d != 1]
    prove = ev.module.symbols.prove_eq
    if len(src) != len(dst) or any(prove(a, b) is not True for (_, a), (_, b) in zip(src, dst, strict=True)):
        raise _Unknown
    x_idx = [sympy.Integer(0)] * x.type.rank
    for (si, _), (di, _) in zip(src, dst, strict=True):
        x_idx[si] = idx[di]
    return ev.at(x, tuple(x_idx), depth)


def _slice(ev: _Eval, op: Op, v: Value, idx: Idx, depth: int):
    ins = onnx_inputs(op, list(op.operands))
    starts = ev.const(ins[1])
    steps = ev.const(ins[4]) if len(ins) > 4 and ins[4] is not None else np.ones_like(starts)
    if np.any(starts != 0) or np.any(steps != 1):
        raise _Unknown  # only a zero-based, unit-step slice keeps the indices
    return ev.at(op.operands[0], idx, depth)


def _transpose(ev: _Eval, op: Op, v: Value, idx: Idx, depth: int):
    x = op.operands[0]
    perm = op.attrs.get("perm", tuple(reversed(range(x.type.rank))))
    x_idx: list = [None] * len(perm)
    for j, p in enumerate(perm):
        x_idx[p] = idx[j]
    return ev.at(x, tuple(x_idx), depth)


def _cast(ev: _Eval, op: Op, v: Value, idx: Idx, depth: int):
    src, dst = op.operands[0].type.dtype, v.type.dtype
    x = ev.at(op.operands[0], idx, depth)
    if dst is DType.bool:
        return x if src is DType.bool else sympy.Ne(x, 0)
    if src is DType.bool:
        return sympy.Piecewise((sympy.Integer(1), x), (sympy.Integer(0), True))
    if dst.is_float and (src.is_float or src.is_int):
        return x  # the masks' values (0, 1, small ints, finfo.min) convert exactly
    raise _Unknown


def _where(ev: _Eval, op: Op, v: Value, idx: Idx, depth: int):
    c, a, b = (ev.operand(op, i, idx, depth) for i in range(3))
    return sympy.Piecewise((a, c), (b, True))


def _binary(fn: Callable) -> Callable:
    def rule(ev: _Eval, op: Op, v: Value, idx: Idx, depth: int):
        if len(op.operands) != 2:
            raise _Unknown
        return fn(ev.operand(op, 0, idx, depth), ev.operand(op, 1, idx, depth))

    return rule


def _not(ev: _Eval, op: Op, v: Value, idx: Idx, depth: int):
    return sympy.Not(ev.at(op.operands[0], idx, depth))


def _neg(ev: _Eval, op: Op, v: Value, idx: Idx, depth: int):
    return -ev.at(op.operands[0], idx, depth)


def _trilu(ev: _Eval, op: Op, v: Value, idx: Idx, depth: int):
    if len(idx) < 2:
        raise _Unknown
    k = sympy.Integer(0)
    if len(op.operands) > 1:
        k = _number(ev.const(op.operands[1]).reshape(-1)[0])
    x = ev.at(op.operands[0], idx, depth)
    i, j = idx[-2], idx[-1]
    keep = (j - i >= k) if op.attrs.get("upper", 1) else (j - i <= k)
    return sympy.Piecewise((x, keep), (sympy.Integer(0), True))


def _range(ev: _Eval, op: Op, v: Value, idx: Idx, depth: int):
    start = ev.at(op.operands[0], (), depth)
    delta = ev.at(op.operands[2], (), depth)
    return start + idx[0] * delta


def _constant_of_shape(ev: _Eval, op: Op, v: Value, idx: Idx, depth: int):
    val = op.attrs.get("value")
    return sympy.Float(0.0) if val is None else _number(np.asarray(val).reshape(-1)[0])


_RULES: dict[str, Callable] = {
    "cc.const": _const, "cc.dims": _dims, "onnx.Expand": _expand,
    "onnx.Reshape": _same_but_ones, "onnx.Unsqueeze": _same_but_ones, "onnx.Squeeze": _same_but_ones,
    "onnx.Flatten": _same_but_ones, "onnx.Identity": _same_but_ones,
    "onnx.Slice": _slice, "onnx.Transpose": _transpose, "onnx.Cast": _cast, "onnx.Where": _where,
    "onnx.Equal": _binary(sympy.Eq), "onnx.Less": _binary(sympy.Lt), "onnx.LessOrEqual": _binary(sympy.Le),
    "onnx.Greater": _binary(sympy.Gt), "onnx.GreaterOrEqual": _binary(sympy.Ge),
    "onnx.And": _binary(sympy.And), "onnx.Or": _binary(sympy.Or), "onnx.Xor": _binary(sympy.Xor),
    "onnx.Not": _not, "onnx.Neg": _neg,
    "onnx.Add": _binary(lambda a, b: a + b), "onnx.Sub": _binary(lambda a, b: a - b),
    "onnx.Mul": _binary(lambda a, b: a * b),
    "onnx.Trilu": _trilu, "onnx.Range": _range, "onnx.ConstantOfShape": _constant_of_shape,
}


def _steps_at(ev: _Eval, steps: tuple[str, ...], operands: tuple[Value, ...], idx: Idx, x: sympy.Symbol):
    """The score after the steps at `idx`, the raw score being `x`."""
    from ..ops.sdpa import apply_steps

    x = apply_steps(x, steps, operands, lambda a: ev.at(a, broadcast(idx, a.type.shape)),
                    lambda c, a, b: sympy.Piecewise((a, c), (b, True)))
    return sympy.piecewise_fold(x)


def _affine(e: sympy.Basic, x: sympy.Symbol) -> tuple[sympy.Basic, sympy.Basic] | None:
    """(a, m) with e == a*x + m, a and m numbers (m possibly -oo), else None."""
    if e == -sympy.oo:
        return sympy.Integer(0), -sympy.oo
    if not isinstance(e, sympy.Expr) or e.free_symbols - {x}:
        return None
    poly = sympy.Poly(e, x) if e.free_symbols else None
    if poly is None:
        return (sympy.Integer(0), e) if e.is_number else None
    if poly.degree() > 1:
        return None
    a, m = poly.coeff_monomial(x), poly.coeff_monomial(1)
    return (a, m) if a.is_number and m.is_number and a.is_finite else None


def causal_steps(module: Module, steps: tuple[str, ...], operands: tuple[Value, ...],
                 rank: int) -> tuple[tuple[str, ...], tuple[Value, ...], tuple[float, float]] | None:
    """None, or the steps proved causal (module doc) less those that change nothing at or
    before the diagonal (a mask that adds 0 there, a Where that keeps the score there): with
    the keys after the row given their own score, those steps are the identity, and the
    kernel need not read their masks at all. Returned with their operands and the masked
    keys' score (`masked_score`)."""
    if not steps:
        return None
    ev = _Eval(module)
    x = sympy.Symbol("score", real=True, finite=True)
    s = sympy.Symbol("row", integer=True, nonnegative=True)
    u = sympy.Symbol("after", integer=True, nonnegative=True)
    batch = tuple(sympy.Symbol(f"b{i}", integer=True, nonnegative=True) for i in range(rank - 2))
    try:
        if not _masks_after_row(ev, steps, operands, batch, s, u, x):
            return None
        masked = masked_score(ev, steps, operands, (*batch, s, s + 1 + u))
        if masked is None:
            return None
        return (*_drop_identities(ev, steps, operands, (*batch, s, s - u)), masked)
    except (TypeError, ValueError, _Unknown):  # sympy refusing a comparison it cannot decide
        return None


def _masks_after_row(ev: _Eval, steps, operands, batch, s, u, x) -> bool:
    above = _affine(_steps_at(ev, steps, operands, (*batch, s, s + 1 + u), x), x)
    if above is None:
        return False
    m = above[1]
    if m == -sympy.oo:
        return True
    if not (m.is_finite and bool(m <= _MASKED)):
        return False
    diag = _affine(_steps_at(ev, steps, operands, (*batch, s, s), x), x)
    return diag is not None and diag[1].is_finite and bool(abs(diag[1]) <= _MODERATE)


def masked_score(ev: _Eval, steps, operands, idx: Idx) -> tuple[float, float] | None:
    """(a, m): the score of a key after the row is `a*X + m` of its raw score X for every X,
    NaN and the infinities included (IEEE arithmetic, as the graph's ops compute it), or the
    constant m where a == 0 (a Where's fill); None where the steps give something else."""
    x = sympy.Symbol("raw")  # no assumptions: X + -oo stays a sum, its coefficient readable
    e = sympy.expand(_steps_at(ev, steps, operands, idx, x))
    if e.free_symbols - {x}:
        return None
    a = e.coeff(x, 1)
    m = sympy.simplify(e - a * x)
    if not (a.is_number and m.is_number) or m.free_symbols or a.has(sympy.nan) or m.has(sympy.nan):
        return None
    fa, fm = float(a), float(m)
    if not (np.isfinite(fa) and fm < 0):
        return None
    for raw in (float("nan"), float("inf"), float("-inf"), 0.0):
        got = _steps_at(ev, steps, operands, idx, _number(raw) if raw == raw else sympy.nan)
        got_f = float("nan") if got is sympy.nan else float(got) if got.is_number else None
        with np.errstate(invalid="ignore"):
            want = fm if fa == 0 else np.float64(raw) * fa + fm
        if got_f is None or not (got_f == want or (np.isnan(got_f) and np.isnan(want))):
            return None
    return fa, fm


def _drop_identities(ev: _Eval, steps, operands, idx: Idx) -> tuple[tuple[str, ...], tuple[Value, ...]]:
    """The steps that are not the identity at `idx` (a key at or before the row)."""
    from ..ops.sdpa import STEP_ARITY

    kept: list[str] = []
    kept_ops: list[Value] = []
    it = iter(operands)
    for st in steps:
        ops = [next(it) for _ in range(STEP_ARITY[st])]
        first = sympy.piecewise_fold(ev.at(ops[0], broadcast(idx, ops[0].type.shape)))
        if st in ("add", "sub"):
            identity = getattr(first, "is_zero", None) is True
        elif st == "where_keep":
            identity = first is sympy.true
        elif st == "where_fill":
            identity = first is sympy.false
        else:
            identity = False
        if not identity:
            kept.append(st)
            kept_ops.extend(ops)
    return tuple(kept), tuple(kept_ops)
