"""RoiAlign (opset 16): bilinear pooling of regions of interest (Mask R-CNN's ROIAlign).

    X [N, C, H, W], rois [R, 4] (x1, y1, x2, y2 in input coordinates times 1/spatial_scale),
    batch_indices [R] -> Y [R, C, output_height, output_width]

Each output bin averages (mode avg) or takes the max of (mode max) a g_h x g_w grid of bilinear
samples placed at the centres of a regular grid over the bin; the grid is sampling_ratio per
side, or, when sampling_ratio is 0, ceil(roi size / output size) (per roi: data-dependent).
half_pixel shifts the roi by -0.5; output_half_pixel (opset 10's behaviour) does not, and
stretches malformed rois to at least 1 x 1. A sample more than one pixel outside X counts as
zero; one inside the border clamps to it. Mode max follows onnxruntime (and onnx's reference):
a sample's value is the max of its four weighted corner terms, not their sum.

The lowering is one compute whose reduction runs over the static sample grid (sampling_ratio
> 0); the adaptive grid of sampling_ratio = 0 has a trip count only the roi values decide, which
the kernel IR's static reductions cannot express, so it is refused by name (the interpreter
runs it).
"""

from __future__ import annotations

import math

import numpy as np

from ..ir import DType, TensorType
from ..kernel import Const, Var, cast, floor, maximum, minimum, rmax, rsum, select, wrap_index
from .registry import InferCtx, RefCtx, define

_FLOATS = (DType.f16, DType.bf16, DType.f32, DType.f64)
_MODES = ("avg", "max")
_TRANSFORMS = ("half_pixel", "output_half_pixel")


class _Attrs:
    def __init__(self, attr, error):
        self.mode = str(attr("mode", "avg")).lower()
        if self.mode not in _MODES:
            raise error(f"mode must be avg or max, got {self.mode!r}")
        self.transform = str(attr("coordinate_transformation_mode", "half_pixel")).lower()
        if self.transform not in _TRANSFORMS:
            raise error(f"coordinate_transformation_mode must be one of {_TRANSFORMS}, got {self.transform!r}")
        self.oh, self.ow = int(attr("output_height", 1)), int(attr("output_width", 1))
        if self.oh < 1 or self.ow < 1:
            raise error(f"output_height and output_width must be >= 1, got {self.oh} x {self.ow}")
        self.ratio = int(attr("sampling_ratio", 0))
        if self.ratio < 0:
            raise error(f"sampling_ratio must be >= 0, got {self.ratio}")
        self.scale = float(attr("spatial_scale", 1.0))


def _infer(ctx: InferCtx):
    x, rois, idx = ctx.in_types
    a = _Attrs(ctx.attr, ctx.error)
    if x.dtype not in _FLOATS or x.rank != 4:
        raise ctx.error(f"X must be a 4-D float tensor [N, C, H, W], got {x}")
    if rois.dtype is not x.dtype or rois.rank != 2:
        raise ctx.error(f"rois must be a 2-D {x.dtype.value} tensor [num_rois, 4], got {rois}")
    if idx.dtype is not DType.i64 or idx.rank != 1:
        raise ctx.error(f"batch_indices must be a 1-D int64 tensor, got {idx}")
    ctx.require_eq(rois.shape[1], 4, "rois dim 1")
    r = ctx.require_eq(rois.shape[0], idx.shape[0], "rois count vs batch_indices length")
    return [TensorType(x.dtype, (r, x.shape[1], a.oh, a.ow))]


def _sample_weights(y: float, x: float, h: int, w: int):
    """The bilinear corners and weights of one sample: [(row, col, weight)] (all zero outside)."""
    if y < -1.0 or y > h or x < -1.0 or x > w:
        return [(0, 0, 0.0)] * 4
    y, x = max(y, 0.0), max(x, 0.0)
    y0, x0 = int(y), int(x)
    if y0 >= h - 1:
        y0 = y1 = h - 1
        y = float(y0)
    else:
        y1 = y0 + 1
    if x0 >= w - 1:
        x0 = x1 = w - 1
        x = float(x0)
    else:
        x1 = x0 + 1
    ly, lx = y - y0, x - x0
    hy, hx = 1.0 - ly, 1.0 - lx
    return [(y0, x0, hy * hx), (y0, x1, hy * lx), (y1, x0, ly * hx), (y1, x1, ly * lx)]


def roi_align(x: np.ndarray, rois: np.ndarray, idx: np.ndarray, a: _Attrs) -> np.ndarray:
    """numpy RoiAlign, in float64."""
    n_img, ch, h, w = x.shape
    out = np.zeros((len(idx), ch, a.oh, a.ow), np.float64)
    off = 0.5 if a.transform == "half_pixel" else 0.0
    for r in range(len(idx)):
        b = int(idx[r])
        if not 0 <= b < n_img:
            raise ValueError(f"RoiAlign: batch index {b} is outside [0, {n_img})")
        x1, y1, x2, y2 = (float(v) * a.scale - off for v in rois[r])
        rw, rh = x2 - x1, y2 - y1
        if a.transform != "half_pixel":
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        bh, bw = rh / a.oh, rw / a.ow
        gh = a.ratio or math.ceil(rh / a.oh)
        gw = a.ratio or math.ceil(rw / a.ow)
        img = x[b].astype(np.float64)
        for ph in range(a.oh):
            for pw in range(a.ow):
                vals = []
                for iy in range(gh):
                    sy = y1 + ph * bh + (iy + 0.5) * bh / gh
                    for ix in range(gw):
                        sx = x1 + pw * bw + (ix + 0.5) * bw / gw
                        terms = [wt * img[:, yy, xx] for yy, xx, wt in _sample_weights(sy, sx, h, w)]
                        vals.append(sum(terms) if a.mode == "avg" else np.max(terms, axis=0))
                if not vals:
                    continue
                out[r, :, ph, pw] = (np.sum(vals, axis=0) / max(gh * gw, 1) if a.mode == "avg"
                                     else np.max(vals, axis=0))
    return out


def _ref(ctx: RefCtx, x, rois, idx):
    return [roi_align(x, rois, idx, _Attrs(ctx.attr, ValueError)).astype(ctx.out_type(0).dtype.np)]


def _lower(ctx) -> None:
    x, rois, idx = ctx.inputs
    a = _Attrs(ctx.attr, ctx.unsupported)
    if a.ratio == 0:
        raise ctx.unsupported("sampling_ratio = 0 (the adaptive sample grid's size depends on the roi values)")
    y = ctx.out(0)
    ft = DType.f64 if x.dtype is DType.f64 else DType.f32
    i64 = DType.i64
    h, w = ctx.dim(x.shape[2]), ctx.dim(x.shape[3])
    hf, wf = cast(h, ft), cast(w, ft)
    g = a.ratio
    off = 0.5 if a.transform == "half_pixel" else 0.0
    iy, ix = Var("sy"), Var("sx")

    def fc(v: float):
        return Const(v, ft)

    def body(r, c, ph, pw):
        b = wrap_index(idx[(r,)], x.shape[0], negative=False)

        def coord(k):
            return cast(rois[r, Const(k, i64)], ft) * a.scale - off

        x1, y1 = coord(0), coord(1)
        rw, rh = coord(2) - x1, coord(3) - y1
        if a.transform != "half_pixel":  # malformed rois become 1 x 1
            rw, rh = maximum(rw, fc(1.0)), maximum(rh, fc(1.0))
        bh, bw = rh / float(a.oh), rw / float(a.ow)
        sy = y1 + cast(ph, ft) * bh + (cast(iy, ft) + 0.5) * bh / float(g)
        sx = x1 + cast(pw, ft) * bw + (cast(ix, ft) + 0.5) * bw / float(g)
        outside = (sy < -1.0) | (sy > hf) | (sx < -1.0) | (sx > wf)
        sy, sx = maximum(sy, fc(0.0)), maximum(sx, fc(0.0))

        def axis(s, n, nf):
            """(low, high, fraction) along one axis, clamped to the last pixel as the reference does."""
            lo = cast(floor(s), i64)
            edge = lo >= n - 1
            lo = select(edge, n - 1, lo)
            hi = select(edge, n - 1, lo + 1)
            frac = select(edge, fc(0.0), s - cast(lo, ft))
            lo, hi = minimum(maximum(lo, Const(0, i64)), n - 1), minimum(maximum(hi, Const(0, i64)), n - 1)
            return lo, hi, frac

        y0, y1_, ly = axis(sy, h, hf)
        x0, x1_, lx = axis(sx, w, wf)
        hy, hx = 1.0 - ly, 1.0 - lx

        def term(yy, xx, wt):
            return select(outside, fc(0.0), wt) * cast(x[b, c, yy, xx], ft)

        terms = [term(y0, x0, hy * hx), term(y0, x1_, hy * lx), term(y1_, x0, ly * hx), term(y1_, x1_, ly * lx)]
        if a.mode == "avg":
            v = rsum([(iy, g), (ix, g)], terms[0] + terms[1] + terms[2] + terms[3]) / float(g * g)
        else:
            v = rmax([(iy, g), (ix, g)], maximum(maximum(terms[0], terms[1]), maximum(terms[2], terms[3])))
        return cast(v, y.dtype)

    ctx.compute(y, body)


define("onnx.RoiAlign", infer=_infer, reference=_ref, lower=_lower, kind="opaque", arity=3, math=roi_align)
