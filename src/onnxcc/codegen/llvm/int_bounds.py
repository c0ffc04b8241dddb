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

The bounds follow the interval rules ir/ bounds the dims with (`onnxcc.ir.intervals`, which
`ir/dims._interval` applies to the same expressions before lowering): this module only maps
the kernel's operations onto them. Only symbols and constants are bounded: a symbol from
below by what the backend's function context declares for it (`FunctionContext.sym_lower`,
the bound its loads' range metadata already promise LLVM), from above not at all; a loop
var, a load or a select is unknown. Overflow is not modelled: the expressions bounded here
are sizes and offsets of buffers, far below 2**63.
"""

from __future__ import annotations

from collections.abc import Callable

from onnxcc.ir import intervals
from onnxcc.ir.intervals import UNBOUNDED, Interval
from onnxcc.kernel.expr import Binary, Const, Expr, SymRef


class LowerBounds:
    """`lower(e)`: an integer every value of `e` is at least, or None (memoised per
    expression: dims repeat, and their trees share subtrees)."""

    def __init__(self, sym_lower: Callable[[str], int | None]) -> None:
        self.sym_lower = sym_lower
        self._memo: dict[Expr, Interval] = {}

    def nonnegative(self, e: Expr) -> bool:
        lo = self.lower(e)
        return lo is not None and lo >= 0

    def lower(self, e: Expr) -> int | None:
        lo = self.interval(e)[0]
        return None if lo is None else int(lo)

    def interval(self, e: Expr) -> Interval:
        if isinstance(e, Const):
            return intervals.point(int(e.value)) if e.dtype.is_int else UNBOUNDED
        if isinstance(e, SymRef):
            return self.sym_lower(e.name), None
        if not isinstance(e, Binary) or not (e.dtype.is_int and e.dtype.is_signed):
            return UNBOUNDED
        iv = self._memo.get(e)
        if iv is None:
            iv = self._memo[e] = self._binary(e)
        return iv

    def _binary(self, e: Binary) -> Interval:
        op = e.op
        if op in ("floordiv", "div", "mod"):  # both floor semantics on the kernel's ints
            d = self.interval(e.b)
            if op == "mod":
                return intervals.floor_mod(d) or UNBOUNDED
            c = d[0]
            if c is None or c != d[1] or c <= 0:  # only constant divisors, as dims' floor(x / c)
                return UNBOUNDED
            return intervals.floor_div(self.interval(e.a), int(c))
        rule = _RULES.get(op)
        return UNBOUNDED if rule is None else rule(self.interval(e.a), self.interval(e.b))


_RULES: dict[str, Callable[[Interval, Interval], Interval]] = {
    "add": intervals.add,
    "sub": lambda a, b: intervals.add(a, intervals.neg(b)),
    "mul": intervals.mul,
    "max": lambda a, b: intervals.maximum((a, b)),
    "min": lambda a, b: intervals.minimum((a, b)),
}
