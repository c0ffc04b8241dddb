"""Linear algebra: Det (the determinant of the trailing square matrices)."""

from __future__ import annotations

import numpy as np

from ..ir import DType
from ..kernel import cast
from .registry import OpDef, register
from .shape import emit

# ---- Det ----------------------------------------------------------------------------------------

#: the largest matrix Det lowers: the expansion has n! products of n terms
_DET_MAX_N = 4


def _permutations(n: int) -> list[tuple[tuple[int, ...], int]]:
    """Every permutation of range(n) with its sign (+1 / -1)."""
    if n == 1:
        return [((0,), 1)]
    out = []
    for perm, sign in _permutations(n - 1):
        for pos in range(n):  # insert n - 1 at pos: it passes n - 1 - pos elements
            out.append((perm[:pos] + (n - 1,) + perm[pos:], sign * (-1) ** (n - 1 - pos)))
    return out


@register("onnx.Det")
class DetOp(OpDef):
    """Determinant of the trailing square matrices. Lowered as the Leibniz expansion (exact
    sum of signed products) for n <= 4 known at compile time; larger n is refused."""

    arity = 1
    kind = "opaque"

    def infer(self, ctx):
        x = ctx.in_types[0]
        if not x.dtype.is_float:
            raise ctx.error(f"input must be a float tensor, got {x.dtype.value}")
        if x.rank < 2:
            raise ctx.error(f"input must be (..., M, M), got {x}")
        ctx.require_eq(x.shape[-2], x.shape[-1], "square matrices")
        return [x.with_shape(x.shape[:-2])]

    def lower(self, ctx):
        x, y = ctx.inputs[0], ctx.out(0)
        n = x.shape[-1]
        if not isinstance(n, int) or n > _DET_MAX_N:
            raise ctx.unsupported(f"matrix size {n}: only sizes up to {_DET_MAX_N} known at compile time "
                                  "are lowered")
        dt = DType.f32 if x.dtype in (DType.f16, DType.bf16) else x.dtype

        def body(ix):
            total = None
            for perm, sign in _permutations(n):
                term = None
                for r, c in enumerate(perm):
                    v = cast(x[(*ix, r, c)], dt)
                    term = v if term is None else term * v
                term = term if sign > 0 else -term
                total = term if total is None else total + term
            return cast(total, y.dtype)

        emit(ctx, y, body)

    def reference(self, ctx, x):
        xw = x.astype(np.float32) if x.dtype == np.float16 else x
        return [np.asarray(np.linalg.det(xw)).astype(x.dtype)]

