"""The GEMM codegen's column helpers for several n vars (a conv's (oh, ow)): binding the
vars of a tile's columns without a division per column, and cutting the columns into runs
along which only the last var moves (gemm.py's packers and epilogues use them)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from llvmlite import ir

from ..llvm.exprs import ExprEmitter
from ..llvm.helpers import I64, PTR, for_range, i64, if_then
from .gemm_ir import add, unflatten

if TYPE_CHECKING:
    from .emit import FnCtx


def bind_vars(em: ExprEmitter, vals: dict[str, ir.Value], exts: dict) -> None:
    """Bind `vals` in `em` with their extents from `exts`."""
    em.push(vals, {n: exts[n] for n in vals})


def column_binder(b: ir.IRBuilder, fctx: FnCtx, em: ExprEmitter, names: Sequence[str],
                   exts: Sequence[ir.Value], dims: dict, j0: ir.Value, ncols: ir.Value, width: int
                   ) -> Callable[[ir.Value], None]:
    """`bind(cc)` binds the vars `names` (their Dims in `dims`) to the row-major
    unflattening of column j0 + cc (cc < ncols <= width) in `em`. With several vars (a
    conv's (oh, ow)) the columns are unflattened once, here, into stack arrays, instead of
    dividing in every inner loop."""
    if len(names) == 1:
        return lambda cc: bind_vars(em, {names[0]: add(b, j0, cc, names[0])}, dims)
    arrays = []
    for n in names:
        a = fctx.eb.alloca(ir.ArrayType(I64, width), name=f"{n}.cols")
        a.type = PTR  # NOTE: llvmlite types allocas as typed pointers; the IR is opaque
        arrays.append(a)
    # unflatten j0 once, then step column by column with carries (no division per column)
    cur = []
    for n, v in unflatten(b, j0, exts, names).items():
        slot = fctx.eb.alloca(I64, name=f"{n}.cur")
        b.store(v, slot, align=8)
        cur.append((n, slot))
    cur.sort(key=lambda t: names.index(t[0]))
    with for_range(b, ncols, "col", guard=True) as cc:
        vals = {n: b.load(slot, name=n, align=8, typ=I64) for n, slot in cur}
        for n, a in zip(names, arrays):
            b.store(vals[n], b.gep(a, [cc], inbounds=True, name=f"{n}.col.p", source_etype=I64), align=8)
        _step(b, vals, cur, exts)

    def bind(cc: ir.Value) -> None:
        bind_vars(em, {n: b.load(b.gep(a, [cc], inbounds=True, name=f"{n}.col.p", source_etype=I64), name=n, align=8,
                             typ=I64) for n, a in zip(names, arrays)}, dims)

    return bind


def column_segments(b: ir.IRBuilder, fctx: FnCtx, names: Sequence[str], exts: Sequence[ir.Value],
                     j0: ir.Value, ncols: ir.Value, width: int
                     ) -> tuple[ir.Value, ir.Value, dict[str, ir.Value], ir.Value]:
    """Columns [j0, j0 + ncols) (1 <= ncols <= width) of several n vars (a conv's (oh, ow))
    cut into runs along which every var but the last is constant and the last counts up
    by one. Returns stack arrays (start column of each run, with ncols after the last;
    the last var's first value; each leading var's value) and the number of runs."""
    def arr(n: str) -> ir.Value:
        a = fctx.eb.alloca(ir.ArrayType(I64, width + 1), name=n)
        a.type = PTR  # NOTE: llvmlite types allocas as typed pointers; the IR is opaque
        return a

    def at(a: ir.Value, i: ir.Value) -> ir.Value:
        return b.gep(a, [i], inbounds=True, name="seg.p", source_etype=I64)

    last = names[-1]
    seg_cc, seg_last = arr("seg.cc"), arr(f"{last}.seg")
    leads = {n: arr(f"{n}.seg") for n in names[:-1]}
    nseg = fctx.eb.alloca(I64, name="nseg")
    cur = []
    for n in names:
        slot = fctx.eb.alloca(I64, name=f"{n}.cur")
        cur.append((n, slot))
    start = unflatten(b, j0, exts, names)
    for n, slot in cur:
        b.store(start[n], slot, align=8)
    b.store(i64(0), nseg, align=8)
    with for_range(b, ncols, "col", guard=True) as cc:
        vals = {n: b.load(slot, name=n, align=8, typ=I64) for n, slot in cur}
        new = b.or_(b.icmp_unsigned("==", cc, i64(0), name="seg.first"),
                    b.icmp_unsigned("==", vals[last], i64(0), name="seg.wrap"), name="seg.new")
        with if_then(b, new, name="seg.new"):
            sidx = b.load(nseg, name="seg", align=8, typ=I64)
            b.store(cc, at(seg_cc, sidx), align=8)
            b.store(vals[last], at(seg_last, sidx), align=8)
            for n, a in leads.items():
                b.store(vals[n], at(a, sidx), align=8)
            b.store(add(b, sidx, 1, "seg.next"), nseg, align=8)
        _step(b, vals, cur, exts)
    count = b.load(nseg, name="nseg", align=8, typ=I64)
    b.store(ncols, at(seg_cc, count), align=8)
    return seg_cc, seg_last, leads, count


def _step(b: ir.IRBuilder, vals: dict, cur: list, exts) -> None:
    """Advance the column vars one column: the innermost by one, each wrap carried outward
    (the counters live in the `cur` slots; `vals` holds this column's values)."""
    carry: ir.Value = i64(1)
    for (n, slot), e in zip(reversed(cur), reversed(list(exts))):
        nxt = b.add(vals[n], carry, name=f"{n}.step")
        wrap = b.icmp_unsigned(">=", nxt, e, name=f"{n}.wrap")
        b.store(b.select(wrap, i64(0), nxt, name=f"{n}.next"), slot, align=8)
        carry = b.zext(wrap, I64, name=f"{n}.carry")
