"""Row staging: a costly elementwise producer fused into a row normalisation, computed once
per element by staging each row in the output.

A LayerNormalization after an activation (tanh-GELU, SiLU, Mish) reads the activation `a` at
three places of one compute: the row mean `sum(d: a(d))`, the variance
`sum(d: (a(d) - mean)**2)` and the element `(a(j) - mean) * rstd * g[j] + b[j]`. Kept as a
temp, `a` goes through memory in full between two kernels (on working sets past the caches,
two more passes over DRAM); inlined as written, it would be evaluated three times per
element. A compute of that shape gets a `RowStage` on its schedule, and the CPU emitter runs
each row in two passes (codegen/cpu/rowstage.py):

    for j: out[j] = a(j)                        (a evaluated once per element)
    row statistics from out[d]; for j: out[j] = body with a(.) read back from out[.]

The row is in L1 between the passes. The stored values are read back at the precision they
were computed in (the output stores exactly the compute type, f32 or f64), so the result is
the same arithmetic on the same values. Fusion (kernel/fuse.py) inlines a costly producer
into such a consumer only when `stageable_sites` holds, which is what makes this match.

Matched only where that is safe: `a` is reduction-free and does not read the output, every
reduction that reads `a` is free of the innermost var (hoisted: it runs after the first
pass and before the second pass writes anything), and outside reductions `a` is read only at
the element being written.
"""

from __future__ import annotations

from dataclasses import dataclass

from onnxcc.ir import DType

from .expr import (
    Expr,
    Load,
    Reduce,
    Select,
    Var,
    buffers_read,
    children,
    dim_to_expr,
    free_vars,
    outside_reductions,
    replace_nodes,
    substitute,
    walk,
)
from .fuse import CHEAP, element_cost
from .program import Compute
from .rownorm import row_reduction, stores_row_exactly


@dataclass(frozen=True)
class RowStage:
    """`stage` is the staged expression at the compute's own vars; `body` the compute's body
    with every read of it (at the innermost var, or at a row reduction's var) replaced by a
    load of the output row."""

    stage: Expr
    body: Expr


def match_row_stage(c: Compute, out_dtype: DType) -> RowStage | None:
    """The row staging of `c` (storing `out_dtype`), or None."""
    body = c.body
    if not stores_row_exactly(c, out_dtype) or c.out in buffers_read(body):
        return None
    inner, ext = c.vars[-1]
    j, ext_e = inner.name, dim_to_expr(ext)
    rows = [n for n in walk(body) if row_reduction(n, j, ext_e)]
    if not rows:
        return None
    outer = tuple(v for v, _ in c.vars[:-1])
    for a in _candidates(body, j, out_dtype):
        pats: dict[Expr, Expr] = {a: Load(c.out, (*outer, inner), out_dtype)}
        for r in rows:
            d = r.vars[0][0]
            pats.setdefault(substitute(a, {j: d}), Load(c.out, (*outer, d), out_dtype))
        new = replace_nodes(body, pats.get)
        if new == body or not any(c.out in buffers_read(r) for r in walk(new) if isinstance(r, Reduce)):
            continue
        if _safe(new, c, j):
            return RowStage(a, new)
    return None


def _candidates(body: Expr, j: str, dtype: DType) -> list[Expr]:
    """Maximal costly, reduction-free subexpressions of `body` of `dtype` outside its
    reductions that depend on the innermost var `j`, costliest first (below a cast to
    another type: LayerNormalization's f32 statistics of an f64 activation)."""
    found: list[Expr] = []
    seen: set[Expr] = set()
    stack = [body]
    while stack:
        n = stack.pop()
        if n in seen or isinstance(n, Reduce):
            continue
        seen.add(n)
        if n.dtype is dtype and j in free_vars(n) and element_cost(n) > CHEAP \
                and not any(isinstance(m, Reduce) for m in walk(n)):
            found.append(n)
            continue
        stack.extend(children(n))
    return sorted(found, key=element_cost, reverse=True)


def _safe(new: Expr, c: Compute, j: str) -> bool:
    """Every read of the output in `new` is at the element being written (outside
    reductions) or inside a reduction free of `j` (hoisted before the second pass)."""
    own = tuple(Var(v.name) for v, _ in c.vars)
    for n in outside_reductions(new):
        if isinstance(n, Reduce):  # its reads of the row run before the second pass stores anything
            if c.out in buffers_read(n) and j in free_vars(n):
                return False
        elif isinstance(n, Load) and n.buffer == c.out and n.indices != own:
            return False
        elif isinstance(n, Select) and any(isinstance(r, Reduce) and c.out in buffers_read(r)
                                           for arm in (n.a, n.b) for r in walk(arm)):
            return False  # a lazy arm is not hoisted: its statistics would run mid-row
    return True
