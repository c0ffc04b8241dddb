"""A grouped 2-D Conv (RegNet's group width 8, ResNeXt's 4 to 32) as a GEMM per (batch,
group).

In one compute the group index g = m // (M / group) sits in both operands' indices, so no
GEMM reading exists and the generic lowering runs a scalar loop nest with a padding check
per tap (regnet_y's 3x3 convs of 32 channels in 4 groups: 6.8x onnxruntime's time). Here
the sum goes into T[n, g, j, oh, ow] with g a batch var of both operands: the window GEMM
(kernel/conv_window.py) with the weights prepacked per group (kernel/schedule.py
`prepack_a`), 15x faster on that layer (0.084 ms against onnxruntime's 0.111)."""

from __future__ import annotations

from ..ir import DType
from ..kernel import Const, Var, rsum, select
from .pad_guard import pad_guard


def grouped_gemm_applies(x, w, group: int) -> bool:
    """A float32 grouped 2-D conv (not depthwise) with static channel counts: a GEMM per
    (batch, group), the weights prepacked per group and the input read through the window
    GEMM's padded copy (kernel/conv_window.py)."""
    cg, m = w.shape[1], w.shape[0]
    return (x.dtype is DType.f32 and x.rank == 4 and group > 1 and isinstance(cg, int) and cg > 1
            and isinstance(m, int) and m % group == 0 and all(isinstance(k, int) for k in w.shape[2:]))


def grouped_gemm_lower(ctx, x, w, bias, strides, dilations, pb, pe, group: int) -> None:
    """T[n, g, j, o...] = sum(c, k...: pad-guarded X[n, g*C/group + c, o*s + k*d - p] *
    W[g*mg + j, c, k...]), then Y[n, g*mg + j, o...] = T[n, g, j, o...] (+ B[g*mg + j]): in
    one compute g = m // mg sits in both operands, no GEMM reading exists; here g is a
    batch var of both, j the GEMM's rows, (oh, ow) its columns. The copy is cheap and
    elementwise: fusion folds it (with the bias) into its readers."""
    cg, kernel = w.shape[1], [int(k) for k in w.shape[2:]]
    mg = w.shape[0] // group
    y = ctx.out(0)
    t = ctx.temp(x.dtype, [x.shape[0], group, mg, *y.shape[2:]], "gconv")
    cv = Var("c")
    kv = [None if k == 1 else Var(f"k{i}") for i, k in enumerate(kernel)]
    zero = Const(0, DType.i64)
    axes = [(cv, cg)] + [(v, k) for v, k in zip(kv, kernel) if v is not None]

    def gemm(n, g, j, *o):
        ks = [zero if v is None else v for v in kv]
        pos = [oi * s + k * d - ctx.dim(p) for oi, k, s, d, p in zip(o, ks, strides, dilations, pb)]
        xv = x[(n, g * cg + cv, *pos)]
        inside = pad_guard(ctx, pos, x.shape[2:], pb, pe)
        if inside is not None:
            xv = select(inside, xv, 0)
        return rsum(axes, xv * w[(g * mg + j, cv, *ks)])

    ctx.compute(t, gemm)
    # the bias in the copy, not as the GEMM's epilogue: indexed by g*mg + j it is no row
    # operand the micro-kernel could add in registers, and the epilogue pass it would take
    # instead doubled the task functions' code (ResNeXt-50: +10 s of LLVM time)
    if bias is None:
        ctx.compute(y, lambda n, m, *o: t[(n, m // mg, m % mg, *o)])
    else:
        ctx.compute(y, lambda n, m, *o: t[(n, m // mg, m % mg, *o)] + bias[m])
