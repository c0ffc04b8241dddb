"""The row tiles of one GEMM row panel: which micro-kernel heights a panel may need and the
dispatch over them ("the full-height tile, else each row variant from r0"), shared by the
plain and the window-mode task functions of gemm.py; and the tasks gemm.py cuts the columns
for where its m blocks are uneven (`column_tasks`)."""

from __future__ import annotations

from collections.abc import Callable

from llvmlite import ir

from ..llvm.helpers import i64, if_else, if_then
from .gemm_call import POOL_CHUNKS_PER_THREAD
from .gemm_ir import add, mul


def column_tasks(b: ir.IRBuilder, tasks: ir.Value, m: ir.Value, mr: int, pm: ir.Value, blocks: ir.Value,
                 per: ir.Value, threads: ir.Value) -> ir.Value:
    """The tasks wanted (gemm.py `_Geometry`: `tasks`, for `blocks` m blocks of `pm` row panels
    of M = `m` rows, `per` over all batches), which the n blocks are cut to reach: twice as many
    on several threads where the m blocks are fewer than the pool's chunks and uneven (panels
    that do not split evenly between them, or a last panel of fewer than mr rows), so the
    threads' shares even out. mnasnet0_5's 1x1 convs at M = 60 (5 row panels) were 4 blocks
    of 2, 1, 1 and 1 panels, 3:2 between 2 threads; as 8 tasks, about even."""
    chunks = mul(b, threads, POOL_CHUNKS_PER_THREAD, "gemm.chunks")
    uneven = b.or_(b.icmp_unsigned("!=", b.urem(pm, blocks, name="gemm.pm.rem"), i64(0), name="gemm.pm.uneven"),
                   b.icmp_unsigned("!=", b.urem(m, i64(mr), name="gemm.m.rem"), i64(0), name="gemm.m.partial"),
                   name="gemm.uneven")
    few = b.and_(b.icmp_unsigned("<", per, chunks, name="gemm.blocks.few"),
                 b.icmp_unsigned(">", threads, i64(1), name="gemm.par"), name="gemm.few")
    return b.select(b.and_(uneven, few, name="gemm.rebalance"), mul(b, tasks, 2, "gemm.want2"), tasks,
                    name="gemm.want.n")


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
