"""Lower bounds of integer index expressions, so the emitter can skip work that only a
negative value needs.

A dim such as a conv's output size `floor((W - 1) / 2) + 1` reaches the emitter as a chain
of floor divisions of symbol arithmetic. Emitted with Python's floor semantics each division
is seven instructions (`sdiv`, `srem` and the sign fix), which LLVM's InstCombine then has to
prove away from the symbols' range metadata: squeezenet's kernels held 541 of them, a
quarter of its emitted instructions. Where the dividend is provably non-negative and the
divisor positive, floor and truncation agree and one `udiv` is exact (`exprs.py`
`_int_division`); where it is only bounded below (`(H - 3) // 2`, negative on small planes)
and the divisor a positive constant, the dividend is shifted down by c - 1 when negative and
divided with truncation: three instructions, no remainder.

Only symbols and constants are bounded (a symbol by what the backend's function context
declares for it, `FunctionContext.sym_lower`, the bound its loads' range metadata already
promise LLVM); a loop var, a load or a select is unknown. Overflow is not modelled: the
expressions bounded here are sizes and offsets of buffers, far below 2**63.
"""

from __future__ import annotations

from collections.abc import Callable

from onnxcc.kernel.expr import Binary, Const, Expr, SymRef


class LowerBounds:
    """`lower(e)`: an integer every value of `e` is at least, or None (memoised per
    expression: dims repeat, and their trees share subtrees)."""

    def __init__(self, sym_lower: Callable[[str], int | None]) -> None:
        self.sym_lower = sym_lower
        self._memo: dict[Expr, int | None] = {}

    def nonnegative(self, e: Expr) -> bool:
        lo = self.lower(e)
        return lo is not None and lo >= 0

    def lower(self, e: Expr) -> int | None:
        if isinstance(e, Const):
            return int(e.value) if e.dtype.is_int else None
        if isinstance(e, SymRef):
            return self.sym_lower(e.name)
        if not isinstance(e, Binary) or not (e.dtype.is_int and e.dtype.is_signed):
            return None
        if e in self._memo:
            return self._memo[e]
        lo = self._binary(e)
        self._memo[e] = lo
        return lo

    def _binary(self, e: Binary) -> int | None:
        op = e.op
        a = self.lower(e.a)
        if op == "sub":  # a - c: only a constant's upper bound is known
            return a - c if a is not None and (c := _const(e.b)) is not None else None
        if op in ("floordiv", "div", "mod"):
            d = _const(e.b)
            if d is None or d <= 0:
                return None
            if op == "mod":
                return 0  # floor modulo a positive constant
            return None if a is None else a // d  # floor is monotone
        b = self.lower(e.b)
        if op == "max":
            known = [x for x in (a, b) if x is not None]
            return max(known) if known else None
        if a is None or b is None:
            return None
        if op == "add":
            return a + b
        if op == "min":
            return min(a, b)
        if op == "mul" and a >= 0 and b >= 0:
            return a * b
        return None


def _const(e: Expr) -> int | None:
    return int(e.value) if isinstance(e, Const) and e.dtype.is_int else None
