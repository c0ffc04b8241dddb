"""Row epilogues: a GEMM epilogue that is a chain of per-row operations on the sum.

A conv's epilogue is usually `relu(acc + bias[m])`, with a folded BatchNormalization
`acc * scale[m] + shift[m]`, or a clip. Such a chain can run in the micro-kernel's
registers before the tile is stored, instead of a second pass that reads the tile back:
each step is add / sub / mul / max / min with an operand that is a constant, a load
indexed by the row (the output channel) alone or a tile of a buffer shaped like the output
(a residual), or relu.

`match_row_epilogue` reads the chain off the epilogue expression exactly (the operations in
the order the expression applies them, each operand on the side it is written), or gives
None; the codegen then keeps the separate pass."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import sympy

from onnxcc.ir import Dim, DType

from .expr import Binary, Const, Expr, Load, Unary, Var, walk

MAX_STEPS = 6


@dataclass(frozen=True)
class RowOp:
    op: str
    """"add", "sub" (acc - operand), "mul", "max", "min", "relu" (no operand) or "mulself" (`sub`)"""
    value: float | None = None
    """a constant operand"""
    load: Load | None = None
    """a per-row operand: a load whose one non-constant index is the row var"""
    tile: bool = False
    """`load` is a whole tile instead: the output's own indices into a buffer of the
    output's shape (a residual), read at the tile's place with the output's row stride"""
    sub: tuple[RowOp, ...] = ()
    """op "mulself": acc * sub(acc), `sub` a chain of constant steps and relu applied to a
    copy of acc (HardSwish: x * min(max(x * (1/6) + 0.5, 0), 1))"""

    def key(self) -> str:
        """What the micro-kernel's code depends on (a load's buffer is an argument)."""
        if self.op == "mulself":
            return f"mulself({','.join(o.key() for o in self.sub)})"
        return f"{self.op}:{'t' if self.tile else 'r' if self.load is not None else self.value!r}"


def _row_load(e: Expr, m: str, shape_of: Callable[[str], Sequence[Dim]]) -> bool:
    """A load of f32 whose indices are 0 except one that is `m`, with unit dims after it
    (so consecutive rows are consecutive elements)."""
    if not isinstance(e, Load) or e.dtype is not DType.f32:
        return False
    shape = shape_of(e.buffer)
    pos = [j for j, i in enumerate(e.indices) if isinstance(i, Var) and i.name == m]
    if len(pos) != 1 or len(shape) != len(e.indices):
        return False
    p = pos[0]
    for j, i in enumerate(e.indices):
        if j != p and not (isinstance(i, Const) and i.value == 0):
            return False
    return all(d == 1 for d in shape[p + 1:])


def _same_shape(a: Sequence[Dim], b: Sequence[Dim]) -> bool:
    return len(a) == len(b) and all(sympy.sympify(x) == sympy.sympify(y) for x, y in zip(a, b))


Operand = Callable[[str, Expr], RowOp | None]
"""a chain step's operand (the side of the expression without the value chained) as the step
of its op, or None where such an operand is not allowed"""


def _constant_operand(op: str, other: Expr) -> RowOp | None:
    return RowOp(op, value=float(other.value)) if isinstance(other, Const) else None


def _chain(e: Expr, base: Expr, operand: Operand, self_products: bool) -> tuple[RowOp, ...] | None:
    """`e` as steps applied to `base` in order, each relu or an op with an `operand` (a
    "mulself" step too with `self_products`), or None."""
    ops: list[RowOp] = []
    while e != base:
        if len(ops) >= MAX_STEPS or e.dtype is not DType.f32:
            return None
        if isinstance(e, Unary) and e.op == "relu":
            ops.append(RowOp("relu"))
            e = e.a
            continue
        if not isinstance(e, Binary) or e.op not in ("add", "sub", "mul", "max", "min"):
            return None
        a_has, b_has = (any(n == base for n in walk(x)) for x in (e.a, e.b))
        if a_has and b_has and e.op == "mul" and self_products:
            found = _self_product(e)
            if found is None:
                return None
            e, step = found
            ops.append(step)
            continue
        if a_has == b_has:
            return None
        inner, other = (e.a, e.b) if a_has else (e.b, e.a)
        if e.op == "sub" and not a_has:
            return None  # operand - value: not a chain step
        step = operand(e.op, other)
        if step is None:
            return None
        ops.append(step)  # add, mul, max, min: the side of the operand does not change the value
        e = inner
    return tuple(reversed(ops))


def _self_product(e: Binary) -> tuple[Expr, RowOp] | None:
    """`x * chain(x)` (either order; a product is exact either way), the chain's steps
    constants and relu, as x and its step."""
    for x, y in ((e.a, e.b), (e.b, e.a)):
        sub = _chain(y, x, _constant_operand, self_products=False)
        if sub:
            return x, RowOp("mulself", sub=sub)
    return None


def match_row_epilogue(epi: Expr, acc: Load, m: str, shape_of: Callable[[str], Sequence[Dim]],
                       self_products: bool = False) -> tuple[RowOp, ...] | None:
    """The epilogue as row operations applied to `acc` in order, or None. `self_products`:
    also a product of the value with a constant chain of itself (op "mulself"), which only
    the GEMM micro-kernel's column epilogue applies."""

    def operand(op: str, other: Expr) -> RowOp | None:
        if isinstance(other, Const):
            return _constant_operand(op, other)
        if (isinstance(other, Load) and other.dtype is DType.f32 and other.indices == acc.indices
                and _same_shape(shape_of(other.buffer), shape_of(acc.buffer))):
            return RowOp(op, load=other, tile=True)
        if _row_load(other, m, shape_of):
            return RowOp(op, load=other)  # type: ignore[arg-type]
        return None

    return _chain(epi, acc, operand, self_products)
