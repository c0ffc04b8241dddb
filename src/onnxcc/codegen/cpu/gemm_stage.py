"""A dense layer's A rows staged per task (kernel/schedule.py `GemmPlan.a_stage`): rows of A
that sit a multiple of 4 KiB apart all map to the same L1 sets, more of them than the L1 has
ways, so the micro-kernel's 12 rows cannot stay in L1 while the B panels stream by. Each task
copies its rows of every k block into a stack block whose row stride is the block's length
plus one cache line, and the micro-kernel reads that in place (x[M, 2048] @ W[2048, 512],
M = 128 / 512: 0.85-0.9x the time of the rows read where they are)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir

from onnxcc.kernel.schedule import GemmPlan

from ..llvm.exprs import F32
from ..llvm.helpers import PTR, for_range, i64, loop_metadata
from .gemm_ir import f32_ptr, mul

if TYPE_CHECKING:
    from .emit import FnCtx

A_STAGE_PAD = 16
"""floats a staged row's stride exceeds the k block by: 64 bytes, so consecutive rows start
one L1 set apart (and stay 64-byte aligned)"""


def stage_block(fctx: FnCtx, g: GemmPlan, panels: int, kc_max: int) -> tuple[ir.Value, ir.Value]:
    """(the task's stack block for `panels` x mr rows of kc_max floats, its row stride: i64)."""
    lds = kc_max + A_STAGE_PAD
    block = fctx.eb.alloca(ir.ArrayType(F32, panels * g.mr * lds), name="astage")
    block.align = 64
    block.type = PTR  # NOTE: llvmlite types allocas as typed pointers; the IR is opaque
    return block, i64(lds)


def stage_rows(b: ir.IRBuilder, module: ir.Module, g: GemmPlan, src: ir.Value, lda_src: ir.Value, dst: ir.Value,
               lda_dst: ir.Value, rows: ir.Value, kcur: ir.Value) -> None:
    """dst[r * lda_dst + t] = src[r * lda_src + t] for r < rows, t < kcur."""
    md = loop_metadata(module, vector_width=g.vl)
    with for_range(b, rows, "as.r", guard=True) as r:
        s_row = f32_ptr(b, src, mul(b, r, lda_src, "as.so"), "as.srow")
        d_row = f32_ptr(b, dst, mul(b, r, lda_dst, "as.do"), "as.drow")
        with for_range(b, kcur, "as.t", guard=True, metadata=md) as t:
            v = b.load(f32_ptr(b, s_row, t, "as.s"), name="as.v", typ=F32, align=4)
            b.store(v, f32_ptr(b, d_row, t, "as.d"), align=4)
