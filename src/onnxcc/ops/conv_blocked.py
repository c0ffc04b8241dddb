"""Depthwise Conv on a channel-blocked (NCHWc) copy: vectors run along 16 channels.

The plain depthwise lowering (ops/nn.py `_depthwise_lower`) vectorises each output row, so
on the small planes of a mobile net's late stages (7x7, 14x14) most lanes of every vector
are masked off and each tap pays a bounds select: mnasnet's 5x5 depthwise convs ran 2-7x
slower than onnxruntime there. Here

- the input is copied once, zero-padded, into `Xb[n, cb, h, w*16 + c]` (channel
  `cb*16 + c`; channels past C are zeros);
- the taps are summed into `Yb[n, cb, o..., c]`: every load a whole unmasked vector of 16
  channels, no selects (the padding lives in Xb), the weights a const `Wb[cb, k..., c]`
  (kernel/fold_consts.py folds its compute at compile time);
- `Y[n, m, o...] = Yb[n, m // 16, o..., m % 16] (+ B[m])` puts the result back in NCHW.

The two copies cost a gather per 16 elements each, so the path pays only where the taps
outweigh them (`blocked_applies`). Fusion keeps both copies as buffers (kernel/fuse.py: Xb
is a guarded remap read at one site per tap, and Yb's sum of taps is too costly to recompute
at its strided reads).
"""

from __future__ import annotations

import numpy as np

from ..ir import DType, canon
from ..kernel import Const, select

BLOCK = 16
"""channels per block: one AVX-512 vector of f32 (two AVX2 vectors)"""

MIN_TAPS = 25
"""smallest window taken: with 3x3 windows the two copies cost more than the blocked taps
save (measured 1.8-3x slower than the row-vectorised taps on 14x14 to 112x112 planes)"""

MAX_TAPS = 49
"""largest window taken (its taps are unrolled into one sum, like `_depthwise_lower`'s)"""

MIN_STRIDED_CHANNELS = 128
"""a strided conv is taken from this many channels on: its output plane is a quarter of
the input's, so the input copy weighs more; mobile nets' wide layers are their small planes
(5x5 stride 2: 288 channels 14x14 2x faster blocked, 48 channels 56x56 1.4x slower)"""


def blocked_applies(x, w, kernel, group, strides) -> bool:
    """Whether a Conv takes this path: a pure depthwise conv of f32 (one input and one
    output channel per group, static channel count) with a static window of `MIN_TAPS` to
    `MAX_TAPS` taps, at stride 1 or with `MIN_STRIDED_CHANNELS` channels."""
    c = x.shape[1]
    if x.dtype is not DType.f32 or not isinstance(c, int) or c < 2:
        return False
    if not (group == c and w.shape[0] == c and w.shape[1] == 1):
        return False
    if not all(isinstance(k, int) for k in kernel) or not MIN_TAPS <= int(np.prod(kernel)) <= MAX_TAPS:
        return False
    return all(s == 1 for s in strides) or c >= MIN_STRIDED_CHANNELS


def blocked_depthwise_lower(ctx, x, w, bias, kernel, strides, dilations, pb, pe) -> None:
    """Lower Y = depthwise conv(X, W) + B through the blocked copies described above."""
    nd = x.rank - 2
    n_dim, c_total = x.shape[0], x.shape[1]
    nb = -(-c_total // BLOCK)
    ragged = c_total % BLOCK != 0
    y = ctx.out(0)
    outs = list(y.shape[2:])
    zero_f = Const(0.0, x.dtype)

    # Xb spans exactly the positions the windows read, its last axis q = w*16 + c: one row
    # per input row rather than one 16-lane row per pixel (the per-row overhead outweighed
    # the gather). No views (a 5-D buffer seen 4-D): the verifier proves a view's element
    # count with sympy's simplify, which took minutes on mnasnet's nested floor dims.
    span = [canon((outs[i] - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1) for i in range(nd)]
    xb = ctx.temp(x.dtype, [n_dim, nb, *span[:-1], canon(span[-1] * BLOCK)], "xblk")

    def x_body(n, cb, *rest):
        q = rest[-1]
        c = q % BLOCK
        pos = [p - ctx.dim(b) for p, b in zip([*rest[:-1], q // BLOCK], pb)]
        conds = [cb * BLOCK + c < c_total] if ragged else []
        for i, (p, h, b, e) in enumerate(zip(pos, x.shape[2:], pb, pe)):
            if not _is_zero(b):
                conds.append(p >= 0)
            # without end padding the last window ends inside X; the column check stays
            # anyway: a guarded copy is what kernel/fuse.py keeps as a buffer, where an
            # unguarded remap would be inlined into every tap as a 16-lane gather
            if not _is_zero(e) or i == nd - 1:
                conds.append(p < ctx.dim(h))
        load = x[(n, cb * BLOCK + c, *pos)]
        if not conds:
            return load
        cond = conds[0]
        for extra in conds[1:]:
            cond = cond & extra
        return select(cond, load, zero_f)  # lazy: a padding position is never loaded

    ctx.compute(xb, x_body)

    wb = ctx.temp(w.dtype, [nb, *kernel, BLOCK], "wblk")

    def w_body(cb, *rest):
        ks, c = rest[:-1], rest[-1]
        load = w[(cb * BLOCK + c, Const(0, DType.i64), *ks)]
        return select(cb * BLOCK + c < c_total, load, zero_f) if ragged else load

    ctx.compute(wb, w_body)

    def taps(n, cb, o_outer, col):
        """The window's products; `col(t)` is (Xb's last index for tap t of the last axis,
        the block lane)."""
        terms = []
        for tap in np.ndindex(*kernel):
            pos = [oi * s + int(t) * d for oi, t, s, d in zip(o_outer, tap, strides, dilations)]
            ks = [Const(int(t), DType.i64) for t in tap]
            q, c = col(int(tap[-1]))
            terms.append(xb[(n, cb, *pos, q)] * wb[(cb, *ks, c)])
        return tree_sum(terms)

    dl, sl = dilations[-1], strides[-1]
    if sl == 1:
        # Yb's last axis q = ow*16 + c too: at stride 1 along W a tap's loads are contiguous
        # in q, so a row is a few long vector runs (measured 15-20% faster than 16-lane rows)
        yb = ctx.temp(x.dtype, [n_dim, nb, *outs[:-1], canon(outs[-1] * BLOCK)], "yblk")
        ctx.compute(yb, lambda n, cb, *r: taps(n, cb, r[:-1], lambda t: (r[-1] + t * dl * BLOCK, r[-1] % BLOCK)))

        def at(n, m, o):
            return yb[(n, m // BLOCK, *o[:-1], o[-1] * BLOCK + m % BLOCK)]
    else:
        # strided along W: 16-lane rows, each tap one contiguous vector of Xb
        yb = ctx.temp(x.dtype, [n_dim, nb, *outs, BLOCK], "yblk")
        ctx.compute(yb, lambda n, cb, *r: taps(n, cb, r[:-2], lambda t: ((r[-2] * sl + t * dl) * BLOCK + r[-1],
                                                                          r[-1])))

        def at(n, m, o):
            return yb[(n, m // BLOCK, *o, m % BLOCK)]

    def out_body(n, m, *o):
        v = at(n, m, o)
        return v if bias is None else v + bias[m]

    ctx.compute(y, out_body)


def _is_zero(d) -> bool:
    return isinstance(d, int) and d == 0


def tree_sum(terms: list):
    """The terms summed as a balanced tree: a left-to-right chain of 25 taps is 25
    dependent FMAs per output vector (latency-bound, measured about 4x slower than the
    loads allow); the tree's independent halves overlap (LLVM keeps the order: no
    fast-math)."""
    while len(terms) > 1:
        terms = [terms[i] + terms[i + 1] if i + 1 < len(terms) else terms[i] for i in range(0, len(terms), 2)]
    return terms[0]
