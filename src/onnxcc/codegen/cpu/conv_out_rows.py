"""Where the f32 conv call (gemm_implicit.py) stores its rows: each stored pixel j at row
at(j) = (j // ow + opt) * wpo + j % ow + opl of C (kernel/conv_call.py), and, when C is a
zero-padded map (out pads not all 0), the zeros of its border.

A padded C lets the next conv read its windows from the producer's output in place: the
padded copy of the map (a read and a write of the whole map per conv) is not made. The
border is written by the call itself, so C is wholly written by the call and the memory
planner may reuse its memory like any other result's."""

from __future__ import annotations

from llvmlite import ir

from onnxcc.kernel.conv_call import POOL_ROWS, SIZES

from ..llvm.exprs import F32
from ..llvm.helpers import I1, I8, I32, I64, PTR, VOID, for_range, get_or_declare, i64, if_else, if_then
from . import gemm_call as gcall
from .gemm_ir import add, mul, umin

OUT_SIZES = ("oh", "ow", "wpo", "opt", "opl", "opb", "opr")
"""the call's sizes that place the stored rows in C"""


def row_pointers(b: ir.IRBuilder, sz: dict[str, ir.Value], cbat: ir.Value, j0: ir.Value, rows: int,
                 out: ir.Value) -> None:
    """out[g] = the address of stored pixel j0 + g's first column in C (`cbat`: C of the
    batch at the panel's first column), g < `rows`: j*ldc on a flat C; on a padded one
    at(j)*ldc, j clamped to the last pixel (a tile's rows past it are never stored: the
    micro-kernel's nrows). At(j) by one division for j0, then a step of ldc per pixel and the
    border's 2 * pads past a row's end (a division per row cost 150 cycles a tile, 3% of
    resnet's run; a table of at(j) made per call, the conv net's 0.3%). With `pool` a tile
    stores rows / POOL_ROWS rows: only those are set."""
    ldc = sz["ldc"]

    def padded_rows(n: int) -> None:
        ow = sz["ow"]
        last = b.sub(mul(b, sz["oh"], ow, "c.n"), i64(1), name="c.last")

        def at(h: ir.Value, w: ir.Value, name: str) -> ir.Value:  # (h, w)'s offset in the padded C
            row = mul(b, add(b, h, sz["opt"], f"{name}.h"), sz["wpo"], f"{name}.r")
            return mul(b, add(b, add(b, row, w, f"{name}.w"), sz["opl"], f"{name}.l"), ldc, name)

        at_last = at(b.sub(sz["oh"], i64(1), name="c.lh"), b.sub(ow, i64(1), name="c.lw"), "c.atlast")
        h0 = b.udiv(j0, ow, name="c.h0")
        w = b.sub(j0, mul(b, h0, ow, "c.hw"), name="c.w0")
        off = at(h0, w, "c.at0")
        wrap = mul(b, b.sub(sz["wpo"], ow, name="c.pads"), ldc, "c.wrap")  # a row's end to the next's start
        for g in range(n):
            past = b.icmp_unsigned(">", add(b, j0, g, "c.j"), last, name="c.past")
            ptr = gcall.gep(b, cbat, b.select(past, at_last, off, name="c.off"), F32, "c.p")
            b.store(ptr, b.gep(out, [i64(0), i64(g)], inbounds=True, name="crow.g"))
            if g + 1 < n:
                w = add(b, w, 1, "c.w")
                wrapped = b.icmp_unsigned("==", w, ow, name="c.wrapped")
                off = add(b, add(b, off, ldc, "c.step"), b.select(wrapped, wrap, i64(0), name="c.wr"), "c.next")
                w = b.select(wrapped, i64(0), w, name="c.w")

    def flat(n: int) -> None:
        base = gcall.gep(b, cbat, mul(b, j0, ldc, "c.r"), F32, "c.blk")
        for g in range(n):
            ptr = b.gep(base, [mul(b, ldc, g, "c.off")], name="c.p", source_etype=F32)  # not inbounds: see above
            b.store(ptr, b.gep(out, [i64(0), i64(g)], inbounds=True, name="crow.g"))

    padded = b.icmp_unsigned("!=", _pads(b, sz), i64(0), name="padded")
    _per_pool(b, sz["pool"], lambda n: _either(b, padded, lambda: padded_rows(n), lambda: flat(n)), rows)


def _either(b: ir.IRBuilder, cond: ir.Value, then, otherwise) -> None:
    with if_else(b, cond, name="either") as (yes, no):
        with yes:
            then()
        with no:
            otherwise()


def _per_pool(b: ir.IRBuilder, pool: ir.Value, emit, rows: int) -> None:
    """`emit(n)` for the n rows a tile stores: rows // POOL_ROWS with pool, else rows"""
    _either(b, b.icmp_unsigned("==", pool, i64(POOL_ROWS), name="pooled"), lambda: emit(rows // POOL_ROWS),
            lambda: emit(rows))


def residual_pointers(b: ir.IRBuilder, sz: dict[str, ir.Value], rbat: ir.Value, r0: ir.Value, rows: int,
                      out: ir.Value, table: ir.Value) -> None:
    """out[g] = the address of row r0 + g's residual (`rbat`: R of the batch at the panel's
    first column): (r0 + g)*ldc on a flat R, table[r0 + g] (V) on a padded one (`rpad`), the
    row clamped to the last (the micro-kernel reads only rows < nrows)."""
    with if_else(b, b.icmp_unsigned("!=", sz["rpad"], i64(0), name="rpadded"), name="rrow") as (padded, flat):
        with padded:
            last = b.sub(sz["m"], i64(1), name="r.last")
            for g in range(rows):
                off = b.load(b.gep(table, [umin(b, add(b, r0, g, "r.j"), last, "r.j")], inbounds=True, name="v.p",
                                   source_etype=I64), name="v", typ=I64, align=8)
                b.store(gcall.gep(b, rbat, off, F32, "r.p"), b.gep(out, [i64(0), i64(g)], inbounds=True,
                                                                   name="rrow.g"))
        with flat:
            base = gcall.gep(b, rbat, mul(b, r0, sz["ldc"], "r.r"), F32, "r.blk")
            for g in range(rows):
                ptr = b.gep(base, [mul(b, sz["ldc"], g, "r.off")], name="r.p", source_etype=F32)
                b.store(ptr, b.gep(out, [i64(0), i64(g)], inbounds=True, name="rrow.g"))


def prefetch_tile(module: ir.Module, b: ir.IRBuilder, c: ir.Value, pool: ir.Value, res: ir.Value, rows: int,
                  nv: int) -> None:
    """Before a micro-kernel's k loop: its tile's rows of C (`c`: the row pointers) fetched
    for writing and the residual's (`res`: its row pointers, where not null) for reading, so their
    misses overlap the FMAs instead of stalling the stores (a 4x112x112x32 map does not stay
    in the caches between convs). A prefetch never faults: the rows past the tile's (never
    stored) are fetched too; with `pool` only the rows stored."""
    pf = get_or_declare(module, "llvm.prefetch.p0", ir.FunctionType(VOID, [PTR, I32, I32, I32]))

    def fetch(ptr: ir.Value, write: int) -> None:
        for v in range(nv):  # one 64-byte line per 16 floats
            at = gcall.gep(b, ptr, 16 * v, F32, "pf.p") if v else ptr
            b.call(pf, [at, ir.Constant(I32, write), ir.Constant(I32, 3), ir.Constant(I32, 1)])

    def stored(n: int) -> None:
        for g in range(n):
            fetch(b.load(b.gep(c, [i64(g)], inbounds=True, name="pf.cp", source_etype=PTR), name="pf.c", typ=PTR,
                         align=8), 1)

    _per_pool(b, pool, stored, rows)
    has_res = b.icmp_unsigned("!=", b.ptrtoint(res, I64, name="pf.res.i"), i64(0), name="pf.res")
    with if_then(b, has_res, name="pf.res"):
        for r in range(rows):
            fetch(b.load(b.gep(res, [i64(r)], inbounds=True, name="pf.rpp", source_etype=PTR), name="pf.r", typ=PTR,
                         align=8), 0)


def _pads(b: ir.IRBuilder, sz: dict[str, ir.Value]) -> ir.Value:
    """nonzero where C is padded"""
    return b.or_(b.or_(sz["opt"], sz["opl"], name="pads"), b.or_(sz["opb"], sz["opr"], name="pads"), name="pads")


def _zero(b: ir.IRBuilder, memset: ir.Function, base: ir.Value, off: ir.Value, count: ir.Value) -> None:
    """count f32 zeros from base + off"""
    ptr = gcall.gep(b, base, off, F32, "z.p")
    b.call(memset, [ptr, ir.Constant(I8, 0), mul(b, count, 4, "z.bytes"), ir.Constant(I1, 0)])


def _border(module: ir.Module) -> ir.Function:
    """`void border(const i64 *sizes, void *const *bufs)`: zeros of C's border, every batch
    (nothing when C is flat)"""
    name = "onnxcc.f32conv.border"
    fn = module.globals.get(name)
    if fn is not None:
        return fn
    fn = gcall.internal_function(module, name, ir.FunctionType(VOID, [PTR, PTR]), ("sizes", "bufs"))
    sizes, bufs = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))

    def size(nm: str) -> ir.Value:
        p = b.gep(sizes, [i64(SIZES.index(nm))], inbounds=True, name=f"{nm}.p", source_etype=I64)
        return b.load(p, name=nm, typ=I64, align=8)

    sz = {nm: size(nm) for nm in ("batch", "ldc", "sc", *OUT_SIZES)}
    c = b.load(b.gep(bufs, [i64(2)], inbounds=True, name="c.pp", source_etype=PTR), name="c", typ=PTR, align=8)
    memset = get_or_declare(module, "llvm.memset.p0.i64", ir.FunctionType(VOID, [PTR, I8, I64, I1]))
    with if_then(b, b.icmp_unsigned("!=", _pads(b, sz), i64(0), name="padded"), name="border"):
        row = mul(b, sz["wpo"], sz["ldc"], "row")  # a padded row's elements
        with for_range(b, sz["batch"], "bi", guard=True) as bi:
            base = gcall.gep(b, c, mul(b, bi, sz["sc"], "c.b"), F32, "c.bat")
            _zero(b, memset, base, i64(0), mul(b, sz["opt"], row, "top"))
            left, right = mul(b, sz["opl"], sz["ldc"], "left"), mul(b, sz["opr"], sz["ldc"], "right")
            right_at = mul(b, add(b, sz["opl"], sz["ow"], "r.at"), sz["ldc"], "r.at")
            with for_range(b, sz["oh"], "h", guard=True) as h:
                at = mul(b, add(b, sz["opt"], h, "h.p"), row, "h.at")
                _zero(b, memset, base, at, left)
                _zero(b, memset, base, add(b, at, right_at, "h.r"), right)
            _zero(b, memset, base, mul(b, add(b, sz["opt"], sz["oh"], "b.at"), row, "b.at"),
                  mul(b, sz["opb"], row, "bottom"))
    b.ret_void()
    return fn


def define_with_border(module: ir.Module, name: str, grid: ir.Function) -> ir.Function:
    """`i32 name(const i64 *sizes, void *const *bufs)`: C's border zeroed, then the task grid
    `grid` (gemm_call.py `define_entry`, or conv_stem.py's, whose call has the same sizes)
    computes its interior"""
    fn = module.globals.get(name)
    if fn is not None:
        return fn
    fn = gcall.internal_function(module, name, gcall.CALL_FNTY, ("sizes", "bufs"), noinline=True)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    b.call(_border(module), list(fn.args))
    b.ret(b.call(grid, list(fn.args), name="rc"))
    return fn


__all__ = ["OUT_SIZES", "define_with_border", "prefetch_tile", "residual_pointers", "row_pointers"]
