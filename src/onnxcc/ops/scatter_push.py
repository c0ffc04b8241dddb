"""Scatters without a reduction in push form: the output is a copy of the data, then each
update is written at its target (a `WriteAt` over the update positions, in row-major order,
so of duplicate targets the last update wins, as onnxruntime's serial loop gives).

The pull form (ops/misc.py `_scatter_value`: every output element searches all the updates
for the last one that targets it) costs output x updates: BEiT's relative position index,
built by six ScatterNDs over (patches^2, 2) at run-time sizes, made the model 115x slower
than onnxruntime at 64x48 pixels. This one costs output + updates. Reductions (add, mul, max,
min) keep the pull form, whose body reads the element it combines with.
"""

from __future__ import annotations

from ..kernel import WriteAt, fresh_var
from .shape_util import emit


def scatter_writes(ctx, y, x, update_shape, target, update) -> None:
    """`y = x`, then `y[target(q)] = update(q)` for every q in `update_shape` (row-major).
    `target(q)` returns the output index tuple (with its bounds checks), `update(q)` the value."""
    emit(ctx, y, lambda ix: x[ix])
    qs = tuple(fresh_var("s") for _ in update_shape)
    ctx.program.body.append(WriteAt(y.name, tuple(zip(qs, update_shape)), target(qs), update(qs)))
