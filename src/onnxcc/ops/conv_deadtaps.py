"""Dropping a conv's kernel taps that only ever read padding.

A dilated conv on a plane smaller than its dilation (DeepLabV3's ASPP: 3x3 taps at dilation
12/24/36 over a 6x6 or 12x12 plane) reads, for its outer taps, nothing but the zero padding
at every output: those taps add 0 and cost 9x the useful work (and K = 9C is past the window
GEMM's limit, so B is packed, im2col-like, on every call). With static input extents, pads and
a constant weight, the taps of an axis that read inside the input for some output are a
contiguous range [lo, hi] (tap k reads positions s*o + d*k - b, o < O, an interval moving right
with k). The conv over the sliced weight W[..., lo:hi+1, ...] with begin pad b - d*lo and end
pad e - d*(K-1-hi) computes the same output extents and the same sums: a 3x3 ASPP conv on a
small plane becomes a 1x1 conv. Only trims that leave every pad >= 0 are taken (the padded
copies and guards of the conv paths take non-negative pads); with pad = dilation, the usual
export, dropping the outer taps leaves pad 0.
"""

from __future__ import annotations

import numpy as np

from ..ir import DType


def live_taps(h: int, o: int, k: int, s: int, d: int, b: int) -> tuple[int, int] | None:
    """[lo, hi] of the taps that read inside [0, h) for some output o' < o; None if none do."""
    live = [t for t in range(k) if d * t - b <= h - 1 and s * (o - 1) + d * t - b >= 0]
    return (live[0], live[-1]) if live else None


def trim_dead_taps(ctx, x, w, kernel, strides, dilations, pb, pe):
    """(w, kernel, pb, pe) of the same conv without its padding-only taps, or None when
    there are none (see the module doc)."""
    dims, outs = list(x.shape[2:]), list(ctx.out(0).shape[2:])
    if not all(isinstance(k, int) for k in kernel):
        return None
    wv = ctx.const_value(1)
    # f32 only: the slice must be a const of w's own dtype (a half conv runs on f32 buffers)
    if wv is None or w.dtype is not DType.f32 or np.asarray(wv).dtype != np.float32:
        return None
    # per axis: one whose extents or pads are symbolic keeps all its taps (a version that
    # fixes H alone still trims the rows)
    ranges = [live_taps(h, o, k, s, d, b)
              if all(isinstance(v, int) for v in (h, o, b, e)) else (0, k - 1)
              for h, o, k, s, d, b, e in zip(dims, outs, kernel, strides, dilations, pb, pe)]
    # an axis with no live tap makes the output the bias alone: rare, left to the full conv
    if any(r is None for r in ranges) or all(r == (0, k - 1) for r, k in zip(ranges, kernel)):
        return None
    sl = tuple(slice(lo, hi + 1) for lo, hi in ranges)  # type: ignore[misc]
    new_k = [hi - lo + 1 for lo, hi in ranges]  # type: ignore[misc]
    new_b = [b - d * lo for b, d, (lo, _) in zip(pb, dilations, ranges)]  # type: ignore[misc]
    new_e = [e - d * (k - 1 - hi) for e, d, k, (_, hi) in zip(pe, dilations, kernel, ranges)]  # type: ignore[misc]
    if any(isinstance(v, int) and v < 0 for v in (*new_b, *new_e)):
        return None
    wt = ctx.const(np.ascontiguousarray(np.asarray(wv)[(slice(None), slice(None), *sl)]), "wlive")
    return wt, new_k, new_b, new_e
