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

A symbolic extent with static pads (`tap_regimes`): a tap's liveness only grows with the
extent h (both of its bounds move outward with h), so the h >= 1 split into a few intervals
of one live range each: for the ASPP conv, h <= d (the centre tap) and h > d (all three). The
conv is then lowered once per combination of the axes' intervals, the trimmed ones behind an
if on the extents (kernel IfStmt, evaluated once per call), the full conv last: a generic
version (symbolic H, W) runs the 1x1 conv on small planes instead of nine taps of padding.
"""

from __future__ import annotations

import numpy as np

from ..ir import DType
from ..kernel import Const, IfStmt

MAX_VARIANTS = 4
"""trimmed lowerings per conv (each is a conv's code): two symbolic axes of two intervals"""

MIN_REGIME_EXTENT = 4
"""an interval of extents gets its own lowering only if it reaches this far: a 3x3 conv at
pad 1 has a dead-tap interval too (h = 1), which would double every padded conv's code for
planes nobody runs; dilated convs (the ASPP's h <= 12) pass"""


def live_taps(h: int, o: int, k: int, s: int, d: int, b: int) -> tuple[int, int] | None:
    """[lo, hi] of the taps that read inside [0, h) for some output o' < o; None if none do."""
    live = [t for t in range(k) if d * t - b <= h - 1 and s * (o - 1) + d * t - b >= 0]
    return (live[0], live[-1]) if live else None


def _out_extent(h: int, k: int, s: int, d: int, b: int, e: int) -> int:
    return (h + b + e - d * (k - 1) - 1) // s + 1


def _intervals(k: int, s: int, d: int, b: int, e: int) -> list[tuple[int, int | None, tuple[int, int] | None]]:
    """[(h_lo, h_hi or None: unbounded, live range)] over the extents h >= 1 of an axis with
    static pads: consecutive extents of one live range merged. Past h = 2(b + e + d(k-1) + s)
    every tap that ever reads inside does (both bounds of a tap's reads pass 0 and h - 1)."""
    top = 2 * (b + e + d * (k - 1) + s) + 2
    out: list[tuple[int, int | None, tuple[int, int] | None]] = []
    for h in range(1, top + 1):
        o = _out_extent(h, k, s, d, b, e)
        r = live_taps(h, o, k, s, d, b) if o >= 1 else None
        if out and out[-1][2] == r:
            out[-1] = (out[-1][0], h, r)
        else:
            out.append((h, h, r))
    lo, _, r = out[-1]
    out[-1] = (lo, None, r)
    return out


def tap_regimes(ctx, x, w, kernel, strides, dilations, pb, pe, spatial: slice = slice(2, None)
                ) -> list[tuple[object, tuple]] | None:
    """[(condition, (w, kernel, pb, pe))] for a conv with a symbolic extent whose dead taps
    depend on it (see the module doc): the trimmed lowerings, each under its condition over
    the extents (a kernel bool Expr), tried in order before the full conv; None when no
    extent leaves a tap dead, or for more than MAX_VARIANTS combinations. `spatial`: where
    the window dims sit in X's and Y's shapes (slice(1, 3) channels-last); W is ONNX's
    [M, C/group, k...] either way."""
    dims, outs = list(x.shape[spatial]), list(ctx.out(0).shape[spatial])
    if not all(isinstance(k, int) for k in (*kernel, *strides, *dilations, *pb, *pe)):
        return None
    wv = ctx.const_value(1)
    if wv is None or w.dtype is not DType.f32 or np.asarray(wv).dtype != np.float32:
        return None
    per_axis: list[list[tuple[object, tuple[int, int] | None]]] = []
    for h, o, k, s, d, b, e in zip(dims, outs, kernel, strides, dilations, pb, pe):
        if isinstance(h, int):
            per_axis.append([(None, live_taps(h, o, k, s, d, b) if isinstance(o, int) else (0, k - 1))])
            continue
        hx = ctx.dim(h)
        axis = []
        for lo, hi, r in _intervals(k, s, d, b, e):
            if r is None or r == (0, k - 1) or hi is None or hi < MIN_REGIME_EXTENT:
                continue  # no tap (an empty output), all of them, or a degenerate plane: the full conv
            cond = hx <= Const(hi, DType.i64)
            axis.append((cond if lo == 1 else cond & (hx >= Const(lo, DType.i64)), r))
        per_axis.append(axis + [(None, (0, k - 1))])
    combos: list[tuple[object, list]] = [(None, [])]
    for axis in per_axis:
        combos = [(c if a is None else a if c is None else c & a, [*rs, r]) for c, rs in combos for a, r in axis]
    out = []
    for cond, ranges in combos:
        if cond is None or any(r is None for r in ranges) or all(r == (0, k - 1) for r, k in zip(ranges, kernel)):
            continue
        new_b = [b - d * lo for b, d, (lo, _) in zip(pb, dilations, ranges)]
        new_e = [e - d * (k - 1 - hi) for e, d, k, (_, hi) in zip(pe, dilations, kernel, ranges)]
        if any(v < 0 for v in (*new_b, *new_e)):
            continue
        sl = tuple(slice(lo, hi + 1) for lo, hi in ranges)
        wt = ctx.const(np.ascontiguousarray(np.asarray(wv)[(slice(None), slice(None), *sl)]), "wlive")
        out.append((cond, (wt, [hi - lo + 1 for lo, hi in ranges], new_b, new_e)))
    return out if 0 < len(out) <= MAX_VARIANTS else None


def lower_regimes(ctx, regimes, lower) -> None:
    """`lower(trimmed)` once per regime and once with None (the full conv), chained as
    if / else if / ... / else on the regimes' conditions in the kernel program."""
    p = ctx.program

    def body(trimmed) -> list:
        saved, p.body = p.body, []
        try:
            lower(trimmed)
            return p.body
        finally:
            p.body = saved

    chain = body(None)
    for cond, trimmed in reversed(regimes):
        chain = [IfStmt(cond, body(trimmed), chain)]
    p.body.extend(chain)


def trim_dead_taps(ctx, x, w, kernel, strides, dilations, pb, pe, spatial: slice = slice(2, None)):
    """(w, kernel, pb, pe) of the same conv without its padding-only taps, or None when
    there are none (see the module doc; `spatial` as for `tap_regimes`)."""
    dims, outs = list(x.shape[spatial]), list(ctx.out(0).shape[spatial])
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
