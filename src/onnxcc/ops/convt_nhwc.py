"""cc.convt_nhwc: a 2-D ConvTranspose whose kernel equals its stride, channels-last.

A U-Net's learned upsampling is a ConvTranspose with a 2x2 kernel at stride 2 (no pads, no
output_padding): its taps never overlap, so every output pixel takes exactly one tap of one
input pixel,

    Y[n, h*s0 + a, w*s1 + b, m] = sum(c: X[n, h, w, c] * W[c, m, a, b]) + B[m]

which is a GEMM of the input pixels (n, h, w) against the constant weights laid out as
[s0, s1*M, C], whose result is already Y's memory: channels-last, Y viewed as
[N, H, s0, W, s1*M] has (b, m) contiguous per input pixel and tap row a. So the op lowers
to one compute over that view, with no col2im gather and no layout change; the nhwc-region
pass (passes/nhwc_region.py) moves such ConvTransposes into a region so a U-Net's decoder
(upsample -> Concat with the encoder's skip -> convs) stays channels-last. Operands and
attributes are the ONNX op's (W stays [C, M, KH, KW], B is [M]); only X and Y are permuted:

    cc.convt_nhwc(X[N, H, W, C], W, B) = transpose(ConvTranspose(transpose(X, 0 3 1 2), W, B), 0 2 3 1)

Other ConvTransposes (overlapping taps, pads, output_padding, groups) stay NCHW outside the
region (`pixel_shuffle_convt` says which qualify); lowering one of them here is refused.
"""

from __future__ import annotations

import numpy as np

from ..ir import TensorType, canon
from ..kernel import Var, rsum
from .elementwise import cast_out, same_dtype, widen
from .nn import conv_transpose
from .registry import InferCtx, RefCtx, define

_NHWC = (0, 2, 3, 1)
_NCHW = (0, 3, 1, 2)


def pixel_shuffle_convt(attrs: dict, w_shape) -> bool:
    """Whether a 2-D ConvTranspose with these attributes and weight shape [C, M/group, KH, KW]
    has non-overlapping taps covering its output exactly: one group, kernel == strides,
    dilation 1, no pads, no output_padding, no output_shape or auto_pad that could crop."""
    if len(w_shape) != 4 or not all(isinstance(k, int) for k in w_shape[2:]):
        return False
    kernel = list(w_shape[2:])
    if list(attrs.get("kernel_shape") or kernel) != kernel or int(attrs.get("group", 1)) != 1:
        return False
    if attrs.get("output_shape") is not None or attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        return False
    strides = list(attrs.get("strides") or [1, 1])
    return (strides == kernel and all(int(d) == 1 for d in attrs.get("dilations") or [1, 1])
            and not any(attrs.get("pads") or []) and not any(attrs.get("output_padding") or []))


def _infer(ctx: InferCtx):
    x, w = ctx.in_types[0], ctx.in_types[1]
    dt = same_dtype(ctx)
    if x.rank != 4 or w.rank != 4 or not pixel_shuffle_convt(ctx.op.attrs, w.shape):
        raise ctx.error(f"x must be [N, H, W, C] and w [C, M, KH, KW] with kernel == strides, no pads, "
                        f"output_padding or groups, got {x} and {w}")
    ctx.require_eq(x.shape[3], w.shape[0], "input channels (x dim 3 vs w dim 0)")
    if len(ctx.in_types) > 2:
        ctx.require_eq(ctx.in_types[2].shape[0], w.shape[1], "bias length vs output channels")
    kh, kw = w.shape[2], w.shape[3]
    return [TensorType(dt, (x.shape[0], canon(x.shape[1] * kh), canon(x.shape[2] * kw), w.shape[1]))]


def _reference(ctx: RefCtx, x, w, b=None):
    kernel = list(w.shape[2:])
    outs = [x.shape[1] * kernel[0], x.shape[2] * kernel[1]]
    y = conv_transpose(widen(x).transpose(_NCHW), widen(w), None if b is None else widen(b), kernel, [0, 0], outs,
                       [1, 1], 1)
    return [cast_out(ctx, y.transpose(_NHWC))]


def _lower(ctx) -> None:
    x, y = ctx.inputs[0], ctx.out(0)
    wv = ctx.const_value(1)
    bias_v = ctx.const_value(2) if len(ctx.inputs) > 2 else None
    if wv is None or (len(ctx.inputs) > 2 and bias_v is None):
        raise ctx.unsupported("channels-last ConvTranspose with non-constant weights or bias is not lowered")
    cin, m, s0, s1 = (int(d) for d in wv.shape)
    # [C, M, s0, s1] -> [s0, (s1, M), C]: tap row a, then the output's contiguous (b, m) columns
    wp = ctx.const(np.ascontiguousarray(np.asarray(wv).transpose(2, 3, 1, 0).reshape(s0, s1 * m, cin)), "wshuf")
    bp = None if bias_v is None else ctx.const(np.tile(np.asarray(bias_v).reshape(-1), s1), "bshuf")
    n_, h_, w_, _ = x.shape
    yv = ctx.program.view(f"{y.name}_taps", y, (n_, h_, s0, w_, s1 * m))  # Y's memory, tap rows split out
    c = Var("c")

    def body(n, h, a, w, j):
        acc = rsum([(c, cin)], x[(n, h, w, c)] * wp[(a, j, c)])
        return acc if bp is None else acc + bp[j]

    ctx.compute(yv, body)


define("cc.convt_nhwc", infer=_infer, reference=_reference, arity=(2, 3), lower=_lower, kind="opaque")
