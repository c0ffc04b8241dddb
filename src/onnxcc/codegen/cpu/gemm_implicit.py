"""The f32 implicit-GEMM conv (`onnxcc_f32conv`, kernel/conv_call.py has the contract), defined
in LLVM where the CPU emitter (extern.py) meets its CallStmt, with the runtime calls' one
signature `i32 fn(const i64 *sizes, void *const *bufs)`.

The GEMM's rows are a conv's output pixels, each reading its window in place from a padded
channels-last copy of the input at an offset the task steps from pixel to pixel; its columns the output channels,
NR = 32 per packed weight panel, two 16-lane vectors. A micro-kernel holds MR x 2
accumulators (24 of the 32 zmm): per k it loads the panel row's two vectors and broadcasts
one input element per row; a window segment of 3, 5 or 7 steps (a planar stem's KW taps)
is a straight run of steps at immediate offsets instead of a loop. The bias and an
optional ReLU are applied to the registers before the (masked) stores, so the conv's
output is written once.

Work is split over (batch, row block, panel) tasks through onnxcc_parallel_for when it is
big. A tile's missing rows (the last M % MR) repeat the block's last row's pointer and are
not stored: one micro-kernel for every height (at 13x13 outputs the repeats cost about 6%;
a kernel per height was 11 more functions to compile)."""

from __future__ import annotations

from llvmlite import ir

from onnxcc.kernel.conv_call import BUFFERS, NR, POOL_ROWS, SIZES

from ..llvm.exprs import F32
from ..llvm.helpers import I32, I64, PTR, VOID, for_range, get_or_declare, i32, i64, if_else, if_then
from . import conv_out_rows as out_rows
from . import gemm_call as gcall
from .gemm_ir import add, ceildiv, mul

MR = 12
"""rows per micro-kernel call"""
NV = NR // 16
"""16-lane vectors per panel row"""
RB = 8 * MR
"""rows per parallel task, at most (gemm_call.row_blocks: fewer where that splits the grid evenly over the threads)"""
assert MR % POOL_ROWS == 0 and RB % POOL_ROWS == 0  # a pooling window's rows never straddle tiles
_SHAPE = gcall.CallShape(sizes=SIZES, bufs=BUFFERS, ety=F32, nr=NR, mr=MR, rb=RB)

_V = ir.VectorType(F32, 16)

UNROLLED_SEGMENTS = (3, 5, 7)
"""segment lengths whose steps a micro-kernel emits one after the other, each step's addresses
an immediate offset from the segment's start: a planar stem's KW taps (kernel widths 3, 5, 7).
As a loop, LLVM unrolls the k loop by 2 or 4 and the odd leftover step, a second copy of the
body with its own address arithmetic, spilled the row pointers (12 rows' pointers, the panel,
the segment counters: more than the 15 general registers)"""


def _gepf(b: ir.IRBuilder, base: ir.Value, off: ir.Value | int, name: str) -> ir.Value:
    return gcall.gep(b, base, off, F32, name)


def _ukr(module: ir.Module, nv: int = NV) -> ir.Function:
    """`void ukr(ptr rowp, ptr q, i64 S0, i64 SS0, i64 S1, i64 SS1, i64 L, ptr c, i64 ldc,
    i64 ncols, i64 nrows, ptr bias, i64 relu, i64 pool, ptr res)`: MR x NR of C from one
    packed panel q, row r of the window at rowp[r]; stored row g at c[g] (a row pointer each:
    a padded C's rows are not evenly spaced, conv_out_rows.py); rows >= nrows and columns >=
    ncols are not stored; bias points at the panel's first column; with pool = 4 each 4 rows
    are maxed into one stored row; res (null: none) is the residual tile's row pointers (row r
    at res[r]), added before the ReLU.
    With `nv` = 1 only the panel's first 16 columns: a conv of at most 16 output channels (a
    small stem) does half the FMAs of the full panel."""
    name = f"onnxcc.f32conv.ukr.{MR}x{16 * nv}"
    fn = module.globals.get(name)
    if fn is not None:
        return fn
    fn, b, acc, prow = gcall.micro_kernel(module, name, (("ncols", I64), ("nrows", I64), ("bias", PTR), ("relu", I64),
                                                                   ("pool", I64), ("res", PTR)),
                                          _V, MR, nv)
    _, q, s0n, ss0, s1n, ss1, seg, c, ldc, ncols, nrows, bias, relu, pool, res = fn.args
    fma = get_or_declare(module, "llvm.fma.v16f32", ir.FunctionType(_V, [_V, _V, _V]))
    out_rows.prefetch_tile(module, b, c, pool, res, MR, nv)
    walk = _SegmentWalk(b, fma, acc, prow, q, (s0n, ss0, s1n, ss1, seg), nv)
    done = fn.append_basic_block("k.done")
    generic = fn.append_basic_block("k.any")
    switch = b.switch(seg, generic)
    for steps in UNROLLED_SEGMENTS:
        blk = fn.append_basic_block(f"k.seg{steps}")
        switch.add_case(i64(steps), blk)
        b.position_at_end(blk)
        walk.emit(steps)
        b.branch(done)
    b.position_at_end(generic)
    walk.emit(None)
    b.branch(done)
    b.position_at_end(done)
    _epilogue(module, b, acc, c, ldc, ncols, nrows, bias, relu, pool, res)
    b.ret_void()
    return fn


class _SegmentWalk:
    """The micro-kernel's K loop: every segment of the window, `steps` k steps each (a
    straight run of steps) or L (a loop over them), one FMA per row and panel vector a step."""

    def __init__(self, b: ir.IRBuilder, fma: ir.Function, acc, prow: list[ir.Value], q: ir.Value,
                 seg_args: tuple[ir.Value, ...], nv: int) -> None:
        self.b, self.fma, self.acc, self.prow, self.q, self.seg_args, self.nv = b, fma, acc, prow, q, seg_args, nv

    def emit(self, steps: int | None) -> None:
        b = self.b
        s0n, ss0, s1n, ss1, seg = self.seg_args
        per_seg = seg if steps is None else i64(steps)
        with gcall.window_segments(b, s0n, ss0, s1n, ss1, per_seg, "k.seg") as (base, k0):
            segp = [_gepf(b, self.prow[r], base, f"p.seg{r}") for r in range(MR)]
            qseg = _gepf(b, self.q, mul(b, k0, NR, "q.seg"), "q.s")
            if steps is None:
                with for_range(b, seg, "k", guard=True) as k:
                    self._step(segp, qseg, k)
            else:
                for k in range(steps):
                    self._step(segp, qseg, k)

    def _step(self, segp: list[ir.Value], qseg: ir.Value, k: ir.Value | int) -> None:
        """step k of a segment: k an int is an immediate offset"""
        b = self.b
        qrow = _gepf(b, qseg, k * NR if isinstance(k, int) else mul(b, k, NR, "q.k"), "q.row")
        qv = [b.load(_gepf(b, qrow, 16 * v, "q.p"), name=f"q{v}", typ=_V, align=4) for v in range(self.nv)]
        for r in range(MR):
            pv = gcall.splat(b, b.load(_gepf(b, segp[r], k, "p.p"), name=f"x{r}", typ=F32, align=4), f"x{r}.v")
            for v in range(self.nv):
                cur = b.load(self.acc[r][v], name="acc", typ=_V)
                b.store(b.call(self.fma, [pv, qv[v], cur], name="fma"), self.acc[r][v])


def _epilogue(module: ir.Module, b: ir.IRBuilder, acc, c, ldc, ncols, nrows, bias, relu, pool, res) -> None:
    """acc + bias (+ the residual tile `res` where not null), then max(., 0) where `relu` (a
    select keeps NaN as np.maximum does), into the tile's rows < nrows and columns < ncols
    (masked vector stores); with `pool` = 4 the maximum (llvm.maximum: NaN-propagating, as
    the kernel's max) of each 4 rows into one."""
    mload = get_or_declare(module, "llvm.masked.load.v16f32.p0", ir.FunctionType(_V, [PTR, I32, gcall.MASK, _V]))
    mstore = get_or_declare(module, "llvm.masked.store.v16f32.p0", ir.FunctionType(VOID, [_V, PTR, I32, gcall.MASK]))
    vmax = get_or_declare(module, "llvm.maximum.v16f32", ir.FunctionType(_V, [_V, _V]))
    zero = ir.Constant(_V, [0.0] * 16)
    lo = b.select(b.icmp_unsigned("!=", relu, i64(0), name="relu.on"), ir.Constant(F32, 0.0),
                  ir.Constant(F32, float("-inf")), name="lo")
    lov = gcall.splat(b, lo, "lo.v")
    masks, cols = [], []
    for v in range(len(acc[0])):
        masks.append(gcall.column_mask(b, ncols, v))
        cols.append(b.call(mload, [_gepf(b, bias, 16 * v, "bias.p"), i32(4), masks[v], zero], name=f"bias{v}"))

    def value(r: int, v: int, residual: bool = False) -> ir.Value:
        x = b.fadd(b.load(acc[r][v], name="sum", typ=_V), cols[v], name="biased")
        if residual:  # (acc + bias) + r: onnxruntime's order, the conv's then the Add's
            rrow = b.load(b.gep(res, [i64(r)], inbounds=True, name="r.pp", source_etype=PTR), name="r.row", typ=PTR,
                          align=8)
            x = b.fadd(x, b.call(mload, [_gepf(b, rrow, 16 * v, "r.p"), i32(4), masks[v], zero], name="r"),
                       name="plus.r")
        neg = b.fcmp_ordered("<", x, lov, name="below")
        neg.type = gcall.MASK
        return b.select(neg, lov, x, name="act")

    def store(row: int, vals: list[ir.Value]) -> None:
        crow = b.load(b.gep(c, [i64(row)], inbounds=True, name="c.pp", source_etype=PTR), name="c.row", typ=PTR,
                      align=8)
        for v, x in enumerate(vals):
            b.call(mstore, [x, _gepf(b, crow, 16 * v, "c.p"), i32(4), masks[v]])

    with if_else(b, b.icmp_unsigned("==", pool, i64(POOL_ROWS), name="pooled"), name="st") as (then, otherwise):
        with then:
            for g in range(MR // POOL_ROWS):
                with if_then(b, b.icmp_unsigned(">", nrows, i64(POOL_ROWS * g), name="win.in"), name=f"pool{g}"):
                    top = POOL_ROWS * g
                    pooled = []
                    for v in range(len(acc[0])):
                        upper = b.call(vmax, [value(top, v), value(top + 1, v)], name="max.up")
                        lower = b.call(vmax, [value(top + 2, v), value(top + 3, v)], name="max.lo")
                        pooled.append(b.call(vmax, [upper, lower], name="pooled"))
                    store(g, pooled)
        with otherwise:
            has_res = b.icmp_unsigned("!=", b.ptrtoint(res, I64, name="res.i"), i64(0), name="res.on")
            with if_else(b, has_res, name="res") as (with_res, plain):
                for arm, residual in ((with_res, True), (plain, False)):
                    with arm:
                        for r in range(len(acc)):
                            with if_then(b, b.icmp_unsigned(">", nrows, i64(r), name="row.in"), name=f"store{r}"):
                                store(r, [value(r, v, residual) for v in range(len(acc[r]))])


def _panel_elems(b: ir.IRBuilder, sz: dict[str, ir.Value]) -> ir.Value:
    """a packed panel's f32 elements: K rows of NR"""
    return mul(b, mul(b, mul(b, sz["s0"], sz["s1"], "segs"), sz["l"], "k"), NR, "panel.elems")


def _window_offset(b: ir.IRBuilder, sz: dict[str, ir.Value], pooled: ir.Value, row: ir.Value) -> ir.Value:
    """T(row) of kernel/conv_call.py: row's window offset in P, by division (once per task)"""
    g = b.select(pooled, b.lshr(row, i64(2), name="o.g4"), row, name="o.g")
    s = b.select(pooled, b.and_(row, i64(3), name="o.s4"), i64(0), name="o.s")
    ph = b.udiv(g, sz["ow"], name="o.ph")
    pw = b.sub(g, mul(b, ph, sz["ow"], "o.phw"), name="o.pw")
    two = b.select(pooled, i64(2), i64(1), name="o.two")
    y = add(b, mul(b, ph, two, "o.y"), b.lshr(s, i64(1), name="o.dy"), "o.y")
    x = add(b, mul(b, pw, two, "o.x"), b.and_(s, i64(1), name="o.dx"), "o.x")
    return add(b, mul(b, y, sz["ta"], "o.ya"), mul(b, x, sz["tb"], "o.xb"), "o.off")


def _window_rows(b: ir.IRBuilder, sz: dict[str, ir.Value], pooled: ir.Value, r0: ir.Value, last: ir.Value,
                 off_last: ir.Value, t: gcall.Task) -> None:
    """t.rowp[r] = the window of row r0 + r in P, r < MR; rows past `last` (the block's) that
    of `last` (`off_last`). One division for the tile's first stored pixel, then each next
    pixel a step of tb (2 tb pooled) and, past the row's end, the wrap to the next (a load
    from a table made per call before: 3.7% of the plain conv net at 224x224)."""
    ow = sz["ow"]
    start = _window_offset(b, sz, pooled, r0)
    g0 = b.select(pooled, b.lshr(r0, i64(2), name="w.g4"), r0, name="w.g")
    col = b.sub(g0, mul(b, b.udiv(g0, ow, name="w.ph"), ow, "w.phw"), name="w.pw")  # the pixel's column

    def put(r: int, off: ir.Value) -> None:
        past = b.icmp_unsigned(">", add(b, r0, r, "w.r"), last, name="w.past")
        off = b.select(past, off_last, off, name="w.off")
        b.store(_gepf(b, t.pbat, off, "p.r"), b.gep(t.rowp, [i64(0), i64(r)], inbounds=True, name="rowp.r"))

    def walk(per: int, step: ir.Value, wrap: ir.Value, taps: tuple[ir.Value, ...]) -> None:
        off, c = start, col
        for k in range(MR // per):
            for j, tap in enumerate(taps):
                put(k * per + j, add(b, off, tap, "w.tap") if j else off)
            if k + 1 < MR // per:
                c = add(b, c, 1, "w.c")
                wrapped = b.icmp_unsigned("==", c, ow, name="w.wrap")
                off = add(b, add(b, off, step, "w.step"), b.select(wrapped, wrap, i64(0), name="w.w"), "w.next")
                c = b.select(wrapped, i64(0), c, name="w.c")

    ta, tb = sz["ta"], sz["tb"]
    with if_else(b, pooled, name="wrows") as (four, one):
        with four:  # a pooled pixel's 2x2 conv pixels: +0, +tb, +ta, +ta+tb; pixels 2 tb apart
            tb2, ta2 = add(b, tb, tb, "w.tb2"), add(b, ta, ta, "w.ta2")
            walk(POOL_ROWS, tb2, b.sub(ta2, mul(b, ow, tb2, "w.row2"), name="w.wrap2"),
                 (i64(0), tb, ta, add(b, ta, tb, "w.tab")))
        with one:
            walk(1, tb, b.sub(ta, mul(b, ow, tb, "w.row"), name="w.wrap1"), (i64(0),))


def _body(module: ir.Module) -> ir.Function:
    """the task body: each task's row block MR rows at a time, a tile's missing rows the
    block's last row again (not stored)"""
    name = "onnxcc.f32conv.tasks"
    fn = module.globals.get(name)
    if fn is not None:
        return fn
    with gcall.task_body(module, name, _SHAPE, _panel_elems) as t:
        b, sz = t.b, t.sz
        seg_args = [sz["s0"], sz["ss0"], sz["s1"], sz["ss1"], sz["l"]]
        # C of batch bi at the panel's first column, from channel c0 (a Concat's slice)
        cbat = _gepf(b, t.bufs["C"], add(b, add(b, mul(b, t.bi, sz["sc"], "c.b"), sz["c0"], "c.c0"), t.col, "c.off"),
                     "c.bat")
        rbat = _gepf(b, t.bufs["R"], add(b, mul(b, t.bi, sz["sr"], "r.b"), t.col, "r.off"), "r.bat")
        bcol = _gepf(b, t.bufs["B"], t.col, "bias.j")
        with b.goto_entry_block():
            crow = b.alloca(ir.ArrayType(PTR, MR), name="crow")  # the tile's stored rows' pointers
            rrow = b.alloca(ir.ArrayType(PTR, MR), name="rrow")  # its residual rows' pointers
        r_lo, r_hi = t.rows()
        last = b.sub(r_hi, i64(1), name="r.last")
        pooled = b.icmp_unsigned("==", sz["pool"], i64(POOL_ROWS), name="pooled")
        off_last = _window_offset(b, sz, pooled, last)
        with for_range(b, ceildiv(b, b.sub(r_hi, r_lo, name="r.n"), MR, "tiles"), "mb", guard=True) as mb:
            r0 = add(b, r_lo, mul(b, mb, MR, "r0"), "r0")
            _window_rows(b, sz, pooled, r0, last, off_last, t)
            out_rows.row_pointers(b, sz, cbat, b.udiv(r0, sz["pool"], name="c.r0"), MR, crow)
            res_on = b.icmp_unsigned("!=", sz["res"], i64(0), name="res.on")
            with if_then(b, res_on, name="rrow"):
                out_rows.residual_pointers(b, sz, rbat, r0, MR, rrow, t.bufs["V"])
            rp = b.select(res_on, rrow, ir.Constant(PTR, None), name="res")
            args = [t.rowp, t.qpan, *seg_args, crow, sz["ldc"], t.ncols, b.sub(r_hi, r0, name="rows"), bcol,
                    sz["relu"], sz["pool"], rp]
            with if_else(b, b.icmp_signed("<=", t.ncols, i64(16), name="half"), name="ukr") as (then, otherwise):
                with then:  # the last panel's columns fit one vector (a 16-channel stem)
                    b.call(_ukr(module, 1), args)
                with otherwise:
                    b.call(_ukr(module), args)
    return t.fn


def define_callee(module: ir.Module) -> ir.Function:
    """The LLVM definition of the `onnxcc_f32conv` CallStmt's callee in `module`."""
    name = "onnxcc.f32conv"
    fn = module.globals.get(name)
    if fn is not None:
        return fn
    grid = gcall.define_entry(module, f"{name}.grid", _SHAPE, lambda: _body(module))
    return out_rows.define_with_border(module, name, grid)


__all__ = ["MR", "define_callee"]
