"""The row tiles of one GEMM row panel: which micro-kernel heights a panel may need and the
dispatch over them ("the full-height tile, else each row variant from r0"), shared by the
plain and the window-mode task functions of gemm.py."""

from __future__ import annotations

from collections.abc import Callable

from llvmlite import ir

from ..llvm.helpers import i64, if_else, if_then
from .gemm_ir import add


def row_variants(mr: int) -> list[int]:
    """Micro-kernel heights for the rows of a partial panel when M is symbolic, tried in
    order, each taken when that many rows are left: the binary decomposition of mr - 1."""
    out, v = [], 1
    while v < mr:
        out.append(v)
        v *= 2
    return sorted(out, reverse=True)


def tile_heights(mr: int, m: int | None) -> tuple[list[int], list[int]]:
    """(the micro-kernel heights a panel's tiles may call, the row variants of a partial
    panel). With M static a panel has mr rows or M % mr: only those kernels are emitted
    (each variant a micro-kernel of its own, which LLVM compiles in every part of the
    module that calls it: the binary variants were half of a conv net's LLVM time). A
    remainder that is no power of two gets a kernel of exactly its height (a batch-3 RNN
    step: one 3-row pass over each B panel instead of a 2-row and a 1-row one)."""
    if m is None:
        variants = row_variants(mr)
        return [mr, *variants], variants
    rem = m % mr
    variants = [rem] if rem else []
    return ([mr] if m >= mr else []) + variants, variants


def row_tiles(b: ir.IRBuilder, kernels: dict, mr: int, variants: list[int], rows: ir.Value, r0_slot: ir.Value,
               call: Callable[[ir.Function, ir.Value | None], None]) -> None:
    """The tiles of one row panel of `rows` rows: the full-height micro-kernel when rows ==
    mr, else each variant in turn from row r0 while that many rows are left. `call(kernel,
    r0)` emits one micro-kernel call at row r0 (None: the panel's first row, full height)."""
    def partial() -> None:
        b.store(i64(0), r0_slot)
        for v in variants:
            r0 = b.load(r0_slot, name="r0")
            more = b.icmp_unsigned(">=", b.sub(rows, r0, name="rleft"), i64(v), name="more")
            with if_then(b, more, name=f"rows{v}"):
                call(kernels[v], r0)
                b.store(add(b, r0, v, "r0.next"), r0_slot)

    if mr not in kernels:  # a static M below mr: every panel is partial
        partial()
        return
    if not variants:  # a static M that mr divides: every panel is full
        call(kernels[mr], None)
        return
    with if_else(b, b.icmp_unsigned("==", rows, i64(mr), name="full"), name="tile") as (then, other):
        with then:
            call(kernels[mr], None)
        with other:
            partial()
