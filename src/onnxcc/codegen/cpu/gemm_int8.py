"""The 8-bit GEMM of the quantized ops on AVX-512 VNNI: `vpdpbusd` micro-kernels.

ops/int8_gemm.py lowers an integer contraction with constant weights to a `CallStmt` of
`onnxcc_i8gemm` / `onnxcc_i8gemm_rows` (kernel/i8gemm.py has the contract) where the
backend says the target has VNNI (`CpuBackend.int8_dot`); the CPU emitter (extern.py)
defines the callee here, in LLVM, instead of calling the C runtime, with the runtime calls'
one signature `i32 fn(const i64 *sizes, void *const *bufs)`.

One vpdpbusd adds four u8 x s8 products (each fits 16 bits, their sum 18) into every i32
lane without saturation: the sums are exact, as the i32 contraction (wrapping like it past
2**31). The activations (u8) are broadcast four bytes at a time, the packed weights (s8)
loaded NR (or, for N <= 16, NR_NARROW) columns at a time.

The work is split over (batch, row block, panel) tasks through onnxcc_parallel_for when it
is big; a task computes its rows MR at a time by a micro-kernel holding MR x nr/16 zmm
accumulators, the last rows (M % MR) by a kernel of that many rows."""

from __future__ import annotations

from llvmlite import ir

from onnxcc.kernel.i8gemm import CALLEES, NR

from ..llvm.helpers import I1, I8, I32, I64, PTR, VOID, alloca_once, for_range, get_or_declare, i32, i64, if_else
from .gemm_ir import add, ceildiv, mul, umin

MR = 8
"""rows of P per micro-kernel call (MR x nr/16 accumulators, 16 of the 32 zmm at nr = NR)"""
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


_SIZES = ("batch", "m", "n", "s0", "ss0", "s1", "ss1", "l", "lda", "sp", "ldc", "sc", "cs", "zp")
RB = 12 * MR
"""rows per parallel task"""


def _ukr(module: ir.Module, rows: int, out: str, nr: int = NR) -> ir.Function:
    """`void ukr(ptr rowp, ptr q, i64 S0, i64 SS0, i64 S1, i64 SS1, i64 L, ptr c, i64 ldc,
    i64 cs, i64 ncols[, ptr bias, ptr scale, i64 zp])`: rows x nr of C from one packed panel q
    and `rows` rows of P, row r starting at rowp[r] (a pointer); element (r, j) of the tile at
    c + r*ldc + j*cs; columns >= ncols are not stored. `out` "i32" stores the sums, "u8" / "i8"
    their requantization (`_requant`)."""
    name = f"onnxcc.i8gemm.ukr.{rows}x{nr}.{out}"
    nv = nr // 16  # 16-lane i32 vectors per panel row
    fn = module.globals.get(name)
    if fn is not None:
        return fn
    extra = [] if out == "i32" else [PTR, PTR, I64]
    fn = ir.Function(module, ir.FunctionType(VOID, [PTR, PTR, I64, I64, I64, I64, I64, PTR, I64, I64, I64, *extra]),
                     name=name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    fn.attributes.add("noinline")
    names = ("rowp", "q", "s0", "ss0", "s1", "ss1", "l", "c", "ldc", "cs", "ncols", "bias", "scale", "zp")
    for a, n in zip(fn.args, names):
        a.name = n
    rowp, q, s0n, ss0, s1n, ss1, seg, c, ldc, cs, ncols = fn.args[:11]
    for a in (q, c):
        a.add_attribute("noalias")
    dot = get_or_declare(module, "llvm.x86.avx512.vpdpbusd.512", ir.FunctionType(_V, [_V, _V, _V]))
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    acc = [[b.alloca(_V, name=f"acc.{r}.{v}") for v in range(nv)] for r in range(rows)]
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
        qrow = _gep8(b, q, mul(b, qg, nr * 4, "q.off"), "q.g")
        qv = [b.load(_gep8(b, qrow, 64 * v, "q.p"), name=f"q{v}", typ=_V, align=1) for v in range(nv)]
        for r in range(rows):
            pv = _splat(b, word(r), f"p{r}")
            for v in range(nv):
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
    masks = _column_masks(b, ncols, nv)
    vals = [[b.load(acc[r][v], name="sum", typ=_V) for v in range(nv)] for r in range(rows)]
    if out != "i32":
        vals = _requant(module, b, vals, fn.args[11], fn.args[12], fn.args[13], masks, out == "i8")
    _store(module, b, vals, c, ldc, cs, ncols, masks, I32 if out == "i32" else I8)
    b.ret_void()
    return fn


def _column_masks(b: ir.IRBuilder, ncols: ir.Value, nv: int) -> list[ir.Value]:
    """lane l of vector v is a column of the tile when v*16 + l < ncols"""
    iota = ir.Constant(ir.VectorType(I64, 16), list(range(16)))
    masks = []
    for v in range(nv):
        left = b.sub(ncols, i64(16 * v), name=f"left{v}")
        undef = ir.Constant(ir.VectorType(I64, 16), ir.Undefined)
        lv = b.shuffle_vector(b.insert_element(undef, left, i32(0), name="left.ins"), undef,
                              ir.Constant(ir.VectorType(I32, 16), [0] * 16), name=f"left{v}.v")
        m = b.icmp_signed(">", lv, iota, name=f"mask{v}")
        m.type = _MASK  # NOTE: llvmlite types vector compares as i1
        masks.append(m)
    return masks


def _requant(module: ir.Module, b: ir.IRBuilder, vals, bias: ir.Value, scale: ir.Value, zp: ir.Value,
             masks: list[ir.Value], signed: bool) -> list[list[ir.Value]]:
    """ops/quant.py's requant_expr on the tile, column j's operands bias[j] (i32, added to the
    sum) and scale[j] (f32): clamp(roundeven(f32(sum + bias) * scale) + zp, lo, hi) as 8-bit
    lanes, in the same f32 steps (the same bits)."""
    vf = ir.VectorType(ir.FloatType(), 16)
    mload_i = get_or_declare(module, "llvm.masked.load.v16i32.p0", ir.FunctionType(_V, [PTR, I32, _MASK, _V]))
    mload_f = get_or_declare(module, "llvm.masked.load.v16f32.p0", ir.FunctionType(vf, [PTR, I32, _MASK, vf]))
    rnd = get_or_declare(module, "llvm.roundeven.v16f32", ir.FunctionType(vf, [vf]))
    vmax = get_or_declare(module, "llvm.maxnum.v16f32", ir.FunctionType(vf, [vf, vf]))
    vmin = get_or_declare(module, "llvm.minnum.v16f32", ir.FunctionType(vf, [vf, vf]))
    lo, hi = (-128.0, 127.0) if signed else (0.0, 255.0)
    zi = ir.Constant(_V, [0] * 16)
    zf = ir.Constant(vf, [0.0] * 16)
    zpf = b.sitofp(_splat(b, b.trunc(zp, I32, name="zp32"), "zp"), vf, name="zp.f")
    cols = []
    for v in range(len(masks)):
        bp = b.gep(bias, [i64(16 * v)], inbounds=True, name="bias.p", source_etype=I32)
        sp = b.gep(scale, [i64(16 * v)], inbounds=True, name="scale.p", source_etype=ir.FloatType())
        cols.append((b.call(mload_i, [bp, i32(4), masks[v], zi], name=f"bias{v}"),
                     b.call(mload_f, [sp, i32(4), masks[v], zf], name=f"scale{v}")))
    out = []
    for row in vals:
        qrow = []
        for v, x in enumerate(row):
            bv, sv = cols[v]
            f = b.fmul(b.sitofp(b.add(x, bv, name="acc.b"), vf, name="acc.f"), sv, name="scaled")
            f = b.fadd(b.call(rnd, [f], name="rounded"), zpf, name="shifted")
            f = b.call(vmin, [b.call(vmax, [f, ir.Constant(vf, [lo] * 16)], name="lo"), ir.Constant(vf, [hi] * 16)],
                       name="hi")
            qrow.append(b.trunc(b.fptosi(f, _V, name="q32"), ir.VectorType(I8, 16), name="q8"))
        out.append(qrow)
    return out


def _store(module: ir.Module, b: ir.IRBuilder, vals, c: ir.Value, ldc: ir.Value, cs: ir.Value, ncols: ir.Value,
           masks: list[ir.Value], ety: ir.IntType) -> None:
    """the tile's vectors into C: masked vector stores where columns are contiguous (cs = 1),
    else element by element (column j at c + j*cs; the lowering stores densely today)"""
    vt = ir.VectorType(ety, 16)
    bits = ety.width
    mstore = get_or_declare(module, f"llvm.masked.store.v16i{bits}.p0", ir.FunctionType(VOID, [vt, PTR, I32, _MASK]))
    with if_else(b, b.icmp_unsigned("==", cs, i64(1), name="dense"), name="store") as (then, otherwise):
        with then:
            for r, row in enumerate(vals):
                crow = b.gep(c, [mul(b, ldc, r, "c.off") if r else i64(0)], inbounds=True, name="c.row",
                             source_etype=ety)
                for v, x in enumerate(row):
                    cp = b.gep(crow, [i64(16 * v)], inbounds=True, name="c.p", source_etype=ety)
                    b.call(mstore, [x, cp, i32(bits // 8), masks[v]])
        with otherwise:
            _store_each(b, vals, c, ldc, cs, ncols, ety)


def _store_each(b: ir.IRBuilder, vals, c: ir.Value, ldc: ir.Value, cs: ir.Value, ncols: ir.Value,
                ety: ir.IntType) -> None:
    """the general strided store: each row through a stack copy, its columns stored one by one
    (a loop, not 32 stores)"""
    vt = ir.VectorType(ety, 16)
    nr = 16 * len(vals[0])
    buf = alloca_once(b, ir.ArrayType(ety, nr), f"c.tmp{nr}")
    cols = umin(b, ncols, i64(nr), "c.n")
    for r, row in enumerate(vals):
        for v, x in enumerate(row):
            at = b.gep(buf, [i64(0), i64(16 * v)], inbounds=True, name="c.tv")
            b.store(x, b.bitcast(at, vt.as_pointer(), name="c.tvv"), align=1)
        crow = b.gep(c, [mul(b, ldc, r, "c.off") if r else i64(0)], inbounds=True, name="c.row",
                     source_etype=ety)
        with for_range(b, cols, "cj", guard=True) as j:
            e = b.load(b.gep(buf, [i64(0), j], inbounds=True, name="c.tp"), name="e")
            b.store(e, b.gep(crow, [mul(b, j, cs, "c.j")], inbounds=True, name="c.e", source_etype=ety))


def _body(module: ir.Module, table: bool, out: str, nr: int) -> ir.Function:
    """`void body(i64 begin, i64 end, ptr ctx)`: tasks [begin, end) of the (batch, row block,
    panel) grid; ctx = {sizes, bufs} of the call."""
    name = f"onnxcc.i8gemm.tasks{'.rows' if table else ''}.{out}.n{nr}"
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
    extra = [b.load(b.gep(bufs, [i64(j)], inbounds=True, name="buf.p", source_etype=PTR), name=nm, typ=PTR, align=8)
             for j, nm in enumerate(("T",) * table + (("bias", "scale") if out != "i32" else ()), start=3)]
    tb = extra.pop(0) if table else None
    ety = I32 if out == "i32" else I8
    m, n = sz["m"], sz["n"]
    panels = ceildiv(b, n, nr, "panels")
    seg_groups = ceildiv(b, sz["l"], 4, "seg.groups")
    panel_bytes = mul(b, mul(b, mul(b, sz["s0"], sz["s1"], "segs"), seg_groups, "groups"), nr * 4, "panel.bytes")
    blocks = ceildiv(b, m, RB, "rblocks")
    seg_args = [sz["s0"], sz["ss0"], sz["s1"], sz["ss1"], sz["l"]]
    with for_range(b, end, "t", start=begin, guard=True) as t:
        j = b.urem(t, panels, name="panel")
        rest = b.udiv(t, panels, name="t.rest")
        blk = b.urem(rest, blocks, name="rblock")
        bi = b.udiv(rest, blocks, name="b")
        pbat = _gep8(b, pb, mul(b, bi, sz["sp"], "p.b"), "p.bat")
        qpan = _gep8(b, qb, mul(b, j, panel_bytes, "q.j"), "q.pan")
        col = mul(b, j, nr, "col")
        ncols = b.sub(n, col, name="ncols")
        cbat = b.gep(cb, [add(b, mul(b, bi, sz["sc"], "c.b"), mul(b, col, sz["cs"], "c.j"), "c.off")], inbounds=True,
                     name="c.bat", source_etype=ety)
        # the tile's columns' requantization operands
        cols = [b.gep(extra[0], [col], inbounds=True, name="bias.j", source_etype=I32),
                b.gep(extra[1], [col], inbounds=True, name="scale.j", source_etype=ir.FloatType()),
                sz["zp"]] if extra else []
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
            cp = b.gep(cbat, [mul(b, r0, sz["ldc"], "c.r")], inbounds=True, name="c.blk", source_etype=ety)
            b.call(_ukr(module, rows, out, nr), [rowp, qpan, *seg_args, cp, sz["ldc"], sz["cs"], ncols, *cols])

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
    table, out, nr = CALLEES[call_name]
    name = f"onnxcc.i8gemm{'.rows' if table else ''}.{out}.n{nr}"
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
    tasks = mul(b, mul(b, batch, ceildiv(b, m, RB, "rblocks"), "tasks"), ceildiv(b, n, nr, "panels"), "tasks")
    work = mul(b, mul(b, mul(b, batch, m, "w"), n, "w"), kk, "work")
    body = _body(module, table, out, nr)
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
