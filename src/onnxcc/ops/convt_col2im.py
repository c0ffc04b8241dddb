"""A strided ConvTranspose as a GEMM over the input, then a col2im gather-sum.

The gather form (ops/nn.py `_convt_lower`) reads X at t / s only where t = o + pad - k*d is
a multiple of the stride s: as a GEMM its packing builds a C*K x O im2col with a remainder
and a guard per entry, of which all but 1/s per axis are zeros (convs1d at 3200 samples:
the packing took 3x the GEMM). Here the GEMM runs over the input positions instead,
T[n, m, k..., l...] = sum_c X[n, c, l...] * W[c, m, k...] (contiguous packing, no zero
columns), and each output sums its few valid taps of T: M*K*O guarded loads instead of
C*K*O. Taken for group 1 and a stride above 1 on some axis (at stride 1 the gather form
has no zeros to skip and no remainder).
"""

from __future__ import annotations

from ..ir import DType
from ..kernel import Var, rsum, select


def transposed_source(t, stride: int, size):
    """Where a transposed conv's output offset t = o + pad - k * dilation reads its input along
    one axis, and the conditions for that input position to exist: t inside the input and, past
    stride 1, a multiple of the stride."""
    if stride == 1:
        return [t >= 0, t < size], t
    return [t >= 0, (t % stride).eq(0), t < size * stride], t // stride


def col2im_applies(x, w, strides: list[int], group: int) -> bool:
    """Also f32/f64 only: a half-precision T would round each product sum once more before
    the tap sum (the gather form accumulates in one reduction)."""
    return (x.dtype in (DType.f32, DType.f64) and group == 1 and any(s > 1 for s in strides)
            and all(isinstance(k, int) for k in w.shape[2:]))


def col2im_lower(ctx, x, w, bias, pads_begin, strides: list[int], dilations: list[int]) -> None:
    nd = x.rank - 2
    kernel = list(w.shape[2:])
    cols = ctx.temp(x.dtype, [x.shape[0], w.shape[1], *kernel, *x.shape[2:]], "convt_cols")
    c = Var("c")

    def gemm(n, m, *rest):
        ks, ls = rest[:nd], rest[nd:]
        return rsum([(c, x.shape[1])], x[(n, c, *ls)] * w[(c, m, *ks)])

    ctx.compute(cols, gemm)
    kv = [Var(f"k{i}") for i in range(nd)]

    def gather(n, m, *o):
        conds, src = [], []
        for i in range(nd):
            t = o[i] + ctx.dim(pads_begin[i]) - kv[i] * dilations[i]
            exists, at = transposed_source(t, strides[i], ctx.dim(x.shape[2 + i]))
            conds += exists
            src.append(at)
        ok = conds[0]
        for cond in conds[1:]:
            ok = ok & cond
        acc = rsum(list(zip(kv, kernel)), select(ok, cols[(n, m, *kv, *src)], 0))
        return acc if bias is None else acc + bias[m]

    ctx.compute(ctx.out(0), gather)
