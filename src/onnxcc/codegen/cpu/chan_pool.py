"""The channels-last global pool call (`onnxcc_f32chanpool`, kernel/chan_pool_call.py has the
contract), defined in LLVM where the CPU emitter (extern.py) meets its CallStmt, with the
runtime calls' one signature `i32 fn(const i64 *sizes, void *const *bufs)`.

The work is cut into tasks of (image, group of G vectors of 16 channels); a task walks its
image's pixels in memory order (each pixel's group is contiguous; the last vector masked past
C) with G x U accumulator vectors, U = 4 / G: pixel p goes to accumulator p % U, and the U
sums are added pairwise at the end (the max likewise, a NaN winning as in np.max). Four
independent adds per pixel step keep the pipe busy whatever G is, where one vector summed
pixel by pixel would wait on each add's latency. G is 4 unless that leaves fewer than
`TASKS_WANTED` tasks (a net's head at batch 1: 64 channels were one task, run serially while
the other threads idled), then 2 or 1; it depends on the shape alone, so the result is the
same at any thread count. The tasks run through `onnxcc_parallel_for` from `PAR_MIN_ELEMS`
elements read (the pool's wake-up costs more below), else on the calling thread."""

from __future__ import annotations

from llvmlite import ir

from onnxcc.kernel.chan_pool_call import SIZES

from ..llvm.exprs import F32
from ..llvm.helpers import I1, I32, I64, PTR, VOID, for_range, get_or_declare, i32, i64, if_else
from .gemm_call import run_items
from .gemm_ir import add, ceildiv, mul

CB = 4
"""16-lane vectors of channels per group at most, and accumulators per task (G x U)"""
TASKS_WANTED = 4
"""groups are narrowed (4 -> 2 -> 1 vectors) while batch x groups is below this"""
PAR_MIN_ELEMS = 1 << 16
"""batch * P * C below which the call runs on the calling thread: 64K f32 read are ~2 us,
about what a parallel region costs on 2 threads (benchmarks/region_profile.py's dispatch)"""

_V = ir.VectorType(F32, 16)
_MASK = ir.VectorType(I1, 16)
_CALL_FNTY = ir.FunctionType(I32, [PTR, PTR])
_BODY_FNTY = ir.FunctionType(VOID, [I64, I64, PTR])


def _splat(b: ir.IRBuilder, x: ir.Value, name: str) -> ir.Value:
    vt = ir.VectorType(x.type, 16)
    undef = ir.Constant(vt, ir.Undefined)
    return b.shuffle_vector(b.insert_element(undef, x, i32(0), name=f"{name}.ins"), undef,
                            ir.Constant(ir.VectorType(I32, 16), [0] * 16), name=name)


def _combine(b: ir.IRBuilder, cur: ir.Value, x: ir.Value, is_max: bool) -> ir.Value:
    """cur + x, or max(cur, x) with a NaN on either side winning (np.max's rule)"""
    if not is_max:
        return b.fadd(cur, x, name="summed")
    nan = b.fcmp_unordered("!=", x, x, name="nan")
    nan.type = _MASK  # NOTE: llvmlite types vector compares as i1
    gt = b.fcmp_ordered(">", x, cur, name="gt")
    gt.type = _MASK
    return b.select(b.or_(nan, gt, name="take"), x, cur, name="maxed")


def _walk(b: ir.IRBuilder, xn, p, c, c0, masks, init_v, mload, is_max: bool, u: int) -> list[ir.Value]:
    """The sums (maxes) over the pixels of channels c0 + 16 v + lane, v < len(masks), on U
    accumulators per vector (pixel px on px % U), merged pairwise: one vector per v."""
    g = len(masks)
    with b.goto_entry_block():  # entry-block slots: mem2reg keeps them in registers
        acc = [[b.alloca(_V, name=f"acc{v}.{k}") for k in range(u)] for v in range(g)]
    for row in acc:
        for slot in row:
            b.store(init_v, slot)

    def step(px: ir.Value, k: int) -> None:
        row = b.gep(xn, [add(b, mul(b, px, c, "x.px"), c0, "x.off")], inbounds=True, name="x.row",
                    source_etype=F32)
        for v in range(g):
            ptr = b.gep(row, [i64(16 * v)], inbounds=True, name="x.p", source_etype=F32)
            x = b.call(mload, [ptr, i32(4), masks[v], init_v], name=f"x{v}")
            b.store(_combine(b, b.load(acc[v][k], name="cur", typ=_V), x, is_max), acc[v][k])

    full = b.udiv(p, i64(u), name="px.steps") if u > 1 else p
    with for_range(b, full, "ps", guard=True) as ps:
        base = mul(b, ps, u, "px.base")
        for k in range(u):
            step(add(b, base, k, "px"), k)
    if u > 1:  # the last p % U pixels, on the first accumulators
        with for_range(b, p, "pt", start=mul(b, full, u, "px.tail"), guard=True) as pt:
            step(pt, 0)
    out = []
    for row in acc:
        vals = [b.load(slot, name="part", typ=_V) for slot in row]
        while len(vals) > 1:  # pairwise: (a0 + a1) + (a2 + a3)
            vals = [_combine(b, vals[j], vals[j + 1], is_max) for j in range(0, len(vals), 2)]
        out.append(vals[0])
    return out


def _body(module: ir.Module, mload: ir.Function, mstore: ir.Function) -> ir.Function:
    """`void body(i64 begin, i64 end, ptr ctx)`: tasks [begin, end) of the (image, group)
    grid, ctx = {sizes, bufs, G (as a pointer)}"""
    name = "onnxcc.f32chanpool.tasks"
    fn = ir.Function(module, _BODY_FNTY, name=name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    begin, end, ctx = fn.args
    begin.name, end.name, ctx.name = "begin", "end", "ctx"
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    sizes = b.load(ctx, name="sizes", typ=PTR, align=8)
    bufs = b.load(b.gep(ctx, [i64(1)], inbounds=True, name="bufs.p", source_etype=PTR), name="bufs", typ=PTR, align=8)
    g = b.ptrtoint(b.load(b.gep(ctx, [i64(2)], inbounds=True, name="g.pp", source_etype=PTR), name="g.p", typ=PTR,
                          align=8), I64, name="g")
    sz = {n: b.load(b.gep(sizes, [i64(j)], inbounds=True, name=f"{n}.p", source_etype=I64), name=n, typ=I64, align=8)
          for j, n in enumerate(SIZES)}
    xb, yb = (b.load(b.gep(bufs, [i64(j)], inbounds=True, name="buf.p", source_etype=PTR), name=nm, typ=PTR, align=8)
              for j, nm in enumerate(("X", "Y")))
    p, c = sz["p"], sz["c"]
    is_max = b.icmp_unsigned("!=", sz["max"], i64(0), name="is.max")
    init = b.select(is_max, ir.Constant(F32, float("-inf")), ir.Constant(F32, 0.0), name="init")
    init_v = _splat(b, init, "init.v")
    div_v = _splat(b, b.sitofp(p, F32, name="count"), "div.v")
    iota = ir.Constant(ir.VectorType(I64, 16), list(range(16)))
    width = mul(b, g, 16, "g.ch")
    groups = b.udiv(b.add(c, b.sub(width, i64(1), name="g.ch1"), name="g.up"), width, name="groups")
    with for_range(b, end, "t", start=begin, guard=True) as t:
        n = b.udiv(t, groups, name="n")
        c0 = mul(b, b.urem(t, groups, name="grp"), width, "c0")
        xn = b.gep(xb, [mul(b, mul(b, n, p, "x.np"), c, "x.n")], inbounds=True, name="x.img", source_etype=F32)
        yn = b.gep(yb, [mul(b, n, c, "y.n")], inbounds=True, name="y.img", source_etype=F32)
        masks = []
        for v in range(CB):
            left = b.sub(c, add(b, c0, 16 * v, "cv"), name=f"left{v}")
            m = b.icmp_signed(">", _splat(b, left, f"left{v}.v"), iota, name=f"mask{v}")
            m.type = _MASK  # NOTE: llvmlite types vector compares as i1
            masks.append(m)
        done = fn.append_basic_block("task.done")
        cases = {gv: fn.append_basic_block(f"g{gv}") for gv in (1, 2, CB)}
        sw = b.switch(g, cases[CB])
        for gv in (1, 2):
            sw.add_case(i64(gv), cases[gv])
        for gv, block in cases.items():
            b.position_at_end(block)
            with if_else(b, is_max, name=f"mode{gv}") as (then, otherwise):
                for branch, mx in ((then, True), (otherwise, False)):
                    with branch:
                        res = _walk(b, xn, p, c, c0, masks[:gv], init_v, mload, mx, CB // gv)
                        for v, r in enumerate(res):
                            out = r if mx else b.fdiv(r, div_v, name="mean")
                            ptr = b.gep(yn, [add(b, c0, 16 * v, "y.c")], inbounds=True, name="y.p", source_etype=F32)
                            b.call(mstore, [out, ptr, i32(4), masks[v]])
            b.branch(done)
        b.position_at_end(done)
    b.ret_void()
    return fn


def _group(b: ir.IRBuilder, batch: ir.Value, c: ir.Value) -> ir.Value:
    """G: 4 vectors of channels a task (2, 1 where C has no more), halved while batch x groups
    < TASKS_WANTED"""
    vecs = ceildiv(b, c, 16, "vecs")
    g = b.select(b.icmp_unsigned(">=", vecs, i64(3), name="g.wide"), i64(CB),
                 b.select(b.icmp_unsigned(">=", vecs, i64(2), name="g.two"), i64(2), i64(1), name="g.cap"),
                 name="g.cap")
    for gv in (CB, 2):
        tasks = mul(b, batch, ceildiv(b, vecs, gv, f"groups{gv}"), f"tasks{gv}")
        few = b.and_(b.icmp_unsigned("==", g, i64(gv), name=f"g.is{gv}"),
                     b.icmp_unsigned("<", tasks, i64(TASKS_WANTED), name=f"few{gv}"), name=f"narrow{gv}")
        g = b.select(few, i64(gv // 2), g, name="g")
    return g


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
    body = _body(module, mload, mstore)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    sz = {n: b.load(b.gep(sizes, [i64(j)], inbounds=True, name=f"{n}.p", source_etype=I64), name=n, typ=I64, align=8)
          for j, n in enumerate(SIZES)}
    batch, p, c = sz["batch"], sz["p"], sz["c"]
    g = _group(b, batch, c)
    ctx = b.alloca(ir.ArrayType(PTR, 3), name="ctx")  # sizes, bufs, G (as a pointer)
    for j, v in enumerate((sizes, bufs, b.inttoptr(g, PTR, name="g.p"))):
        b.store(v, b.gep(ctx, [i64(0), i64(j)], inbounds=True, name="ctx.slot"))
    tasks = mul(b, batch, b.udiv(b.add(ceildiv(b, c, 16, "v"), b.sub(g, i64(1), name="g1"), name="v.up"), g,
                                 name="groups"), "tasks")
    work = mul(b, mul(b, batch, p, "work"), c, "work")
    run_items(b, module, tasks, body, ctx, work, PAR_MIN_ELEMS)
    b.ret(i32(0))
    return fn


__all__ = ["CB", "PAR_MIN_ELEMS", "TASKS_WANTED", "define_callee"]
