"""Addresses handed to parallel body functions by their caller (a "frame" in their ctx).

A parallel body (`par.*`, emit.py `_parallel_body`; a GEMM's packing and tile tasks, gemm.py)
used to compute each buffer's address in its own entry block: a temp's `workspace + offset`
from the memory plan, an input's slot in the `inputs` array, a weight's global (a GEMM's
packed weights). Those are the only things that differ between the bodies of two layers of
the same shape (bert's attention and projections, a transformer's layer norms), so LLVM
optimised and compiled every layer's copy again (0.65 s per bert attention kernel). Here a
body instead loads the k-th address it asks for from slot `base + k` of the ctx it is called
with; the caller builds that ctx per frame (`open_frame`: the shared ctx's fields, then, once
its function is finished, `close_frames`, the addresses, computed in its own entry block).
Two layers' bodies then print alike and `dedup.py` compiles one of them. The bodies of one
GEMM share one frame (the packer and the tasks are called with the same ctx).

A frame costs its caller a few stores per call (with one per body, mobilenet_v3_small's 77
frames measured 3% and 5% slower on its 0.06 ms 64x64 run in two A/B runs; with 29 frames,
within noise), so only computes whose shape another compute of the program repeats
(`Repeats`: the same extents and the same expression up to buffer names) get one; the
others keep computing their addresses and take the shared ctx.

LLVM sees nothing less in the body than before: its workspace pointer was already a load
from the ctx (no `noalias` there), so the temps' addresses carried no provenance, and the
statements' scoped-noalias metadata still separates their loads from their stores. Small
constant tables stay globals the body names (LLVM may fold their values,
`SMALL_CONST_BYTES`); aliases resolve to their root's slot.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING

from llvmlite import ir

from onnxcc.kernel.expr_text import format_shared

from ..llvm.helpers import PTR, i64

if TYPE_CHECKING:
    from onnxcc.kernel.expr import Expr
    from onnxcc.kernel.program import Compute, KernelProgram

    from .emit import FnCtx

FRAME_BASE = 6
"""a parallel body's first frame slot: after the parallel ctx's six fields (emit.py `_CTX_TY`)"""

SMALL_CONST_BYTES = 4096
"""constants up to this size stay named globals in the body (the CPU backend keeps them
visible to the optimiser, `cpu/backend.py` `_INLINE_CONST_BYTES`)"""


def framed(kind: str, const_bytes: int) -> bool:
    """Whether a buffer of `kind` (a constant: of `const_bytes` bytes) goes through the frame."""
    return kind in ("input", "output", "temp") or (kind == "const" and const_bytes > SMALL_CONST_BYTES)


_WORD = re.compile(r"[A-Za-z_][\w.]*(\()?")


class Repeats:
    """Which computes of a program share their shape with another: the same extents and the
    same expression up to names (buffers, reduction vars; each replaced by its order of
    appearance, the functions' names kept). Only a guess at which bodies will print alike:
    a wrong one costs a frame or a dedup, never a result."""

    def __init__(self, program: KernelProgram) -> None:
        # each compute's key kept by identity: the emitter asks about every compute again,
        # and a key (sympy extents printed, the body formatted) is a tenth of the emission
        self._known: dict[int, tuple[Compute, tuple]] = {}
        counts: Counter[tuple] = Counter()
        for c in program.computes():  # (one object met twice counts twice, as it did)
            known = self._known.get(id(c))
            if known is None:
                known = self._known[id(c)] = (c, self.key(c))
            counts[known[1]] += 1
        self._keys = {k for k, n in counts.items() if n > 1}

    @staticmethod
    def key(c: Compute) -> tuple:
        return _shape_key(c.out, c.vars, c.body)

    def __contains__(self, c: Compute) -> bool:
        if not self._keys:
            return False
        known = self._known.get(id(c))
        return (known[1] if known is not None and known[0] is c else self.key(c)) in self._keys


@functools.lru_cache(maxsize=4096)
def _shape_key(out: str, vars: tuple, body: Expr) -> tuple:
    """`Repeats.key` of the compute `out[vars] = body`, memoised by content: a later version's
    program repeats most computes of the first (equal, not the same objects), and formatting
    a body took a twentieth of a two-version conv net's emission."""
    names: dict[str, int] = {}

    def name(m: re.Match) -> str:
        return m.group(0) if m.group(1) else f"%{names.setdefault(m.group(0), len(names))}"

    var_names = [v.name for v, _ in vars]
    text, defs = format_shared(body, var_names)
    text = "\n".join([f"{out}[{', '.join(var_names)}] = {text}", *(f"{n} = {d}" for n, d in defs)])
    return (tuple(str(d) for _, d in vars), _WORD.sub(name, text))


class Frame:
    """The addresses the bodies called with one frame ctx read, in slot order: each a key (a
    buffer's name, a global's) and how the caller computes it."""

    def __init__(self, base: int) -> None:
        self.base = base
        self.slots: dict[str, int] = {}
        self.values: list[Callable[[FnCtx], ir.Value]] = []

    def slot(self, key: str, value: Callable[[FnCtx], ir.Value]) -> int:
        k = self.slots.get(key)
        if k is None:
            k = self.slots[key] = len(self.values)
            self.values.append(value)
        return self.base + k


class FrameReader:
    """A body's side of a frame: each address loaded once, in its entry block, from the ctx
    argument `ctx_arg`."""

    def __init__(self, frame: Frame, ctx_arg: ir.Value) -> None:
        self.frame, self.ctx_arg = frame, ctx_arg
        self._loaded: dict[str, ir.Value] = {}

    def pointer(self, eb: ir.IRBuilder, key: str, value: Callable[[FnCtx], ir.Value]) -> ir.Value:
        p = self._loaded.get(key)
        if p is None:
            k = self.frame.slot(key, value)
            slot = eb.gep(self.ctx_arg, [i64(k)], inbounds=True, name=f"{key}.slot", source_etype=PTR)
            p = self._loaded[key] = eb.load(slot, name=f"{key}.data", align=8, typ=PTR)
        return p


def open_frame(owner: FnCtx, pctx: ir.Value, base: int) -> tuple[ir.Value, Frame]:
    """A new frame of `owner` (the function calling the bodies) and the ctx to call its bodies
    with: `pctx`'s six fields copied into the first slots of a fresh array in the owner's entry
    block (its type and the addresses set by `close_frames`). The copies are loads placed
    after everything the entry block stored into `pctx` so far; the hoisted dims' array,
    stored into field 5 only when the entry block is finished, is stored right after the
    field's first (null) store (hoist_dims.py), so before these loads as well."""
    eb = owner.eb
    arr = eb.alloca(ir.ArrayType(PTR, base), name="frame.ctx")
    for k in range(FRAME_BASE):
        src = eb.gep(pctx, [i64(k)], inbounds=True, name=f"par.ctx.f{k}", source_etype=PTR)
        eb.store(eb.load(src, name=f"par.ctx.v{k}", align=8, typ=PTR), _slot(eb, arr, k), align=8)
    frame = Frame(base)
    owner.frames.append((arr, frame))
    return arr, frame


def close_frames(owner: FnCtx) -> None:
    """Size each of `owner`'s frame arrays for its addresses and store them (at the end of the
    entry block, which runs whole before the body)."""
    for arr, frame in owner.frames:
        # NOTE: llvmlite prints an alloca's type from this field; the frame's size is known now
        arr.allocated_type = ir.ArrayType(PTR, frame.base + len(frame.values))  # pyright: ignore[reportAttributeAccessIssue]
        for k, value in enumerate(frame.values):
            owner.eb.store(value(owner), _slot(owner.eb, arr, frame.base + k), align=8)
    owner.frames.clear()


def _slot(eb: ir.IRBuilder, arr: ir.Value, k: int) -> ir.Value:
    p = eb.gep(arr, [i64(k)], inbounds=True, name=f"frame.ctx.{k}", source_etype=PTR)
    p.type = PTR  # NOTE: llvmlite types GEPs as typed pointers; the IR is opaque
    return p
