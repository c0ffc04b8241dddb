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

from collections.abc import Callable, Hashable
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


#: what a slot is numbered by: the dim itself, or the role it plays (`("offset", TEMP)`: the
#: workspace offset of a temp, whose value differs from version to version)
SlotKey = Hashable


class HoistedDims:
    """The owner side: the dims its body functions asked for, by slot. `reserve` runs
    when the owner's parallel ctx is built (the field first holds null, so copying the ctx
    never reads an unset field); `finish` when its entry block is complete.

    Slot numbers come from `shared` when given: one numbering for every owner of every version
    of a build (the backend passes it, cpu/backend.py), by key (`SlotKey`), so a body that two
    versions emit alike reads its dims from the same slots in both and prints alike, and
    dedup.py compiles it once. A temp's workspace offset is keyed by the temp's name, not by
    its value: versions plan their memory apart, so the same temp sits at other offsets
    (lraspp_mobilenet_v3's two versions: 26 bodies that differed only in their slot numbers,
    0.76 s of LLVM). An owner's array then holds up to its highest slot (the slots it does
    not fill are never read). Without `shared`, slots are numbered per owner from 0."""

    def __init__(self, shared: dict[SlotKey, int] | None = None) -> None:
        self.slots: dict[SlotKey, tuple[sympy.Basic, int]] = {}
        self._numbers = {} if shared is None else shared
        self._after: ir.Instruction | None = None
        self._field: ir.Value | None = None

    def reserve(self, eb: ir.IRBuilder, field: ir.Value) -> None:
        self._field = field
        self._after = eb.store(ir.Constant(PTR, None), field)

    def slot(self, d: sympy.Basic, key: SlotKey = None) -> int:
        """The slot of dim `d`, numbered by `key` (None: by `d` itself)."""
        key = d if key is None else key
        got = self.slots.get(key)
        if got is None:
            got = self.slots[key] = (d, self._numbers.setdefault(key, len(self._numbers)))
        return got[1]

    def finish(self, owner: FnCtx) -> None:
        """The array (allocated right after the ctx is built, so whatever copies the ctx
        later copies its address) and the values, computed at the end of the entry block."""
        if not self.slots:
            return
        assert self._after is not None and self._field is not None, "slots handed out without a parallel ctx"
        at = ir.IRBuilder(owner.eb.block)
        at.position_after(self._after)
        arr = at.alloca(ir.ArrayType(I64, max(j for _, j in self.slots.values()) + 1), name="hoisted")
        at.store(arr, self._field)
        owner.eb.position_at_end(owner.eb.block)  # its insertion index predates the two above
        for d, j in self.slots.values():
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

    def get(self, d: sympy.Basic, key: SlotKey = None) -> ir.Value:
        """Dim `d`, read from its slot (numbered by `key`, `HoistedDims.slot`) unless this
        body read the same value before (two temps at one offset: one load)."""
        v = self._vals.get(d)
        if v is None:
            if self._base is None:
                self._base = self._base_fn(self.eb)
            j = self.owner.slot(d, key)
            p = self.eb.gep(self._base, [i64(j)], inbounds=True, name=f"hoisted.{j}.ptr", source_etype=I64)
            v = self.eb.load(p, name=f"hoisted.{j}", align=8, typ=I64)
            self._vals[d] = v
        return v
