"""cc.maxpool_nhwc / cc.avgpool_nhwc: a 2-D MaxPool (one result, no Indices) or AveragePool
whose input and output are channels-last, [N, H, W, C]; their attributes are the ONNX op's.

    cc.maxpool_nhwc(X[N, H, W, C]) = transpose(MaxPool(transpose(X, 0 3 1 2)), 0 2 3 1)

cc.avgpool_nhwc takes only windows whose divisor is the constant KH*KW: count_include_pad
with ceil_mode 0 (inception's 3x3 stride-1 pad-1 branch pools), or no padding at all
(`avg_constant_divisor`); the pass leaves other AveragePools outside the region.

The nhwc-region pass (passes/nhwc_region.py) moves a MaxPool between channels-last convs
into the region, so a squeezenet's Fire modules on either side of it stay one region instead
of converting the whole feature map out and back. Lowered as the taps unrolled (a balanced
max tree): each tap is a whole vector of channels, its padding guard one test per output
pixel (-inf outside X, as the NCHW pool fills)."""

from __future__ import annotations

import numpy as np

from ..ir import DType, TensorType, canon
from ..kernel import CallStmt, Const, Var, cast, maximum, rmax, rsum, select
from ..kernel.chan_pool_call import CALLEE as CHANPOOL
from .conv_blocked import tree_sum
from .nn import pool, window_geometry
from .pad_guard import pad_guard
from .registry import InferCtx, RefCtx, define

_NHWC = (0, 2, 3, 1)
_NCHW = (0, 3, 1, 2)


def pool_attrs(attrs: dict) -> dict:
    """MaxPool's window attributes with the ONNX defaults filled in (2-D)."""
    return dict(kernel=list(attrs["kernel_shape"]), strides=list(attrs.get("strides") or [1, 1]),
                dilations=list(attrs.get("dilations") or [1, 1]), pads=list(attrs.get("pads") or [0, 0, 0, 0]),
                auto_pad=attrs.get("auto_pad", "NOTSET"), ceil_mode=int(attrs.get("ceil_mode", 0)))


def _geometry(attrs: dict, x_shape):
    win = pool_attrs(attrs)
    outs, pb, pe = window_geometry(x_shape[1:3], win["kernel"], win["strides"], win["dilations"], win["pads"],
                                   win["auto_pad"], win["ceil_mode"])
    return win, outs, pb, pe


def _infer(ctx: InferCtx):
    x = ctx.in_types[0]
    if x.rank != 4 or not ctx.op.attrs.get("kernel_shape") or len(ctx.op.attrs["kernel_shape"]) != 2:
        raise ctx.error(f"x must be [N, H, W, C] with a 2-D kernel_shape, got {x}")
    _, outs, _, _ = _geometry(ctx.op.attrs, x.shape)
    return [TensorType(x.dtype, (x.shape[0], *outs, x.shape[3]))]


def avg_constant_divisor(attrs: dict) -> bool:
    """an AveragePool whose every window divides by KH*KW (what cc.avgpool_nhwc lowers)"""
    if int(attrs.get("ceil_mode", 0)) or attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        return False
    pads = attrs.get("pads") or [0, 0, 0, 0]
    return int(attrs.get("count_include_pad", 0)) == 1 or not any(pads)


def _reference(mode: str):
    def reference(ctx: RefCtx, x):
        win, outs, pb, pe = _geometry(ctx.op.attrs, x.shape)
        y, _ = pool(x.transpose(_NCHW), mode, win["kernel"], win["strides"], pb, outs, win["dilations"],
                    int(ctx.op.attrs.get("count_include_pad", 0)), pe)
        return [y.transpose(_NHWC).astype(x.dtype)]

    return reference


def _lower(mode: str):
    def lower(ctx) -> None:
        x = ctx.inputs[0]
        win, _, pb, pe = _geometry(ctx.op.attrs, x.shape)
        # an 8-bit max pool (passes/qnhwc_region.py) fills its padding with the type's minimum
        small_int = mode == "max" and x.dtype in (DType.u8, DType.i8)
        if x.dtype is not DType.f32 and not small_int:
            raise ctx.unsupported(f"channels-last {mode} pool of {x.dtype.value} is not lowered")
        if mode == "avg" and not avg_constant_divisor(ctx.op.attrs):
            raise ctx.unsupported("channels-last average pool with a per-window divisor is not lowered")
        fill = Const(int(np.iinfo(x.dtype.np).min), x.dtype) if small_int else Const(
            float("-inf") if mode == "max" else 0.0, x.dtype)
        kernel, strides, dil = win["kernel"], win["strides"], win["dilations"]

        def body(n, o0, o1, c):
            terms = []
            for t0 in range(kernel[0]):
                for t1 in range(kernel[1]):
                    pos = [o0 * strides[0] + t0 * dil[0] - ctx.dim(pb[0]),
                           o1 * strides[1] + t1 * dil[1] - ctx.dim(pb[1])]
                    guard = pad_guard(ctx, pos, x.shape[1:3], pb, pe, win["ceil_mode"])
                    v = x[(n, *pos, c)]
                    terms.append(v if guard is None else select(guard, v, fill))
            if mode == "avg":
                return tree_sum(terms) / Const(float(kernel[0] * kernel[1]), x.dtype)
            while len(terms) > 1:  # a balanced tree: independent halves overlap
                terms = [maximum(terms[i], terms[i + 1]) if i + 1 < len(terms) else terms[i]
                         for i in range(0, len(terms), 2)]
            return terms[0]

        ctx.compute(ctx.out(0), body)

    return lower


define("cc.maxpool_nhwc", infer=_infer, reference=_reference("max"), arity=1, lower=_lower("max"), kind="reduction")
define("cc.avgpool_nhwc", infer=_infer, reference=_reference("avg"), arity=1, lower=_lower("avg"), kind="reduction")


# ---- global pools over H, W of a channels-last value -------------------------------------------
#
#     cc.global_avgpool_nhwc(X[N, H, W, C]) -> [N, 1, 1, C]   (GlobalAveragePool, ReduceMean over H, W)
#     cc.global_maxpool_nhwc(X[N, H, W, C]) -> [N, 1, 1, C]   (GlobalMaxPool)
#
# A net's head pools the last feature map of a region. Outside the region it read the map back
# through the exit Transpose, which fusion folds into the pool: one scalar strided load per
# element (16-19% of benchmarks/convnets.py's plain net at 224x224). Inside, the output's
# innermost axis is the channels, so each step of the reduction loads a vector of channels, and
# the exit of [N, 1, 1, C] to [N, C, 1, 1] moves no element of a feature map.

def _global_infer(ctx: InferCtx):
    x = ctx.in_types[0]
    if x.rank != 4:
        raise ctx.error(f"x must be [N, H, W, C], got {x}")
    return [TensorType(x.dtype, (x.shape[0], 1, 1, x.shape[3]))]


def _global_reference(mode: str):
    def reference(ctx: RefCtx, x):
        wide = x.astype(np.float64)
        y = wide.mean(axis=(1, 2), keepdims=True) if mode == "avg" else wide.max(axis=(1, 2), keepdims=True)
        return [y.astype(x.dtype)]

    return reference


def _global_lower(mode: str):
    def lower(ctx) -> None:
        x = ctx.inputs[0]
        if x.dtype is not DType.f32:
            raise ctx.unsupported(f"channels-last global {mode} pool of {x.dtype.value} is not lowered")
        sp = x.shape[1:3]
        if ctx.f32_conv_call:  # the backend that runs the conv call runs the pool call too
            sizes = (x.shape[0], canon(sp[0] * sp[1]), x.shape[3], int(mode == "max"))
            y = ctx.out(0)
            ctx.program.body.append(CallStmt(CHANPOOL, tuple(ctx.dim(canon(d)) for d in sizes), (x.name, y.name),
                                             (y.name,)))
            return
        rv = [Var("r0"), Var("r1")]
        red = list(zip(rv, sp, strict=True))

        def body(n, _h, _w, c):
            v = x[(n, *rv, c)]
            if mode == "max":
                return rmax(red, v)
            return rsum(red, v) / cast(ctx.dim(canon(sp[0] * sp[1])), x.dtype)

        ctx.compute(ctx.out(0), body)

    return lower


define("cc.global_avgpool_nhwc", infer=_global_infer, reference=_global_reference("avg"), arity=1,
       lower=_global_lower("avg"), kind="reduction")
define("cc.global_maxpool_nhwc", infer=_global_infer, reference=_global_reference("max"), arity=1,
       lower=_global_lower("max"), kind="reduction")
