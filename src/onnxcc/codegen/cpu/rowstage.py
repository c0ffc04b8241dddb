"""The innermost loop of a row-staged compute (kernel/rowstage.py) as two passes over the row:

    for j: out[j] = stage(j)                   (the costly part, once per element)
    row statistics from out[.]; for j: out[j] = body(j), reading out[j] back

Both loops carry the vectorizer hint of the row norm's passes. The statistics and the second
pass read what the first stored, so the loads and stores of this part carry none of the
statement's scoped-noalias tags (which promise that its loads never alias its stores).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir

from ..llvm.exprs import AccessMetadata, ExprEmitter
from ..llvm.helpers import for_range
from .rownorm import row_loop_md

if TYPE_CHECKING:
    from onnxcc.kernel.program import Compute

    from .emit import FnCtx, KernelEmitter, NestPlan


def emit_row_stage(owner: KernelEmitter, em: ExprEmitter, ctx: FnCtx, c: Compute, plan: NestPlan, v: int,
                   vals: dict[str, ir.Value]) -> None:
    """The innermost var `v` of `c` (the outer vars bound in `vals`; the row nonempty)."""
    rs = plan.row_stage
    assert rs is not None
    b = ctx.b
    name, ext = c.var_names[v], c.extents[v]
    n = ctx.dim(ext)

    def index(j: ir.Value) -> list[ir.Value]:
        return [j if m == name else vals[m] for m in c.var_names]

    with for_range(b, n, name, guard=False, metadata=row_loop_md(owner.module, plan.vector_width)) as j:
        em.push({name: j}, {name: ext})
        em.store(c.out, index(j), em.emit(rs.stage))
        em.pop()
    saved = em.md
    em.md = AccessMetadata()
    try:
        em.hoist(rs.body)  # the row statistics, over the stored row, before anything is overwritten
        with for_range(b, n, f"{name}.norm", guard=False,
                       metadata=row_loop_md(owner.module, plan.vector_width)) as j:
            em.push({name: j}, {name: ext})
            em.store(c.out, index(j), em.emit(rs.body))
            em.pop()
    finally:
        em.md = saved
