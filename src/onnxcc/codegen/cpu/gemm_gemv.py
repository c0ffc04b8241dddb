"""The column micro-kernel of a window-mode GEMM whose grid is a few columns (a conv on a
1x1 plane: squeeze-excitation convs after a global pool, a classifier's 1x1 conv).

The tile micro-kernel (gemm_ukr.py) puts the columns in vector lanes and broadcasts one
weight per FMA: with one column of eight lanes it loads every weight on its own and spends
seven lanes of each FMA on nothing, several times slower than one pass over the weights
(512 -> 1280 on a 1x1 plane: 0.155 ms against onnxruntime's 0.069). This one puts the
rows (output channels) in the lanes: the packed A panel holds the mr weights of each k
contiguously ([k][mr], kernel/schedule.py `prepack_a`), so each k step is mr/vl full
vector loads of weights, one broadcast of B's element per column and mr/vl FMAs per
column; the weights stream at the loads' speed. Same signature and result as the tile
micro-kernel in window mode, so the task function swaps one for the other."""

from __future__ import annotations

from llvmlite import ir

from onnxcc.ir import canon
from onnxcc.kernel.program import Compute
from onnxcc.kernel.schedule import GemmPlan

from ..llvm.exprs import F32
from ..llvm.helpers import I1, I32, I64, PTR, VOID, for_range, get_or_declare, i32, i64, if_else, if_then
from .gemm_ir import f32_ptr as _f32_ptr
from .gemm_ir import mul as _mul
from .gemm_ir import sum_sets as _sum_sets

MAX_COLS = 4
"""grids of at most this many columns (static) take the column micro-kernel"""
MIN_CHAINS = 8
"""independent FMA chains to keep in flight"""


def static_grid(c: Compute, g: GemmPlan) -> int | None:
    """Columns of a window GEMM's grid (OH rows of X columns) when static."""
    assert g.window is not None
    oh, x = canon(dict(zip(c.var_names, c.extents))[g.n[0]]), canon(g.window.x_ext)
    return oh * x if isinstance(oh, int) and isinstance(x, int) else None


def applies(g: GemmPlan, grid: int) -> bool:
    """Whether a window GEMM with a static grid of `grid` columns takes the column kernel:
    a few columns, whole vectors of rows in an mr-row panel, and no residual tile operand in
    the register epilogue (that one is read at C's place, a strided gather here)."""
    if grid > MAX_COLS or g.window is None or g.a_direct:
        return False
    if g.mr % g.vl:
        return False
    return not any(o.tile for o in g.row_ops or ())


def gemv_function(module: ir.Module, rows: int, g: GemmPlan, cols: int) -> ir.Function:
    """`void ukr(ptr a, ptr b, ptr boff, i64 kc, ptr c, i64 ldc, i1 first, i64 ncols, ptr e...)`
    as gemm_ukr.ukr_function's window mode: C[r][j] (+)= sum_k a[k*mr + r] * b[boff[k] + j]
    for r < rows, j < min(ncols, cols), then the plan's row epilogue (`g.row_ops`) on each
    row before the store."""
    MR, VL = g.mr, g.vl
    row_ops = g.row_ops
    tag = ""
    if row_ops:
        import hashlib

        tag = ".e" + hashlib.sha1("|".join(o.key() for o in row_ops).encode()).hexdigest()[:10]
    name = f"onnxcc.gemm.gemv.{rows}x{cols}.a{MR}{tag}.v{VL}"
    fn = module.globals.get(name)
    if fn is not None:
        return fn
    V = ir.VectorType(F32, VL)
    MASK = ir.VectorType(I1, VL)
    nload = sum(1 for o in (row_ops or ()) if o.load is not None)
    fn = ir.Function(module, ir.FunctionType(VOID, [PTR, PTR, PTR, I64, PTR, I64, I1, I64, *[PTR] * nload]), name=name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    fn.attributes.add("noinline")
    names = ("a", "b", "boff", "kc", "c", "ldc", "first", "ncols")
    names += tuple(f"e{k}" for k, o in enumerate(row_ops or ()) if o.load is not None)
    for arg, n in zip(fn.args, names):
        arg.name = n
    args = dict(zip(names, fn.args))
    a, bp, boff, kc, cp, ldc, first, ncols = (args[n] for n in names[:8])
    for arg in (a, bp, cp):
        arg.add_attribute("noalias")
    nv = -(-rows // VL)
    tail = rows - (nv - 1) * VL  # lanes of the last row vector
    sets = max(1, min(4, -(-MIN_CHAINS // (cols * nv))))
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    vzero = ir.Constant(V, [0.0] * VL)
    undef = ir.Constant(V, ir.Undefined)
    splat = ir.Constant(ir.VectorType(I32, VL), [0] * VL)
    tail_mask = ir.Constant(MASK, [1 if lane < tail else 0 for lane in range(VL)])
    mload = get_or_declare(module, f"llvm.masked.load.v{VL}f32.p0", ir.FunctionType(V, [PTR, I32, MASK, V]))
    fma = get_or_declare(module, f"llvm.fma.v{VL}f32", ir.FunctionType(V, [V, V, V]))
    acc = [[[b.alloca(V, name=f"acc.{s}.{j}.{v}") for v in range(nv)] for j in range(cols)] for s in range(sets)]
    for s in range(sets):
        for j in range(cols):
            for v in range(nv):
                b.store(vzero, acc[s][j][v])

    def row_vec(base: ir.Value, v: int, name: str) -> ir.Value:
        """Rows v*VL.. of a row-contiguous operand (the last vector masked to `rows`)."""
        p = _f32_ptr(b, base, v * VL, f"{name}.p")
        if v == nv - 1 and tail < VL:
            return b.call(mload, [p, i32(4), tail_mask, vzero], name=name)
        return b.load(p, name=name, typ=V, align=4)

    def step(k: ir.Value, s: int) -> None:
        off = b.load(b.gep(boff, [k], inbounds=True, name="boff.p", source_etype=I64), name="boff", typ=I64, align=8)
        brow = _f32_ptr(b, bp, off, "bk")
        arow = _f32_ptr(b, a, _mul(b, k, MR, "ak"), "ak")
        av = [row_vec(arow, v, f"a{v}") for v in range(nv)]
        for j in range(cols):
            x = b.load(_f32_ptr(b, brow, j, "b.p"), name=f"b{j}", typ=F32, align=4)
            xv = b.shuffle_vector(b.insert_element(undef, x, i32(0), name="b.ins"), undef, splat, name=f"b{j}.v")
            for v in range(nv):
                cur = b.load(acc[s][j][v], name="acc", typ=V)
                b.store(b.call(fma, [av[v], xv, cur], name="fma"), acc[s][j][v])

    unroll = 4
    nq = b.lshr(kc, i64(2), name="kq.n")
    with for_range(b, nq, "kq", guard=True) as kq:
        k = _mul(b, kq, unroll, "k")
        for u in range(unroll):
            step(b.add(k, i64(u), name="ku", flags=("nuw", "nsw")) if u else k, u % sets)
    with for_range(b, kc, "kr", start=b.and_(kc, i64(-unroll), name="kmain"), guard=True) as kr:
        step(kr, 0)
    vals = _sum_sets(b, acc, cols, nv, sets, V)
    if row_ops:
        _row_ops(module, b, row_ops, vals, [args.get(f"e{k}") for k in range(len(row_ops))], row_vec, V)
    # C[r][j]: lane r % VL of vector r // VL of column j, one scalar per element (rows x cols
    # of them against kc x rows multiply-adds)
    with if_else(b, first, name="store") as (then, otherwise):
        for branch, add in ((then, False), (otherwise, True)):
            with branch:
                for j in range(cols):
                    with if_then(b, b.icmp_unsigned("<", i64(j), ncols, name="col.in"), name=f"col{j}"):
                        for r in range(rows):
                            p = _f32_ptr(b, cp, b.add(_mul(b, ldc, r, "cr") if r else i64(0), i64(j), name="cj"), "cp")
                            x = b.extract_element(vals[j][r // VL], i32(r % VL), name="cx")
                            if add:
                                x = b.fadd(x, b.load(p, name="old", typ=F32, align=4), name="new")
                            b.store(x, p, align=4)
    b.ret_void()
    return fn


def _row_ops(module: ir.Module, b: ir.IRBuilder, ops, vals: list[list[ir.Value]], ptrs: list, row_vec,
             V: ir.VectorType) -> None:
    """vals[j][v] = op(vals[j][v], operand) for each op in order, as gemm_ukr's register
    epilogue computes them, with the rows in the lanes: a row operand is a vector load."""
    zero = ir.Constant(V, [0.0] * V.count)
    vmax = get_or_declare(module, f"llvm.maximum.v{V.count}f32", ir.FunctionType(V, [V, V]))
    vmin = get_or_declare(module, f"llvm.minimum.v{V.count}f32", ir.FunctionType(V, [V, V]))
    nv = len(vals[0])
    for o, p in zip(ops, ptrs):
        if o.op == "relu":
            for col in vals:
                neg = [b.fcmp_ordered("<", x, zero, name="isneg") for x in col]
                for m in neg:
                    m.type = ir.VectorType(I1, V.count)  # NOTE: llvmlite types vector compares as i1
                col[:] = [b.select(m, zero, x, name="relu") for m, x in zip(neg, col)]
            continue
        ys = [row_vec(p, v, "e") for v in range(nv)] if p is not None else [ir.Constant(V, [o.value] * V.count)] * nv
        for col in vals:
            if o.op == "add":
                col[:] = [b.fadd(x, y, name="e.add") for x, y in zip(col, ys)]
            elif o.op == "sub":
                col[:] = [b.fsub(x, y, name="e.sub") for x, y in zip(col, ys)]
            elif o.op == "mul":
                col[:] = [b.fmul(x, y, name="e.mul") for x, y in zip(col, ys)]
            else:
                col[:] = [b.call(vmax if o.op == "max" else vmin, [x, y], name=f"e.{o.op}") for x, y in zip(col, ys)]

