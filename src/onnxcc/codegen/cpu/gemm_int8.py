"""The 8-bit GEMM of the quantized ops on AVX-512 VNNI: `vpdpbusd` micro-kernels.

ops/int8_gemm.py lowers an integer contraction with constant weights to a `CallStmt` of
`onnxcc_i8gemm` / `onnxcc_i8gemm_rows` (kernel/i8gemm.py has the contract) where the
backend says the target has VNNI (`CpuBackend.int8_dot`); the CPU emitter (extern.py)
defines the callee here, in LLVM, instead of calling the C runtime, with the runtime calls'
one signature `i32 fn(const i64 *sizes, void *const *bufs)`.

One vpdpbusd adds four u8 x s8 products (each fits 16 bits, their sum 18) into every i32
lane without saturation: the sums are exact, as the i32 contraction (wrapping like it past
2**31). The activations (u8) are broadcast four bytes at a time, the packed weights (s8)
loaded NR columns at a time.

The work is split over (batch, row block, panel) tasks through onnxcc_parallel_for when it
is big; a task computes its rows MR at a time by a micro-kernel holding MR x NR/16 zmm
accumulators, the last rows (M % MR) by a kernel of that many rows."""

from __future__ import annotations

from llvmlite import ir

from onnxcc.kernel.i8gemm import CALLEES, NR

from ..llvm.helpers import I1, I8, I32, I64, PTR, VOID, for_range, get_or_declare, i32, i64, if_else
from .gemm_ir import add, ceildiv, mul, umin

MR = 8
"""rows of P per micro-kernel call (MR x NV accumulators, 16 of the 32 zmm)"""
NV = NR // 16
"""16-lane i32 vectors per panel row"""
PAR_MIN_WORK = 1 << 18
"""M*N*K below which the GEMM runs on the calling thread"""

_V = ir.VectorType(I32, 16)
_MASK = ir.VectorType(I1, 16)
_CALL_FNTY = ir.FunctionType(I32, [PTR, PTR])
_BODY_FNTY = ir.FunctionType(VOID, [I64, I64, PTR])


def _gep8(b: ir.IRBuilder, base: ir.Value, off: ir.Value | int, name: str) -> ir.Value:
    return b.gep(base, [i64(off) if isinstance(off, int) else off], inbounds=True, name=name, source_etype=I8)


def _splat(b: ir.IRBuilder, x: ir.Value, name: str) -> ir.Value:
    undef = ir.Constant(_V, ir.Undefined)
    ins = b.insert_element(undef, x, i32(0), name=f"{name}.ins")
    return b.shuffle_vector(ins, undef, ir.Constant(_V, [0] * 16), name=name)


_SIZES = ("batch", "m", "n", "s0", "ss0", "s1", "ss1", "l", "lda", "sp", "ldc", "sc")
RB = 12 * MR
"""rows per parallel task"""


def _ukr(module: ir.Module, rows: int) -> ir.Function:
    """`void ukr(ptr rowp, ptr q, i64 S0, i64 SS0, i64 S1, i64 SS1, i64 L, ptr c, i64 ldc,
    i64 ncols)`: rows x NR of C from one packed panel q and `rows` rows of P, row r starting at
    rowp[r] (a pointer); columns >= ncols are not stored."""
    name = f"onnxcc.i8gemm.ukr.{rows}x{NR}"
    fn = module.globals.get(name)
    if fn is not None:
        return fn
    fn = ir.Function(module, ir.FunctionType(VOID, [PTR, PTR, I64, I64, I64, I64, I64, PTR, I64, I64]), name=name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    fn.attributes.add("noinline")
    rowp, q, s0n, ss0, s1n, ss1, seg, c, ldc, ncols = fn.args
    for a, n in zip(fn.args, ("rowp", "q", "s0", "ss0", "s1", "ss1", "l", "c", "ldc", "ncols")):
        a.name = n
    for a in (q, c):
        a.add_attribute("noalias")
    dot = get_or_declare(module, "llvm.x86.avx512.vpdpbusd.512", ir.FunctionType(_V, [_V, _V, _V]))
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    acc = [[b.alloca(_V, name=f"acc.{r}.{v}") for v in range(NV)] for r in range(rows)]
    zero = ir.Constant(_V, [0] * 16)
    for row in acc:
        for slot in row:
            b.store(zero, slot)
    prow = [b.load(b.gep(rowp, [i64(r)], inbounds=True, name="rowp.p", source_etype=PTR), name=f"p.row{r}",
                   typ=PTR, align=8) for r in range(rows)]
    groups = b.lshr(seg, i64(2), name="groups")
    rem = b.and_(seg, i64(3), name="l.rem")
    per_seg = b.add(groups, b.zext(b.icmp_unsigned("!=", rem, i64(0), name="has.rem"), I64, name="rem.g"),
                    name="seg.groups")

    def group(qg: ir.Value, word) -> None:
        """one group of four k: row r's four bytes `word(r)` (an i32) against the panel's"""
        qrow = _gep8(b, q, mul(b, qg, NR * 4, "q.off"), "q.g")
        qv = [b.load(_gep8(b, qrow, 64 * v, "q.p"), name=f"q{v}", typ=_V, align=1) for v in range(NV)]
        for r in range(rows):
            pv = _splat(b, word(r), f"p{r}")
            for v in range(NV):
                cur = b.load(acc[r][v], name="acc", typ=_V)
                b.store(b.call(dot, [cur, pv, qv[v]], name="dot"), acc[r][v])  # (u8 x s8) x 4

    with for_range(b, s0n, "sa", guard=True) as sa:
        with for_range(b, s1n, "sb", guard=True) as sb:
            base = add(b, mul(b, sa, ss0, "seg.a"), mul(b, sb, ss1, "seg.b"), "seg.off")
            q0 = mul(b, add(b, mul(b, sa, s1n, "seg.i"), sb, "seg.i"), per_seg, "q.seg")
            segp = [_gep8(b, prow[r], base, f"p.seg{r}") for r in range(rows)]
            with for_range(b, groups, "g", guard=True) as g:
                off = mul(b, g, 4, "p.k")
                group(add(b, q0, g, "q.i"), lambda r: b.load(_gep8(b, segp[r], off, "p.p"), name=f"pw{r}", typ=I32,
                                                              align=1))
            with if_else(b, b.icmp_unsigned("!=", rem, i64(0), name="tail.any"), name="tail") as (then, otherwise):
                with then:
                    # the segment's last 1-3 bytes, zero-extended into one word (no read past it)
                    last = mul(b, groups, 4, "p.tail")
                    words = []
                    for r in range(rows):
                        w: ir.Value = i32(0)
                        for t in range(3):
                            keep = b.icmp_unsigned(">", rem, i64(t), name="keep")
                            at = b.select(keep, add(b, last, t, "p.t"), last, name="p.ti")
                            byte = b.load(_gep8(b, segp[r], at, "p.tp"), name="pb", typ=I8, align=1)
                            byte32 = b.select(keep, b.zext(byte, I32, name="pb.z"), i32(0), name="pb.k")
                            w = b.or_(w, b.shl(byte32, i32(8 * t), name="pb.s"), name="pw.t")
                        words.append(w)
                    group(add(b, q0, groups, "q.i"), lambda r: words[r])
                with otherwise:
                    pass
    iota = ir.Constant(ir.VectorType(I64, 16), list(range(16)))
    mstore = get_or_declare(module, "llvm.masked.store.v16i32.p0", ir.FunctionType(VOID, [_V, PTR, I32, _MASK]))
    masks = []
    for v in range(NV):
        left = b.sub(ncols, i64(16 * v), name=f"left{v}")
        undef = ir.Constant(ir.VectorType(I64, 16), ir.Undefined)
        lv = b.shuffle_vector(b.insert_element(undef, left, i32(0), name="left.ins"), undef,
                              ir.Constant(ir.VectorType(I32, 16), [0] * 16), name=f"left{v}.v")
        m = b.icmp_signed(">", lv, iota, name=f"mask{v}")
        m.type = _MASK  # NOTE: llvmlite types vector compares as i1
        masks.append(m)
    for r in range(rows):
        crow = b.gep(c, [mul(b, ldc, r, "c.off") if r else i64(0)], inbounds=True, name="c.row", source_etype=I32)
        for v in range(NV):
            cp = b.gep(crow, [i64(16 * v)], inbounds=True, name="c.p", source_etype=I32)
            b.call(mstore, [b.load(acc[r][v], name="sum", typ=_V), cp, i32(4), masks[v]])
    b.ret_void()
    return fn


def _body(module: ir.Module, table: bool) -> ir.Function:
    """`void body(i64 begin, i64 end, ptr ctx)`: tasks [begin, end) of the (batch, row block,
    panel) grid; ctx = {sizes, bufs} of the call."""
    name = f"onnxcc.i8gemm.tasks{'.rows' if table else ''}"
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
          for j, n in enumerate(_SIZES)}
    pb, qb, cb = (b.load(b.gep(bufs, [i64(j)], inbounds=True, name="buf.p", source_etype=PTR), name=nm, typ=PTR,
                         align=8) for j, nm in enumerate(("P", "Q", "C")))
    tb = b.load(b.gep(bufs, [i64(3)], inbounds=True, name="buf.p", source_etype=PTR), name="T", typ=PTR,
                align=8) if table else None
    m, n = sz["m"], sz["n"]
    panels = ceildiv(b, n, NR, "panels")
    seg_groups = ceildiv(b, sz["l"], 4, "seg.groups")
    panel_bytes = mul(b, mul(b, mul(b, sz["s0"], sz["s1"], "segs"), seg_groups, "groups"), NR * 4, "panel.bytes")
    blocks = ceildiv(b, m, RB, "rblocks")
    seg_args = [sz["s0"], sz["ss0"], sz["s1"], sz["ss1"], sz["l"]]
    with for_range(b, end, "t", start=begin, guard=True) as t:
        j = b.urem(t, panels, name="panel")
        rest = b.udiv(t, panels, name="t.rest")
        blk = b.urem(rest, blocks, name="rblock")
        bi = b.udiv(rest, blocks, name="b")
        pbat = _gep8(b, pb, mul(b, bi, sz["sp"], "p.b"), "p.bat")
        qpan = _gep8(b, qb, mul(b, j, panel_bytes, "q.j"), "q.pan")
        col = mul(b, j, NR, "col")
        ncols = b.sub(n, col, name="ncols")
        cbat = b.gep(cb, [add(b, mul(b, bi, sz["sc"], "c.b"), col, "c.off")], inbounds=True, name="c.bat",
                     source_etype=I32)
        r_lo = mul(b, blk, RB, "r.lo")
        r_hi = umin(b, add(b, r_lo, RB, "r.hi"), m, "r.end")
        nrows = b.sub(r_hi, r_lo, name="r.n")

        def tile(r0: ir.Value, rows: int) -> None:
            for r in range(rows):
                mr = add(b, r0, r, "m.r")
                if tb is not None:
                    off = b.load(b.gep(tb, [mr], inbounds=True, name="t.p", source_etype=I64), name="t.off", typ=I64,
                                 align=8)
                else:
                    off = mul(b, mr, sz["lda"], "p.off")
                b.store(_gep8(b, pbat, off, "p.r"), b.gep(rowp, [i64(0), i64(r)], inbounds=True, name="rowp.r"))
            cp = b.gep(cbat, [mul(b, r0, sz["ldc"], "c.r")], inbounds=True, name="c.blk", source_etype=I32)
            b.call(_ukr(module, rows), [rowp, qpan, *seg_args, cp, sz["ldc"], ncols])

        with for_range(b, b.udiv(nrows, i64(MR), name="tiles"), "mb", guard=True) as mb:
            tile(add(b, r_lo, mul(b, mb, MR, "r0"), "r0"), MR)
        r0 = b.sub(r_hi, b.urem(nrows, i64(MR), name="mtail"), name="r.tail")
        after = fn.append_basic_block("tail.end")
        sw = b.switch(b.urem(nrows, i64(MR), name="mtail"), after)
        for rows in range(1, MR):
            blkb = fn.append_basic_block(f"tail{rows}")
            sw.add_case(i64(rows), blkb)
            with b.goto_block(blkb):
                tile(r0, rows)
                b.branch(after)
        b.position_at_end(after)
    b.ret_void()
    return fn


def define_callee(module: ir.Module, call_name: str) -> ir.Function:
    """The LLVM definition of CallStmt callee `call_name` (one of CALLEES) in `module`."""
    table = CALLEES[call_name]
    name = f"onnxcc.i8gemm{'.rows' if table else ''}"
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
        j = _SIZES.index(nm)
        return b.load(b.gep(sizes, [i64(j)], inbounds=True, name=f"{nm}.p", source_etype=I64), name=nm, typ=I64,
                      align=8)

    batch, m, n = size("batch"), size("m"), size("n")
    kk = mul(b, mul(b, size("s0"), size("s1"), "k"), size("l"), "k")
    tasks = mul(b, mul(b, batch, ceildiv(b, m, RB, "rblocks"), "tasks"), ceildiv(b, n, NR, "panels"), "tasks")
    work = mul(b, mul(b, mul(b, batch, m, "w"), n, "w"), kk, "work")
    body = _body(module, table)
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
