"""QLinearConv / ConvInteger through the float conv's lowering, where that is exact.

The integer path (int_gemm.py) computes each output as one dot product over the contraction
(vpdpwssd, then a horizontal sum per output): 3-5x slower than onnxruntime's u8s8 GEMM on a
small quantized conv net. The float conv gets the GEMM / window micro-kernels, packed weights
and fused epilogues. Its products and sums are exact when they are integers below 2**24: with
W, its zero point and the bias constant, the largest |partial sum| of output channel m is at
most max|x - xz| * sum|W[m] - wz[m]| + |B[m]|, known at compile time. Where that bound is below
2**24, the f32 accumulator holds exactly the i32 the integer path gives, so the requantized
result is bit-identical; otherwise (or with a W that is not constant) the integer path runs."""

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


def float_conv(ctx, shape, x, xz, w, wz, bias) -> Buffer | None:
    """A temp acc[n, m, o...] (f32, `shape`) = the integer conv sum(c, k: (X - xz) * (W - wz))
    (+ B), exactly, through onnx.Conv's lowering; None (nothing written) where that would not
    be exact."""
    wdata = ctx.const_value(ctx.inputs.index(w))
    xzv, wzv = _zero_point(ctx, xz), _zero_point(ctx, wz)
    bdata = np.zeros(1, np.int64) if bias is None else ctx.const_value(ctx.inputs.index(bias))
    if wdata is None or xzv is None or wzv is None or bdata is None or xzv.size != 1:
        return None
    wi = wdata.astype(np.int64).reshape(wdata.shape[0], -1)
    wi = wi - (wzv[:, None] if wzv.size > 1 else wzv[0])
    info = np.iinfo(x.dtype.np)
    xmax = max(int(xzv[0]) - int(info.min), int(info.max) - int(xzv[0]))
    bound = xmax * np.abs(wi).sum(axis=1) + np.abs(np.asarray(bdata, np.int64).reshape(-1))
    if int(bound.max()) >= EXACT:
        return None
    f32 = DType.f32
    xf = ctx.temp(f32, x.shape, "xf")

    def xbody(*ix):
        v = cast(x[ix], f32)
        return v if xz is None else v - cast(per_element(xz, 0), f32)

    ctx.compute(xf, xbody)
    wf = wi.astype(np.float32).reshape(wdata.shape)
    bf = None if bias is None else np.asarray(bdata, np.float32).reshape(-1)
    inputs = [xf, ctx.const(wf, "wf")] + ([] if bf is None else [ctx.const(bf, "bf")])
    acc = ctx.temp(f32, shape, "acc")
    get_opdef("onnx.Conv").lower(ctx.over(inputs, [acc], [None, wf, bf]))
    return acc
