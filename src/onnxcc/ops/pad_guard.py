"""The padding guard of a sliding window: the conditions that keep window positions inside
the input. Convs (float, integer, quantized, 3-D), pools and padded copies all ask this one
function, so which sides get a check is decided in one place."""

from __future__ import annotations


def _zero(d) -> bool:
    return isinstance(d, int) and d == 0


def pad_conds(ctx, pos, in_dims, pads_begin, pads_end, ceil_mode: int = 0) -> list:
    """One condition per checked side of each position in `pos` (index Exprs) over input
    dims `in_dims`. A side needs no check when its pad is the literal 0: without ceil_mode
    the last window then ends inside the input (ceil_mode's extra window may not)."""
    conds = []
    for p, h, b, e in zip(pos, in_dims, pads_begin, pads_end, strict=True):
        if not _zero(b):
            conds.append(p >= 0)
        if ceil_mode or not _zero(e):
            conds.append(p < ctx.dim(h))
    return conds


def pad_guard(ctx, pos, in_dims, pads_begin, pads_end, ceil_mode: int = 0):
    """The conjunction of `pad_conds` (None when no side needs a check)."""
    cond = None
    for c in pad_conds(ctx, pos, in_dims, pads_begin, pads_end, ceil_mode):
        cond = c if cond is None else cond & c
    return cond
