"""Where the f32 conv call (gemm_implicit.py) stores its rows: each stored pixel j at row
at(j) = (j // ow + opt) * wpo + j % ow + opl of C (kernel/conv_call.py), and, when C is a
zero-padded map (out pads not all 0), the zeros of its border.

A padded C lets the next conv read its windows from the producer's output in place: the
padded copy of the map (a read and a write of the whole map per conv) is not made. The
border is written by the call itself, so C is wholly written by the call and the memory
planner may reuse its memory like any other result's."""

from __future__ import annotations

from llvmlite import ir

from onnxcc.kernel.conv_call import SIZES

from ..llvm.exprs import F32
from ..llvm.helpers import I1, I8, I64, PTR, VOID, for_range, get_or_declare, i64, if_then
from . import gemm_call as gcall
from .gemm_ir import add, mul

OUT_SIZES = ("oh", "ow", "wpo", "opt", "opl", "opb", "opr")
"""the call's sizes that place the stored rows in C"""


def row_pointers(b: ir.IRBuilder, sz: dict[str, ir.Value], cbat: ir.Value, j0: ir.Value, rows: int,
                 out: ir.Value) -> None:
    """out[g] = the address of stored pixel j0 + g's first column in C (`cbat`: C of the
    batch at the panel's first column), g < `rows`: one division for the tile's first pixel,
    then a step along its output row, wrapping to the next row at `ow`. Pointers past C's
    last pixel are computed but never stored through (the micro-kernel's nrows)."""
    ow, ldc = sz["ow"], sz["ldc"]
    oh0 = b.udiv(j0, ow, name="c.oh")
    ow0 = b.sub(j0, mul(b, oh0, ow, "c.ohw"), name="c.ow")
    for g in range(rows):
        pix = add(b, mul(b, add(b, oh0, sz["opt"], "c.h"), sz["wpo"], "c.hw"), add(b, ow0, sz["opl"], "c.w"), "c.pix")
        ptr = b.gep(cbat, [mul(b, pix, ldc, "c.at")], name="c.p", source_etype=F32)  # not inbounds: see above
        b.store(ptr, b.gep(out, [i64(0), i64(g)], inbounds=True, name="crow.g"))
        if g + 1 < rows:
            nxt = add(b, ow0, 1, "c.ow1")
            wrap = b.icmp_unsigned("==", nxt, ow, name="c.wrap")
            ow0 = b.select(wrap, i64(0), nxt, name="c.ow")
            oh0 = b.select(wrap, add(b, oh0, 1, "c.oh1"), oh0, name="c.oh")


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
    pads = b.or_(b.or_(sz["opt"], sz["opl"], name="pads"), b.or_(sz["opb"], sz["opr"], name="pads"), name="pads")
    with if_then(b, b.icmp_unsigned("!=", pads, i64(0), name="padded"), name="border"):
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
    `grid` (gemm_call.py `define_entry`) computes its interior"""
    fn = module.globals.get(name)
    if fn is not None:
        return fn
    fn = gcall.internal_function(module, name, gcall.CALL_FNTY, ("sizes", "bufs"), noinline=True)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    b.call(_border(module), list(fn.args))
    b.ret(b.call(grid, list(fn.args), name="rc"))
    return fn


__all__ = ["OUT_SIZES", "define_with_border", "row_pointers"]
