"""Flat columns: when a GEMM's n vars (a conv's (oh, ow)) may be read as one flat index.

A conv's output tile covers columns j0 .. j0 + ncols of the flattened (oh, ow). Binding
(oh, ow) column by column costs a stack-array load per var and keeps the loop scalar; when
every use of those vars is the trailing index run of a load over dims that match their
extents (the output itself, a residual of the same shape), the leading vars can be bound to
0 and the last one to the flat column, so the loop is one unit-stride run that vectorises.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import sympy

from onnxcc.ir import Dim
from onnxcc.kernel.expr import Const, Expr, Load, Var, free_vars, transform


def flat_trailing_load(ld: Load, names: Sequence[str], ext: Mapping[str, Dim], shape: Sequence[Dim]) -> bool:
    """Whether `ld` indexes with exactly `names` as its last indices, over dims equal to their
    extents past the first (so those indices address memory as one flat index), and uses
    none of them anywhere else."""
    k = len(names)
    if len(ld.indices) < k or len(shape) != len(ld.indices):
        return False
    tail = ld.indices[len(ld.indices) - k:]
    if any(not isinstance(i, Var) or i.name != n for i, n in zip(tail, names)):
        return False
    if any(free_vars(i) & set(names) for i in ld.indices[:len(ld.indices) - k]):
        return False
    dims = shape[len(shape) - k:]
    return all(sympy.sympify(dims[j]) == sympy.sympify(ext[n]) for j, n in enumerate(names) if j > 0)


def flat_columns_ok(e: Expr, names: Sequence[str], ext: Mapping[str, Dim],
                    shape_of: Callable[[str], Sequence[Dim]]) -> bool:
    """Whether every use of the vars `names` in `e` is inside a load that
    `flat_trailing_load` accepts (then `e` may be evaluated with names[:-1] bound to 0
    and names[-1] to the flat column index)."""
    if len(names) < 2:
        return False
    bad = False

    def visit(n: Expr) -> Expr | None:
        nonlocal bad
        if isinstance(n, Load) and free_vars(n) & set(names):
            if n.dtype.bits < 8 or not flat_trailing_load(n, names, ext, shape_of(n.buffer)):
                bad = True
                return None
            return Const(0, n.dtype)  # a stand-in without the vars, so the check below skips it
        return None

    rest = transform(e, visit)
    return not bad and not (free_vars(rest) & set(names))
