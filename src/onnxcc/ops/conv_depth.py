"""A 3-D Conv as a batch of 2-D window GEMMs, one per (n, output depth).

The GEMM scheduler (kernel/schedule.py) takes the trailing run of output vars that only B
reads as the GEMM's columns: for Y[n, m, od, oh, ow] that is (od, oh, ow), three vars, and
the window mode (kernel/conv_window.py: B read in place from a padded copy instead of an
im2col packing at every call) only knows two. So the sum is computed into
`Yt[n, od, m, oh, ow]`: columns (oh, ow), rows m, batch (n, od), the depth taps `kd` plane
vars of the window copy like the input channels; the bias stays the GEMM's epilogue, and
`Y[n, m, od, oh, ow] = Yt[n, od, m, oh, ow]` is one copy of the output.
"""

from __future__ import annotations

from ..ir import DType
from ..kernel import Const, Var, rsum, select
from .pad_guard import pad_guard


def depth_batched_applies(x, w, group: int) -> bool:
    """A dense (group 1) 3-D conv of f32 with a static window and more than one input
    channel and depth tap (else it is one 2-D conv already or the taps path's)."""
    kernel = w.shape[2:]
    return (x.dtype is DType.f32 and x.rank == 5 and group == 1 and all(isinstance(k, int) for k in kernel)
            and isinstance(w.shape[1], int) and w.shape[1] * kernel[0] > 1)


def depth_batched_lower(ctx, x, w, bias, strides, dilations, pb, pe) -> None:
    y = ctx.out(0)
    n_dim, m_dim = y.shape[0], y.shape[1]
    outs = list(y.shape[2:])
    kernel = list(w.shape[2:])
    yt = ctx.temp(y.dtype, [n_dim, outs[0], m_dim, *outs[1:]], "ydepth")
    # a var per contraction dim; an extent-1 dim is index 0 (a reduce var of extent 1 would
    # be one more loop for nothing)
    exts = [w.shape[1], *kernel]
    vs = [Const(0, DType.i64) if e == 1 else Var(name) for e, name in zip(exts, ("c", "k0", "k1", "k2"))]
    c, kv = vs[0], vs[1:]
    axes = [(v, e) for v, e in zip(vs, exts) if isinstance(v, Var)]
    # the largest extent first: the GEMM schedule takes every reduce var but the first as one
    # static inner block of at most kc/2 (kernel/schedule.py); a video stem's 3 channels first
    # left 3*7*7 = 147 taps inner and the conv on a scalar loop nest, 7 first leaves 63
    axes.sort(key=lambda a: -a[1])

    def body(n, od, m, oh, ow):
        pos = [o * s + k * d - ctx.dim(p) for o, k, s, d, p in zip((od, oh, ow), kv, strides, dilations, pb)]
        xv = x[(n, c, *pos)]
        inside = pad_guard(ctx, pos, x.shape[2:], pb, pe)
        if inside is not None:
            xv = select(inside, xv, 0)
        acc = rsum(axes, xv * w[(m, c, *kv)])
        return acc if bias is None else acc + bias[m]

    ctx.compute(yt, body)
    ctx.compute(y, lambda n, m, od, oh, ow: yt[(n, od, m, oh, ow)])
