"""QLinearConv through the float conv's lowering, where that is exact.

The integer path (int_gemm.py) computes each output as one dot product over the contraction
(vpdpwssd, then a horizontal sum per output): 3-7x slower than onnxruntime's u8s8 GEMM. The
float conv gets the GEMM / window micro-kernels, packed weights and fused epilogues. Its
products and sums are exact when they are integers below 2**24: with W, its zero point and the
bias constant, the largest |partial sum| of output channel m is at most
max|x - xz| * sum|W[m] - wz[m]| + |B[m]|, known at compile time (max|x - xz| is 255 for an 8-bit
x whatever its zero point, less for a constant one). Where that bound is below 2**24, the f32
accumulator holds exactly the i32 the integer path gives, so the result is bit-identical;
otherwise (or with a W that is not constant) the integer path runs.

Measured (benchmarks/int_kernels.py, 1 thread, 64->64 3x3 on 28x28): QLinearConv 1.27 ms ->
0.71 ms (onnxruntime's VNNI u8s8: 0.18 ms). ConvInteger (its i32 result has no requantization)
and the integer MatMuls stay on the integer path, measured faster there: ConvInteger 0.62 ms vs
0.72 ms through f32, MatMulInteger at 128x512x512 0.57 ms vs 0.71 ms."""

from __future__ import annotations

import numpy as np

from ..ir import DType
from ..kernel import Buffer, cast
from .int_gemm import per_element
from .registry import get_opdef

EXACT = 2**24
"""f32 holds every integer up to this bound exactly"""


def _zero_point(ctx, buf) -> np.ndarray | None:
    """a zero point's constant value as int64 (0 when absent); None when it is not constant"""
    if buf is None:
        return np.zeros(1, np.int64)
    data = ctx.const_value(ctx.inputs.index(buf))
    return None if data is None else np.asarray(data, np.int64).reshape(-1)


def _x_range(ctx, x, xz) -> int | None:
    """max|x - xz| over x's type, for a scalar zero point (None: one per row, not handled)"""
    info = np.iinfo(x.dtype.np)
    if xz is not None and not (xz.rank == 0 or all(isinstance(d, int) and d == 1 for d in xz.shape)):
        return None
    z = _zero_point(ctx, xz)
    if z is None:  # computed at run time (DynamicQuantizeLinear's): any value of the type
        return int(info.max) - int(info.min)
    return max(int(z[0]) - int(info.min), int(info.max) - int(z[0]))


def _shifted(ctx, x, xz) -> Buffer:
    """x - xz as f32 in a temp (the float op's activation operand)"""
    f32 = DType.f32
    xf = ctx.temp(f32, x.shape, "xf")

    def body(*ix):
        v = cast(x[ix], f32)
        return v if xz is None else v - cast(per_element(xz, 0), f32)

    ctx.compute(xf, body)
    return xf


def float_conv(ctx, shape, x, xz, w, wz, bias) -> Buffer | None:
    """A temp acc[n, m, o...] (f32, `shape`) = the integer conv sum(c, k: (X - xz) * (W - wz))
    (+ B), exactly, through onnx.Conv's lowering; None (nothing written) where that would not
    be exact."""
    wdata = ctx.const_value(ctx.inputs.index(w))
    wzv, xmax = _zero_point(ctx, wz), _x_range(ctx, x, xz)
    bdata = np.zeros(1, np.int64) if bias is None else ctx.const_value(ctx.inputs.index(bias))
    if wdata is None or wzv is None or bdata is None or xmax is None:
        return None
    wi = wdata.astype(np.int64).reshape(wdata.shape[0], -1)
    wi = wi - (wzv[:, None] if wzv.size > 1 else wzv[0])
    bound = xmax * np.abs(wi).sum(axis=1) + np.abs(np.asarray(bdata, np.int64).reshape(-1))
    if int(bound.max()) >= EXACT:
        return None
    xf = _shifted(ctx, x, xz)
    wf = wi.astype(np.float32).reshape(wdata.shape)
    bf = None if bias is None else np.asarray(bdata, np.float32).reshape(-1)
    inputs = [xf, ctx.const(wf, "wf")] + ([] if bf is None else [ctx.const(bf, "bf")])
    acc = ctx.temp(DType.f32, shape, "acc")
    conv = get_opdef("onnx.Conv")
    assert conv is not None and conv.lower is not None  # registered by ops/nn.py
    conv.lower(ctx.over(inputs, [acc], [None, wf, bf]))
    return acc
