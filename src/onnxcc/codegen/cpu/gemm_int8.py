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

from ..llvm.helpers import I8, I32, I64, PTR, VOID, alloca_once, for_range, get_or_declare, i32, i64, if_else
from . import gemm_call as gcall
from .gemm_ir import add, ceildiv, mul, umin

MR = 8
"""rows of P per micro-kernel call (MR x nr/16 accumulators, 16 of the 32 zmm at nr = NR)"""
RB = 12 * MR
"""rows per parallel task, at most (gemm_call.row_blocks: fewer where that splits the grid evenly over the threads)"""
_SIZES = ("batch", "m", "n", "s0", "ss0", "s1", "ss1", "l", "lda", "sp", "ldc", "sc", "cs", "zp")

_V = ir.VectorType(I32, 16)


def _gep8(b: ir.IRBuilder, base: ir.Value, off: ir.Value | int, name: str) -> ir.Value:
    return gcall.gep(b, base, off, I8, name)


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
    requant = () if out == "i32" else (("bias", PTR), ("scale", PTR), ("zp", I64))
    fn, b, acc, prow = gcall.micro_kernel(module, name, (("cs", I64), ("ncols", I64), *requant), _V, rows, nv)
    _, q, s0n, ss0, s1n, ss1, seg, c, ldc, cs, ncols = fn.args[:11]
    dot = get_or_declare(module, "llvm.x86.avx512.vpdpbusd.512", ir.FunctionType(_V, [_V, _V, _V]))
    groups = b.lshr(seg, i64(2), name="groups")
    rem = b.and_(seg, i64(3), name="l.rem")
    per_seg = b.add(groups, b.zext(b.icmp_unsigned("!=", rem, i64(0), name="has.rem"), I64, name="rem.g"),
                    name="seg.groups")

    def group(qg: ir.Value, word) -> None:
        """one group of four k: row r's four bytes `word(r)` (an i32) against the panel's"""
        qrow = _gep8(b, q, mul(b, qg, nr * 4, "q.off"), "q.g")
        qv = [b.load(_gep8(b, qrow, 64 * v, "q.p"), name=f"q{v}", typ=_V, align=1) for v in range(nv)]
        for r in range(rows):
            pv = gcall.splat(b, word(r), f"p{r}")
            for v in range(nv):
                cur = b.load(acc[r][v], name="acc", typ=_V)
                b.store(b.call(dot, [cur, pv, qv[v]], name="dot"), acc[r][v])  # (u8 x s8) x 4

    with gcall.window_segments(b, s0n, ss0, s1n, ss1, per_seg, "q.seg") as (base, q0):
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
    masks = [gcall.column_mask(b, ncols, v) for v in range(nv)]
    vals = [[b.load(acc[r][v], name="sum", typ=_V) for v in range(nv)] for r in range(rows)]
    if out != "i32":
        vals = _requant(module, b, vals, fn.args[11], fn.args[12], fn.args[13], masks, out == "i8")
    _store(module, b, vals, c, ldc, cs, ncols, masks, I32 if out == "i32" else I8)
    b.ret_void()
    return fn


def _requant(module: ir.Module, b: ir.IRBuilder, vals, bias: ir.Value, scale: ir.Value, zp: ir.Value,
             masks: list[ir.Value], signed: bool) -> list[list[ir.Value]]:
    """ops/quant.py's requant_expr on the tile, column j's operands bias[j] (i32, added to the
    sum) and scale[j] (f32): clamp(roundeven(f32(sum + bias) * scale) + zp, lo, hi) as 8-bit
    lanes, in the same f32 steps (the same bits)."""
    vf = ir.VectorType(ir.FloatType(), 16)
    mload_i = get_or_declare(module, "llvm.masked.load.v16i32.p0", ir.FunctionType(_V, [PTR, I32, gcall.MASK, _V]))
    mload_f = get_or_declare(module, "llvm.masked.load.v16f32.p0", ir.FunctionType(vf, [PTR, I32, gcall.MASK, vf]))
    rnd = get_or_declare(module, "llvm.roundeven.v16f32", ir.FunctionType(vf, [vf]))
    vmax = get_or_declare(module, "llvm.maxnum.v16f32", ir.FunctionType(vf, [vf, vf]))
    vmin = get_or_declare(module, "llvm.minnum.v16f32", ir.FunctionType(vf, [vf, vf]))
    lo, hi = (-128.0, 127.0) if signed else (0.0, 255.0)
    zi = ir.Constant(_V, [0] * 16)
    zf = ir.Constant(vf, [0.0] * 16)
    zpf = b.sitofp(gcall.splat(b, b.trunc(zp, I32, name="zp32"), "zp"), vf, name="zp.f")
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
    mstore = get_or_declare(module, f"llvm.masked.store.v16i{bits}.p0",
                            ir.FunctionType(VOID, [vt, PTR, I32, gcall.MASK]))
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


def _shape(table: bool, out: str, nr: int) -> gcall.CallShape:
    """the call's buffers: P, Q, C, then the row-offset table T (`_rows` callees) and the
    requantization operands (8-bit outputs)"""
    bufs = ("P", "Q", "C") + ("T",) * table + (("bias", "scale") if out != "i32" else ())
    return gcall.CallShape(sizes=_SIZES, bufs=bufs, ety=I8, nr=nr, mr=MR, rb=RB)


def _body(module: ir.Module, table: bool, out: str, nr: int) -> ir.Function:
    """the task body: each task's row block MR rows at a time, the last M % MR rows by a
    micro-kernel of that many rows"""
    name = f"onnxcc.i8gemm.tasks{'.rows' if table else ''}.{out}.n{nr}"
    fn = module.globals.get(name)
    if fn is not None:
        return fn

    def panel_bytes(b: ir.IRBuilder, sz: dict[str, ir.Value]) -> ir.Value:
        """K rounded up to groups of four per segment, times nr bytes"""
        seg_groups = ceildiv(b, sz["l"], 4, "seg.groups")
        return mul(b, mul(b, mul(b, sz["s0"], sz["s1"], "segs"), seg_groups, "groups"), nr * 4, "panel.bytes")

    ety = I32 if out == "i32" else I8
    with gcall.task_body(module, name, _shape(table, out, nr), panel_bytes) as t:
        b, sz, rowp = t.b, t.sz, t.rowp
        seg_args = [sz["s0"], sz["ss0"], sz["s1"], sz["ss1"], sz["l"]]
        tb = t.bufs["T"] if table else None
        cbat = b.gep(t.bufs["C"], [add(b, mul(b, t.bi, sz["sc"], "c.b"), mul(b, t.col, sz["cs"], "c.j"), "c.off")],
                     inbounds=True, name="c.bat", source_etype=ety)
        # the tile's columns' requantization operands
        cols = [b.gep(t.bufs["bias"], [t.col], inbounds=True, name="bias.j", source_etype=I32),
                b.gep(t.bufs["scale"], [t.col], inbounds=True, name="scale.j", source_etype=ir.FloatType()),
                sz["zp"]] if out != "i32" else []
        r_lo, r_hi = t.rows()
        nrows = b.sub(r_hi, r_lo, name="r.n")

        def tile(r0: ir.Value, rows: int) -> None:
            for r in range(rows):
                mr = add(b, r0, r, "m.r")
                if tb is not None:
                    off = b.load(b.gep(tb, [mr], inbounds=True, name="t.p", source_etype=I64), name="t.off", typ=I64,
                                 align=8)
                else:
                    off = mul(b, mr, sz["lda"], "p.off")
                b.store(_gep8(b, t.pbat, off, "p.r"), b.gep(rowp, [i64(0), i64(r)], inbounds=True, name="rowp.r"))
            cp = b.gep(cbat, [mul(b, r0, sz["ldc"], "c.r")], inbounds=True, name="c.blk", source_etype=ety)
            b.call(_ukr(module, rows, out, nr), [rowp, t.qpan, *seg_args, cp, sz["ldc"], sz["cs"], t.ncols, *cols])

        with for_range(b, b.udiv(nrows, i64(MR), name="tiles"), "mb", guard=True) as mb:
            tile(add(b, r_lo, mul(b, mb, MR, "r0"), "r0"), MR)
        r0 = b.sub(r_hi, b.urem(nrows, i64(MR), name="mtail"), name="r.tail")
        after = t.fn.append_basic_block("tail.end")
        sw = b.switch(b.urem(nrows, i64(MR), name="mtail"), after)
        for rows in range(1, MR):
            blkb = t.fn.append_basic_block(f"tail{rows}")
            sw.add_case(i64(rows), blkb)
            with b.goto_block(blkb):
                tile(r0, rows)
                b.branch(after)
        b.position_at_end(after)
    return t.fn


def define_callee(module: ir.Module, call_name: str) -> ir.Function:
    """The LLVM definition of CallStmt callee `call_name` (one of CALLEES) in `module`."""
    table, out, nr = CALLEES[call_name]
    name = f"onnxcc.i8gemm{'.rows' if table else ''}.{out}.n{nr}"
    fn = module.globals.get(name)
    if fn is not None:
        return fn
    return gcall.define_entry(module, name, _shape(table, out, nr), lambda: _body(module, table, out, nr))
