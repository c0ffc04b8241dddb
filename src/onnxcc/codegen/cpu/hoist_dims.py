"""Big dims computed once per kernel function and read by its parallel body functions.

Every function computes the dims it uses in its own entry block (`FnCtx.dim`). In a parallel
body function (a GEMM task, a parallel loop nest) that repeats, per function, expressions
that do not depend on anything the body binds: the workspace offset of the GEMM scratch
region or of a temp is the rounded-up peak of the memory plan, which on a net with symbolic
H and W is a sympy expression of tens of KB. Emitting it into each of hundreds of task
functions cost most of a conv net's IR emission and LLVM time (inception_v3: 270 copies).

So a body function asks its owner (the kernel-signature function whose parallel ctx it is
called with) for a slot: the owner computes the dim once in its entry block and stores it
in an i64 array the ctx's `hoisted` field points to; the body loads it once in its entry.
Only big dims go this way: a small one (a symbol, `4*N`) stays local, where LLVM still
sees its form (known multiples, the symbols' range metadata) and the load would cost more
than the arithmetic.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import sympy
from llvmlite import ir

from ..llvm.helpers import I64, PTR, i32, i64

if TYPE_CHECKING:
    from .emit import FnCtx

HOIST_MIN_NODES = 32
"""sympy nodes from which a body function reads a dim from its owner instead of computing it"""

_SIZES: dict[sympy.Basic, bool] = {}


def is_big(d: sympy.Basic) -> bool:
    """Whether `d` has at least HOIST_MIN_NODES sympy nodes (counted up to there; memoised)."""
    big = _SIZES.get(d)
    if big is None:
        n, todo = 0, [d]
        while todo and n < HOIST_MIN_NODES:
            e = todo.pop()
            n += 1
            todo.extend(e.args)
        big = n >= HOIST_MIN_NODES
        if len(_SIZES) > 1 << 16:  # a long-lived process compiling many models
            _SIZES.clear()
        _SIZES[d] = big
    return big


class HoistedDims:
    """The owner side: the dims its body functions asked for, in slot order. `reserve` runs
    when the owner's parallel ctx is built (the field first holds null, so copying the ctx
    never reads an unset field); `finish` when its entry block is complete."""

    def __init__(self) -> None:
        self.slots: dict[sympy.Basic, int] = {}
        self._after: ir.Instruction | None = None
        self._field: ir.Value | None = None

    def reserve(self, eb: ir.IRBuilder, field: ir.Value) -> None:
        self._field = field
        self._after = eb.store(ir.Constant(PTR, None), field)

    def slot(self, d: sympy.Basic) -> int:
        j = self.slots.get(d)
        if j is None:
            j = self.slots[d] = len(self.slots)
        return j

    def finish(self, owner: FnCtx) -> None:
        """The array (allocated right after the ctx is built, so whatever copies the ctx
        later copies its address) and the values, computed at the end of the entry block."""
        if not self.slots:
            return
        assert self._after is not None and self._field is not None, "slots handed out without a parallel ctx"
        at = ir.IRBuilder(owner.eb.block)
        at.position_after(self._after)
        arr = at.alloca(ir.ArrayType(I64, len(self.slots)), name="hoisted")
        at.store(arr, self._field)
        owner.eb.position_at_end(owner.eb.block)  # its insertion index predates the two above
        for d, j in self.slots.items():
            p = owner.eb.gep(arr, [i32(0), i32(j)], inbounds=True, name=f"hoisted.{j}.ptr",
                             source_etype=arr.allocated_type)
            p.type = PTR  # NOTE: llvmlite types GEPs as typed pointers; the IR is opaque
            owner.eb.store(owner.dim(d), p, align=8)


class HoistedReader:
    """The body side: each big dim loaded once, in the body's entry block, from the slot
    its owner gave it."""

    def __init__(self, owner: HoistedDims, base: Callable[[ir.IRBuilder], ir.Value], eb: ir.IRBuilder):
        self.owner, self._base_fn, self.eb = owner, base, eb
        self._base: ir.Value | None = None
        self._vals: dict[sympy.Basic, ir.Value] = {}

    def get(self, d: sympy.Basic) -> ir.Value:
        v = self._vals.get(d)
        if v is None:
            if self._base is None:
                self._base = self._base_fn(self.eb)
            j = self.owner.slot(d)
            p = self.eb.gep(self._base, [i64(j)], inbounds=True, name=f"hoisted.{j}.ptr", source_etype=I64)
            v = self.eb.load(p, name=f"hoisted.{j}", align=8, typ=I64)
            self._vals[d] = v
        return v
