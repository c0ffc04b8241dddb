"""Buffer pointers handed to a parallel body function by its caller (a "frame" in its ctx).

A parallel body (`par.*`, emit.py `_parallel_body`) used to compute each buffer's address in
its own entry block: a temp's `workspace + offset` from the memory plan, an input's slot in
the `inputs` array, a weight's global. Those are the only things that differ between the
bodies of two layers of the same shape (bert's attention, a transformer's layer norms), so
LLVM optimised and compiled every layer's copy again (0.65 s per attention kernel). Here
the body instead loads its k-th buffer's address from slot `FRAME_BASE + k` of the ctx it
is called with, k in the order the body first asks for buffers; the caller builds that ctx
per body (the shared ctx's fields, then the addresses, which it computes in its own entry
block). Two layers' bodies then print alike and `dedup.py` compiles one of them.

LLVM sees nothing less in the body than before: its workspace pointer was already a load
from the ctx (no `noalias` there), so the temps' addresses carried no provenance, and the
statements' scoped-noalias metadata still separates their loads from their stores. Small
constant tables stay globals the body names (LLVM may fold their values,
`SMALL_CONST_BYTES`); aliases resolve to their root's slot.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir

from ..llvm.helpers import PTR, i32, i64

if TYPE_CHECKING:
    from .emit import FnCtx

FRAME_BASE = 6
"""the frame's first slot: after the parallel ctx's six fields (emit.py `_CTX_TY`)"""

SMALL_CONST_BYTES = 4096
"""constants up to this size stay named globals in the body (the CPU backend keeps them
visible to the optimiser, `cpu/backend.py` `_INLINE_CONST_BYTES`)"""


class Frame:
    """The body side: which buffers the body reads through its frame, in slot order."""

    def __init__(self, ctx_arg: ir.Value) -> None:
        self.ctx_arg = ctx_arg
        self.names: list[str] = []

    def pointer(self, eb: ir.IRBuilder, name: str) -> ir.Value:
        """The address of buffer `name`, loaded in the body's entry block (`eb`) from its slot."""
        k = len(self.names)
        self.names.append(name)
        slot = eb.gep(self.ctx_arg, [i64(FRAME_BASE + k)], inbounds=True, name=f"{name}.slot", source_etype=PTR)
        return eb.load(slot, name=f"{name}.data", align=8, typ=PTR)


def framed(kind: str, const_bytes: int) -> bool:
    """Whether a buffer of `kind` (a constant: of `const_bytes` bytes) goes through the frame."""
    return kind in ("input", "output", "temp") or (kind == "const" and const_bytes > SMALL_CONST_BYTES)


def frame_ctx(owner: FnCtx, pctx: ir.Value, frame: Frame) -> ir.Value:
    """The ctx to call `frame`'s body with: `pctx`'s fields, then the frame's addresses, built in
    the owner's entry block. Without framed buffers, `pctx` itself. The fields are copied by
    loads placed after everything the entry block stored into `pctx` so far; the hoisted
    dims' array, stored into field 5 only when the entry block is finished, is stored right
    after the field's first (null) store (hoist_dims.py), so before these loads as well."""
    if not frame.names:
        return pctx
    eb = owner.eb
    ty = ir.ArrayType(PTR, FRAME_BASE + len(frame.names))
    arr = eb.alloca(ty, name="frame.ctx")

    def slot(k: int) -> ir.Value:
        p = eb.gep(arr, [i32(0), i32(k)], inbounds=True, name=f"frame.ctx.{k}", source_etype=ty)
        p.type = PTR  # NOTE: llvmlite types GEPs as typed pointers; the IR is opaque
        return p

    for k in range(FRAME_BASE):
        src = eb.gep(pctx, [i64(k)], inbounds=True, name=f"par.ctx.f{k}", source_etype=PTR)
        eb.store(eb.load(src, name=f"par.ctx.v{k}", align=8, typ=PTR), slot(k), align=8)
    for k, name in enumerate(frame.names):
        eb.store(owner.buffer_ptr(name), slot(FRAME_BASE + k), align=8)
    return arr
