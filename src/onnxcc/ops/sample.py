"""Sampling ops: GridSample (nearest / linear / cubic over any number of spatial dims, padding
zeros / border / reflection, align_corners); 2-D DeformConv, AffineGrid and Col2Im follow it.

GridSample reads, for every output position, a normalized coordinate per spatial dim from
the grid (the grid's last axis lists them innermost dim first: x, then y, then z) and
interpolates X there. The steps, shared by the numpy reference and the lowering:
  1. denormalize: align_corners ? (g + 1) / 2 * (size - 1) : ((g + 1) * size - 1) / 2;
  2. nearest rounds half to even;
  3. a coordinate outside the borders ([0, size - 1] with align_corners, else
     [-0.5, size - 0.5]) is clamped to [0, size - 1] (border) or reflected into them
     (reflection); cubic with border padding skips the clamp and only clamps its taps, as
     onnxruntime (and PyTorch) do (the ONNX reference clamps first; no node test covers it);
  4. the taps (1, 2 or 4 per dim) around the coordinate are read with the padding rule:
     zeros gives 0 outside X, border clamps the index, reflection reflects it.
The lowering is one compute: a sum over the tap box (vars with constant extents) of the
product of the per-dim tap weights and the padded read; the coordinates depend only on the
output position.
"""

from __future__ import annotations

import numpy as np
import sympy

from .. import kernel as K
from ..ir import DType, TensorType, canon
from ..kernel import Expr, Var, dim_to_expr
from .elementwise import kwiden
from .registry import InferCtx, RefCtx, define, onnx_inputs
from .shape import fresh_dim
from .shape_util import known_dims

#: opset 16 names (bilinear, bicubic) and opset 20 names
_MODES = {"nearest": "nearest", "linear": "linear", "bilinear": "linear", "cubic": "cubic",
          "bicubic": "cubic"}
_PADDING = ("zeros", "border", "reflection")
_CUBIC_A = -0.75
_TAPS = {"nearest": 1, "linear": 2, "cubic": 4}


def _attrs(ctx, fail) -> tuple[str, str, int]:
    mode = ctx.attr("mode", "linear")
    if mode not in _MODES:
        raise fail(f"mode must be one of {sorted(_MODES)}, got {mode!r}")
    pad = ctx.attr("padding_mode", "zeros")
    if pad not in _PADDING:
        raise fail(f"padding_mode must be one of {_PADDING}, got {pad!r}")
    return _MODES[mode], pad, int(ctx.attr("align_corners", 0))


def _gs_infer(ctx: InferCtx) -> list[TensorType]:
    x, g = ctx.in_types
    _attrs(ctx, ctx.error)
    if x.rank < 3:
        raise ctx.error(f"X must be (N, C, spatial...) with rank >= 3, got {x}")
    if not x.dtype.is_float or not g.dtype.is_float:
        raise ctx.error(f"X and grid must be float tensors, got {x.dtype.value} and {g.dtype.value}")
    r = x.rank - 2
    if g.rank != r + 2:
        raise ctx.error(f"grid must be (N, out spatial..., {r}) with rank {r + 2}, got {g}")
    if g.shape[-1] != r:
        raise ctx.error(f"grid's last dim must be {r} (one coordinate per spatial dim), got {g.shape[-1]}")
    n = ctx.require_eq(x.shape[0], g.shape[0], "grid batch == X batch")
    return [TensorType(x.dtype, (n, x.shape[1], *g.shape[1:-1]))]


# ---- the per-dim arithmetic, written once over numpy arrays or kernel expressions ------------------


class _NumpyMath:
    floor = staticmethod(np.floor)
    round = staticmethod(np.rint)

    @staticmethod
    def select(c, a, b):
        return np.where(c, a, b)

    @staticmethod
    def clamp(x, lo, hi):
        return np.minimum(np.maximum(x, lo), hi)

    @staticmethod
    def to_int(x):
        return x.astype(np.int64)

    @staticmethod
    def odd(n):
        return n.astype(np.int64) % 2 == 1


class _KernelMath:
    floor = staticmethod(K.floor)

    @staticmethod
    def round(x):
        return K.unary("round", x)

    @staticmethod
    def select(c, a, b):
        return K.select(c, a, b)

    @staticmethod
    def clamp(x, lo, hi):
        return K.clamp(x, lo, hi)

    @staticmethod
    def to_int(x):
        return K.cast(x, DType.i64)

    @staticmethod
    def odd(n):
        return (K.cast(n, DType.i64) % 2).eq(1)


def _reflect(m, x, lo: float, hi: float):
    """Reflect x by the near border until it lies in [lo, hi]."""
    span = hi - lo
    if isinstance(span, Expr):  # a symbolic size: the single-position case is decided per call
        return m.select(span > 0, _reflect_span(m, x, lo, hi, K.maximum(span, 1.0)), m.clamp(x, lo, hi))
    if span <= 0:  # a single position: everything maps onto it
        return m.clamp(x, lo, hi)
    return _reflect_span(m, x, lo, hi, span)


def _reflect_span(m, x, lo, hi, span):
    below = x < lo
    dx = m.select(below, lo - x, x - hi)
    k = m.floor(dx / span)
    rest = dx - k * span
    odd = m.odd(k)
    lowside = m.select(odd, hi - rest, lo + rest)   # reflected from below
    highside = m.select(odd, lo + rest, hi - rest)  # reflected from above
    return m.select(below, lowside, m.select(x > hi, highside, x))


def _cubic_weights(t) -> list:
    a = _CUBIC_A
    return [((a * (t + 1) - 5 * a) * (t + 1) + 8 * a) * (t + 1) - 4 * a,
            ((a + 2) * t - (a + 3)) * t * t + 1,
            ((a + 2) * (1 - t) - (a + 3)) * (1 - t) * (1 - t) + 1,
            ((a * (2 - t) - 5 * a) * (2 - t) + 8 * a) * (2 - t) - 4 * a]


def _coordinate(m, g, size, mode: str, pad: str, align: int):
    """Steps 1-3 for one dim: the (float) sampling coordinate."""
    x = (g + 1) / 2 * (size - 1) if align else ((g + 1) * size - 1) / 2
    if mode == "nearest":
        x = m.round(x)
    lo, hi = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
    if pad == "border" and mode != "cubic":
        x = m.select((x < lo) | (x > hi), m.clamp(x, 0.0, size - 1.0), x)
    elif pad == "reflection":
        x = _reflect(m, x, lo, hi)
    return x


def _index(m, i, size, pad: str, align: int):
    """Step 4 for one dim: (index to read, whether it is inside X) for integer tap index i."""
    if pad == "zeros":
        return i, (i >= 0) & (i < size)
    if pad == "border":
        return m.clamp(i, 0, size - 1), None
    fsize = K.cast(size, DType.f64) if isinstance(size, Expr) else size
    lo, hi = (0.0, fsize - 1.0) if align else (-0.5, fsize - 0.5)
    fi = K.cast(i, DType.f64) if isinstance(i, Expr) else i.astype(np.float64)
    return m.to_int(_reflect(m, fi, lo, hi)), None


# ---- numpy reference -------------------------------------------------------------------------------


def grid_sample(x, grid, mode: str, pad: str, align: int):
    mode = _MODES[mode]
    m = _NumpyMath
    n, c, sp = x.shape[0], x.shape[1], x.shape[2:]
    r = len(sp)
    out_sp = grid.shape[1:-1]
    ct = np.result_type(x.dtype, grid.dtype, np.float32)
    coords = [_coordinate(m, grid[..., r - 1 - i].astype(ct), sp[i], mode, pad, align) for i in range(r)]
    base = [m.floor(v) if mode != "nearest" else v for v in coords]
    y = np.zeros((n, c, *out_sp), ct)
    taps = _TAPS[mode]
    for tap in np.ndindex(*([taps] * r)):
        w = np.ones((n, *out_sp), ct)
        idx, ok = [], np.ones((n, *out_sp), bool)
        for i in range(r):
            t = coords[i] - base[i]
            if mode == "linear":
                w = w * (1 - t if tap[i] == 0 else t)
            elif mode == "cubic":
                w = w * _cubic_weights(t)[tap[i]]
            off = -1 if mode == "cubic" else 0
            j, inside = _index(m, base[i].astype(np.int64) + tap[i] + off, sp[i], pad, align)
            if inside is not None:
                ok &= inside
            idx.append(np.clip(j, 0, sp[i] - 1))
        nn = np.arange(n).reshape((n,) + (1,) * len(out_sp))
        vals = x[(nn[:, None], np.arange(c).reshape((1, c) + (1,) * len(out_sp)),
                  *[j[:, None] for j in idx])]
        y = y + np.where(ok[:, None], vals, 0) * w[:, None]
    return y.astype(x.dtype)


def _gs_ref(ctx: RefCtx, x, grid):
    mode, pad, align = _attrs(ctx, ValueError)
    return [grid_sample(x, grid, mode, pad, align)]


# ---- lowering --------------------------------------------------------------------------------------


def _gs_lower(ctx) -> None:
    x, grid = ctx.inputs
    y = ctx.out(0)
    mode, pad, align = _attrs(ctx, ctx.unsupported)
    sp = x.shape[2:]
    r = len(sp)
    ct = DType.f64 if DType.f64 in (x.dtype, grid.dtype) else DType.f32
    # a symbolic spatial dim enters the arithmetic as a run-time value: an i64 size for the
    # tap indices, a float one for the coordinates (static dims stay constants)
    isz = [d if isinstance(d, int) else dim_to_expr(d) for d in sp]
    fsz = [float(d) if isinstance(d, int) else K.cast(d, ct) for d in isz]
    m = _KernelMath
    taps = _TAPS[mode]
    tv = [Var(f"t{i}") for i in range(r)]

    def body(n, c, *o):
        val: Expr = K.Const(1.0, ct)
        conds = []
        idx = []
        for i in range(r):
            g = K.cast(grid[(n, *o, r - 1 - i)], ct)
            v = _coordinate(m, g, fsz[i], mode, pad, align)
            b = v if mode == "nearest" else m.floor(v)
            t = v - b
            if mode == "linear":
                val = val * K.select(tv[i].eq(0), 1.0 - t, t)
            elif mode == "cubic":
                w = _cubic_weights(t)
                val = val * K.select(tv[i].eq(0), w[0], K.select(tv[i].eq(1), w[1],
                                                                 K.select(tv[i].eq(2), w[2], w[3])))
            off = -1 if mode == "cubic" else 0
            j, inside = _index(m, K.cast(b, DType.i64) + tv[i] + off if taps > 1 else K.cast(b, DType.i64),
                               isz[i], pad, align)
            if inside is not None:
                conds.append(inside)
            idx.append(j)
        read = kwiden(x[(n, c, *idx)])
        read = K.cast(read, ct)
        if conds:
            ok = conds[0]
            for cnd in conds[1:]:
                ok = ok & cnd
            read = K.select(ok, read, K.Const(0.0, ct))
        term = read * val if mode != "nearest" else read
        if taps == 1:
            return K.cast(term, y.dtype)
        return K.cast(K.rsum([(v, taps) for v in tv], term), y.dtype)

    ctx.program.compute(y, body, names=["n", "c"] + [f"o{i}" for i in range(r)])


define("onnx.GridSample", infer=_gs_infer, reference=_gs_ref, lower=_gs_lower, kind="opaque", arity=2,
       math=grid_sample)


# ---- DeformConv ------------------------------------------------------------------------------------
#
# 2-D deformable convolution: every kernel tap (i, j) of output (oh, ow) reads X bilinearly
# (zero outside X) at the regular position plus a learned offset, offset[n, og, tap, (dh, dw),
# oh, ow] with og the channel's offset group, scaled by mask[n, og, tap, oh, ow] when given.


def _deform_attrs(ctx, x_shape, w_shape, fail) -> dict:
    kernel = list(ctx.attr("kernel_shape") or w_shape[2:])
    nd = len(x_shape) - 2
    if nd != 2:
        raise fail(f"only 2-D DeformConv is supported, got {nd} spatial dims")
    strides = list(ctx.attr("strides") or [1] * nd)
    dil = list(ctx.attr("dilations") or [1] * nd)
    pads = list(ctx.attr("pads") or [0] * (2 * nd))
    outs = [canon((x_shape[2 + i] + pads[i] + pads[nd + i] - dil[i] * (kernel[i] - 1) - 1) // strides[i] + 1)
            if isinstance(x_shape[2 + i], int) else None for i in range(nd)]
    return dict(kernel=kernel, strides=strides, dil=dil, pads=pads, outs=outs,
                group=int(ctx.attr("group", 1)), og=int(ctx.attr("offset_group", 1)))


def _deform_infer(ctx: InferCtx) -> list[TensorType]:
    x, w = ctx.in_types[0], ctx.in_types[1]
    if x.rank != 4 or w.rank != 4:
        raise ctx.error(f"X and W must be 4-D (2-D DeformConv), got {x} and {w}")
    a = _deform_attrs(ctx, x.shape, w.shape, ctx.error)
    if any(d is None for d in a["outs"]):
        raise ctx.error("DeformConv needs static spatial dims of X")
    if not all(isinstance(d, int) for d in (*x.shape[1:], *w.shape)):
        raise ctx.error(f"DeformConv needs static channel and kernel dims, got {x} and {w}")
    kh, kw = a["kernel"]
    if x.shape[1] % a["group"] or w.shape[0] % a["group"] or x.shape[1] % a["og"]:
        raise ctx.error("channels must divide by group and offset_group")
    off = ctx.in_types[2]
    want = (x.shape[0], a["og"] * 2 * kh * kw, *a["outs"])
    for i, (d, e) in enumerate(zip(off.shape, want)):
        ctx.require_eq(d, e, f"offset dim {i}")
    return [TensorType(x.dtype, (x.shape[0], w.shape[0], *a["outs"]))]


def _bilinear_np(img, h, w):
    """img (N, C, H, W) sampled at per-(n, c) positions h, w (N, C, ...): zero outside."""
    hh, ww = img.shape[2], img.shape[3]
    h0, w0 = np.floor(h).astype(np.int64), np.floor(w).astype(np.int64)
    out = np.zeros(h.shape, img.dtype)
    n = np.arange(img.shape[0]).reshape((-1,) + (1,) * (h.ndim - 1))
    c = np.arange(img.shape[1]).reshape((1, -1) + (1,) * (h.ndim - 2))
    for dh in (0, 1):
        for dw in (0, 1):
            hi, wi = h0 + dh, w0 + dw
            wt = (1 - np.abs(h - hi)) * (1 - np.abs(w - wi))
            ok = (hi >= 0) & (hi < hh) & (wi >= 0) & (wi < ww)
            out = out + np.where(ok, img[n, c, np.clip(hi, 0, hh - 1), np.clip(wi, 0, ww - 1)], 0) * wt
    return out


def deform_conv(x, w, offset, b, mask, a: dict):
    n, c = x.shape[:2]
    oc, cg = w.shape[:2]
    kh, kw = a["kernel"]
    oh, ow = a["outs"]
    og = a["og"]
    per_og = c // og
    ys = np.arange(oh)[:, None] * a["strides"][0] - a["pads"][0]
    xs = np.arange(ow)[None, :] * a["strides"][1] - a["pads"][1]
    off = offset.reshape(n, og, kh * kw, 2, oh, ow)
    msk = np.ones((n, og, kh * kw, oh, ow), x.dtype) if mask is None else mask.reshape(n, og, kh * kw, oh, ow)
    cols = np.zeros((n, c, kh * kw, oh, ow), x.dtype)  # the sampled, masked input per tap
    groups = np.arange(c) // per_og
    for i in range(kh):
        for j in range(kw):
            t = i * kw + j
            h = ys + i * a["dil"][0] + off[:, groups, t, 0]
            ww = xs + j * a["dil"][1] + off[:, groups, t, 1]
            cols[:, :, t] = _bilinear_np(x, h, ww) * msk[:, groups, t]
    y = np.zeros((n, oc, oh, ow), x.dtype)
    ocg = oc // a["group"]
    for g in range(a["group"]):
        wg = w[g * ocg:(g + 1) * ocg].reshape(ocg, cg * kh * kw)
        colg = cols[:, g * cg:(g + 1) * cg].reshape(n, cg * kh * kw, oh * ow)
        y[:, g * ocg:(g + 1) * ocg] = np.einsum("ok,nkp->nop", wg, colg).reshape(n, ocg, oh, ow)
    if b is not None:
        y = y + b.reshape(1, -1, 1, 1)
    return y.astype(x.dtype)


def _deform_ref(ctx: RefCtx, x, w, offset, *rest):
    items = [*onnx_inputs(ctx.op, [x, w, offset, *rest]), None, None]
    a = _deform_attrs(ctx, x.shape, w.shape, ValueError)
    return [deform_conv(x, w, offset, items[3], items[4], a)]


def _deform_lower(ctx) -> None:
    items = [*onnx_inputs(ctx.op, list(ctx.inputs)), None, None]
    x, w, off, b, mask = items[:5]
    y = ctx.out(0)
    a = _deform_attrs(ctx, x.shape, w.shape, ctx.unsupported)
    c, oc, cg = x.shape[1], w.shape[0], w.shape[1]
    kh, kw = a["kernel"]
    hh, ww = x.shape[2], x.shape[3]
    per_og, ocg = c // a["og"], oc // a["group"]
    dt = kwiden(K.Const(0.0, x.dtype)).dtype
    ci, i, j, ch, cw = Var("ci"), Var("ki"), Var("kj"), Var("ch"), Var("cw")

    def body(n, o, p, q):
        ch_ = (o // ocg) * cg + ci  # the input channel
        g = ch_ // per_og
        tap = i * kw + j
        base = g * (2 * kh * kw) + 2 * tap
        (sh, sw), (dh, dw) = a["strides"], a["dil"]
        h = K.cast(p * sh - a["pads"][0] + i * dh, dt) + kwiden(off[(n, base, p, q)])
        v = K.cast(q * sw - a["pads"][1] + j * dw, dt) + kwiden(off[(n, base + 1, p, q)])
        hi = K.cast(K.floor(h), DType.i64) + ch
        wi = K.cast(K.floor(v), DType.i64) + cw
        wt = (1.0 - abs(h - K.cast(hi, dt))) * (1.0 - abs(v - K.cast(wi, dt)))
        ok = (hi >= 0) & (hi < hh) & (wi >= 0) & (wi < ww)
        val = K.select(ok, kwiden(x[(n, ch_, hi, wi)]), K.Const(0.0, dt)) * wt
        if mask is not None:
            val = val * kwiden(mask[(n, g * kh * kw + tap, p, q)])
        acc = K.rsum([(ci, cg), (i, kh), (j, kw), (ch, 2), (cw, 2)], val * kwiden(w[(o, ci, i, j)]))
        if b is not None:
            acc = acc + kwiden(b[(o,)])
        return K.cast(acc, y.dtype)

    ctx.program.compute(y, body, names=["n", "o", "p", "q"])


define("onnx.DeformConv", infer=_deform_infer, reference=_deform_ref, lower=_deform_lower, kind="opaque",
       arity=(3, 5), math=deform_conv)


# ---- AffineGrid ------------------------------------------------------------------------------------
#
# grid[n, (d,) h, w, :] = theta[n] @ (x_w, y_h, (z_d,) 1): the normalized coordinates of an
# (N, C, (D,) H, W) output, transformed. Base coordinate i of a length-L dim: -1 + 2i / (L - 1)
# with align_corners (-1 when L is 1), else (2i + 1) / L - 1. The size comes from an input:
# known at compile time, or data-dependent dims (not compiled).


def _base(i, length, align: int):
    if align:
        return -1.0 + 2.0 * i / (length - 1) if length != 1 else -1.0 + 0.0 * i
    return (2.0 * i + 1.0) / length - 1.0


def _affine_infer(ctx: InferCtx) -> list[TensorType]:
    theta, size = ctx.in_types
    if theta.rank != 3 or not theta.dtype.is_float:
        raise ctx.error(f"theta must be a float (N, 2, 3) or (N, 3, 4) tensor, got {theta}")
    if size.rank != 1 or size.shape[0] not in (4, 5):
        raise ctx.error(f"size must be a 1-D tensor of 4 or 5 values, got {size}")
    r = size.shape[0] - 2
    ctx.require_eq(theta.shape[1], r, "theta dim 1 == spatial rank")
    ctx.require_eq(theta.shape[2], r + 1, "theta dim 2 == spatial rank + 1")
    known = ctx.known_ints(1)
    if known is not None:
        ctx.require_eq(theta.shape[0], known[0], "theta batch == size[0]")
        sp = tuple(known[2:])
    else:
        sp = tuple(fresh_dim(ctx, "grid_dim", "size input", dim=1 + i) for i in range(r))
    return [TensorType(theta.dtype, (theta.shape[0], *sp, r))]


def affine_grid(theta, size, align: int):
    sp = [int(d) for d in size[2:]]
    r = len(sp)
    axes = [_base(np.arange(n, dtype=np.float64), n, align) for n in sp]
    mesh = np.meshgrid(*axes, indexing="ij")  # per spatial dim, innermost last
    homo = np.stack([*mesh[::-1], np.ones(sp)], -1)  # (..., x, y, (z,) 1)
    out = np.einsum("nij,...j->n...i", theta.astype(np.float64), homo)
    return out.reshape(theta.shape[0], *sp, r).astype(theta.dtype)


def _affine_ref(ctx: RefCtx, theta, size):
    return [affine_grid(theta, np.asarray(size).reshape(-1), int(ctx.attr("align_corners", 0)))]


def _affine_lower(ctx) -> None:
    theta, y = ctx.inputs[0], ctx.out(0)
    sp = y.shape[1:-1]
    r = len(sp)
    if not all(isinstance(d, int) for d in sp):
        raise ctx.unsupported(f"output spatial dims {list(sp)} must be known at compile time")
    align = int(ctx.attr("align_corners", 0))
    if align and 1 in sp:
        # the ONNX reference puts a single position at -1; onnxruntime does not agree
        raise ctx.unsupported("align_corners=1 with a spatial dim of 1 (onnxruntime and the ONNX reference "
                              "disagree on its coordinate)")
    f64 = DType.f64

    def body(n, *rest):
        pos, comp = rest[:-1], rest[-1]
        # homogeneous coordinates: x (innermost dim), y, (z,), then 1
        coords = [_base(K.cast(pos[r - 1 - j], f64), sp[r - 1 - j], align) for j in range(r)]
        acc = K.cast(theta[(n, comp, r)], f64)
        for j, c in enumerate(coords):
            acc = acc + K.cast(theta[(n, comp, j)], f64) * c
        return K.cast(acc, y.dtype)

    ctx.compute(y, body)


define("onnx.AffineGrid", infer=_affine_infer, reference=_affine_ref, lower=_affine_lower, kind="opaque",
       arity=2, math=affine_grid)


# ---- Col2Im ----------------------------------------------------------------------------------------
#
# The inverse of im2col: x (N, C * prod(block), L) holds, for each of the L sliding blocks
# (row-major over the block grid), its C * prod(block) values; each lands at its position in
# an (N, C, *image) output, overlapping contributions summing. image_shape and block_shape
# are inputs: block_shape must be known at compile time to lower, image_shape may be a
# shape chain's symbolic value (torch's F.fold at the input's own H, W: Shape -> Slice)


def _col2im_geometry(image, block, strides, dil, pads) -> list:
    """The number of block positions along each spatial dim (Dims: an image dim may be a
    symbol, the count then a floor expression)."""
    nd = len(image)
    return [canon(sympy.floor(sympy.sympify(image[i] + pads[i] + pads[nd + i] - dil[i] * (block[i] - 1) - 1)
                              / strides[i]) + 1) for i in range(nd)]


def _col2im_attrs(ctx, nd: int) -> tuple[list, list, list]:
    return (list(ctx.attr("strides") or [1] * nd), list(ctx.attr("dilations") or [1] * nd),
            list(ctx.attr("pads") or [0] * (2 * nd)))


def _col2im_infer(ctx: InferCtx) -> list[TensorType]:
    x, img, blk = ctx.in_types
    if x.rank != 3:
        raise ctx.error(f"input must be (N, C * prod(block_shape), L), got {x}")
    if img.rank != 1 or blk.rank != 1 or not isinstance(img.shape[0], int) or img.shape[0] != blk.shape[0]:
        raise ctx.error(f"image_shape and block_shape must be 1-D of one static length, got {img} and {blk}")
    nd = img.shape[0]
    image, block = known_dims(ctx, 1), ctx.known_ints(2)
    if block is not None:
        nb = int(np.prod(block))
        if isinstance(x.shape[1], int) and x.shape[1] % nb:
            raise ctx.error(f"input dim 1 ({x.shape[1]}) is not a multiple of prod(block_shape) = {nb}")
        c = canon(sympy.sympify(x.shape[1]) / nb)
    else:
        c = fresh_dim(ctx, "col2im_c", "block_shape input", dim=1)
    if image is not None and block is not None:
        n_blocks = canon(sympy.Mul(*_col2im_geometry(image, block, *_col2im_attrs(ctx, nd))))
        ctx.require_eq(x.shape[2], n_blocks, "L == the number of sliding blocks")
    sp = tuple(image) if image is not None else \
        tuple(fresh_dim(ctx, "col2im_dim", "image_shape input", dim=2 + i) for i in range(nd))
    return [TensorType(x.dtype, (x.shape[0], c, *sp))]


def col2im(x, image, block, strides, dil, pads):
    nd = len(image)
    counts = _col2im_geometry(image, block, strides, dil, pads)
    n, cb, _ = x.shape
    c = cb // int(np.prod(block))
    padded = np.zeros((n, c, *[image[i] + pads[i] + pads[nd + i] for i in range(nd)]), x.dtype)
    cols = x.reshape(n, c, *block, *counts)
    for b in np.ndindex(*block):
        for lpos in np.ndindex(*counts):
            at = tuple(lpos[i] * strides[i] + b[i] * dil[i] for i in range(nd))
            padded[(slice(None), slice(None), *at)] += cols[(slice(None), slice(None), *b, *lpos)]
    return padded[(slice(None), slice(None), *[slice(pads[i], pads[i] + image[i]) for i in range(nd)])]


def _col2im_ref(ctx: RefCtx, x, image, block):
    image, block = [int(v) for v in image.reshape(-1)], [int(v) for v in block.reshape(-1)]
    return [col2im(x, image, block, *_col2im_attrs(ctx, len(image)))]


def _col2im_lower(ctx) -> None:
    x, y = ctx.inputs[0], ctx.out(0)
    block = ctx.const_value(2)
    block = ctx.known_value(2) if block is None else block
    if block is None or not all(isinstance(canon(v), int) for v in block.reshape(-1)):
        raise ctx.unsupported("block_shape must be known at compile time")
    block = [int(canon(v)) for v in block.reshape(-1)]
    # the image dims are the result's, typed by inference from image_shape's (symbolic) value
    nd, image = len(block), list(y.shape[2:])
    strides, dil, pads = _col2im_attrs(ctx, nd)
    counts = _col2im_geometry(image, block, strides, dil, pads)
    bv = [Var(f"b{i}") for i in range(nd)]

    def body(n, c, *p):
        conds, lpos = [], []
        for i in range(nd):
            off = p[i] + pads[i] - bv[i] * dil[i]  # = l * stride for the block position l
            conds += [off >= 0, (off % strides[i]).eq(0), off // strides[i] < dim_to_expr(counts[i])]
            lpos.append(off // strides[i])
        ch = c * int(np.prod(block)) + K.flatten_index(bv, block)
        ok = conds[0]
        for cnd in conds[1:]:
            ok = ok & cnd
        v = K.select(ok, kwiden(x[(n, ch, K.flatten_index(lpos, counts))]), 0.0)
        return K.cast(K.rsum([(b, e) for b, e in zip(bv, block)], v), y.dtype)

    ctx.compute(y, body)


define("onnx.Col2Im", infer=_col2im_infer, reference=_col2im_ref, lower=_col2im_lower, kind="opaque", arity=3,
       math=col2im)
