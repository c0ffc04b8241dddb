"""Row normalisation: `out[..., j] = a(j) / f(sum(d < n: a(d)))`, computed with `a`
evaluated once per element (`f` is the identity, or a row-invariant guard such as
Attention's `select(s == 0, 1, s)`).

Softmax lowers to `exp(x[..., j] - max) / sum(d < n: exp(x[..., d] - max))` (ops/reduce.py,
the contrib attention ops): as written, the emitter hoists the row sum out of the loop over
`j` and then evaluates `exp` again for every element, two exponentials per element. A
compute of that shape gets a `RowNorm` on its schedule; the CPU emitter then runs the
innermost axis as two passes over the row: `out[j] = a(j)` while summing, then
`out[j] = out[j] / f(sum)`. The stored numerators are read back at the precision they were
computed in, so the result is the same division of the same values (only the order of the
sum's additions may differ, as it may for any vectorised sum).

Only matched where that holds: the output stores exactly the compute type of `a` (f32 or
f64; an f16 output would round the numerator before the division), `a` does not read the
output, and every reduction inside `a` is free of the innermost var (a row statistic such
as the max, hoisted out of the row loop).
"""

from __future__ import annotations

from dataclasses import dataclass

from onnxcc.ir import DType

from .expr import Binary, Const, Expr, Load, Reduce, dim_to_expr, free_vars, replace_nodes, substitute, walk
from .program import Compute

_STORED_EXACTLY = (DType.f32, DType.f64)
"""output dtypes whose storage holds a computed value bit for bit"""


def stores_row_exactly(c: Compute, out_dtype: DType) -> bool:
    """`c` has an innermost var to run as a row, and its output (of `out_dtype`) holds the
    body's values bit for bit: what a two-pass row emission (this file's, rowstage.py's)
    needs to read a stored row back as it was computed."""
    return bool(c.vars) and out_dtype in _STORED_EXACTLY and c.body.dtype is out_dtype


@dataclass(frozen=True)
class RowNorm:
    """`numer / denom` where `denom` is a row-invariant function of `rowsum`, the sum of
    `numer` over the innermost output var (plain softmax: `denom` is `rowsum` itself;
    Attention guards an empty row: `select(rowsum == 0, 1, rowsum)`)."""

    numer: Expr
    """the element before normalisation, at the compute's own vars"""
    denom: Expr
    """the divisor: free of the innermost var, reads `rowsum`"""
    rowsum: Reduce
    """the row sum of `numer` (one var, the innermost axis's extent)"""


def match_row_norm(c: Compute, out_dtype: DType) -> RowNorm | None:
    """The row normalisation `c` (storing `out_dtype`) computes over its innermost var, or None."""
    body = c.body
    if not stores_row_exactly(c, out_dtype) or not (isinstance(body, Binary) and body.op == "div"):
        return None
    numer, denom = body.a, body.b
    inner, ext = c.vars[-1]
    if inner.name in free_vars(denom) or inner.name not in free_vars(numer):
        return None
    rowsum = next((n for n in walk(denom) if _sums_row(n, numer, inner.name, dim_to_expr(ext))), None)
    if not isinstance(rowsum, Reduce):
        return None
    for n in walk(numer):
        if isinstance(n, Load) and n.buffer == c.out:
            return None
        if isinstance(n, Reduce) and inner.name in free_vars(n):
            return None  # a per-element reduction: nothing to share, keep the plain loop
    return RowNorm(numer, denom, rowsum)


def row_reduction(n: Expr, inner: str, ext: Expr) -> bool:
    """`n` reduces over one var of the row's extent `ext` and is free of the innermost var
    `inner`: a statistic of the whole row (its sum, max, sum of squares), what both row
    matchers (this file's, rowstage.py's) and the staging emitter look for."""
    return isinstance(n, Reduce) and len(n.vars) == 1 and n.vars[0][1] == ext and inner not in free_vars(n)


def plain_row_sum(n: Expr, inner: str, ext: Expr) -> bool:
    """`n` is `sum(d < ext: ...)` over the row, with no initial value."""
    return row_reduction(n, inner, ext) and n.op == "sum" and n.init is None


def _sums_row(n: Expr, numer: Expr, inner: str, ext: Expr) -> bool:
    """Whether `n` is `sum(d < ext: numer[inner := d])`."""
    return plain_row_sum(n, inner, ext) and substitute(numer, {inner: n.vars[0][0]}) == n.body


def per_element_reads(rn: RowNorm, c: Compute) -> tuple[Expr, Expr]:
    """What the two-pass emission of `c` reads per element of a row, for memory planning:
    the numerator and the divisor, with the row sum taken out (its loads are the
    numerator's own, made in the first pass before that element's store) and every
    row-invariant reduction that reads only the row being written (the max) taken out too:
    the emitter computes it before the row's first pass. Writing the output in place over
    an input read only through what is left at the element being written is then safe:
    every element is read before the iteration that overwrites it, and the second pass
    reads only the output."""
    own = tuple(v for v, _ in c.vars)

    def row_stat(n: Expr) -> bool:
        if n == rn.rowsum:
            return True
        if not isinstance(n, Reduce) or own[-1].name in free_vars(n):
            return False
        bound = {v for v, _ in n.vars}
        return all(ld.indices[:-1] == own[:-1] and ld.indices[-1] in bound
                   for ld in walk(n.body) if isinstance(ld, Load))

    def cut(n: Expr) -> Expr | None:
        """A row statistic's stand-in (a constant), each node judged as it is in the
        numerator or the divisor."""
        return Const(0, n.dtype) if row_stat(n) else None

    return replace_nodes(rn.numer, cut), replace_nodes(rn.denom, cut)
