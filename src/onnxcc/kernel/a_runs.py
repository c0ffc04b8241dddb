"""A GEMM operand A read as runs: its k index split by a transpose fused into the read.

Attention's output projection reads the heads' outputs [b, heads, s, head] through the
exporters' Transpose + Reshape to [b, s, heads * head]: the fused load is
`Y[i0, k // D, i1, k % D]`, so a row of A is `heads` contiguous runs of D, each in another
head's plane. Not read in place (`GemmPlan.a_direct` wants k the unit-stride last index),
it was packed per call with a gather per element and its epilogue (bias, residual) was a
pass of its own over C. `runs_of` finds such an A; kernel/schedule.py then stages it like
aliasing rows (`GemmPlan.a_stage`): each task copies its rows of the k block run by run
into a stack block (codegen/cpu/gemm_dense.py `stage_runs`: each run's start is A's
address there, its D elements contiguous), which the micro-kernel reads in place with the
epilogue in its registers."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from onnxcc.ir import Dim

from .expr import Binary, Const, Expr, Load, Reduce, Var, free_vars

MIN_RUN = 16
"""the shortest run staged this way: a whole 16-float vector (shorter runs, a copy loop of
a few elements per row and run, were not measured)"""


def _split(ix: Expr, k: str, op: str) -> int | None:
    """D where `ix` is `k // D` (op "floordiv") or `k % D` (op "mod"), else None."""
    ops = ("floordiv", "div") if op == "floordiv" else (op,)
    if (isinstance(ix, Binary) and ix.op in ops and isinstance(ix.a, Var) and ix.a.name == k
            and isinstance(ix.b, Const)):
        return int(ix.b.value)
    return None


def runs_of(a: Expr, r: Reduce, kc: int, shape_of: Callable[[str], Sequence[Dim]]) -> int:
    """D when A is a load whose last index is `k % D` over a last dim of D, whose other
    indices reading k are `k // D`, the rest free of k, with D a multiple of MIN_RUN that
    divides the static k extent and, past one k block of `kc`, kc too (every run inside
    one block); 0 otherwise."""
    if len(r.vars) != 1 or not isinstance(a, Load) or not a.indices:
        return 0
    (kv, ext), = r.vars
    k = kv.name
    if not isinstance(ext, Const):
        return 0
    d = _split(a.indices[-1], k, "mod")
    shape = shape_of(a.buffer)
    if d is None or d < MIN_RUN or d % MIN_RUN or int(ext.value) % d or shape[-1] != d:
        return 0
    if int(ext.value) > kc and kc % d:  # k blocks start at multiples of kc: a run must not straddle one
        return 0
    for ix in a.indices[:-1]:
        if k in free_vars(ix) and _split(ix, k, "floordiv") != d:
            return 0
    return d
