"""The innermost loop of a row-staged compute (kernel/rowstage.py) as two passes over the row:

    for j: out[j] = stage(j); s += stage(j)    (the costly part, once per element)
    row statistics from out[.]; for j: out[j] = body(j), reading out[j] back

A statistic that is the plain row sum of the staged values (LayerNorm's mean) is summed in
the first pass (`s`), so the statistics re-read the row once less (the variance's pass
stays: it needs the mean first). On a static row of at least two interleaved vector
iterations that pass sums into STAT_INTERLEAVE vector accumulators (`stat_interleave`), in
a loop kept rolled.

Both loops carry the vectorizer hint of the row norm's passes. The statistics and the second
pass read what the first stored, so the loads and stores of this part carry none of the
statement's scoped-noalias tags (which promise that its loads never alias its stores).

Where the output may be large and streaming is on (streaming_stores.py; on by default,
STREAMING), the row is staged in a stack row instead on the calls that store
non-temporally, and copied out once normalised.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir

from onnxcc.kernel.expr import Expr, Load, Reduce, buffers_read, dim_to_expr, walk
from onnxcc.kernel.rownorm import plain_row_sum

from ..llvm.exprs import AccessMetadata, ExprEmitter, compute_type, identity
from ..llvm.helpers import for_range, i64
from .rownorm import row_index, row_loop_md, store_row
from .streaming_stores import copy_row, stream_row

if TYPE_CHECKING:
    from onnxcc.kernel.program import Compute

    from .emit import FnCtx, KernelEmitter, NestPlan


def emit_row_stage(owner: KernelEmitter, em: ExprEmitter, ctx: FnCtx, c: Compute, plan: NestPlan, v: int,
                   vals: dict[str, ir.Value]) -> None:
    """The innermost var `v` of `c` (the outer vars bound in `vals`; the row nonempty)."""
    rs = plan.row_stage
    assert rs is not None
    sr = stream_row(ctx, c) if v + 1 == len(c.vars) else None
    if sr is None:
        _emit_passes(owner, em, ctx, c, plan, v, vals)
        return
    # the row staged in sr.stack on the streaming path, in the output otherwise (streaming_stores.py)
    b = ctx.b
    out_row = em.address(c.out, row_index(c, v, vals, i64(0)))
    row = b.select(sr.flag, sr.stack, out_row, name="rowstage.row")
    with ctx.redirected(c.out, row, [i64(0)] * (len(c.vars) - 1) + [i64(1)]):
        _emit_passes(owner, em, ctx, c, plan, v, vals)
    copy_row(ctx, sr, out_row)


def _emit_passes(owner: KernelEmitter, em: ExprEmitter, ctx: FnCtx, c: Compute, plan: NestPlan, v: int,
                 vals: dict[str, ir.Value]) -> None:
    """Both passes and the statistics between them, on `c.out`'s row."""
    rs = plan.row_stage
    assert rs is not None
    b = ctx.b
    name, ext = c.var_names[v], c.extents[v]
    n = ctx.dim(ext)
    sums = _row_sums(c, rs.body)
    dt = rs.stage.dtype
    acc = None
    if sums:
        acc = ctx.alloca(compute_type(dt), "rowstage.sum")
        b.store(identity("sum", dt), acc)
    store_row(owner, em, ctx, c, plan, v, vals, n, rs.stage, acc, "rowstage")
    if acc is not None:  # hoist below takes the sum from the frame's cache instead of re-reading the row
        total = b.load(acc, name="rowstage.rowsum")
        for r in sums:
            em.frames[-1].cache[r] = total
    saved = em.md
    em.md = AccessMetadata()
    k = stat_interleave(ext, plan.vector_width)
    try:
        if k > 1:  # the sums of the other statistics (the variance's) interleaved; else LLVM's defaults
            for r in _statistic_sums(c, rs.body, done=sums):
                em.reduce(r, loop_md=row_loop_md(owner.module, plan.vector_width, k, unroll=False))
        em.hoist(rs.body)  # the row statistics, over the stored row, before anything is overwritten
        with for_range(b, n, f"{name}.norm", guard=False,
                       metadata=row_loop_md(owner.module, plan.vector_width)) as j:
            em.push({name: j}, {name: ext})
            em.store(c.out, row_index(c, v, vals, j), em.emit(rs.body))
            em.pop()
    finally:
        em.md = saved


#: vector accumulators of a row statistic's sum (the variance's): one FMA chain per vector
#: is 4 cycles a step on Zen 4, and a row of 768 f32 was 48 dependent FMAs (~190 cycles).
#: The loop is kept rolled: fully unrolled, x86's DAG combiner (reassoc + contract) folded
#: fadd(fma(x, y, z), w) into fma(x, y, fadd(z, w)), one chain again
STAT_INTERLEAVE = 4


def stat_interleave(ext, width: int | None) -> int:
    """Interleave count of the statistics' sum loops over a row of `ext`: STAT_INTERLEAVE
    where the extent is static and fills at least two interleaved vector iterations, else 1
    (a symbolic or short row must not fall off the vector loop: see `row_loop_md`)."""
    if not width or not isinstance(ext, int) or ext < 2 * STAT_INTERLEAVE * width:
        return 1
    return STAT_INTERLEAVE


def _row_sums(c: Compute, body: Expr) -> list[Reduce]:
    """The reductions of `body` that are the plain sum of the staged row: `sum(d < n:
    out[outer..., d])` over the innermost extent, no init."""
    outer = tuple(v for v, _ in c.vars[:-1])
    inner, ext = c.vars[-1][0].name, dim_to_expr(c.vars[-1][1])
    found: list[Reduce] = []
    for r in walk(body):
        if plain_row_sum(r, inner, ext) and r.body == Load(c.out, (*outer, r.vars[0][0]), r.body.dtype) \
                and r not in found:
            found.append(r)
    return found


def _statistic_sums(c: Compute, body: Expr, done: list[Reduce]) -> list[Reduce]:
    """The one-var float sums of `body` over the staged row but those `done` (the plain row
    sums, summed in the first pass), inner ones first (`walk`'s order): each is emitted
    before the reductions that read it, so each loop gets its own hint."""
    return [r for r in walk(body) if isinstance(r, Reduce) and r.op == "sum" and len(r.vars) == 1
            and r.body.dtype.is_float and c.out in buffers_read(r) and r not in done]
