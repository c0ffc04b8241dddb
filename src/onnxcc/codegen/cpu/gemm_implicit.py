"""The f32 implicit-GEMM conv (`onnxcc_f32conv`, kernel/conv_call.py has the contract), defined
in LLVM where the CPU emitter (extern.py) meets its CallStmt, with the runtime calls' one
signature `i32 fn(const i64 *sizes, void *const *bufs)`.

The GEMM's rows are a conv's output pixels, each reading its window in place from a padded
channels-last copy of the input through a row-offset table; its columns the output channels,
NR = 32 per packed weight panel, two 16-lane vectors. A micro-kernel holds MR x 2
accumulators (24 of the 32 zmm): per k it loads the panel row's two vectors and broadcasts
one input element per row. The bias and an optional ReLU are applied to the registers
before the (masked) stores, so the conv's output is written once.

Work is split over (batch, row block, panel) tasks through onnxcc_parallel_for when it is
big. A tile's missing rows (the last M % MR) repeat the block's last row's pointer and are
not stored: one micro-kernel for every height (at 13x13 outputs the repeats cost about 6%;
a kernel per height was 11 more functions to compile)."""

from __future__ import annotations

from llvmlite import ir

from onnxcc.kernel.conv_call import NR, SIZES

from ..llvm.exprs import F32
from ..llvm.helpers import I1, I32, I64, PTR, VOID, for_range, get_or_declare, i32, i64, if_else, if_then
from .gemm_ir import add, ceildiv, mul, umin

MR = 12
"""rows per micro-kernel call"""
NV = NR // 16
"""16-lane vectors per panel row"""
RB = 8 * MR
"""rows per parallel task"""
PAR_MIN_WORK = 1 << 18
"""M*N*K below which the call runs on the calling thread"""

_V = ir.VectorType(F32, 16)
_MASK = ir.VectorType(I1, 16)
_CALL_FNTY = ir.FunctionType(I32, [PTR, PTR])
_BODY_FNTY = ir.FunctionType(VOID, [I64, I64, PTR])


def _gepf(b: ir.IRBuilder, base: ir.Value, off: ir.Value | int, name: str) -> ir.Value:
    return b.gep(base, [i64(off) if isinstance(off, int) else off], inbounds=True, name=name, source_etype=F32)


def _splat(b: ir.IRBuilder, x: ir.Value, name: str) -> ir.Value:
    undef = ir.Constant(_V, ir.Undefined)
    ins = b.insert_element(undef, x, i32(0), name=f"{name}.ins")
    return b.shuffle_vector(ins, undef, ir.Constant(ir.VectorType(I32, 16), [0] * 16), name=name)


def _ukr(module: ir.Module, nv: int = NV) -> ir.Function:
    """`void ukr(ptr rowp, ptr q, i64 S0, i64 SS0, i64 S1, i64 SS1, i64 L, ptr c, i64 ldc,
    i64 ncols, i64 nrows, ptr bias, i64 relu)`: MR x NR of C from one packed panel q, row r
    of the window at rowp[r]; rows >= nrows and columns >= ncols are not stored; bias points
    at the panel's first column. With `nv` = 1 only the panel's first 16 columns: a conv of
    at most 16 output channels (a small stem) does half the FMAs of the full panel."""
    name = f"onnxcc.f32conv.ukr.{MR}x{16 * nv}"
    fn = module.globals.get(name)
    if fn is not None:
        return fn
    fn = ir.Function(module, ir.FunctionType(VOID, [PTR, PTR, I64, I64, I64, I64, I64, PTR, I64, I64, I64, PTR, I64]),
                     name=name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    fn.attributes.add("noinline")
    names = ("rowp", "q", "s0", "ss0", "s1", "ss1", "l", "c", "ldc", "ncols", "nrows", "bias", "relu")
    for a, n in zip(fn.args, names, strict=True):
        a.name = n
    rowp, q, s0n, ss0, s1n, ss1, seg, c, ldc, ncols, nrows, bias, relu = fn.args
    for a in (q, c):
        a.add_attribute("noalias")
    fma = get_or_declare(module, "llvm.fma.v16f32", ir.FunctionType(_V, [_V, _V, _V]))
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    acc = [[b.alloca(_V, name=f"acc.{r}.{v}") for v in range(nv)] for r in range(MR)]
    zero = ir.Constant(_V, [0.0] * 16)
    for row in acc:
        for slot in row:
            b.store(zero, slot)
    prow = [b.load(b.gep(rowp, [i64(r)], inbounds=True, name="rowp.p", source_etype=PTR), name=f"p.row{r}",
                   typ=PTR, align=8) for r in range(MR)]
    with for_range(b, s0n, "sa", guard=True) as sa:
        with for_range(b, s1n, "sb", guard=True) as sb:
            base = add(b, mul(b, sa, ss0, "seg.a"), mul(b, sb, ss1, "seg.b"), "seg.off")
            k0 = mul(b, add(b, mul(b, sa, s1n, "seg.i"), sb, "seg.i"), seg, "k.seg")
            segp = [_gepf(b, prow[r], base, f"p.seg{r}") for r in range(MR)]
            qseg = _gepf(b, q, mul(b, k0, NR, "q.seg"), "q.s")
            with for_range(b, seg, "k", guard=True) as k:
                qrow = _gepf(b, qseg, mul(b, k, NR, "q.k"), "q.row")
                qv = [b.load(_gepf(b, qrow, 16 * v, "q.p"), name=f"q{v}", typ=_V, align=4) for v in range(nv)]
                for r in range(MR):
                    pv = _splat(b, b.load(_gepf(b, segp[r], k, "p.p"), name=f"x{r}", typ=F32, align=4), f"x{r}.v")
                    for v in range(nv):
                        cur = b.load(acc[r][v], name="acc", typ=_V)
                        b.store(b.call(fma, [pv, qv[v], cur], name="fma"), acc[r][v])
    _epilogue(module, b, acc, c, ldc, ncols, nrows, bias, relu)
    b.ret_void()
    return fn


def _epilogue(module: ir.Module, b: ir.IRBuilder, acc, c, ldc, ncols, nrows, bias, relu) -> None:
    """acc + bias, then max(., 0) where `relu` (a select keeps NaN as np.maximum does), into
    the tile's rows < nrows and columns < ncols (masked vector stores)."""
    mload = get_or_declare(module, "llvm.masked.load.v16f32.p0", ir.FunctionType(_V, [PTR, I32, _MASK, _V]))
    mstore = get_or_declare(module, "llvm.masked.store.v16f32.p0", ir.FunctionType(VOID, [_V, PTR, I32, _MASK]))
    iota = ir.Constant(ir.VectorType(I64, 16), list(range(16)))
    zero = ir.Constant(_V, [0.0] * 16)
    lo = b.select(b.icmp_unsigned("!=", relu, i64(0), name="relu.on"), ir.Constant(F32, 0.0),
                  ir.Constant(F32, float("-inf")), name="lo")
    lov = _splat(b, lo, "lo.v")
    masks, cols = [], []
    for v in range(len(acc[0])):
        left = b.sub(ncols, i64(16 * v), name=f"left{v}")
        undef = ir.Constant(ir.VectorType(I64, 16), ir.Undefined)
        lv = b.shuffle_vector(b.insert_element(undef, left, i32(0), name="left.ins"), undef,
                              ir.Constant(ir.VectorType(I32, 16), [0] * 16), name=f"left{v}.v")
        m = b.icmp_signed(">", lv, iota, name=f"mask{v}")
        m.type = _MASK  # NOTE: llvmlite types vector compares as i1
        masks.append(m)
        cols.append(b.call(mload, [_gepf(b, bias, 16 * v, "bias.p"), i32(4), m, zero], name=f"bias{v}"))
    for r, row in enumerate(acc):
        with if_then(b, b.icmp_unsigned(">", nrows, i64(r), name="row.in"), name=f"store{r}"):
            crow = _gepf(b, c, mul(b, ldc, r, "c.off") if r else i64(0), "c.row")
            for v, slot in enumerate(row):
                x = b.fadd(b.load(slot, name="sum", typ=_V), cols[v], name="biased")
                neg = b.fcmp_ordered("<", x, lov, name="below")
                neg.type = _MASK
                x = b.select(neg, lov, x, name="act")
                b.call(mstore, [x, _gepf(b, crow, 16 * v, "c.p"), i32(4), masks[v]])


def _body(module: ir.Module) -> ir.Function:
    """`void body(i64 begin, i64 end, ptr ctx)`: tasks [begin, end) of the (batch, row block,
    panel) grid; ctx = {sizes, bufs} of the call."""
    name = "onnxcc.f32conv.tasks"
    fn = module.globals.get(name)
    if fn is not None:
        return fn
    fn = ir.Function(module, _BODY_FNTY, name=name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    begin, end, ctx = fn.args
    begin.name, end.name, ctx.name = "begin", "end", "ctx"
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    rowp = b.alloca(ir.ArrayType(PTR, MR), name="rowp")
    sizes = b.load(ctx, name="sizes", typ=PTR, align=8)
    bufs = b.load(b.gep(ctx, [i64(1)], inbounds=True, name="bufs.p", source_etype=PTR), name="bufs", typ=PTR,
                  align=8)
    sz = {n: b.load(b.gep(sizes, [i64(j)], inbounds=True, name="s.p", source_etype=I64), name=n, typ=I64, align=8)
          for j, n in enumerate(SIZES)}
    pb, qb, cb, tb, bb = (b.load(b.gep(bufs, [i64(j)], inbounds=True, name="buf.p", source_etype=PTR), name=nm,
                                 typ=PTR, align=8) for j, nm in enumerate(("P", "Q", "C", "T", "B")))
    m, n = sz["m"], sz["n"]
    panels = ceildiv(b, n, NR, "panels")
    kk = mul(b, mul(b, sz["s0"], sz["s1"], "segs"), sz["l"], "k")
    panel_elems = mul(b, kk, NR, "panel.elems")
    blocks = ceildiv(b, m, RB, "rblocks")
    seg_args = [sz["s0"], sz["ss0"], sz["s1"], sz["ss1"], sz["l"]]
    with for_range(b, end, "t", start=begin, guard=True) as t:
        j = b.urem(t, panels, name="panel")
        rest = b.udiv(t, panels, name="t.rest")
        blk = b.urem(rest, blocks, name="rblock")
        bi = b.udiv(rest, blocks, name="b")
        pbat = _gepf(b, pb, mul(b, bi, sz["sp"], "p.b"), "p.bat")
        qpan = _gepf(b, qb, mul(b, j, panel_elems, "q.j"), "q.pan")
        col = mul(b, j, NR, "col")
        ncols = b.sub(n, col, name="ncols")
        cbat = _gepf(b, cb, add(b, mul(b, bi, sz["sc"], "c.b"), col, "c.off"), "c.bat")
        bcol = _gepf(b, bb, col, "bias.j")
        r_lo = mul(b, blk, RB, "r.lo")
        r_hi = umin(b, add(b, r_lo, RB, "r.hi"), m, "r.end")
        last = b.sub(r_hi, i64(1), name="r.last")
        with for_range(b, ceildiv(b, b.sub(r_hi, r_lo, name="r.n"), MR, "tiles"), "mb", guard=True) as mb:
            r0 = add(b, r_lo, mul(b, mb, MR, "r0"), "r0")
            for r in range(MR):
                mr = umin(b, add(b, r0, r, "m.r"), last, "m.r")  # past the block: its last row again
                off = b.load(b.gep(tb, [mr], inbounds=True, name="t.p", source_etype=I64), name="t.off", typ=I64,
                             align=8)
                b.store(_gepf(b, pbat, off, "p.r"), b.gep(rowp, [i64(0), i64(r)], inbounds=True, name="rowp.r"))
            cp = _gepf(b, cbat, mul(b, r0, sz["ldc"], "c.r"), "c.blk")
            args = [rowp, qpan, *seg_args, cp, sz["ldc"], ncols, b.sub(r_hi, r0, name="rows"), bcol, sz["relu"]]
            with if_else(b, b.icmp_signed("<=", ncols, i64(16), name="half"), name="ukr") as (then, otherwise):
                with then:  # the last panel's columns fit one vector (a 16-channel stem)
                    b.call(_ukr(module, 1), args)
                with otherwise:
                    b.call(_ukr(module), args)
    b.ret_void()
    return fn


def define_callee(module: ir.Module) -> ir.Function:
    """The LLVM definition of the `onnxcc_f32conv` CallStmt's callee in `module`."""
    name = "onnxcc.f32conv"
    fn = module.globals.get(name)
    if fn is not None:
        return fn
    fn = ir.Function(module, _CALL_FNTY, name=name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    sizes, bufs = fn.args
    sizes.name, bufs.name = "sizes", "bufs"
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    ctx = b.alloca(ir.ArrayType(PTR, 2), name="ctx")
    b.store(sizes, b.gep(ctx, [i64(0), i64(0)], inbounds=True, name="ctx.s"))
    b.store(bufs, b.gep(ctx, [i64(0), i64(1)], inbounds=True, name="ctx.b"))

    def size(nm: str) -> ir.Value:
        return b.load(b.gep(sizes, [i64(SIZES.index(nm))], inbounds=True, name=f"{nm}.p", source_etype=I64), name=nm,
                      typ=I64, align=8)

    batch, m, n = size("batch"), size("m"), size("n")
    kk = mul(b, mul(b, size("s0"), size("s1"), "k"), size("l"), "k")
    tasks = mul(b, mul(b, batch, ceildiv(b, m, RB, "rblocks"), "tasks"), ceildiv(b, n, NR, "panels"), "tasks")
    work = mul(b, mul(b, mul(b, batch, m, "w"), n, "w"), kk, "work")
    body = _body(module)
    runtime = get_or_declare(module, "onnxcc_parallel_for", ir.FunctionType(VOID, [I64, PTR, PTR]))
    big = b.and_(b.icmp_unsigned(">=", work, i64(PAR_MIN_WORK), name="big"),
                 b.icmp_unsigned(">", tasks, i64(1), name="many"), name="par")
    with if_else(b, big, name="par") as (then, otherwise):
        with then:
            b.call(runtime, [tasks, body, ctx])
        with otherwise:
            b.call(body, [i64(0), tasks, ctx])
    b.ret(i32(0))
    return fn


__all__ = ["MR", "define_callee"]
