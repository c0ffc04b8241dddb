"""The innermost loop of a row-normalised compute (softmax) as two passes over the row.

`out[..., j] = a(j) / sum(d: a(d))` (kernel/rownorm.py) written as one loop evaluates `a`
twice per element: once inside the row sum (hoisted out of the loop over `j`) and once
for the element itself. Here the row is run twice instead:

    for j: t = a(j); out[j] = t; s += t      (a evaluated once per element)
    for j: out[j] = out[j] / f(s)            (f(s) = s, or a guard of an empty row)

Both loops carry the vectorizer hint. The second pass reads back what the first stored, so
its loads carry none of the statement's scoped-noalias tags (which promise that the
statement's loads never alias its stores).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir

from ..llvm.exprs import REDUCE_COMBINE, ExprEmitter, compute_type, identity
from ..llvm.helpers import I1, for_range, i32

if TYPE_CHECKING:
    from onnxcc.kernel.expr import Expr
    from onnxcc.kernel.program import Compute

    from .emit import FnCtx, KernelEmitter, NestPlan


def row_loop_md(module: ir.Module, width: int | None, interleave: int = 1,
                unroll: bool = True) -> ir.MDValue | None:
    """A fresh `!llvm.loop` node: vectorise at `width` lanes and interleave 1, so a row of
    `width` elements already runs as one vector iteration (LLVM's default interleaving
    would need several vectors' worth before the vector loop is entered at all: measured
    1.4x slower than one pass on rows of 17, 0.9x with interleave 1); `interleave` for a
    caller that knows its rows are long (rowstage.stat_interleave), `unroll=False` to keep
    LLVM's unroller off the loop."""
    if not width:
        return None
    props = [module.add_metadata([ir.MetaDataString(module, "llvm.loop.vectorize.enable"), ir.Constant(I1, 1)]),
             module.add_metadata([ir.MetaDataString(module, "llvm.loop.vectorize.width"), i32(width)]),
             module.add_metadata([ir.MetaDataString(module, "llvm.loop.interleave.count"), i32(interleave)])]
    if not unroll:
        props.append(module.add_metadata([ir.MetaDataString(module, "llvm.loop.unroll.disable")]))
    # NOTE: llvmlite uniques metadata by content; a distinct tag keeps each loop ID its own
    tag = module.add_metadata([ir.MetaDataString(module, "onnxcc.rownorm"), i32(len(module.metadata))])
    node = module.add_metadata([tag, *props])
    node.operands = (node, *node.operands)  # a loop ID refers to itself
    return node


def row_index(c: Compute, v: int, vals: dict[str, ir.Value], j: ir.Value) -> list[ir.Value]:
    """The output index of element `j` of the row: `j` for the innermost var `v`, the outer
    vars' values from `vals`."""
    name = c.var_names[v]
    return [j if m == name else vals[m] for m in c.var_names]


def store_row(owner: KernelEmitter, em: ExprEmitter, ctx: FnCtx, c: Compute, plan: NestPlan, v: int,
              vals: dict[str, ir.Value], n: ir.Value, value: Expr, acc: ir.Value | None, tag: str) -> None:
    """The first pass of a two-pass row (this file's and rowstage.py's): `out[j] = value(j)`
    for j < n, `value` evaluated once per element, each summed into `acc` (an alloca of its
    compute type) where one is given."""
    b = ctx.b
    name, ext = c.var_names[v], c.extents[v]
    dt = value.dtype
    with for_range(b, n, name, guard=False, metadata=row_loop_md(owner.module, plan.vector_width)) as j:
        em.push({name: j}, {name: ext})
        t = em.emit(value)
        em.store(c.out, row_index(c, v, vals, j), t)
        if acc is not None:
            b.store(REDUCE_COMBINE["sum"](em, b.load(acc, name=f"{tag}.cur"), t, dt), acc)
        em.pop()


def emit_row_norm(owner: KernelEmitter, em: ExprEmitter, ctx: FnCtx, c: Compute, plan: NestPlan, v: int,
                  vals: dict[str, ir.Value]) -> None:
    """The innermost var `v` of `c` (the outer vars bound in `vals`; the row nonempty)."""
    rn = plan.row_norm
    assert rn is not None
    b = ctx.b
    name, ext = c.var_names[v], c.extents[v]
    n = ctx.dim(ext)
    dt = rn.numer.dtype
    acc = ctx.alloca(compute_type(dt), "rownorm.acc")
    b.store(identity("sum", dt), acc)
    store_row(owner, em, ctx, c, plan, v, vals, n, rn.numer, acc, "rownorm")
    # the divisor reads the row sum just computed (the frame's cache is what emit consults)
    em.frames[-1].cache[rn.rowsum] = b.load(acc, name="rownorm.sum")
    total = em.emit(rn.denom)
    with for_range(b, n, f"{name}.norm", guard=False,
                   metadata=row_loop_md(owner.module, plan.vector_width)) as j:
        ptr = em.address(c.out, row_index(c, v, vals, j))
        t = b.load(ptr, name="rownorm.t", align=dt.itemsize, typ=compute_type(dt))
        b.store(b.fdiv(t, total, name="rownorm.div"), ptr, align=dt.itemsize)
