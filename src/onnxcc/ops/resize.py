"""Resize (opsets 10 to 19) and the deprecated Upsample.

Resize is separable: along each resized axis an output position `o` maps to a source
coordinate `x(o)` (the coordinate transformation mode), and the value is a weighted sum of
taps `floor(x) + start + t` (clamped into the input: edge replication) with weights
`K(|start + t - frac(x)| * s)`: K the linear or Keys cubic filter; s = 1, or with antialias
the downscale factor, which widens the filter to `2 - 2*start` taps. Nearest takes one tap.

The numpy reference and the lowering share that arithmetic (`_coords`, `_nearest`,
`_filter` run on numpy arrays or on kernel expressions through a small math shim), in
float64 as the ONNX reference does. The lowering computes per resized axis a table of
source indices (and weights) per output row / column, then one gather-and-sum compute
(small tap counts) or one pass per axis (wide antialias filters).

Input forms: Resize-10 is (X, scales) with asymmetric coordinates and floor rounding;
Resize-11+ is (X, roi, scales, sizes) with empty or absent optional inputs; Upsample is
(X, scales) (or Upsample-7's `scales` attribute), asymmetric and floor like Resize-10.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import sympy

from ..ir import Dim, DType, canon, identical
from ..kernel import (
    Const,
    Expr,
    Var,
    cast,
    ceil,
    clamp,
    dim_to_expr,
    floor,
    lift,
    maximum,
    minimum,
    rsum,
    select,
    unary,
)
from .registry import InferCtx, RefCtx, define, onnx_inputs
from .shape_util import const_value, fresh_dim, known_dims, lowered_value

F64 = DType.f64
I64 = DType.i64

MODES = ("nearest", "linear", "cubic")
COORDS = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
          "tf_crop_and_resize", "tf_half_pixel_for_nn")
NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
POLICIES = ("stretch", "not_larger", "not_smaller")
#: one gather-and-sum compute up to this many taps per output element, else one pass per axis
MAX_JOINT_TAPS = 16


# ---- the op's inputs and attributes ---------------------------------------------------------------


@dataclass(frozen=True)
class _Spec:
    x: int
    roi: int | None
    scales: int | None
    sizes: int | None
    mode: str
    coord: str
    nearest: str
    cubic_a: float
    exclude: bool
    extrap: float
    antialias: bool
    axes: tuple | None
    policy: str


def _empty(op, i: int | None) -> bool:
    t = op.operands[i].type if i is not None else None
    return t is not None and t.is_static and int(np.prod(t.shape, dtype=np.int64)) == 0


def _spec(op) -> _Spec:
    """Operand positions and normalised attributes; raises ValueError on bad attributes."""
    n = len(op.operands)
    a = op.attrs.get
    if op.name == "onnx.Upsample" or (n == 2 and not a("absent")):  # Upsample, Resize-10
        x, roi, scales, sizes = 0, None, (1 if n > 1 else None), None
        coord, nearest = "asymmetric", "floor"
    else:
        pos = onnx_inputs(op, list(range(n))) + [None] * 4
        x, roi, scales, sizes = pos[:4]
        coord, nearest = "half_pixel", "round_prefer_floor"
    roi, scales, sizes = (None if _empty(op, i) else i for i in (roi, scales, sizes))
    mode = a("mode", "nearest")
    mode = "linear" if mode == "bilinear" else mode  # Upsample-1's spelling
    s = _Spec(x, roi, scales, sizes, mode, a("coordinate_transformation_mode", coord),
              a("nearest_mode", nearest), float(a("cubic_coeff_a", -0.75)), bool(a("exclude_outside", 0)),
              float(a("extrapolation_value", 0.0)),
              bool(a("antialias", 0)), None if a("axes") is None else tuple(a("axes")),
              a("keep_aspect_ratio_policy", "stretch"))
    for what, v, allowed in (("mode", s.mode, MODES), ("coordinate_transformation_mode", s.coord, COORDS),
                             ("nearest_mode", s.nearest, NEAREST),
                             ("keep_aspect_ratio_policy", s.policy, POLICIES)):
        if v not in allowed:
            raise ValueError(f"unknown {what} {v!r}; expected one of {', '.join(allowed)}")
    if s.scales is not None and s.sizes is not None:
        raise ValueError("only one of scales and sizes may be given")
    if s.scales is None and s.sizes is None and a("scales") is None:
        raise ValueError("one of scales and sizes must be given")
    return s


def _axes(spec: _Spec, rank: int) -> list[int]:
    if spec.axes is None:
        return list(range(rank))
    out = []
    for ax in spec.axes:
        if not -rank <= ax < rank:
            raise ValueError(f"axis {ax} out of range for rank {rank}")
        out.append(ax % rank)
    if len(set(out)) != len(out):
        raise ValueError(f"axes {list(spec.axes)} repeat an axis")
    return out


# ---- geometry: output dims and per-axis scales ------------------------------------------------------


def _scaled(d: Dim, s: float) -> Dim:
    """floor(d * s), exactly (the float32 scale's exact rational value times the dim)."""
    if s == 1.0 or d is None:  # None: a dim nothing knows
        return d
    if isinstance(d, int):
        return math.floor(d * s)  # exact: a float32 scale times an int < 2**29
    return canon(sympy.floor(sympy.Rational(s) * d))


def _geometry(spec: _Spec, in_shape, scales: list[float] | None, sizes: list | None):
    """Per axis (out dim, scale); scale None means out / in, known only at run time.
    Returns None when keep_aspect_ratio_policy needs dims that are not static."""
    rank = len(in_shape)
    axes = _axes(spec, rank)
    outs: list = list(in_shape)
    sc: list = [1.0] * rank
    if scales is not None:
        if len(scales) != len(axes):
            raise ValueError(f"scales has {len(scales)} entries, expected {len(axes)}")
        for k, ax in enumerate(axes):
            if not scales[k] > 0:
                raise ValueError(f"scale {scales[k]} for axis {ax} must be positive")
            outs[ax], sc[ax] = _scaled(in_shape[ax], scales[k]), scales[k]
        return list(zip(outs, sc))
    if len(sizes) != len(axes):
        raise ValueError(f"sizes has {len(sizes)} entries, expected {len(axes)}")
    if spec.policy == "stretch":
        for k, ax in enumerate(axes):
            d, o = in_shape[ax], sizes[k]
            outs[ax] = o
            sc[ax] = o / d if isinstance(d, int) and isinstance(o, int) and d else None
        return list(zip(outs, sc))
    if not all(isinstance(in_shape[ax], int) and isinstance(sizes[k], int) for k, ax in enumerate(axes)):
        return None
    ratios = [sizes[k] / in_shape[ax] for k, ax in enumerate(axes)]
    s = min(ratios) if spec.policy == "not_larger" else max(ratios)
    for ax in axes:
        outs[ax], sc[ax] = int(s * in_shape[ax] + 0.5), s  # round half up, as the spec says
    return list(zip(outs, sc))


def _roi_pairs(spec: _Spec, rank: int, roi) -> list | None:
    """Per axis (start, end) from the roi values (a sequence), or None without roi."""
    if roi is None:
        return None
    axes = _axes(spec, rank)
    if len(roi) != 2 * len(axes):
        raise ValueError(f"roi has {len(roi)} entries, expected {2 * len(axes)}")
    pairs: list = [(0.0, 1.0)] * rank
    for k, ax in enumerate(axes):
        pairs[ax] = (roi[k], roi[k + len(axes)])
    return pairs


def _is_identity(spec: _Spec, in_dim: Dim, out_dim: Dim, scale, roi) -> bool:
    """An axis the resize leaves alone (the ONNX reference skips it too)."""
    if not _same(in_dim, out_dim) or (scale is not None and not math.isclose(scale, 1.0)):
        return False
    if spec.coord != "tf_crop_and_resize":
        return True
    return roi is not None and all(isinstance(v, float) for v in roi) and math.isclose(roi[0], 0.0) \
        and math.isclose(roi[1], 1.0, abs_tol=1e-9)


def _same(a: Dim, b: Dim) -> bool:
    return identical(a, b)


def _taps(spec: _Spec, scale: float) -> tuple[int, int, float]:
    """(tap count, first tap offset from floor(x), filter scale) of the linear / cubic filter."""
    support = 1 if spec.mode == "linear" else 2
    s = min(scale, 1.0) if spec.antialias else 1.0
    start = math.floor(-support / s) + 1
    return 2 - 2 * start, start, s


# ---- the arithmetic, on numpy arrays or kernel expressions -------------------------------------------


class _NumpyMath:
    floor = staticmethod(np.floor)
    ceil = staticmethod(np.ceil)
    maximum = staticmethod(np.maximum)

    @staticmethod
    def where(c, a, b):
        return np.where(c, a, b)

    @staticmethod
    def eq(a, b):
        return a == b


class _KernelMath:
    floor = staticmethod(floor)
    ceil = staticmethod(ceil)
    maximum = staticmethod(maximum)

    @staticmethod
    def where(c, a, b):
        if isinstance(c, bool):
            return a if c else b
        return select(c, lift(a, F64), lift(b, F64))

    @staticmethod
    def eq(a, b):
        return a.eq(lift(b, F64)) if isinstance(a, Expr) else a == b


def _coords(M, coord: str, y, scale, in_len, out_len, roi):
    """The source coordinate of output positions `y` along one axis (the ONNX formulas, in
    the ONNX reference's operation order). `scale`, `in_len`, `out_len` are floats or f64
    expressions; `roi` is (start, end) for tf_crop_and_resize."""
    width = scale * in_len  # the output length before flooring
    if coord == "half_pixel":
        return (y + 0.5) / scale - 0.5
    if coord == "half_pixel_symmetric":
        offset = (in_len / 2) * (1 - out_len / width)
        return offset + (y + 0.5) / scale - 0.5
    if coord == "pytorch_half_pixel":
        # NOTE: the spec's `length_resized > 1 ? ... : 0` (as onnxruntime); the ONNX reference
        # takes -0.5 when the unfloored width is 1, which differs only for cubic
        return M.where(M.eq(out_len, 1.0), 0.0, (y + 0.5) / scale - 0.5)
    if coord == "align_corners":
        return M.where(M.eq(width, 1.0), 0.0, y * (in_len - 1) / (width - 1))
    if coord == "asymmetric":
        return y / scale
    if coord == "tf_half_pixel_for_nn":
        return (y + 0.5) / scale
    if roi is None:
        raise ValueError("coordinate_transformation_mode tf_crop_and_resize needs roi")
    s0, s1 = roi
    x = M.where(M.eq(width, 1.0), (s1 - s0) * (in_len - 1) / 2, y * (s1 - s0) * (in_len - 1) / (width - 1))
    return x + s0 * (in_len - 1)


def _nearest(M, mode: str, x):
    """The nearest source position (as a float) of coordinate x."""
    fl = M.floor(x)
    if mode == "floor":
        return fl
    if mode == "ceil":
        return M.ceil(x)
    frac = x - fl
    up = frac > 0.5 if mode == "round_prefer_floor" else frac >= 0.5
    return M.where(up, fl + 1.0, fl)


def _filter(M, spec: _Spec, d):
    """The linear or Keys cubic filter at distance d >= 0."""
    if spec.mode == "linear":
        return M.maximum(1.0 - d, 0.0)
    a = spec.cubic_a
    d2 = d * d
    d3 = d2 * d
    near = (a + 2) * d3 - (a + 3) * d2 + 1.0
    far = a * d3 - 5 * a * d2 + 8 * a * d - 4 * a
    return M.where(d <= 1.0, near, M.where(d < 2.0, far, 0.0))


# ---- shape rule --------------------------------------------------------------------------------------


def _scales_attr(op) -> list[float] | None:
    v = op.attrs.get("scales")
    return None if v is None else [float(s) for s in v]


def _infer(ctx: InferCtx):
    try:
        spec = _spec(ctx.op)
    except ValueError as e:
        raise ctx.error(str(e)) from None
    x = ctx.in_types[spec.x]
    if spec.roi is not None and ctx.in_types[spec.roi].rank != 1:
        raise ctx.error(f"roi must be 1-D, got {ctx.in_types[spec.roi]}")
    for i, what in ((spec.scales, "scales"), (spec.sizes, "sizes")):
        if i is not None and ctx.in_types[i].rank != 1:
            raise ctx.error(f"{what} must be 1-D, got {ctx.in_types[i]}")
    scales = sizes = None
    if spec.scales is not None:
        c = const_value(ctx, spec.scales)
        scales = None if c is None else [float(v) for v in np.asarray(c, dtype=np.float64).reshape(-1)]
    elif spec.sizes is not None:
        sizes = known_dims(ctx, spec.sizes)
    else:
        scales = _scales_attr(ctx.op)
    try:
        axes = _axes(spec, x.rank)
        geo = None if scales is None and sizes is None else _geometry(spec, x.shape, scales, sizes)
    except ValueError as e:
        raise ctx.error(str(e)) from None
    if geo is None:  # data-dependent scales / sizes: only the run can tell
        out = list(x.shape)
        for ax in axes:
            why = f"dim {ax} of the resize (scales / sizes not known at compile time)"
            out[ax] = fresh_dim(ctx, "resized", why, 0, ax)
        return [x.with_shape(out)]
    for ax, (d, _) in enumerate(geo):
        if isinstance(d, int) and d < 0:
            raise ctx.error(f"output dim {ax} is {d}, expected >= 0")
    return [x.with_shape([d for d, _ in geo])]


# ---- numpy reference ------------------------------------------------------------------------------------


def _fill(v: float, dt: np.dtype):
    """The extrapolation value in dtype dt (integers round and saturate, as results do)."""
    if np.issubdtype(dt, np.integer):
        info = np.iinfo(dt)
        return int(min(max(round(v), info.min), info.max))
    return bool(v) if dt == np.bool_ else v


def _saturate(y: np.ndarray, dt: np.dtype) -> np.ndarray:
    """The float64 result in the input's dtype: integers round half to even and saturate."""
    if np.issubdtype(dt, np.integer):
        info = np.iinfo(dt)
        return np.clip(np.round(y), info.min, info.max).astype(dt)
    if dt == np.bool_:
        return y != 0
    return y.astype(dt)


def _ref_axis(spec: _Spec, data: np.ndarray, axis: int, out_len: int, scale: float, roi):
    in_len = data.shape[axis]
    y = np.arange(out_len, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        x = np.broadcast_to(_coords(_NumpyMath, spec.coord, y, scale, float(in_len), float(out_len), roi),
                            y.shape).astype(np.float64)
    if spec.mode == "nearest":
        idx = np.clip(_nearest(_NumpyMath, spec.nearest, x), 0, in_len - 1).astype(np.intp)
        res = np.take(data, idx, axis=axis)
    else:
        n, start, s = _taps(spec, scale)
        fl = np.floor(x)
        frac = x - fl
        offs = np.arange(n, dtype=np.float64) + start
        w = _filter(_NumpyMath, spec, np.abs(offs[None, :] - frac[:, None]) * s)
        if spec.antialias:
            w = w / w.sum(axis=1, keepdims=True)
        pos = fl.astype(np.int64)[:, None] + start + np.arange(n)[None, :]
        if spec.exclude:
            w = np.where((pos < 0) | (pos >= in_len), 0.0, w)
            tot = w.sum(axis=1, keepdims=True)
            w = w / np.where(tot == 0, 1.0, tot)
        taken = np.take(data, np.clip(pos, 0, in_len - 1).astype(np.intp), axis=axis)
        wshape = (1,) * axis + w.shape + (1,) * (data.ndim - axis - 1)
        res = (taken * w.reshape(wshape)).sum(axis=axis + 1)
    if spec.coord == "tf_crop_and_resize":
        outside = ((x < 0) | (x > in_len - 1)).reshape((1,) * axis + (-1,) + (1,) * (data.ndim - axis - 1))
        res = np.where(outside, np.asarray(_fill(spec.extrap, res.dtype), dtype=res.dtype), res)
    return res


def _reference(ctx: RefCtx, *args):
    spec = _spec(ctx.op)
    x = args[spec.x]
    scales = sizes = None
    if spec.scales is not None:
        scales = [float(v) for v in np.asarray(args[spec.scales], dtype=np.float64).reshape(-1)]
    elif spec.sizes is not None:
        sizes = [int(v) for v in np.asarray(args[spec.sizes]).reshape(-1)]
    else:
        scales = _scales_attr(ctx.op)
    geo = _geometry(spec, x.shape, scales, sizes)
    roi = None if spec.roi is None else [float(v) for v in np.asarray(args[spec.roi], np.float64).reshape(-1)]
    pairs = _roi_pairs(spec, x.ndim, roi)
    if spec.mode != "nearest" and x.dtype == np.bool_:
        raise ValueError(f"mode {spec.mode} is not defined on bool tensors")
    data = x if spec.mode == "nearest" else x.astype(np.float64)
    for ax, (out, s) in enumerate(geo):
        r = None if pairs is None else pairs[ax]
        if _is_identity(spec, x.shape[ax], out, s, r):
            continue
        data = _ref_axis(spec, data, ax, out, out / x.shape[ax] if s is None else s, r)
    out = _saturate(np.asarray(data, dtype=np.float64), x.dtype) if spec.mode != "nearest" else data
    return [np.ascontiguousarray(out)]


# ---- lowering -------------------------------------------------------------------------------------


def _acc_dtype(dt: DType) -> DType:
    """Where a linear / cubic resize of `dt` sums its taps."""
    if dt is F64 or (dt.is_int and dt.itemsize >= 4):
        return F64
    return DType.f32


def _f64(d: Dim) -> Expr | float:
    """A dim as a float (static) or an f64 expression (symbolic)."""
    return float(d) if isinstance(d, int) else cast(dim_to_expr(d), F64)


class _Axis:
    """One resized axis: its dims, scale and roi as floats or f64 expressions."""

    def __init__(self, ax: int, in_dim: Dim, out_dim: Dim, scale, roi):
        self.ax, self.in_dim, self.out_dim = ax, in_dim, out_dim
        self.in_len, self.out_len = _f64(in_dim), _f64(out_dim)
        self.scale = self.out_len / self.in_len if scale is None else scale
        self.roi = roi

    def coord(self, spec: _Spec, o: Var) -> Expr:
        x = _coords(_KernelMath, spec.coord, cast(o, F64), self.scale, self.in_len, self.out_len, self.roi)
        return lift(x, F64)

    def inside(self, x: Expr) -> Expr:
        return (x >= 0.0) & (x <= self.in_len - 1.0)


def _lower_inputs(ctx, spec: _Spec, rank: int):
    """(geometry, roi pairs) as the lowering sees them; unsupported when data-dependent."""
    scales = sizes = None
    if spec.scales is not None:
        c = ctx.const_value(spec.scales)
        if c is None:
            raise ctx.unsupported("scales must be a compile-time constant (here they are known only at run "
                                  "time)")
        scales = [float(v) for v in np.asarray(c, dtype=np.float64).reshape(-1)]
    elif spec.sizes is not None:
        v = lowered_value(ctx, spec.sizes)
        if v is None:
            raise ctx.unsupported("sizes must be known at compile time (here they are data-dependent)")
        sizes = [canon(d) for d in v.reshape(-1)]
    else:
        scales = _scales_attr(ctx.op)
    geo = _geometry(spec, ctx.in_type(spec.x).shape, scales, sizes)
    if geo is None:
        raise ctx.unsupported(f"keep_aspect_ratio_policy {spec.policy} needs static input dims and sizes")
    roi = None
    if spec.roi is not None and spec.coord == "tf_crop_and_resize":
        c = ctx.const_value(spec.roi)
        if c is not None:
            vals = [float(v) for v in np.asarray(c, dtype=np.float64).reshape(-1)]
        else:
            b = ctx.inputs[spec.roi]
            n = b.shape[0]
            if not isinstance(n, int):
                raise ctx.unsupported("roi must have a static length")
            vals = [cast(b[(k,)], F64) for k in range(n)]
        roi = _roi_pairs(spec, rank, vals)
    return geo, roi


def _lower(ctx) -> None:
    try:
        spec = _spec(ctx.op)
    except ValueError as e:
        raise ctx.unsupported(str(e)) from None
    x, y = ctx.inputs[spec.x], ctx.out(0)
    try:
        geo, roi = _lower_inputs(ctx, spec, x.rank)
    except ValueError as e:
        raise ctx.unsupported(str(e)) from None
    for ax, (d, _) in enumerate(geo):
        if not _same(d, y.shape[ax]):
            raise ctx.unsupported(f"output dim {ax} is {y.shape[ax]} but the resize gives {d}")
    axes = []
    for ax, (d, s) in enumerate(geo):
        r = None if roi is None else roi[ax]
        if not _is_identity(spec, x.shape[ax], d, s, r):
            if spec.coord == "tf_crop_and_resize" and r is None:
                raise ctx.unsupported("coordinate_transformation_mode tf_crop_and_resize needs roi")
            axes.append(_Axis(ax, x.shape[ax], d, s, r))
    if not axes:  # every axis kept as is: a copy
        ctx.compute(y, lambda *ix: x[ix])
        return
    if spec.mode == "nearest":
        _lower_nearest(ctx, spec, x, y, axes)
        return
    if x.dtype is DType.bool:
        raise ctx.unsupported(f"mode {spec.mode} is not defined on bool tensors")
    taps = []
    for a in axes:
        if spec.antialias and not isinstance(a.scale, float):
            taps.append(_symbolic_taps(spec, a))
        else:
            taps.append(_taps(spec, a.scale if isinstance(a.scale, float) else 1.0))
    _lower_filter(ctx, spec, x, y, axes, taps)


def _symbolic_taps(spec: _Spec, a: _Axis) -> tuple[Dim, Dim, Expr]:
    """`_taps` of an antialiased axis whose scale out / in is known only as dims (torch's
    interpolate(antialias=True) at a symbolic size): with s = min(out / in, 1),
    start = 1 - max(support, ceil(support * in / out)) and n = 2 - 2 * start, as Dims; s an
    f64 expression. An empty output (out = 0) reads its denominator as 1: it has no rows."""
    support = 1 if spec.mode == "linear" else 2
    wide = sympy.ceiling(support * sympy.sympify(a.in_dim) / sympy.Max(sympy.sympify(a.out_dim), 1))
    half = sympy.Max(support, wide)
    return canon(2 * half), canon(1 - half), minimum(a.scale, 1.0)


def _valid_table(ctx, spec: _Spec, a: _Axis):
    """bool[out]: the output positions whose coordinate lies inside the input (tf_crop_and_resize)."""
    if spec.coord != "tf_crop_and_resize":
        return None
    t = ctx.temp(DType.bool, (a.out_dim,), f"inside{a.ax}")
    ctx.compute(t, lambda o: a.inside(a.coord(spec, o)))
    return t


def _finish(spec: _Spec, value: Expr, valid: list, ix) -> Expr:
    """`value`, or the extrapolation value where a tf_crop_and_resize coordinate is outside."""
    cond = None
    for a, t in valid:
        c = t[ix[a.ax]]
        cond = c if cond is None else cond & c
    if cond is None:
        return value
    fill = spec.extrap if value.dtype.is_float else _fill(spec.extrap, value.dtype.np)
    return select(cond, value, Const(fill, value.dtype))


def _lower_nearest(ctx, spec: _Spec, x, y, axes: list[_Axis]) -> None:
    """Y[o...] = X[idx_a[o_a]...]: one index table per resized axis, then one gather."""
    tables, valid = {}, []
    for a in axes:
        t = ctx.temp(I64, (a.out_dim,), f"near{a.ax}")
        hi = dim_to_expr(a.in_dim) - 1

        def body(o, a=a, hi=hi):
            return clamp(cast(_nearest(_KernelMath, spec.nearest, a.coord(spec, o)), I64), 0, hi)

        ctx.compute(t, body)
        tables[a.ax] = t
        v = _valid_table(ctx, spec, a)
        if v is not None:
            valid.append((a, v))

    def gather(*ix):
        src = tuple(tables[k][ix[k]] if k in tables else ix[k] for k in range(len(ix)))
        return _finish(spec, x[src], valid, ix)

    ctx.compute(y, gather)


def _tap_tables(ctx, spec: _Spec, a: _Axis, n: int, start: int, s: float, acc: DType):
    """(index table i64[out, n], weight table acc[out, n]) of one axis's filter taps."""
    idx = ctx.temp(I64, (a.out_dim, n), f"tap{a.ax}")
    wt = ctx.temp(acc, (a.out_dim, n), f"wt{a.ax}")
    hi = dim_to_expr(a.in_dim) - 1

    def base(o):
        return a.coord(spec, o)

    first = start if isinstance(start, int) else dim_to_expr(start)  # a Dim when the scale is symbolic
    ctx.compute(idx, lambda o, t: clamp(cast(floor(base(o)), I64) + first + t, 0, hi))

    def weight(o, t):
        xo = base(o)
        fl = floor(xo)
        frac = xo - fl

        def w(tv):
            off = cast(tv, F64) if start == 0 else cast(tv, F64) + (
                float(start) if isinstance(start, int) else cast(first, F64))
            d = abs(off - frac) if isinstance(s, float) and s == 1.0 else abs(off - frac) * s
            k = lift(_filter(_KernelMath, spec, d), F64)
            if spec.exclude:
                p = cast(fl, I64) + first + tv
                k = select((p >= 0) & (p <= hi), k, 0.0)
            return k

        k = w(t)
        if spec.antialias or spec.exclude:
            r = Var("r")
            tot = rsum([(r, n)], w(r))
            k = k / (select(tot.eq(0.0), 1.0, tot) if spec.exclude else tot)
        return cast(k, acc)

    ctx.compute(wt, weight)
    return idx, wt


def _store(v: Expr, dt: DType) -> Expr:
    """The summed value in the output dtype: integers round half to even (the cast saturates)."""
    return cast(v if dt.is_float else unary("round", v), dt)


def _lower_filter(ctx, spec: _Spec, x, y, axes: list[_Axis], taps: list) -> None:
    acc = _acc_dtype(x.dtype)
    tables = [_tap_tables(ctx, spec, a, n, st, s, acc) for a, (n, st, s) in zip(axes, taps)]
    valid = [(a, v) for a in axes if (v := _valid_table(ctx, spec, a)) is not None]
    # symbolic tap counts (an antialiased symbolic scale) go one pass per axis
    joint = int(np.prod([n for n, _, _ in taps])) if all(isinstance(n, int) for n, _, _ in taps) else None
    joint = MAX_JOINT_TAPS + 1 if joint is None else joint
    groups = [list(range(len(axes)))] if joint <= MAX_JOINT_TAPS else [[k] for k in range(len(axes))]
    src = x
    for g, members in enumerate(groups):
        last = g == len(groups) - 1
        shape = list(src.shape)
        for k in members:
            shape[axes[k].ax] = axes[k].out_dim
        dst = y if last else ctx.temp(acc, shape, f"pass{g}")

        def body(*ix, src=src, members=members, last=last):
            idx = list(ix)
            w, red = None, []
            for k in members:
                a, (n, _, _) = axes[k], taps[k]
                t = Var(f"t{a.ax}")
                idx[a.ax] = tables[k][0][ix[a.ax], t]
                wk = tables[k][1][ix[a.ax], t]
                w = wk if w is None else w * wk
                red.append((t, n))
            v = cast(src[tuple(idx)], acc)
            s = v if w is None else rsum(red, w * v)
            if not last:
                return s
            return _store(_finish(spec, s, valid, ix), y.dtype)

        ctx.compute(dst, body)
        src = dst


def channels_last_resize(op, value_of, dims_of) -> tuple[int, np.ndarray | list] | None:
    """(operand index, new operand) of the same Resize run on the channels-last twin of its
    4-D input, or None where it has no such twin here. It has one when N and C stay as they
    are and no axes or roi are in use, with constant `scales` [1, 1, sh, sw] (`value_of(v)`:
    a constant's array or None) or `sizes` [N, C, h, w] whose values the compiler knows
    (`dims_of(v)`: a list of dims or None; torch's interpolate(size=...) after shape folding).
    The twin's operand is [1, sh, sw, 1] (an f32 array) or [N, h, w, C] (a list of dims): an
    axis of scale 1 or size equal to its input is left untouched (`_is_identity`), so H and
    W resize as in NCHW with the channels innermost (one gather or tap sum per pixel,
    vectorised over channels)."""
    try:
        spec = _spec(op)
    except ValueError:
        return None
    if spec.axes is not None or spec.coord == "tf_crop_and_resize" or spec.policy != "stretch":
        return None
    perm = [0, 2, 3, 1]
    if spec.scales is not None:
        v = value_of(op.operands[spec.scales])
        if v is None or np.size(v) != 4:
            return None
        s = np.asarray(v, np.float32).reshape(-1)
        return (spec.scales, np.ascontiguousarray(s[perm])) if s[0] == 1.0 and s[1] == 1.0 else None
    if spec.sizes is None:
        return None
    dims = dims_of(op.operands[spec.sizes])
    shape = op.operands[spec.x].type.shape
    if dims is None or len(dims) != 4 or not all(_same(dims[k], shape[k]) for k in (0, 1)):
        return None
    return spec.sizes, [dims[k] for k in perm]


define("onnx.Resize", infer=_infer, reference=_reference, lower=_lower, arity=(1, 4))
define("onnx.Upsample", infer=_infer, reference=_reference, lower=_lower, arity=(1, 2))
