"""The 8-bit GEMM of the quantized ops on AVX-512 VNNI: `vpdpbusd` micro-kernels.

ops/int8_gemm.py lowers an integer contraction whose weights are constant to a `CallStmt`
of `onnxcc_i8gemm_us` or `onnxcc_i8gemm_su` (only when the backend says the target has
VNNI, `CpuBackend.int8_dot`); the CPU emitter (extern.py) defines the callee here, in
LLVM, instead of calling the C runtime. Its one signature is the runtime calls':

    i32 fn(const i64 *sizes, void *const *bufs)
    sizes = batch, M, N, K, lda, P batch stride, Q batch stride, ldc, C batch stride
    bufs  = P, Q, C

    C[b][m*ldc + n] = sum(k < K: P[b][m*lda + k] * Q(b, k, n))        (i32, stored, not added)

P is read in place, row by row (k contiguous). Q is packed: panels of NR columns, each
[ceil(K/4)][NR][4] bytes (four consecutive k of one column in one 32-bit lane), zero past K
and past N. `us`: P is unsigned and Q signed; `su`: P signed and Q unsigned (vpdpbusd's
unsigned operand is the packed one). One vpdpbusd adds four u8 x s8 products (each fits
16 bits, their sum 18) into every i32 lane without saturation: the sums are exact as the
i32 contraction (wrapping like it past 2**31).

The work is split over (batch, panel) pairs through onnxcc_parallel_for when it is big; a
panel's column block of C is computed MR rows at a time by a micro-kernel holding MR x NR/16
zmm accumulators; the last rows (M % MR) by a kernel of that many rows."""

from __future__ import annotations

from llvmlite import ir

from onnxcc.kernel.i8gemm import CALLEES, NR

from ..llvm.helpers import I1, I8, I32, I64, PTR, VOID, for_range, get_or_declare, i32, i64, if_else
from .gemm_ir import add, ceildiv, mul

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


def _ukr(module: ir.Module, rows: int, p_signed: bool) -> ir.Function:
    """`void ukr(ptr p, i64 lda, ptr q, i64 K, ptr c, i64 ldc, i64 ncols)`: rows x NR of C
    from `rows` rows of P and one packed panel q; columns >= ncols are not stored."""
    name = f"onnxcc.i8gemm.ukr.{rows}x{NR}.{'su' if p_signed else 'us'}"
    fn = module.globals.get(name)
    if fn is not None:
        return fn
    fn = ir.Function(module, ir.FunctionType(VOID, [PTR, I64, PTR, I64, PTR, I64, I64]), name=name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    fn.attributes.add("noinline")
    p, lda, q, kk, c, ldc, ncols = fn.args
    for a, n in zip(fn.args, ("p", "lda", "q", "k", "c", "ldc", "ncols")):
        a.name = n
    for a in (p, q, c):
        a.add_attribute("noalias")
    dot = get_or_declare(module, "llvm.x86.avx512.vpdpbusd.512", ir.FunctionType(_V, [_V, _V, _V]))
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    acc = [[b.alloca(_V, name=f"acc.{r}.{v}") for v in range(NV)] for r in range(rows)]
    zero = ir.Constant(_V, [0] * 16)
    for row in acc:
        for slot in row:
            b.store(zero, slot)
    prow = [_gep8(b, p, mul(b, lda, r, "p.off") if r else 0, f"p.row{r}") for r in range(rows)]

    def group(g: ir.Value, word) -> None:
        """k group g (four k): row r's four bytes `word(r)` (an i32) against the panel's."""
        qrow = _gep8(b, q, mul(b, g, NR * 4, "q.off"), "q.g")
        qv = [b.load(_gep8(b, qrow, 64 * v, "q.p"), name=f"q{v}", typ=_V, align=1) for v in range(NV)]
        for r in range(rows):
            pv = _splat(b, word(r), f"p{r}")
            for v in range(NV):
                cur = b.load(acc[r][v], name="acc", typ=_V)
                # vpdpbusd's first multiplicand is the unsigned one
                x, y = (qv[v], pv) if p_signed else (pv, qv[v])
                b.store(b.call(dot, [cur, x, y], name="dot"), acc[r][v])

    groups = b.lshr(kk, i64(2), name="groups")
    with for_range(b, groups, "g", guard=True) as g:
        off = mul(b, g, 4, "p.k")
        group(g, lambda r: b.load(_gep8(b, prow[r], off, "p.p"), name=f"pw{r}", typ=I32, align=1))
    rem = b.and_(kk, i64(3), name="k.rem")
    with if_else(b, b.icmp_unsigned("!=", rem, i64(0), name="has.rem"), name="tail") as (then, otherwise):
        with then:
            # the last 1-3 bytes of each row, zero-extended into one word (no read past the row)
            base = mul(b, groups, 4, "p.tail")
            words = []
            for r in range(rows):
                w: ir.Value = i32(0)
                for t in range(3):
                    keep = b.icmp_unsigned(">", rem, i64(t), name="keep")
                    byte = b.load(_gep8(b, prow[r], b.select(keep, add(b, base, t, "p.t"), base, name="p.ti"),
                                        "p.tp"), name="pb", typ=I8, align=1)
                    byte32 = b.select(keep, b.zext(byte, I32, name="pb.z"), i32(0), name="pb.k")
                    w = b.or_(w, b.shl(byte32, i32(8 * t), name="pb.s"), name="pw.t")
                words.append(w)
            group(groups, lambda r: words[r])
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


def _body(module: ir.Module, p_signed: bool) -> ir.Function:
    """`void body(i64 begin, i64 end, ptr ctx)`: tasks [begin, end) of the (batch, panel)
    grid; ctx = {sizes, bufs} of the call."""
    name = f"onnxcc.i8gemm.tasks.{'su' if p_signed else 'us'}"
    fn = module.globals.get(name)
    if fn is not None:
        return fn
    fn = ir.Function(module, _BODY_FNTY, name=name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    begin, end, ctx = fn.args
    begin.name, end.name, ctx.name = "begin", "end", "ctx"
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    sizes = b.load(ctx, name="sizes", typ=PTR, align=8)
    bufs = b.load(b.gep(ctx, [i64(1)], inbounds=True, name="bufs.p", source_etype=PTR), name="bufs", typ=PTR,
                  align=8)
    s = [b.load(b.gep(sizes, [i64(j)], inbounds=True, name="s.p", source_etype=I64), name=n, typ=I64, align=8)
         for j, n in enumerate(("batch", "m", "n", "k", "lda", "sp", "sq", "ldc", "sc"))]
    _, m, n, k, lda, sp, sq, ldc, sc = s
    pb, qb, cb = (b.load(b.gep(bufs, [i64(j)], inbounds=True, name="buf.p", source_etype=PTR), name=nm, typ=PTR,
                         align=8) for j, nm in enumerate(("P", "Q", "C")))
    panels = ceildiv(b, n, NR, "panels")
    panel_bytes = mul(b, ceildiv(b, k, 4, "groups"), NR * 4, "panel.bytes")
    full = b.udiv(m, i64(MR), name="mblocks")
    tail = b.urem(m, i64(MR), name="mtail")
    with for_range(b, end, "t", start=begin, guard=True) as t:
        bi = b.udiv(t, panels, name="b")
        j = b.urem(t, panels, name="panel")
        pbat = _gep8(b, pb, mul(b, bi, sp, "p.b"), "p.bat")
        qpan = _gep8(b, qb, add(b, mul(b, bi, sq, "q.b"), mul(b, j, panel_bytes, "q.j"), "q.off"), "q.pan")
        col = mul(b, j, NR, "col")
        ncols = b.sub(n, col, name="ncols")
        cbat = b.gep(cb, [add(b, mul(b, bi, sc, "c.b"), col, "c.off")], inbounds=True, name="c.bat",
                     source_etype=I32)
        big = _ukr(module, MR, p_signed)
        with for_range(b, full, "mb", guard=True) as mb:
            r0 = mul(b, mb, MR, "r0")
            b.call(big, [_gep8(b, pbat, mul(b, r0, lda, "p.r"), "p.blk"), lda, qpan, k,
                         b.gep(cbat, [mul(b, r0, ldc, "c.r")], inbounds=True, name="c.blk", source_etype=I32),
                         ldc, ncols])
        r0 = mul(b, full, MR, "r.tail")
        pt = _gep8(b, pbat, mul(b, r0, lda, "p.r"), "p.tail")
        ct = b.gep(cbat, [mul(b, r0, ldc, "c.r")], inbounds=True, name="c.tail", source_etype=I32)
        after = fn.append_basic_block("tail.end")
        sw = b.switch(tail, after)
        for rows in range(1, MR):
            blk = fn.append_basic_block(f"tail{rows}")
            sw.add_case(i64(rows), blk)
            with b.goto_block(blk):
                b.call(_ukr(module, rows, p_signed), [pt, lda, qpan, k, ct, ldc, ncols])
                b.branch(after)
        b.position_at_end(after)
    b.ret_void()
    return fn


def define_callee(module: ir.Module, call_name: str) -> ir.Function:
    """The LLVM definition of CallStmt callee `call_name` (one of CALLEES) in `module`."""
    p_signed = CALLEES[call_name]
    name = f"onnxcc.i8gemm.{'su' if p_signed else 'us'}"
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

    def size(j: int, nm: str) -> ir.Value:
        return b.load(b.gep(sizes, [i64(j)], inbounds=True, name=f"{nm}.p", source_etype=I64), name=nm, typ=I64,
                      align=8)

    batch, m, n, k = (size(j, nm) for j, nm in enumerate(("batch", "m", "n", "k")))
    tasks = mul(b, batch, ceildiv(b, n, NR, "panels"), "tasks")
    work = mul(b, mul(b, mul(b, batch, m, "w"), n, "w"), k, "work")
    body = _body(module, p_signed)
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
