"""Decisions of the GEMM codegen that a version with static extents can take in Python
instead of at run time: each run-time choice emits (and LLVM compiles) every alternative,
while a static one emits only the one that runs. Also the tile order, which the plan alone
decides (`rows_outer`)."""

from __future__ import annotations

from math import prod

from onnxcc.ir import canon
from onnxcc.kernel.expr import Const
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


ROWS_OUTER_MAX_K = 64
"""the longest static k for which the tiles are visited row block by row block (see `rows_outer`;
measured on [S, k] @ [k, S], 4 heads: 0.51x the time at k = 8, S = 1599; 0.85x at k = 16 and
0.75-0.87x at k = 32 and 64, S = 1000)"""


def dense_rows(g: GemmPlan) -> bool:
    """Whether `g` is a dense layer (kernel/schedule.py `GemmPlan.dense`: B prepacked, A read
    in place or packed per task, N x K wide enough), whose tiles run row block by row block
    (`rows_outer`) in tasks of one row panel (gemm.py `_Geometry._dense_tasks`)."""
    return g.dense and g.b_const and not g.a_const and g.window is None


def rows_outer(g: GemmPlan) -> bool:
    """Whether the tiles of a block run with the B panels innermost (each row block of C written
    left to right) instead of the A panels (each column strip written top to bottom, the order
    that keeps one B panel in L1 over a long k). With a short static k (attention's scores,
    Q @ K^T over heads of 8 to 64) the multiply is cheap and the C stores dominate: top to
    bottom, each tile's rows land in as many pages as rows. A dense layer (B prepacked, A
    read in place or packed per task) runs rows outer at any k: its A rows (12 x kc, at most
    24 KiB) stay in L1 while the prepacked B panels stream from L2 / L3 under them, as BLIS
    keeps the broadcast operand's micro-panel; column strips kept instead a 32 KiB B panel
    (256 x 32 floats) that does not fit beside anything in a 32 KiB L1 (the MLP's
    x[M, 512] @ W[512, 2048] at M = 128 / 512: 0.9x the time)."""
    if dense_rows(g):
        return True
    k = 1
    for _, x in g.reduce.vars:
        if not isinstance(x, Const):
            return False
        k *= int(x.value)
    return k <= ROWS_OUTER_MAX_K
