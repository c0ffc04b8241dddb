"""The channels-last global pool call (`onnxcc_f32chanpool`, kernel/chan_pool_call.py has the
contract), defined in LLVM where the CPU emitter (extern.py) meets its CallStmt, with the
runtime calls' one signature `i32 fn(const i64 *sizes, void *const *bufs)`.

Per image and per block of up to CB = 4 vectors of 16 channels, one accumulator vector per
16 channels walks the pixels in memory order (each pixel's block is contiguous; the last
vector of a block masked past C). The sum of a channel is taken pixel by pixel in f32, the
order of the NCHW GlobalAveragePool's loop, then divided by P. Serial: the pool reads its
input once (memory-bound, a few percent of the conv that wrote it)."""

from __future__ import annotations

from llvmlite import ir

from onnxcc.kernel.chan_pool_call import SIZES

from ..llvm.exprs import F32
from ..llvm.helpers import I1, I32, I64, PTR, VOID, for_range, get_or_declare, i32, i64, if_else
from .gemm_ir import add, ceildiv, mul

CB = 4
"""16-lane vectors of channels per pass over the pixels"""

_V = ir.VectorType(F32, 16)
_MASK = ir.VectorType(I1, 16)
_CALL_FNTY = ir.FunctionType(I32, [PTR, PTR])


def _splat_i64(b: ir.IRBuilder, x: ir.Value, name: str) -> ir.Value:
    ty = ir.VectorType(I64, 16)
    undef = ir.Constant(ty, ir.Undefined)
    return b.shuffle_vector(b.insert_element(undef, x, i32(0), name=f"{name}.ins"), undef,
                            ir.Constant(ir.VectorType(I32, 16), [0] * 16), name=name)


def _walk(b: ir.IRBuilder, xn, p, c, c0, masks, init_v, acc, mload, is_max: bool) -> None:
    """acc[v] = the sum (max) over the pixels of channels c0 + 16 v + lane"""
    with for_range(b, p, "px", guard=True) as px:
        row = b.gep(xn, [add(b, mul(b, px, c, "x.px"), c0, "x.off")], inbounds=True, name="x.row",
                    source_etype=F32)
        for v in range(CB):
            ptr = b.gep(row, [i64(16 * v)], inbounds=True, name="x.p", source_etype=F32)
            x = b.call(mload, [ptr, i32(4), masks[v], init_v], name=f"x{v}")
            cur = b.load(acc[v], name="cur", typ=_V)
            if is_max:
                nan = b.fcmp_unordered("!=", x, x, name="nan")  # a NaN wins, as np.max
                nan.type = _MASK  # NOTE: llvmlite types vector compares as i1
                gt = b.fcmp_ordered(">", x, cur, name="gt")
                gt.type = _MASK
                nxt = b.select(b.or_(nan, gt, name="take"), x, cur, name="maxed")
            else:
                nxt = b.fadd(cur, x, name="summed")
            b.store(nxt, acc[v])


def define_callee(module: ir.Module) -> ir.Function:
    """The LLVM definition of the `onnxcc_f32chanpool` CallStmt's callee in `module`."""
    name = "onnxcc.f32chanpool"
    fn = module.globals.get(name)
    if fn is not None:
        return fn
    fn = ir.Function(module, _CALL_FNTY, name=name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    fn.attributes.add("noinline")  # a call per pool; shared once per library (shared_helpers.py)
    sizes, bufs = fn.args
    sizes.name, bufs.name = "sizes", "bufs"
    mload = get_or_declare(module, "llvm.masked.load.v16f32.p0", ir.FunctionType(_V, [PTR, I32, _MASK, _V]))
    mstore = get_or_declare(module, "llvm.masked.store.v16f32.p0", ir.FunctionType(VOID, [_V, PTR, I32, _MASK]))
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    sz = {n: b.load(b.gep(sizes, [i64(j)], inbounds=True, name=f"{n}.p", source_etype=I64), name=n, typ=I64, align=8)
          for j, n in enumerate(SIZES)}
    xb, yb = (b.load(b.gep(bufs, [i64(j)], inbounds=True, name="buf.p", source_etype=PTR), name=nm, typ=PTR, align=8)
              for j, nm in enumerate(("X", "Y")))
    p, c = sz["p"], sz["c"]
    is_max = b.icmp_unsigned("!=", sz["max"], i64(0), name="is.max")
    init = b.select(is_max, ir.Constant(F32, float("-inf")), ir.Constant(F32, 0.0), name="init")
    init_v = b.shuffle_vector(b.insert_element(ir.Constant(_V, ir.Undefined), init, i32(0), name="init.ins"),
                              ir.Constant(_V, ir.Undefined), ir.Constant(ir.VectorType(I32, 16), [0] * 16),
                              name="init.v")
    inv_div = b.sitofp(p, F32, name="count")
    div_v = b.shuffle_vector(b.insert_element(ir.Constant(_V, ir.Undefined), inv_div, i32(0), name="div.ins"),
                             ir.Constant(_V, ir.Undefined), ir.Constant(ir.VectorType(I32, 16), [0] * 16),
                             name="div.v")
    iota = ir.Constant(ir.VectorType(I64, 16), list(range(16)))
    acc = [b.alloca(_V, name=f"acc{v}") for v in range(CB)]
    with for_range(b, sz["batch"], "n", guard=True) as n:
        xn = b.gep(xb, [mul(b, mul(b, n, p, "x.np"), c, "x.n")], inbounds=True, name="x.img", source_etype=F32)
        yn = b.gep(yb, [mul(b, n, c, "y.n")], inbounds=True, name="y.img", source_etype=F32)
        with for_range(b, ceildiv(b, c, 16 * CB, "blocks"), "blk", guard=True) as blk:
            c0 = mul(b, blk, 16 * CB, "c0")
            masks = []
            for v in range(CB):
                left = b.sub(c, add(b, c0, 16 * v, "cv"), name=f"left{v}")
                m = b.icmp_signed(">", _splat_i64(b, left, f"left{v}.v"), iota, name=f"mask{v}")
                m.type = _MASK  # NOTE: llvmlite types vector compares as i1
                masks.append(m)
                b.store(init_v, acc[v])
            with if_else(b, is_max, name="mode") as (then, otherwise):
                with then:
                    _walk(b, xn, p, c, c0, masks, init_v, acc, mload, True)
                with otherwise:
                    _walk(b, xn, p, c, c0, masks, init_v, acc, mload, False)
            for v in range(CB):
                res = b.load(acc[v], name="res", typ=_V)
                res = b.select(is_max, res, b.fdiv(res, div_v, name="mean"), name="out")
                ptr = b.gep(yn, [add(b, c0, 16 * v, "y.c")], inbounds=True, name="y.p", source_etype=F32)
                b.call(mstore, [res, ptr, i32(4), masks[v]])
    b.ret(i32(0))
    return fn


__all__ = ["define_callee"]
