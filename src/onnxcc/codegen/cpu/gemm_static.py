"""Decisions of the GEMM codegen that a version with static extents can take in Python
instead of at run time: each run-time choice emits (and LLVM compiles) every alternative,
while a static one emits only the one that runs."""

from __future__ import annotations

from math import prod

from onnxcc.ir import canon
from onnxcc.kernel.program import Compute
from onnxcc.kernel.schedule import GemmPlan


def static_panels(c: Compute, g: GemmPlan) -> int | None:
    """The B panels (nr columns each) of `g`'s tiles when the extents they cover are static,
    else None; as gemm.py's `_Geometry.Pn` computes them at run time (the padded grid's
    rows x X columns in window mode, the flattened n extent otherwise)."""
    ext = dict(zip(c.var_names, c.extents))
    dims = [canon(ext[v]) for v in g.n]
    if g.window is not None:
        dims = [dims[0], canon(g.window.x_ext)]
    if not all(isinstance(d, int) for d in dims):
        return None
    return -(-prod(dims) // g.nr)


def narrow_wins(c: Compute, g: GemmPlan, g_n: GemmPlan, efficiency: int) -> bool | None:
    """Whether the one-vector-wide tiles of `g_n` beat `g`'s wide ones (gemm.py
    `_narrow_choice`: their padded columns over `efficiency` percent against the wide
    tiles' padded columns), when both panel counts are static; None: decided per call."""
    wide, narrow = static_panels(c, g), static_panels(c, g_n)
    if wide is None or narrow is None:
        return None
    return narrow * g_n.nr * 100 < wide * g.nr * efficiency
