"""GEMM codegen: a compute with a `GemmPlan` schedule (see kernel/schedule.py) as a packed,
cache-blocked, register-tiled matrix multiply with its epilogue.

The compute is read as `C[bt, m, n] = epilogue(sum_k A(bt, m, k) * B(bt, n, k))`: for each
combination bt of the batch vars an [M, N] matrix of the output with contiguous rows at a
constant stride (n are the output's trailing vars, m a consecutive run); A and B are arbitrary
expressions (loads through any affine or non-affine index, casts, the padding selects of a
convolution), evaluated only by the packers, so the micro-kernel reads nothing but contiguous
panels:

1. B is packed once per call into the scratch region (or at compile time when it reads
   only constants): [combinations of B's batch vars][N panels][K][nr] floats, columns past
   N zero. One
   onnxcc_parallel_for over (batch, panel). When A needs no packing per task (prepacked
   or read in place), a big packed B is packed and multiplied in windows of panels
   (`WINDOW_BYTES`), each multiplied right after it is packed, while it is still in the
   caches (steps 1 and 2 alternate per window).
2. One onnxcc_parallel_for over tasks (bt, m block, n block). A task, for each block of
   the contraction (kc values of K, cut along the first reduce var so multi-var reductions
   such as a conv's (c, kh, kw) need no division), packs its A rows into a stack buffer
   [panels][kc][mr], then for each B panel and A panel calls the micro-kernel. An A that
   is a plain strided load (`GemmPlan.a_direct`) is not packed: the micro-kernel reads its
   rows in place through a row pointer and stride. An A that reads only constants (a
   conv's weights, `GemmPlan.a_packed`) was packed at compile time, for all of K.
3. The micro-kernel (one internal function per (rows, nr)) keeps rows x nr/vl vector
   accumulators in registers (several sets when there are too few to cover the FMA
   latency), runs the k loop unrolled by UNROLL with one broadcast of A and nr/vl loads of
   B per step, and adds into C with masked vector loads/stores (columns past N) — or
   stores, for the first k block. Rows past M are handled by calling the 8/4/2/1-row
   variants on the rest of the panel.
4. After the last k block of a tile, the epilogue (bias, activation, residual...) runs
   once over the tile, reading the sum back from C (hot in L1).

Blocks: m blocks of at most `mc_panels` panels, and enough blocks (m, and n when M is
small) to give about `tasks` work items per thread (onnxcc_num_threads()), their count a
multiple of the threads; panels are split evenly between blocks.
A contraction that may be empty (K = 0) runs the plain loop nest instead; static shapes too
small for packing to pay (M*N*K < `min_work`) never get a GemmPlan; a GEMM smaller than
PARALLEL_MIN_WORK stays on the calling thread.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from contextlib import ExitStack
from typing import TYPE_CHECKING

import sympy
from llvmlite import ir

from onnxcc.ir import DType, canon
from onnxcc.kernel.expr import Expr, Load, Var
from onnxcc.kernel.program import Compute
from onnxcc.kernel.schedule import GemmPlan

from ..llvm.exprs import F32, ExprEmitter, known_positive
from ..llvm.helpers import (
    I1,
    I8,
    I32,
    I64,
    PTR,
    for_range,
    get_or_declare,
    i32,
    i64,
    if_else,
    if_then,
    loop_metadata,
    scalar_loop_metadata,
)
from . import gemm_gemv
from . import gemm_window as gw
from .gemm_columns import column_binder, column_segments
from .gemm_dense import dense_blocks, stage_block, stage_rows, stage_runs
from .gemm_flat import flat_columns_ok
from .gemm_ir import RowIndex
from .gemm_ir import add as _add
from .gemm_ir import ceildiv as _ceildiv
from .gemm_ir import ceildiv_v as _ceildiv_v
from .gemm_ir import f32_ptr as _f32_ptr
from .gemm_ir import mul as _mul
from .gemm_ir import product as _product
from .gemm_ir import umax as _umax
from .gemm_ir import umin as _umin
from .gemm_ir import unflatten as _unflatten
from .gemm_rows import column_tasks
from .gemm_rows import row_tiles as _row_tiles
from .gemm_rows import tile_heights as _tile_heights
from .gemm_static import dense_rows, narrow_wins, rows_outer
from .gemm_ukr import ukr_function

if TYPE_CHECKING:
    from .emit import FnCtx, KernelEmitter

NUM_THREADS = "onnxcc_num_threads"
"""`int onnxcc_num_threads(void)`: the runtime pool's threads, the caller included"""
PARALLEL_MIN_WORK = 1 << 17
"""multiply-adds below which a GEMM runs on the calling thread (waking the pool costs more)"""


# ---- geometry: every size a GEMM function needs, from the symbols ---------------------------


class _Geometry:
    """Run-time sizes and blocking of one GEMM compute, computed at the builder's position
    (the same arithmetic in every function, so they agree)."""

    def __init__(self, fctx: FnCtx, b: ir.IRBuilder, c: Compute, g: GemmPlan, threads: ir.Value):
        ext = dict(zip(c.var_names, c.extents))
        strides = fctx.strides(c.out)
        self.stride = dict(zip(c.var_names, strides))
        self.ldc = self.stride[g.m[-1]]
        self.batch_ext = [fctx.dim(ext[v]) for v in g.batch]
        self.bb_ext = [fctx.dim(ext[v]) for v in g.b_batch_vars]
        self.m_ext = [fctx.dim(ext[v]) for v in g.m]
        self.n_ext = [fctx.dim(ext[v]) for v in g.n]
        self.k_ext = [fctx.entry_em.emit(x) for _, x in g.reduce.vars]
        self.Bt = _product(b, self.batch_ext, "gemm.Bt")
        self.M = _product(b, self.m_ext, "gemm.M")
        self.N = _product(b, self.n_ext, "gemm.N")
        self.K0 = self.k_ext[0]
        self.K = _mul(b, self.K0, g.k_inner, "gemm.K")
        self.Pm = _ceildiv(b, self.M, g.mr, "gemm.Pm")
        self.Pn = _ceildiv(b, self.N, g.nr, "gemm.Pn")
        if g.window is not None:  # tiles over the padded grid: OH rows of X columns
            self.Xw = fctx.dim(g.window.x_ext)
            self.grid = _mul(b, self.n_ext[0], self.Xw, "gemm.grid")
            self.Pn = _ceildiv(b, self.grid, g.nr, "gemm.Pn")
        self.kco = max(1, g.kc // g.k_inner)
        self.npc = _ceildiv(b, self.K0, self.kco, "gemm.npc")
        # m blocks: at most mc_panels panels each (the A block stays in L2), and at least
        # `tasks` per thread in all, rounded up to a multiple of the threads (balance);
        # n blocks only when the batches and m blocks are too few
        # interleaved (one batch at a time, see _run): the blocks split one batch
        self.inter: ir.Value | None = None
        bt_split = self.Bt
        win_copy = g.window is not None and g.window.source is None
        if g.b_interleaved or (win_copy and g.batch and tuple(g.b_batch_vars) == tuple(g.batch)):
            if g.window is not None:  # one batch's padded planes
                nbytes = _mul(b, _mul(b, fctx.dim(g.window.y_ext), self.Xw, "gemm.b.bytes"), g.window.planes * 4,
                              "gemm.b.bytes")
            else:
                nbytes = _mul(b, _mul(b, self.Pn, self.K, "gemm.b.bytes"), g.nr * 4, "gemm.b.bytes")
            self.inter = b.and_(b.icmp_unsigned(">", self.Bt, i64(1), name="gemm.bt.many"),
                                b.icmp_unsigned(">=", nbytes, i64(INTERLEAVE_MIN_BYTES), name="gemm.b.big"),
                                name="gemm.inter")
            bt_split = b.select(self.inter, i64(1), self.Bt, name="gemm.bt.split")
        tasks = _mul(b, threads, g.tasks, "gemm.want")
        by_size = _ceildiv(b, self.Pm, g.mc_panels, "gemm.nic.size")
        per_batch = _ceildiv_v(b, tasks, _umax(b, bt_split, i64(1), "gemm.bt1"), "gemm.nic.tasks")
        n_ic = _umax(b, by_size, _umin(b, self.Pm, per_batch, "gemm.nic.tasks"), "gemm.nic")
        n_ic = _mul(b, _ceildiv_v(b, n_ic, threads, "gemm.nic.t"), threads, "gemm.nic.r")
        self.n_ic = _umax(b, _umin(b, n_ic, self.Pm, "gemm.nic"), i64(1), "gemm.nic")
        self._tasks, self._per = tasks, _umax(b, _mul(b, bt_split, self.n_ic, "gemm.bic"), i64(1), "gemm.bic")
        self._tasks_n = column_tasks(b, tasks, self.M, g.mr, self.Pm, self.n_ic, self._per, threads)
        self.threads = threads
        self.nbB = _product(b, self.bb_ext, "gemm.nbB")
        self.P0: ir.Value = i64(0)
        self.Pc: ir.Value = self.Pn
        self.n_jc, self.n_tasks = self.n_blocks(b, self.Pn)
        if dense_rows(g):
            self._dense_tasks(b)

    def _dense_tasks(self, b: ir.IRBuilder) -> None:
        """A dense layer's tasks: one row panel each, the columns cut (gemm_dense.py)."""
        rows, self.n_jc = dense_blocks(b, self.Bt, self.Pm, self.Pn, self._tasks, self.threads)
        self.n_ic, self._per = self.Pm, rows
        self.n_tasks = _mul(b, rows, self.n_jc, "dense.tasks")

    def n_blocks(self, b: ir.IRBuilder, panels: ir.Value) -> tuple[ir.Value, ir.Value]:
        """(n blocks, tasks) when the tasks cover `panels` B panels."""
        n_jc = _umax(b, _umin(b, _ceildiv_v(b, self._tasks_n, self._per, "gemm.njc.want"),
                              _umax(b, panels, i64(1), "gemm.pn1"), "gemm.njc"), i64(1), "gemm.njc")
        return n_jc, _mul(b, _mul(b, self.Bt, self.n_ic, "gemm.tasks"), n_jc, "gemm.tasks")

    def set_window(self, b: ir.IRBuilder, pctx: ir.Value) -> None:
        """Read the window of B panels this call covers (panels [P0, P0 + Pc), packed at
        slots [0, Pc) of each batch's packed B) from the ctx (see `_run`)."""
        self.P0 = b.load(_xctx_slot(b, pctx, 7), name="gemm.p0", align=8, typ=I64)
        self.Pc = b.load(_xctx_slot(b, pctx, 8), name="gemm.pc", align=8, typ=I64)
        self.n_jc, self.n_tasks = self.n_blocks(b, self.Pc)


def _parallel(kem: KernelEmitter, c: Compute) -> bool:
    par = getattr(c.schedule, "parallel", None)
    return kem.opts.parallel if par is None else bool(par)


def _threads(kem: KernelEmitter, c: Compute, b: ir.IRBuilder) -> ir.Value:
    """The pool's thread count (fixed at its first use, so every function agrees), or 1."""
    if not _parallel(kem, c):
        return i64(1)
    fn = get_or_declare(kem.module, NUM_THREADS, ir.FunctionType(I32, []))
    n = b.sext(b.call(fn, [], name="threads"), I64, name="threads")
    return _umax(b, n, i64(1), "threads")


def emit_gemm(kem: KernelEmitter, ctx: FnCtx, c: Compute, g: GemmPlan, fallback: Callable[[], None]) -> None:
    """Emit compute `c` through the GEMM path at `ctx.b` (its domain is known nonempty);
    `fallback()` emits the plain loop nest, used when the contraction may be empty (then
    the output is the epilogue of 0, which the packed path would never write)."""
    b = ctx.b
    geo = _Geometry(ctx, b, c, g, _threads(kem, c, b))
    if all(known_positive(x) for _, x in g.reduce.vars):
        _run(kem, ctx, c, g, geo)
        return
    with if_else(b, b.icmp_signed(">", geo.K, i64(0), name="gemm.k.pos"), name=f"{c.out}.gemm") as (then, other):
        with then:
            _run(kem, ctx, c, g, geo)
        with other:
            fallback()


def _run(kem: KernelEmitter, ctx: FnCtx, c: Compute, g: GemmPlan, geo: _Geometry) -> None:
    from .emit import PAR_FOR_FNTY, PARALLEL_FOR

    b = ctx.b
    # the ctx of every body below: the parallel ctx's fields, the batch and window fields
    # (`_XCTX_TY`), then the addresses the bodies read (cpu/frame.py)
    pctx = kem.frame_ctx(ctx, c, len(_XCTX_TY.elements), own=not g.b_const)
    parallel = _parallel(kem, c)
    runtime = get_or_declare(kem.module, PARALLEL_FOR, PAR_FOR_FNTY)

    work = _mul(b, _mul(b, geo.M, geo.N, "gemm.mn"), _mul(b, geo.K, geo.Bt, "gemm.kb"), "gemm.work")
    big = b.icmp_unsigned(">=", work, i64(PARALLEL_MIN_WORK), name="gemm.big")

    inter = _interleaved(g)

    def call(fn: ir.Function, n: ir.Value) -> None:
        if parallel:
            with if_else(b, big, name="gemm.par") as (then, other):
                with then:
                    b.call(runtime, [n, fn, pctx])
                with other:
                    b.call(fn, [i64(0), n, pctx])
        else:
            b.call(fn, [i64(0), n, pctx])
        st = b.load(ctx.status, name="status", align=4)
        with if_then(b, b.icmp_signed("!=", st, i32(0), name="failed"), name="status", likely=False):
            b.ret(st)

    narrow = _narrow_choice(kem, ctx, c, g, geo) if g.window is not None else None
    made: dict[int, ir.Function] = {}

    def task_of(gp: GemmPlan) -> ir.Function:  # once per plan, however many call sites (LLVM time)
        if id(gp) not in made:
            made[id(gp)] = _task_function(kem, c, gp)
        return made[id(gp)]

    def run_tasks(per_batch: bool) -> None:
        # the window's tiles, `narrow`'s one-vector-wide ones when they waste fewer columns
        def count(gm: _Geometry) -> ir.Value:
            return _mul(b, gm.n_ic, gm.n_jc, "win.per.batch") if per_batch else gm.n_tasks
        if narrow is None or narrow[2] is True:  # one choice, known at compile time
            call(task_of(narrow[0] if narrow else g), count(narrow[1] if narrow else geo))
            return
        g_n, geo_n, use = narrow
        with if_else(b, use, name="win.narrow") as (then, other):
            with then:
                call(task_of(g_n), count(geo_n))
            with other:
                call(task_of(g), count(geo))

    if g.window is not None and g.window.source is not None:  # B read in place: no copy
        run_tasks(False)
        return
    if not g.b_const:
        if kem.plan.scratch_offset is None:
            from onnxcc.errors import CompileError

            raise CompileError(f"kernel {kem.program.name}: compute {c.out} packs B into scratch, but the "
                               "memory plan reserves none (use kernel.plan_memory.reserve_scratch)")
        if g.window is not None:  # the padded copy of the input, then every task on it
            w = g.window
            nplanes = _mul(b, geo.nbB, w.planes, "win.planes")
            gw.zero_slack(b, gw.scratch_base(kem, ctx), gw.plane_floats(ctx, w), nplanes, gw.slack_floats(ctx, g))
            pad = gw.pad_function(kem, c, g, lambda fb, fp: _mul(fb, fb.load(_xctx_slot(fb, fp, 6), name="bt",
                                                                              align=8, typ=I64), w.planes, "pad.off"))
            if geo.inter is None:
                _xctx_store(b, pctx, 6, i64(0))
                call(pad, nplanes)
                run_tasks(False)
                return
            # one batch at a time when a batch's planes are big (as packed B, see below):
            # its tiles read the planes while they are in the caches
            with if_else(b, geo.inter, name="win.inter") as (then, other):
                with then:
                    with for_range(b, geo.Bt, "win.bt", guard=True) as bt:
                        _xctx_store(b, pctx, 6, bt)
                        call(pad, i64(w.planes))
                        run_tasks(True)
                with other:
                    _xctx_store(b, pctx, 6, i64(0))
                    call(pad, nplanes)
                    run_tasks(False)
            return
        def packed(g: GemmPlan, geo: _Geometry) -> None:  # pack B per window, then the tiles
            pack, task = _pack_b_function(kem, c, g), _task_function(kem, c, g)

            def windows(slots: ir.Value, per_batch: bool) -> None:
                # the panels in windows of about WINDOW_BYTES of packed B: pack a window, run
                # its tasks while it is still in the caches (a conv's whole im2col matrix,
                # packed before any of it is read, is several MB that come back from DRAM)
                panel = _mul(b, geo.K, g.nr * 4, "gemm.panel.bytes")
                want = b.udiv(i64(WINDOW_BYTES), _umax(b, _mul(b, slots, panel, "gemm.win.b"), i64(1), "gemm.w1"),
                              name="gemm.win.want")
                want = _umax(b, want, _mul(b, geo.threads, g.tasks, "gemm.win.min"), "gemm.win")
                # only when A is not packed per task (prepacked conv weights, or read in place):
                # a task packs its A rows again in every window
                pcw = _umin(b, want, geo.Pn, "gemm.win") if g.a_const or g.a_direct else geo.Pn
                with for_range(b, _ceildiv_v(b, geo.Pn, pcw, "gemm.nwin"), "gemm.w", guard=True) as w:
                    p0 = _mul(b, w, pcw, "gemm.p0")
                    pc = _umin(b, pcw, b.sub(geo.Pn, p0, name="gemm.pleft"), "gemm.pc")
                    _xctx_store(b, pctx, 7, p0)
                    _xctx_store(b, pctx, 8, pc)
                    n_jc, n_tasks = geo.n_blocks(b, pc)
                    call(pack, _mul(b, slots, pc, "gemm.packb.items"))
                    call(task, _mul(b, geo.n_ic, n_jc, "gemm.per.batch") if per_batch else n_tasks)

            if inter:
                # one batch at a time when a batch's packed B is big: pack it into batch 0's
                # panels, run its tasks (its panels are still in the caches; all batches'
                # panels at once, written before any is read, are not)
                with if_else(b, geo.inter, name="gemm.inter") as (then, other):
                    with then:
                        with for_range(b, geo.Bt, "gemm.bt", guard=True) as bt:
                            _xctx_store(b, pctx, 6, bt)
                            windows(i64(1), True)
                    with other:
                        _xctx_store(b, pctx, 6, i64(0))
                        windows(geo.nbB, False)
                return
            _xctx_store(b, pctx, 6, i64(0))
            windows(geo.nbB, False)

        # a conv's packed im2col columns with its weights prepacked: one-vector-wide tiles where
        # they waste fewer columns (silero's convs over 1 to 4 frames fill 48-wide tiles to a
        # twelfth), decided per call like the window tiles
        packed_narrow = _narrow_choice(kem, ctx, c, g, geo) if g.a_const and g.window is None else None
        if packed_narrow is None or packed_narrow[2] is True:  # one choice, known at compile time
            packed(*(packed_narrow[:2] if packed_narrow else (g, geo)))
            return
        g_n, geo_n, use = packed_narrow
        with if_else(b, use, name="gemm.narrow") as (then, other):
            with then:
                packed(g_n, geo_n)
            with other:
                packed(g, geo)
        return
    call(_task_function(kem, c, g), geo.n_tasks)


NARROW_EFFICIENCY = 85
"""percent of a wide tile's useful work per FMA that a one-vector-wide window tile keeps
(it loads one A broadcast per FMA instead of one per nr/vl FMAs; see `_narrow_choice`)"""


def _narrow_choice(kem: KernelEmitter, ctx: FnCtx, c: Compute, g: GemmPlan, geo: _Geometry
                   ) -> tuple[GemmPlan, _Geometry, ir.Value | bool] | None:
    """For a GEMM packing B per call (window mode, or a conv's packed columns) with tiles several
    vectors wide: the plan with one-vector-wide
    tiles, its geometry, and whether it runs (an i1 decided per call). A conv's small output
    planes (7x7 = 49, 4x4 = 16 columns per batch) fill a 48-column tile to a third or less,
    every FMA of the empty vectors wasted; one-vector tiles waste at most vl - 1 columns.
    They run when their padded columns, over the efficiency they keep, are fewer than the
    wide tiles' padded columns (None / True when static extents decide it: the wide / narrow
    tiles alone)."""
    if g.nr <= g.vl or g.b_const:
        return None
    b = ctx.b
    g_n = dataclasses.replace(g, nr=g.vl)
    static = narrow_wins(c, g, g_n, NARROW_EFFICIENCY)  # static extents: only the tiles that run are emitted
    if static is False:
        return None
    geo_n = _Geometry(ctx, b, c, g_n, geo.threads)
    if static:
        return g_n, geo_n, True
    wide = _mul(b, geo.Pn, g.nr * NARROW_EFFICIENCY, "win.wide.cols")
    narrow = _mul(b, geo_n.Pn, g.vl * 100, "win.narrow.cols")
    return g_n, geo_n, b.icmp_unsigned("<", narrow, wide, name="win.narrow")


WINDOW_BYTES = 1 << 19
"""packed B bytes per window of B panels (see `_run`): a window is packed, then multiplied
while it is in the L2 caches"""
INTERLEAVE_MIN_BYTES = 1 << 19
"""packed B bytes of one batch from which a GEMM with several batches packs and multiplies
one batch at a time (below it, one parallel call per batch costs more than it saves)"""
_XCTX_TY = ir.LiteralStructType([PTR, PTR, PTR, PTR, PTR, PTR, I64, I64, I64])
"""the kernel's parallel ctx (emit.py's: syms, inputs, outputs, workspace, status, hoisted), then the batch an
interleaved GEMM's body functions work on (0 when not interleaved) and the window of B
panels of a GEMM that packs B per call (first panel, panel count)"""


def _interleaved(g: GemmPlan) -> bool:
    """Whether the GEMM may pack and multiply one batch at a time (`GemmPlan.b_interleaved`;
    decided at run time): its body functions read the batch and the mode from the ctx."""
    return g.b_interleaved


def _xctx_slot(b: ir.IRBuilder, pctx: ir.Value, k: int) -> ir.Value:
    slot = b.gep(pctx, [i32(0), i32(k)], inbounds=True, name=f"xctx.{k}", source_etype=_XCTX_TY)
    slot.type = PTR  # NOTE: llvmlite types GEPs as typed pointers; the IR is opaque
    return slot


def _xctx_store(b: ir.IRBuilder, pctx: ir.Value, k: int, v: ir.Value) -> None:
    b.store(v, _xctx_slot(b, pctx, k), align=8)


def _batch_items(b: ir.IRBuilder, fn: ir.Function, g: GemmPlan, geo: _Geometry, per: ir.Value
                 ) -> tuple[ir.Value, ir.Value, ir.Value | None]:
    """The function's item range (offset by batch * per: the ctx's batch is 0 when not
    interleaved) and the interleaved flag (i1; None: the GEMM never interleaves)."""
    begin, end, pctx = fn.args
    if geo.inter is None:
        return begin, end, None
    off = _mul(b, b.load(_xctx_slot(b, pctx, 6), name="bt", align=8, typ=I64), per, "items.off")
    return _add(b, begin, off, "begin"), _add(b, end, off, "end"), geo.inter


# ---- operand packing --------------------------------------------------------------------------


def _scratch_ptr(kem: KernelEmitter, fctx: FnCtx) -> ir.Value:
    return fctx.workspace_at(kem.plan.scratch_offset, ("scratch",), "gemm.scratch")


def _packed_b_ptr(kem: KernelEmitter, fctx: FnCtx, g: GemmPlan) -> ir.Value:
    if not g.b_const:
        return _scratch_ptr(kem, fctx)
    return fctx.global_ptr(_const_global(kem, g.b_packed))


def _const_global(kem: KernelEmitter, data) -> ir.Value:
    """A 64-byte aligned internal constant holding `data`'s bytes (shared by content)."""
    raw = bytearray(data.tobytes())
    gname = f"onnxcc.const.{hashlib.sha1(raw).hexdigest()[:20]}.{len(raw)}"
    gv = kem.module.globals.get(gname)
    if gv is None:
        ty = ir.ArrayType(I8, len(raw))
        gv = ir.GlobalVariable(kem.module, ty, name=gname)
        gv.global_constant = True
        gv.linkage = "internal"
        gv.unnamed_addr = True
        gv.align = 64
        gv.initializer = ir.Constant(ty, raw)
    return gv


class _KLoops:
    """Nested loops over the reduce vars (the first over [lo, lo + count), the others whole),
    binding them in an emitter; `flat` is the row-major position inside the block."""

    def __init__(self, b: ir.IRBuilder, em: ExprEmitter, g: GemmPlan, geo: _Geometry,
                 lo: ir.Value | None = None, count: ir.Value | None = None):
        self.b, self.em, self.g, self.geo = b, em, g, geo
        self.lo = lo if lo is not None else i64(0)
        self.count = count if count is not None else geo.K0
        self.flat: ir.Value | None = None

    def __enter__(self) -> _KLoops:
        b, em, g = self.b, self.em, self.g
        self._st = ExitStack()
        flat: ir.Value = i64(0)
        for j, ((v, x), e) in enumerate(zip(g.reduce.vars, self.geo.k_ext)):
            if j == 0:
                local = self._st.enter_context(for_range(b, self.count, f"{v.name}.l", guard=True))
                idx = _add(b, self.lo, local, v.name) if not (isinstance(self.lo, ir.Constant)
                                                              and self.lo.constant == 0) else local
                flat = local
            else:
                idx = self._st.enter_context(for_range(b, e, v.name, guard=True))
                flat = _add(b, _mul(b, flat, e, "kf"), idx, "kf")
            em.push({v.name: idx}, {v.name: x})
            self._st.callback(em.pop)
        self.flat = flat
        return self

    def __exit__(self, *exc) -> None:
        self._st.__exit__(*exc)


def _bind(em: ExprEmitter, vals: dict[str, ir.Value], exts: dict[str, object]) -> None:
    em.push(vals, {n: exts[n] for n in vals})


def _run_loop_metadata(module: ir.Module, vl: int, masked_tail: bool = False) -> ir.MDValue:
    """`!llvm.loop` for a run of at most nr columns: vectorise by vl lanes without
    interleaving (interleaved vector bodies would need more iterations than a run has).
    `masked_tail`: the last partial vector runs masked instead of as a scalar loop (runs
    whose lengths are rarely multiples of vl: a window tile's row segments)."""
    md = loop_metadata(module, vector_width=vl)
    extra = [module.add_metadata([ir.MetaDataString(module, "llvm.loop.interleave.count"), i32(1)])]
    if masked_tail:
        extra.append(module.add_metadata([ir.MetaDataString(module, "llvm.loop.vectorize.predicate.enable"),
                                          ir.Constant(I1, 1)]))
    md.operands = (*md.operands, *extra)
    return md


def _flat_columns(kem: KernelEmitter, c: Compute, g: GemmPlan) -> bool:
    """Whether B is a plain f32 load whose last indices are the n vars themselves, over
    trailing dims of their extents (past the first): its columns are then consecutive in
    memory, and column j is element j of the last n var's dim read flat."""
    ld = g.b
    if not isinstance(ld, Load) or ld.dtype is not DType.f32 or len(ld.indices) < len(g.n):
        return False
    tail = ld.indices[len(ld.indices) - len(g.n):]
    if any(not isinstance(i, Var) or i.name != n for i, n in zip(tail, g.n)):
        return False
    shape = kem.program.buffers[ld.buffer].shape[len(ld.indices) - len(g.n):]
    ext = dict(zip(c.var_names, c.extents))
    return all(sympy.sympify(shape[j]) == sympy.sympify(ext[n]) for j, n in enumerate(g.n) if j > 0)


def _pack_b_function(kem: KernelEmitter, c: Compute, g: GemmPlan) -> ir.Function:
    """Items (bB, panel): B[bB][panel][k][col] = b(batch vars, n = panel*nr + col, k)."""
    fn, fctx = kem.body_function(f"gemm.packb.{c.out}")
    b = fctx.b
    geo = _Geometry(fctx, b, c, g, _threads(kem, c, b))
    geo.set_window(b, fn.args[2])
    begin, end, inter = _batch_items(b, fn, g, geo, geo.Pc)
    ext = dict(zip(c.var_names, c.extents))
    base = _scratch_ptr(kem, fctx)
    NR = g.nr
    zero = ir.Constant(F32, 0.0)
    em = ExprEmitter(fctx, b)
    em.hoist(g.b, guarded=True)
    with for_range(b, end, "it", start=begin, guard=True) as it:
        bb = b.udiv(it, geo.Pc, name="bb")
        pl = b.urem(it, geo.Pc, name="pl")  # the panel's slot in the window
        pn = _add(b, geo.P0, pl, "pn")
        _bind(em, _unflatten(b, bb, geo.bb_ext, g.b_batch_vars), ext)
        em.hoist(g.b, guarded=True)
        slot_bb = bb if inter is None else b.select(inter, i64(0), bb, name="bb.slot")
        dst = _f32_ptr(b, base, _mul(b, _add(b, _mul(b, slot_bb, geo.Pc, "bp"), pl, "bp"),
                                     _mul(b, geo.K, NR, "panel"), "bp.off"), "bpanel")
        j0 = _mul(b, pn, NR, "j0")
        ncols = _umin(b, b.sub(geo.N, j0, name="nleft"), i64(NR), "ncols")

        if not g.b_k_inner and len(g.n) > 1 and _flat_columns(kem, c, g):
            # B's rows are contiguous over all the n vars (a 1x1 conv's (oh, ow)): the
            # columns of a panel are one run, read as the flat index of the last var
            md = _run_loop_metadata(kem.module, g.vl)
            with _KLoops(b, em, g, geo) as kl:
                row = _f32_ptr(b, dst, _mul(b, kl.flat, NR, "row"), "brow")
                _bind(em, {n: i64(0) for n in g.n[:-1]}, ext)
                em.hoist(g.b, guarded=True)
                with for_range(b, ncols, "t", guard=False, metadata=md) as t:
                    _bind(em, {g.n[-1]: _add(b, j0, t, g.n[-1])}, ext)
                    b.store(em.emit(g.b), _f32_ptr(b, row, t, "bdst"), align=4)
                    em.pop()
                em.pop()
                with for_range(b, i64(NR), "cz", start=ncols, guard=True) as cz:
                    b.store(zero, _f32_ptr(b, row, cz, "bzero"), align=4)
        elif not g.b_k_inner and len(g.n) > 1:
            # several n vars (a conv's (oh, ow)): runs of columns along the last var, so
            # the inner loop walks the input contiguously (and vectorises, padding masked)
            seg_cc, seg_last, leads, nseg = column_segments(b, fctx, g.n, geo.n_ext, j0, ncols, NR)

            def seg_at(a: ir.Value, i: ir.Value, name: str) -> ir.Value:
                return b.load(b.gep(a, [i], inbounds=True, name=f"{name}.p", source_etype=I64), name=name,
                              align=8, typ=I64)

            last = g.n[-1]
            with _KLoops(b, em, g, geo) as kl:
                row = _f32_ptr(b, dst, _mul(b, kl.flat, NR, "row"), "brow")
                with for_range(b, nseg, "seg", guard=False) as si:
                    cc0 = seg_at(seg_cc, si, "seg.c0")
                    cc1 = seg_at(seg_cc, _add(b, si, 1, "seg.n"), "seg.c1")
                    l0 = seg_at(seg_last, si, f"{last}.0")
                    _bind(em, {n: seg_at(a, si, n) for n, a in leads.items()}, ext)
                    em.hoist(g.b, guarded=True)
                    srow = _f32_ptr(b, row, cc0, "bseg")
                    md = _run_loop_metadata(kem.module, g.vl)
                    # NOTE: splitting each run into border scans and a select-free interior
                    # measured 15-20% slower on the sample convnet (LLVM already turns the
                    # guarded loads into masked vector loads; the scans only add overhead)
                    with for_range(b, b.sub(cc1, cc0, name="seg.len"), "t", guard=False, metadata=md) as t:
                        _bind(em, {last: _add(b, l0, t, last)}, ext)
                        b.store(em.emit(g.b), _f32_ptr(b, srow, t, "bdst"), align=4)
                        em.pop()
                    em.pop()
                with for_range(b, i64(NR), "cz", start=ncols, guard=True) as cz:
                    b.store(zero, _f32_ptr(b, row, cz, "bzero"), align=4)
        elif not g.b_k_inner:
            bind_n = column_binder(b, fctx, em, g.n, geo.n_ext, ext, j0, ncols, NR)
            with _KLoops(b, em, g, geo) as kl:
                row = _f32_ptr(b, dst, _mul(b, kl.flat, NR, "row"), "brow")
                md = _run_loop_metadata(kem.module, g.vl) if len(g.n) == 1 else None
                with for_range(b, ncols, "cc", guard=False, metadata=md) as cc:
                    bind_n(cc)
                    b.store(em.emit(g.b), _f32_ptr(b, row, cc, "bdst"), align=4)
                    em.pop()
                with for_range(b, i64(NR), "cz", start=ncols, guard=True) as cz:
                    b.store(zero, _f32_ptr(b, row, cz, "bzero"), align=4)
        else:
            bind_n = column_binder(b, fctx, em, g.n, geo.n_ext, ext, j0, ncols, NR)
            with for_range(b, ncols, "cc", guard=False) as cc:
                bind_n(cc)
                em.hoist(g.b, guarded=True)
                with _KLoops(b, em, g, geo) as kl:
                    off = _add(b, _mul(b, kl.flat, NR, "row"), cc, "boff")
                    b.store(em.emit(g.b), _f32_ptr(b, dst, off, "bdst"), align=4)
                em.pop()
            with for_range(b, geo.K, "kz", guard=True) as kz:
                row = _f32_ptr(b, dst, _mul(b, kz, NR, "row"), "brow")
                with for_range(b, i64(NR), "cz", start=ncols, guard=True) as cz:
                    b.store(zero, _f32_ptr(b, row, cz, "bzero"), align=4)
        em.pop()
    b.ret_void()
    fctx.finish()
    return fn


# ---- the task loop ----------------------------------------------------------------------------


def _static_m(c: Compute, g: GemmPlan) -> int | None:
    ext = dict(zip(c.var_names, c.extents))
    m = 1
    for v in g.m:
        d = canon(ext[v])
        if not isinstance(d, int):
            return None
        m *= d
    return m


def _batch_offsets(b: ir.IRBuilder, g, geo, batch_vals: dict, inter) -> tuple[ir.Value, ir.Value]:
    """(B's batch slot, the element offset of this batch's [M, N] matrix in C) for one task's
    batch values; batch 0's panels / planes hold every batch's when interleaved (`inter`)."""
    bB: ir.Value = i64(0)
    for v, e in zip(g.b_batch_vars, geo.bb_ext):
        bB = _add(b, _mul(b, bB, e, "bB"), batch_vals[v], "bB")
    if inter is not None:
        bB = b.select(inter, i64(0), bB, name="bB.slot")
    cbatch: ir.Value = i64(0)
    for v in g.batch:
        cbatch = _add(b, cbatch, _mul(b, batch_vals[v], geo.stride[v], "cb"), "cb")
    return bB, cbatch


def _window_task_function(kem: KernelEmitter, c: Compute, g: GemmPlan) -> ir.Function:
    """Tasks of a window-mode GEMM (kernel/conv_window.py): each tile of the padded grid is
    multiplied (one k block, B read from the padded copy) into a stack tile, whose columns
    that are outputs (not the grid's padding columns) are copied into C; then the epilogue
    runs on them."""
    w = g.window
    assert w is not None and g.a_packed is not None
    fn, fctx = kem.body_function(f"gemm.{c.out}")
    b = fctx.b
    geo = _Geometry(fctx, b, c, g, _threads(kem, c, b))
    begin, end, inter = _batch_items(b, fn, g, geo, _mul(b, geo.n_ic, geo.n_jc, "per.batch"))
    ext = dict(zip(c.var_names, c.extents))
    MR, NR = g.mr, g.nr
    apack = fctx.global_ptr(_const_global(kem, g.a_packed))
    per_batch = _mul(b, gw.plane_floats(fctx, w), w.planes, "win.bfloats")
    offs = gw.offsets_table(fctx, g)
    tile = fctx.eb.alloca(ir.ArrayType(F32, MR * NR), name="win.tile")
    tile.align = 64
    tile.type = PTR  # NOTE: llvmlite types allocas as typed pointers; the IR is opaque
    xp = gw.scratch_base(kem, fctx) if w.source is None else fctx.buffer_ptr(w.source)
    out = fctx.buffer_ptr(c.out)
    heights, variants = _tile_heights(MR, _static_m(c, g))
    ukr = {r: ukr_function(kem.module, r, g) for r in heights}
    grid = gemm_gemv.static_grid(c, g)
    if grid is not None and gemm_gemv.applies(g, grid):  # a few columns: rows in the lanes, one pass over A
        ukr = {r: gemm_gemv.gemv_function(kem.module, r, g, grid) for r in heights}
    r0_slot = fctx.eb.alloca(I64, name="r0")
    em_e = ExprEmitter(fctx, b)
    if g.epilogue is not None:
        em_e.hoist(g.epilogue, guarded=True)
    eops = [o for o in g.row_ops or () if o.load is not None]
    eptrs = [fctx.buffer_ptr(o.load.buffer) for o in eops]  # type: ignore[union-attr]
    # a residual operand is read at the tile's place in C: the stack tile has none, so tiles
    # across padding columns take the plain micro-kernel and the epilogue pass
    staged_in_regs = not any(o.tile for o in eops)
    ukr_plain = ukr if staged_in_regs else {r: ukr_function(kem.module, r, dataclasses.replace(g, row_ops=None))
                                            for r in heights}
    ow_ext = geo.n_ext[1]
    yes = ir.Constant(I1, 1)
    with for_range(b, end, "it", start=begin, guard=True) as it:
        jc, t = b.urem(it, geo.n_jc, name="jc"), b.udiv(it, geo.n_jc, name="t")
        ic, bt = b.urem(t, geo.n_ic, name="ic"), b.udiv(t, geo.n_ic, name="bt")
        pm0 = b.udiv(_mul(b, ic, geo.Pm, "pm0"), geo.n_ic, name="pm0")
        pm1 = b.udiv(_mul(b, _add(b, ic, 1, "ic1"), geo.Pm, "pm1"), geo.n_ic, name="pm1")
        pn0 = b.udiv(_mul(b, jc, geo.Pn, "pn0"), geo.n_jc, name="pn0")
        pn1 = b.udiv(_mul(b, _add(b, jc, 1, "jc1"), geo.Pn, "pn1"), geo.n_jc, name="pn1")
        batch_vals = _unflatten(b, bt, geo.batch_ext, g.batch)
        _bind(em_e, batch_vals, ext)
        bB, cbatch = _batch_offsets(b, g, geo, batch_vals, inter)
        xb = _f32_ptr(b, xp, _mul(b, bB, per_batch, "win.xb"), "win.xb")
        pa0 = _mul(b, gw.a_batch_index(b, g, batch_vals, ext), geo.Pm, "pa0")  # A's batch panels
        with for_range(b, pn1, "pn", start=pn0, guard=True) as pn:
            q0 = _mul(b, pn, NR, "q0")
            qend = _umin(b, _add(b, q0, NR, "qe"), geo.grid, "qend")
            bpanel = _f32_ptr(b, xb, q0, "bpanel")
            oh0 = b.udiv(q0, geo.Xw, name="oh0")
            oh1 = _add(b, b.udiv(b.sub(qend, i64(1), name="ql"), geo.Xw, name="oh1"), 1, "oh1")
            # a tile inside one output row's columns is multiplied straight into C
            rs0 = _mul(b, oh0, geo.Xw, "rs0")
            # (every tile, when the grid has no padding columns: its columns are C's, flat)
            inside = yes if w.kx is None else b.and_(
                b.icmp_unsigned("==", _add(b, oh0, 1, "oh0.1"), oh1, name="one.row"),
                b.icmp_unsigned("<=", qend, b.add(rs0, ow_ext, name="rend0"), name="no.pad"), name="inside")
            j_in = b.add(_mul(b, oh0, ow_ext, "wj0"), b.sub(q0, rs0, name="ow.in"), name="wj.in")
            n_in = b.sub(qend, q0, name="n.in")

            def multiply(kernels: dict, apanel: ir.Value, i0: ir.Value, rows: ir.Value, cptr: ir.Value, ldc: ir.Value,
                         ncols: ir.Value, c_off: ir.Value | None) -> None:
                def eargs(r0: ir.Value) -> list[ir.Value]:
                    # the epilogue's operands from row i0 + r0: a row operand's element, a
                    # tile operand's at the tile's place in C (element offset c_off)
                    if c_off is None:
                        return []
                    row = _add(b, i0, r0, "e.row") if not isinstance(r0, ir.Constant) else i0
                    toff = b.add(c_off, _mul(b, r0, ldc, "e.toff"), name="e.toff")
                    return [_f32_ptr(b, p, toff if o.tile else row, "e.ptr") for o, p in zip(eops, eptrs)]

                def call(kernel: ir.Function, r0: ir.Value | None) -> None:
                    if r0 is None:
                        b.call(kernel, [apanel, bpanel, offs, geo.K, cptr, ldc, yes, ncols, *eargs(i64(0))])
                    else:
                        b.call(kernel, [_f32_ptr(b, apanel, r0, "ap.r"), bpanel, offs, geo.K,
                                        _f32_ptr(b, cptr, _mul(b, r0, ldc, "t.r"), "t.r"), ldc, yes, ncols,
                                        *eargs(r0)])

                _row_tiles(b, kernels, MR, variants, rows, r0_slot, call)

            with for_range(b, pm1, "pm", start=pm0, guard=True) as pm:
                i0 = _mul(b, pm, MR, "i0")
                rows = _umin(b, b.sub(geo.M, i0, name="mleft"), i64(MR), "rows")
                apanel = _f32_ptr(b, apack, _mul(b, _mul(b, _add(b, pa0, pm, "ap"), geo.K, "ap"), MR, "ap"), "apanel")
                crow = _add(b, cbatch, _mul(b, i0, geo.ldc, "wd"), "wd")
                with if_else(b, inside, name="win.in") as (direct, staged):
                    with direct:
                        c_in = b.add(crow, j_in, name="cin")
                        multiply(ukr, apanel, i0, rows, _f32_ptr(b, out, c_in, "cin"), geo.ldc, n_in, c_in)
                        if g.epilogue is not None and not g.row_ops:
                            _epilogue(b, fctx, em_e, c, g, geo, ext, i0, rows, j_in, n_in, masked_tail=True)
                    with staged:
                        in_regs = bool(g.row_ops) and staged_in_regs
                        multiply(ukr_plain, apanel, i0, rows, tile, i64(NR), i64(NR), i64(0) if in_regs else None)
                        _window_copy_out(b, kem, fctx, em_e, c, g, geo, ext, tile, out, crow, i0, rows, q0, qend, oh0,
                                         oh1, ow_ext, epilogue=g.epilogue is not None and not in_regs)
        em_e.pop()
    b.ret_void()
    fctx.finish()
    return fn


def _window_copy_out(b: ir.IRBuilder, kem: KernelEmitter, fctx: FnCtx, em_e: ExprEmitter, c: Compute, g: GemmPlan,
                     geo: _Geometry, ext: dict, tile: ir.Value, out: ir.Value, crow: ir.Value, i0: ir.Value,
                     rows: ir.Value, q0: ir.Value, qend: ir.Value, oh0: ir.Value, oh1: ir.Value, ow_ext: ir.Value,
                     epilogue: bool) -> None:
    """The output columns of a stack tile of grid columns [q0, qend) (grid rows [oh0, oh1))
    into C (rows from element offset `crow`), then (`epilogue`) the epilogue on them."""
    NR = g.nr
    with for_range(b, oh1, "wrow", start=oh0, guard=False) as oh:
        rs = _mul(b, oh, geo.Xw, "rs")
        lo = _umax(b, q0, rs, "wlo")
        hi = _umin(b, qend, b.add(rs, ow_ext, name="rend"), "whi")
        with if_then(b, b.icmp_unsigned(">", hi, lo, name="wany"), name="wseg"):
            cnt = b.sub(hi, lo, name="wcnt")
            j = b.add(_mul(b, oh, ow_ext, "wj"), b.sub(lo, rs, name="ow0"), name="wj")
            src0 = _f32_ptr(b, tile, b.sub(lo, q0, name="tcol"), "wsrc")
            dst0 = _f32_ptr(b, out, b.add(crow, j, name="wd"), "wdst")
            with for_range(b, rows, "wr", guard=False) as r:
                src = _f32_ptr(b, src0, _mul(b, r, NR, "wsr"), "wsr")
                dst = _f32_ptr(b, dst0, _mul(b, r, geo.ldc, "wdr"), "wdr")
                md = _run_loop_metadata(kem.module, g.vl, masked_tail=True)
                with for_range(b, cnt, "wc", guard=False, metadata=md) as t:
                    b.store(b.load(_f32_ptr(b, src, t, "ws"), name="wv", typ=F32, align=4),
                            _f32_ptr(b, dst, t, "wd"), align=4)
            if epilogue:
                _epilogue(b, fctx, em_e, c, g, geo, ext, i0, rows, j, cnt, masked_tail=True)


def _task_function(kem: KernelEmitter, c: Compute, g: GemmPlan) -> ir.Function:
    if g.window is not None:
        return _window_task_function(kem, c, g)
    fn, fctx = kem.body_function(f"gemm.{c.out}")
    b = fctx.b
    geo = _Geometry(fctx, b, c, g, _threads(kem, c, b))
    if not g.b_const:
        geo.set_window(b, fn.args[2])
    begin, end, inter = _batch_items(b, fn, g, geo, _mul(b, geo.n_ic, geo.n_jc, "per.batch"))
    ext = dict(zip(c.var_names, c.extents))
    MR, NR = g.mr, g.nr
    kc_max = geo.kco * g.k_inner
    task_panels = 1 if dense_rows(g) else g.mc_panels  # the row panels of one task, at most
    if g.a_direct:  # A's rows are read in place: its pointer, row stride, strides per index
        a_load = g.a
        a_base_ptr = fctx.buffer_ptr(a_load.buffer)
        a_strides = {i.name: st for i, st in zip(a_load.indices, fctx.strides(a_load.buffer)) if isinstance(i, Var)}
        lda = a_strides[[v for v in g.m if v in a_strides][-1]]  # m vars of extent 1 may read 0
        if g.a_stage:  # a stack block of the task's rows, at a row stride that does not alias in L1
            a_ld, (astage, lda) = lda, stage_block(fctx, g, task_panels, kc_max)
    elif g.a_const:  # packed at compile time, [panel][K][mr]
        apack = fctx.global_ptr(_const_global(kem, g.a_packed))
    else:
        apack = fctx.eb.alloca(ir.ArrayType(F32, task_panels * MR * kc_max), name="apack")
        apack.align = 64
        apack.type = PTR  # NOTE: llvmlite types allocas as typed pointers; the IR is opaque
    bbase = _packed_b_ptr(kem, fctx, g)
    out = fctx.buffer_ptr(c.out)
    heights, variants = _tile_heights(MR, _static_m(c, g))
    ukr = {r: ukr_function(kem.module, r, g) for r in heights}
    r0_slot = fctx.eb.alloca(I64, name="r0")
    em_a = ExprEmitter(fctx, b)
    em_e = ExprEmitter(fctx, b)
    em_a.hoist(g.a, guarded=True)
    if g.epilogue is not None:
        em_e.hoist(g.epilogue, guarded=True)
    # the epilogue in the micro-kernel's registers: per-column operands from the tile's first
    # column, a residual tile at the tile's place in C (same shape as C)
    cops = [o for o in g.col_ops or () if o.load is not None]
    cptrs = [fctx.buffer_ptr(o.load.buffer) for o in cops]  # type: ignore[union-attr]

    with for_range(b, end, "it", start=begin, guard=True) as it:
        jc = b.urem(it, geo.n_jc, name="jc")
        t = b.udiv(it, geo.n_jc, name="t")
        ic = b.urem(t, geo.n_ic, name="ic")
        bt = b.udiv(t, geo.n_ic, name="bt")
        pm0 = b.udiv(_mul(b, ic, geo.Pm, "pm0"), geo.n_ic, name="pm0")
        pm1 = b.udiv(_mul(b, _add(b, ic, 1, "ic1"), geo.Pm, "pm1"), geo.n_ic, name="pm1")
        pn0 = _add(b, geo.P0, b.udiv(_mul(b, jc, geo.Pc, "pn0"), geo.n_jc, name="pn0"), "pn0")
        pn1 = _add(b, geo.P0, b.udiv(_mul(b, _add(b, jc, 1, "jc1"), geo.Pc, "pn1"), geo.n_jc, name="pn1"), "pn1")
        m0 = _mul(b, pm0, MR, "m0")
        m1 = _umin(b, _mul(b, pm1, MR, "m1"), geo.M, "m1")
        batch_vals = _unflatten(b, bt, geo.batch_ext, g.batch)
        _bind(em_a, {v: batch_vals[v] for v in g.a_batch_vars}, ext)
        em_a.hoist(g.a, guarded=True)
        _bind(em_e, batch_vals, ext)
        bB, cbatch = _batch_offsets(b, g, geo, batch_vals, inter)
        if g.a_direct:
            abatch: ir.Value = i64(0)  # element offset of this batch's rows in A
            for v in g.a_batch_vars:
                abatch = _add(b, abatch, _mul(b, batch_vals[v], a_strides[v], "ab"), "ab")
            a_rows = _f32_ptr(b, a_base_ptr, abatch, "a.rows")
        with for_range(b, geo.npc, "pc", guard=True) as pc:
            ko0 = _mul(b, pc, geo.kco, "ko0")
            kcoc = _umin(b, b.sub(geo.K0, ko0, name="kleft"), i64(geo.kco), "kcoc")
            kcur = _mul(b, kcoc, g.k_inner, "kcur")
            k0 = _mul(b, ko0, g.k_inner, "k0")
            if not g.a_direct and not g.a_const:
                _pack_a(b, em_a, g, geo, ext, apack, m0, m1, pm0, ko0, kcoc, kcur, fctx.alloca)
            if g.a_runs:  # the same, each row read run by run where A's index puts it
                stage_runs(b, kem.module, g, em_a, lambda ii: _bind(em_a, _unflatten(b, ii, geo.m_ext, g.m), ext),
                           m0, m1, k0, astage, lda, kcur)
            elif g.a_stage:  # rows [m0, m1) of this k block, row r - m0 at astage + (r - m0) * lda
                stage_rows(b, kem.module, g, _f32_ptr(b, a_rows, _add(b, _mul(b, m0, a_ld, "as.src"), k0, "as.src"),
                                                    "as.src"), a_ld, astage, lda, b.sub(m1, m0, name="as.rows"), kcur)
            first = b.icmp_unsigned("==", pc, i64(0), name="first")
            last = b.icmp_unsigned("==", _add(b, pc, 1, "pc1"), geo.npc, name="last")
            def tile(pn: ir.Value, pm: ir.Value) -> None:
                pslot = b.sub(pn, geo.P0, name="pslot") if not g.b_const else pn
                boff = _mul(b, _add(b, _mul(b, _add(b, _mul(b, bB, geo.Pc, "bo"), pslot, "bo"), geo.K, "bo"),
                                    k0, "bo"), NR, "bo")
                bpanel = _f32_ptr(b, bbase, boff, "bpanel")
                j0 = _mul(b, pn, NR, "j0")
                ncols = _umin(b, b.sub(geo.N, j0, name="nleft"), i64(NR), "ncols")
                i0 = _mul(b, pm, MR, "i0")
                rows = _umin(b, b.sub(geo.M, i0, name="mleft"), i64(MR), "rows")
                if g.a_stage:
                    apanel = _f32_ptr(b, astage, _mul(b, b.sub(i0, m0, name="as.r"), lda, "ap"), "apanel")
                    a_args = [apanel, lda]
                elif g.a_direct:
                    apanel = _f32_ptr(b, a_rows, _add(b, _mul(b, i0, lda, "ap"), k0, "ap"), "apanel")
                    a_args = [apanel, lda]
                elif g.a_const:
                    aoff = _mul(b, _add(b, _mul(b, pm, geo.K, "ap"), k0, "ap"), MR, "ap")
                    apanel = _f32_ptr(b, apack, aoff, "apanel")
                    a_args = [apanel]
                else:
                    apanel = _f32_ptr(b, apack, _mul(b, _mul(b, b.sub(pm, pm0, name="pl"), kcur, "ap"), MR,
                                                     "ap"), "apanel")
                    a_args = [apanel]
                cbase = _f32_ptr(b, out, _add(b, _add(b, cbatch, _mul(b, i0, geo.ldc, "crow"), "coff"), j0,
                                              "coff"), "ctile")
                def eargs(r0: ir.Value | None) -> list[ir.Value]:
                    coff = _add(b, _add(b, cbatch, _mul(b, i0, geo.ldc, "crow"), "coff"), j0, "coff")
                    if r0 is not None:
                        coff = b.add(coff, _mul(b, r0, geo.ldc, "e.toff"), name="e.toff")
                    return [_f32_ptr(b, p, coff if o.tile else j0, "e.ptr") for o, p in zip(cops, cptrs)]

                def call(kernel: ir.Function, r0: ir.Value | None) -> None:
                    if r0 is None:
                        b.call(kernel, [*a_args, bpanel, kcur, cbase, geo.ldc, first, ncols, *eargs(None)])
                        return
                    a_r = ([_f32_ptr(b, apanel, _mul(b, r0, lda, "ap.r"), "ap.r"), lda]
                           if g.a_direct else [_f32_ptr(b, apanel, r0, "ap.r")])
                    b.call(kernel, [*a_r, bpanel, kcur, _f32_ptr(b, cbase, _mul(b, r0, geo.ldc, "c.r"), "c.r"),
                                    geo.ldc, first, ncols, *eargs(r0)])

                _row_tiles(b, ukr, MR, variants, rows, r0_slot, call)
                if g.epilogue is not None and not g.col_ops:
                    with if_then(b, last, name="epilogue"):
                        _epilogue(b, fctx, em_e, c, g, geo, ext, i0, rows, j0, ncols)

            if rows_outer(g):  # a short k: the C tile's stores dominate, written row block by row block
                with for_range(b, pm1, "pm", start=pm0, guard=True) as pm, \
                        for_range(b, pn1, "pn", start=pn0, guard=True) as pn:
                    tile(pn, pm)
            else:
                with for_range(b, pn1, "pn", start=pn0, guard=True) as pn, \
                        for_range(b, pm1, "pm", start=pm0, guard=True) as pm:
                    tile(pn, pm)
        em_e.pop()
        em_a.pop()
    b.ret_void()
    fctx.finish()
    return fn


def _pack_a(b: ir.IRBuilder, em: ExprEmitter, g: GemmPlan, geo: _Geometry, ext: dict, apack: ir.Value,
            m0: ir.Value, m1: ir.Value, pm0: ir.Value, ko0: ir.Value, kcoc: ir.Value, kcur: ir.Value,
            alloca) -> None:
    """Rows [m0, m1) x the k block into apack: [panel - pm0][k][r] (row r of the panel)."""
    MR = g.mr

    def dst(ii: ir.Value, kl: ir.Value) -> ir.Value:
        p = b.sub(b.udiv(ii, i64(MR), name="ap.p"), pm0, name="ap.p")
        r = b.urem(ii, i64(MR), name="ap.r")
        off = _add(b, _mul(b, _add(b, _mul(b, p, kcur, "ap.o"), kl, "ap.o"), MR, "ap.o"), r, "ap.o")
        return _f32_ptr(b, apack, off, "adst")

    if g.a_k_inner:
        rix = RowIndex(b, alloca, m0, geo.m_ext, g.m) if len(g.m) > 1 else None
        with for_range(b, m1, "ii", start=m0, guard=True) as ii:
            mvals = rix.values() if rix else _unflatten(b, ii, geo.m_ext, g.m)
            _bind(em, mvals, ext)
            em.hoist(g.a, guarded=True)
            with _KLoops(b, em, g, geo, ko0, kcoc) as kl:
                b.store(em.emit(g.a), dst(ii, kl.flat), align=4)
            em.pop()
            if rix:
                rix.step(mvals)
    else:
        with _KLoops(b, em, g, geo, ko0, kcoc) as kl:
            em.hoist(g.a, guarded=True)
            with for_range(b, m1, "ii", start=m0, guard=True) as ii:
                _bind(em, _unflatten(b, ii, geo.m_ext, g.m), ext)
                b.store(em.emit(g.a), dst(ii, kl.flat), align=4)
                em.pop()


def _epilogue(b: ir.IRBuilder, fctx: FnCtx, em: ExprEmitter, c: Compute, g: GemmPlan, geo: _Geometry, ext: dict,
              i0: ir.Value, rows: ir.Value, j0: ir.Value, ncols: ir.Value, masked_tail: bool = False) -> None:
    """C[tile] = epilogue(C[tile]) for the rows x ncols tile at (i0, j0) (`masked_tail`: see
    `_run_loop_metadata`)."""
    epi: Expr = g.epilogue  # type: ignore[assignment]
    names = c.var_names
    # a conv's (oh, ow) read only as the trailing indices of its output and same-shaped
    # loads: one flat unit-stride run per row (vectorised), no per-column unflattening
    flat = len(g.n) > 1 and flat_columns_ok(epi, g.n, ext, fctx.buffer_shape)
    if flat:
        last = g.n[-1]
        lead = {n: i64(0) for n in g.n[:-1]}

        def bind_n(cc: ir.Value) -> None:
            _bind(em, {last: _add(b, j0, cc, last)}, ext)
    else:
        lead = {}
        bind_n = column_binder(b, fctx, em, g.n, geo.n_ext, ext, j0, ncols, g.nr)
    rix = RowIndex(b, fctx.alloca, i0, geo.m_ext, g.m) if len(g.m) > 1 else None
    # NOTE: the row loop stays scalar: vectorised across rows (N of 24 or 48, a channels-last
    # 1x1 conv's) every element became a masked gather, 3-4x the GEMM's own time
    with for_range(b, rows, "er", guard=False, metadata=scalar_loop_metadata(fctx.module, unroll=True)) as r:
        mvals = rix.values() if rix else _unflatten(b, _add(b, i0, r, "ei"), geo.m_ext, g.m)
        _bind(em, {**mvals, **lead}, ext)
        em.hoist(epi, guarded=True)
        md = _run_loop_metadata(fctx.module, g.vl, masked_tail) if len(g.n) == 1 or flat else None
        with for_range(b, ncols, "ec", guard=False, metadata=md) as cc:
            bind_n(cc)
            em.store(c.out, [em.var_vals[n] for n in names], em.emit(epi))
            em.pop()
        em.pop()
        if rix:
            rix.step(mvals)
