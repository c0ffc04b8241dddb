"""cc.qlinearconv_nhwc: a 2-D QLinearConv whose input and output are channels-last, [N, H, W, C].

The qnhwc-region pass (passes/qnhwc_region.py) rewrites chains of quantized convs into this op
so the 8-bit activations between them keep one layout. Operands and attributes are
QLinearConv's (W stays [M, C/group, KH, KW]); only X and Y are permuted:

    cc.qlinearconv_nhwc(X[N, H, W, C], ...) = transpose(QLinearConv(transpose(X, 0 3 1 2), ...), 0 2 3 1)

With attribute `nchw_input = 1` X stays [N, C, H, W] (a region's image stem: its few input
channels are packed per pixel by the GEMM's own copy, int8_gemm.py `_packed_pixels`, instead
of entering through a transpose whose innermost axis is 3 channels long).

Lowering, on the same integer kernels as QLinearConv, so the 8-bit result is the same:
- one group, on the VNNI GEMM (int8_gemm.py `vnni_conv`, channels_last): the GEMM stores Y
  in place; X is copied only where the conv pads (the pads hold the zero point) or is s8;
- depthwise, on int8_depthwise.py's kernel, its result written in place;
- otherwise (no VNNI, weights not constant, W - wz outside s8) the exact i32 sums as loops
  and the same requantization (correct, not fast; the pass keeps such convs out where it can).
"""

from __future__ import annotations

import numpy as np

from ..ir import DType, TensorType, canon
from ..kernel import Const, Var, cast, rsum, select
from .elementwise import kwiden
from .int8_depthwise import depthwise_qconv
from .int8_gemm import vnni_conv
from .int_gemm import per_element
from .nn import conv, window_geometry
from .pad_guard import pad_guard
from .quant_requant import requant_expr, requant_np
from .registry import InferCtx, RefCtx, define, onnx_inputs

TO_NHWC = (0, 2, 3, 1)
TO_NCHW = (0, 3, 1, 2)


def _args(op, items, n: int = 9) -> list:
    """operands at their ONNX input positions (None for absent ones), padded to n"""
    out = onnx_inputs(op, list(items))
    return out + [None] * (n - len(out))


def _ints(attrs: dict, name: str, n: int, default: int) -> list:
    v = attrs.get(name)
    return [int(a) for a in v] if v else [default] * n


def qconv_geometry(attrs: dict, hw, w_shape):
    """(out dims, pads begin, pads end, strides, dilations) of the conv over spatial dims `hw`"""
    kernel = list(attrs.get("kernel_shape") or w_shape[2:])
    strides, dil = _ints(attrs, "strides", 2, 1), _ints(attrs, "dilations", 2, 1)
    outs, pb, pe = window_geometry(list(hw), kernel, strides, dil, _ints(attrs, "pads", 4, 0),
                                   attrs.get("auto_pad", "NOTSET"))
    return outs, pb, pe, strides, dil


def nchw_input(attrs: dict) -> bool:
    return bool(attrs.get("nchw_input", 0))


def _x_dims(attrs: dict, shape) -> tuple:
    """(channels, (H, W)) of X"""
    return (shape[1], tuple(shape[2:])) if nchw_input(attrs) else (shape[3], tuple(shape[1:3]))


def _infer(ctx: InferCtx):
    x, w, yz = ctx.in_types[0], ctx.in_types[3], ctx.in_types[7]
    if x.rank != 4 or w.rank != 4 or x.dtype not in (DType.u8, DType.i8):
        raise ctx.error(f"x must be 8-bit [N, H, W, C] and w [M, C/group, KH, KW], got {x} and {w}")
    group = int(ctx.op.attrs.get("group", 1))
    c, hw = _x_dims(ctx.op.attrs, x.shape)
    ctx.require_eq(c, canon(w.shape[1] * group), "input channels (x's vs w dim 1 * group)")
    outs = qconv_geometry(ctx.op.attrs, hw, w.shape)[0]
    return [TensorType(yz.dtype, (x.shape[0], *outs, w.shape[0]))]


def _reference(ctx: RefCtx, *args):
    x, x_s, xz, w, w_s, wz, y_s, yz, b = _args(ctx.op, args)
    xi = np.asarray(x, np.int64)
    xi = xi if nchw_input(ctx.op.attrs) else xi.transpose(TO_NCHW)
    xi = xi - (0 if xz is None else int(np.asarray(xz).reshape(-1)[0]))
    wz_ = np.zeros(1, np.int64) if wz is None else np.asarray(wz, np.int64).reshape(-1)
    wi = np.asarray(w, np.int64) - (wz_[0] if wz_.size == 1 else wz_.reshape(-1, 1, 1, 1))
    _, pb, pe, strides, dil = qconv_geometry(ctx.op.attrs, xi.shape[2:], w.shape)
    acc = conv(xi, wi, None, strides, pb, pe, dil, int(ctx.op.attrs.get("group", 1))).astype(np.int32)
    if b is not None:
        acc = acc + np.asarray(b, np.int32).reshape(1, -1, 1, 1)
    f = np.float32
    mult = f(np.asarray(x_s, f).reshape(-1)[0]) * np.asarray(w_s, f).reshape(-1) / f(np.asarray(y_s, f).reshape(-1)[0])
    mult = mult.reshape(1, -1, 1, 1) if mult.size > 1 else mult.reshape(())
    return [requant_np(acc, mult, yz, ctx.out_type().dtype).transpose(TO_NHWC)]


def _f32(e):
    return cast(kwiden(e), DType.f32)


def _lower(ctx) -> None:
    x, x_s, xz, w, w_s, wz, y_s, yz, b = _args(ctx.op, ctx.inputs)
    y = ctx.out(0)
    requant = (lambda j: _f32(per_element(x_s, 0)) * _f32(per_element(w_s, j)) / _f32(per_element(y_s, 0)),
               cast(per_element(yz, 0), DType.i64), y.dtype)
    nchw = nchw_input(ctx.op.attrs)
    geometry = qconv_geometry(ctx.op.attrs, _x_dims(ctx.op.attrs, x.shape)[1], w.shape)
    if not nchw and depthwise_qconv(ctx, y, x, xz, w, wz, b, geometry, requant, channels_last=True):
        return
    if vnni_conv(ctx, y.shape, x, xz, w, wz, b, geometry, requant, y, channels_last=True, x_last=not nchw) is not None:
        return
    _loops(ctx, y, x, xz, w, wz, b, geometry, requant)


def _loops(ctx, y, x, xz, w, wz, b, geometry, requant) -> None:
    """the exact i32 sums of (X - xz) * (W - wz) (+ B) as loops, then the requantization"""
    _, pb, pe, strides, dil = geometry
    group = int(ctx.attr("group", 1))
    mo, cg, kh, kw = w.shape
    i32 = DType.i32
    per_group = canon(mo // group) if group > 1 else None
    nchw = nchw_input(ctx.op.attrs)

    def body(n, oh, ow, m):
        c, r0, r1 = Var("c"), Var("r0"), Var("r1")
        pos = [oh * strides[0] + r0 * dil[0] - ctx.dim(pb[0]), ow * strides[1] + r1 * dil[1] - ctx.dim(pb[1])]
        ch = c if per_group is None else (m // ctx.dim(per_group)) * ctx.dim(cg) + c
        xv = cast(x[(n, ch, *pos) if nchw else (n, *pos, ch)], i32)
        if xz is not None:
            xv = xv - cast(per_element(xz, 0), i32)
        guard = pad_guard(ctx, pos, _x_dims(ctx.op.attrs, x.shape)[1], pb, pe)
        if guard is not None:
            xv = select(guard, xv, Const(0, i32))
        wv = cast(w[(m, c, r0, r1)], i32)
        if wz is not None:
            wv = wv - cast(per_element(wz, m), i32)
        acc = rsum([(c, cg), (r0, kh), (r1, kw)], xv * wv)
        if b is not None:
            acc = acc + cast(b[(m,)], i32)
        return requant_expr(acc, requant[0](m), requant[1], requant[2])

    ctx.compute(y, body)


define("cc.qlinearconv_nhwc", infer=_infer, reference=_reference, lower=_lower, kind="matmul", arity=(8, 9))
