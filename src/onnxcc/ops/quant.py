"""Quantization ops: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, ConvInteger,
QLinearMatMul, QLinearConv and the com.microsoft contrib ops QLinearAdd, QLinearMul,
MatMulIntegerToFloat and DynamicQuantizeMatMul (MatMulInteger is in matmul.py).

Arithmetic follows onnxruntime's CPU kernels, so integer results match it exactly:
- quantize: `clamp(round_half_even(x / scale) + zero_point, qmin, qmax)`, the division in f32;
- integer contractions accumulate `(x - x_zp) * (w - w_zp)` exactly in i32;
- requantization (QLinearMatMul / QLinearConv): `round(f32(acc) * (a_scale * b_scale / y_scale))
  + y_zp`, clamped, the multiplier computed in f32 as onnxruntime does.
Scales and zero points are per tensor (one element), per axis (1-D along `axis`) or blocked
(`block_size` > 0: same rank as x, `axis` dim of length ceil(x dim / block_size)).
QuantizeLinear / DequantizeLinear also take the small types: sub-byte integers (i4, u4, i2,
u2) like the others; float8 and f4e2m1 as ONNX defines them: `x / scale + zero_point`
converted to nearest even (float8 with `saturate` clamped to the largest finite value
first; f4e2m1 always saturates), and back `(x - zero_point) * scale` (a float zero point
must be 0 for float8; the formula holds either way). The other ops here refuse them.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import sympy

from .. import kernel as K
from ..errors import UnsupportedOp
from ..ir import DType, TensorType, canon
from ..kernel import Const, Var, broadcast_indices, cast, clamp, rmax, rmin, rsum, select
from .dtypes import onnx_dtype
from .elementwise import SATURATING, cast_array, kwiden
from .int8_depthwise import depthwise_qconv
from .int8_gemm import vnni_conv, vnni_matmul
from .int_as_f32 import float_conv
from .int_gemm import b_loader, conv_im2col, conv_rows, nonzero_zero_point, per_element, zp_loader
from .matmul import matmul_compute, matmul_integer, matmul_shape
from .nn import conv, window_geometry
from .pad_guard import pad_guard
from .quant_requant import qrange, requant_expr, requant_np
from .registry import InferCtx, RefCtx, define, onnx_inputs

_QTYPES = (DType.u8, DType.i8, DType.u16, DType.i16, DType.i32, DType.u4, DType.i4, DType.u2, DType.i2,
           DType.f8e4m3fn, DType.f8e4m3fnuz, DType.f8e5m2, DType.f8e5m2fnuz, DType.f4e2m1)
_FLOATS = (DType.f32, DType.f16, DType.bf16)


def _args(ctx, items, n: int) -> list:
    """Operands (or arrays) at their ONNX input positions, None for absent ones, padded to n."""
    out = onnx_inputs(ctx.op, list(items))
    return out + [None] * (n - len(out))


def _fail(ctx, msg: str):
    return UnsupportedOp(ctx.op.opname, ctx.op.dialect, ctx.op.loc, msg)


def _attr_dtype(ctx, name: str) -> DType | None:
    v = ctx.attr(name, 0)
    if not v:
        return None
    try:
        return onnx_dtype(v)
    except ValueError as e:
        raise _fail(ctx, f"{name}: {e}") from None


def _check_qtype(ctx, dt: DType, what: str) -> None:
    if dt not in _QTYPES:
        raise _fail(ctx, f"{what} has element type {dt.value}; supported: "
                         + ", ".join(t.value for t in _QTYPES))


# ---- where a scale / zero point applies ------------------------------------------------------


def _param_layout(ctx, x_rank: int, p_shape: tuple) -> tuple[str, int, int]:
    """('tensor' | 'axis' | 'block', axis, block_size) for a scale of shape p_shape."""
    block = int(ctx.attr("block_size", 0) or 0)
    axis = int(ctx.attr("axis", 1))
    if x_rank:
        axis = axis % x_rank
    size = int(np.prod(p_shape)) if all(isinstance(d, int) for d in p_shape) else None
    if block > 0:
        if len(p_shape) != x_rank:
            raise ctx.error(f"blocked quantization needs a scale of rank {x_rank}, got {len(p_shape)}")
        return "block", axis, block
    if size == 1:
        return "tensor", axis, 0
    if len(p_shape) != 1:
        raise ctx.error(f"per-axis scale must be 1-D, got rank {len(p_shape)}")
    return "axis", axis, 0


def _check_param_shape(ctx: InferCtx, x_shape: tuple, p_shape: tuple, what: str) -> None:
    kind, axis, block = _param_layout(ctx, len(x_shape), p_shape)
    if kind == "axis":
        ctx.require_eq(p_shape[0], x_shape[axis], f"{what} length vs x dim {axis}")
    elif kind == "block":
        # every block has its scale: the lowering reads scale[..., i // block_size, ...]
        for d, (xd, pd) in enumerate(zip(x_shape, p_shape)):
            if d != axis:
                ctx.require_eq(pd, xd, f"{what} dim {d} vs x dim {d}")
            else:
                want = canon(sympy.ceiling(sympy.sympify(xd) / block))
                ctx.require_eq(pd, want, f"{what} dim {d} vs ceil(x dim {d} / block_size)")


def _param_np(ctx, p: np.ndarray | None, x_shape: tuple) -> np.ndarray | None:
    """A scale / zero point expanded to x's shape (numpy)."""
    if p is None:
        return None
    kind, axis, block = _param_layout(ctx, len(x_shape), p.shape)
    if kind == "tensor":
        return p.reshape(())
    if kind == "axis":
        shape = [1] * len(x_shape)
        shape[axis] = -1
        return p.reshape(shape)
    return np.repeat(p, block, axis=axis)[tuple(slice(0, n) if d == axis else slice(None)
                                                for d, n in enumerate(x_shape))]


def _param_expr(ctx, buf, ix) -> K.Expr:
    """The element of scale / zero point `buf` that applies at x index `ix`."""
    kind, axis, block = _param_layout(ctx, len(ix), buf.shape)
    if kind == "tensor":
        return buf[(0,) * buf.rank]
    if kind == "axis":
        return buf[(ix[axis],)]
    return buf[tuple(i // block if d == axis else i for d, i in enumerate(ix))]


# ---- QuantizeLinear ----------------------------------------------------------------------------


def _q_out_dtype(ctx) -> DType:
    ts = ctx.in_types if isinstance(ctx, InferCtx) else [v.type for v in ctx.op.operands]
    zp = _args(ctx, ts, 3)[2]
    if zp is not None:
        return zp.dtype
    return _attr_dtype(ctx, "output_dtype") or DType.u8


def _quantize_infer(ctx: InferCtx):
    x, s, zp = _args(ctx, ctx.in_types, 3)
    dt = _q_out_dtype(ctx)
    _check_qtype(ctx, dt, "the quantized output")
    if x.dtype not in (*_FLOATS, DType.i32):
        raise ctx.error(f"x must be float or i32, got {x.dtype.value}")
    _check_param_shape(ctx, x.shape, s.shape, "y_scale")
    if zp is not None and len(zp.shape) != len(s.shape) and not (zp.numel() == 1 and s.numel() == 1):
        raise ctx.error(f"y_zero_point must have y_scale's shape {s}, got {zp}")
    return [TensorType(dt, x.shape)]


def quantize_np(x, scale, zp, dt: DType, saturate: bool = True) -> np.ndarray:
    """round_half_even(x / scale) + zp, saturated; the quotient in f32 (f64 for i32 outputs).
    To a float type: x / scale + zp in f32, converted (saturating as `cast_array` says)."""
    if dt.is_float:
        q = np.asarray(x, np.float32) / np.asarray(scale, np.float32)
        q = q if zp is None else q + np.asarray(zp).astype(np.float32)
        return cast_array(q, dt, saturate)
    q = np.rint(np.asarray(x, np.float32) / np.asarray(scale, np.float32))
    q = q.astype(np.float64) + (0 if zp is None else np.asarray(zp, np.float64))
    lo, hi = qrange(dt)
    with np.errstate(invalid="ignore"):  # NaN: numpy's (and ml_dtypes') cast decides
        return np.clip(q, lo, hi).astype(dt.np)


def _quantize_ref(ctx: RefCtx, *args):
    x, s, zp = _args(ctx, args, 3)
    return [quantize_np(x, _param_np(ctx, s, x.shape), _param_np(ctx, zp, x.shape), ctx.out_type().dtype,
                        bool(ctx.attr("saturate", 1)))]


def quantize_expr(value: K.Expr, scale: K.Expr, zp: K.Expr | None, dt: DType, saturate: bool = True) -> K.Expr:
    """The kernel twin of `quantize_np` for one element (value and scale as f32)."""
    if dt.is_float:
        q = value / scale
        q = q if zp is None else q + cast(kwiden(zp), DType.f32)
        if saturate and dt in SATURATING:
            hi = float(ml_dtypes.finfo(dt.np).max)
            q = clamp(q, Const(-hi, DType.f32), Const(hi, DType.f32))
        return cast(q, dt)
    q = K.unary("round", value / scale)
    lo, hi = qrange(dt)
    wide = DType.f64 if dt is DType.i32 else DType.f32
    if wide is DType.f64:
        q = cast(q, wide)
    if zp is not None:
        q = q + cast(zp, wide)
    return cast(clamp(q, Const(float(lo), wide), Const(float(hi), wide)), dt)


def _f32(e: K.Expr) -> K.Expr:
    return cast(kwiden(e), DType.f32)


def _quantize_lower(ctx) -> None:
    x, s, zp = _args(ctx, ctx.inputs, 3)
    y = ctx.out(0)
    sat = bool(ctx.attr("saturate", 1))
    ctx.compute(y, lambda *ix: quantize_expr(_f32(x[ix]), _f32(_param_expr(ctx, s, ix)),
                                             None if zp is None else _param_expr(ctx, zp, ix), y.dtype, sat))


define("onnx.QuantizeLinear", infer=_quantize_infer, reference=_quantize_ref, lower=_quantize_lower,
       kind="elementwise", arity=(2, 3), small_types=True)


# ---- DequantizeLinear --------------------------------------------------------------------------


def _dequantize_infer(ctx: InferCtx):
    x, s, zp = _args(ctx, ctx.in_types, 3)
    _check_qtype(ctx, x.dtype, "x")
    if zp is not None and zp.dtype is not x.dtype:
        raise ctx.error(f"x_zero_point must have x's type {x.dtype.value}, got {zp.dtype.value}")
    if s.dtype not in _FLOATS:
        raise ctx.error(f"x_scale must be float, got {s.dtype.value}")
    _check_param_shape(ctx, x.shape, s.shape, "x_scale")
    return [TensorType(_attr_dtype(ctx, "output_dtype") or s.dtype, x.shape)]


def _widest(dt: DType) -> DType:
    """Where x - zero_point is exact: f32 for the float types (exact for float8 and f4e2m1)."""
    return DType.f32 if dt.is_float else DType.i64 if dt is DType.i32 else DType.i32


def _dequantize_ref(ctx: RefCtx, *args):
    x, s, zp = _args(ctx, args, 3)
    wide = _widest(DType.from_np(x.dtype)).np
    d = x.astype(wide) - (0 if zp is None else _param_np(ctx, zp, x.shape).astype(wide))
    y = d.astype(np.float32) * _param_np(ctx, s, x.shape).astype(np.float32)
    return [y.astype(ctx.out_type().dtype.np)]


def _dequantize_lower(ctx) -> None:
    x, s, zp = _args(ctx, ctx.inputs, 3)
    y = ctx.out(0)
    wide = _widest(x.dtype)

    def body(*ix):
        d = cast(x[ix], wide)
        if zp is not None:
            d = d - cast(_param_expr(ctx, zp, ix), wide)
        return cast(cast(d, DType.f32) * _f32(_param_expr(ctx, s, ix)), y.dtype)

    ctx.compute(y, body)


define("onnx.DequantizeLinear", infer=_dequantize_infer, reference=_dequantize_ref, lower=_dequantize_lower,
       kind="elementwise", arity=(2, 3), small_types=True)


# ---- DynamicQuantizeLinear ---------------------------------------------------------------------


def _dql_infer(ctx: InferCtx):
    x = ctx.in_types[0]
    if x.dtype is not DType.f32:
        raise ctx.error(f"x must be f32, got {x.dtype.value}")
    return [TensorType(DType.u8, x.shape), TensorType(DType.f32, ()), TensorType(DType.u8, ())]


def dynamic_qparams_np(x: np.ndarray) -> tuple[np.float32, np.uint8]:
    """onnxruntime's uint8 parameters: the range widened to hold 0; scale 1 when it is empty."""
    lo = np.float32(min(0.0, float(x.min()))) if x.size else np.float32(0)
    hi = np.float32(max(0.0, float(x.max()))) if x.size else np.float32(0)
    scale = np.float32(1.0) if hi == lo else np.float32((hi - lo) / np.float32(255))
    zp = np.rint(np.clip(np.float32(0) - lo / scale, 0, 255)).astype(np.uint8)
    return scale, zp


def _dql_ref(ctx: RefCtx, x):
    scale, zp = dynamic_qparams_np(x)
    return [quantize_np(x, scale, zp, DType.u8), np.array(scale, np.float32), np.array(zp, np.uint8)]


def dynamic_qparams_lower(ctx, x, scale_buf, zp_buf) -> None:
    """Computes into rank-0 buffers: x's min and max (with 0), then scale and zero point."""
    vs = ctx.vars(x.rank, "r")
    axes = list(zip(vs, x.shape))
    lo_b, hi_b = ctx.temp(DType.f32, (), "lo"), ctx.temp(DType.f32, (), "hi")
    zero = Const(0.0, DType.f32)
    if axes:
        ctx.compute(lo_b, lambda: K.minimum(rmin(axes, x[tuple(vs)]), zero))
        ctx.compute(hi_b, lambda: K.maximum(rmax(axes, x[tuple(vs)]), zero))
    else:
        ctx.compute(lo_b, lambda: K.minimum(x[()], zero))
        ctx.compute(hi_b, lambda: K.maximum(x[()], zero))
    lo, hi = lo_b[()], hi_b[()]
    one, qmax = Const(1.0, DType.f32), Const(255.0, DType.f32)
    ctx.compute(scale_buf, lambda: select(hi.eq(lo), one, (hi - lo) / qmax))
    sc = scale_buf[()]
    ctx.compute(zp_buf, lambda: cast(K.unary("round", clamp(zero - lo / sc, Const(0.0, DType.f32),
                                                                  Const(255.0, DType.f32))), DType.u8))


def _dql_lower(ctx) -> None:
    x = ctx.inputs[0]
    y, sc, zp = ctx.out(0), ctx.out(1), ctx.out(2)
    dynamic_qparams_lower(ctx, x, sc, zp)
    ctx.compute(y, lambda *ix: quantize_expr(x[ix], sc[()], zp[()], DType.u8))


define("onnx.DynamicQuantizeLinear", infer=_dql_infer, reference=_dql_ref, lower=_dql_lower, arity=1,
       num_results=3)


# ---- integer convolution -----------------------------------------------------------------------


def _ints(ctx, name: str, n: int, default: int) -> list:
    v = ctx.attr(name)
    return [default] * n if v is None else list(v)


def _conv_geometry(ctx, x_shape, w_shape):
    nd = len(x_shape) - 2
    kernel = list(ctx.attr("kernel_shape") or w_shape[2:])
    strides, dil = _ints(ctx, "strides", nd, 1), _ints(ctx, "dilations", nd, 1)
    outs, pb, pe = window_geometry(x_shape[2:], kernel, strides, dil, _ints(ctx, "pads", 2 * nd, 0),
                                   ctx.attr("auto_pad", "NOTSET"))
    return outs, pb, pe, strides, dil


def _iconv_shape(ctx: InferCtx, x, w) -> tuple:
    if x.rank < 3 or w.rank != x.rank:
        raise ctx.error(f"x must be (N, C, spatial...) and w of the same rank, got {x} and {w}")
    group = ctx.attr("group", 1)
    ctx.require_eq(x.shape[1], canon(w.shape[1] * group), "input channels (x dim 1 vs w dim 1 * group)")
    outs, _, _, _, _ = _conv_geometry(ctx, x.shape, w.shape)
    return (x.shape[0], w.shape[0], *outs)


def iconv_np(ctx, x, w, xz, wz) -> np.ndarray:
    """Exact i32 convolution of (x - xz) and (w - wz); wz scalar or one per output channel."""
    xi = x.astype(np.int32) - (0 if xz is None else np.int32(xz.reshape(-1)[0]))
    wi = w.astype(np.int32)
    if wz is not None:
        wz = wz.astype(np.int32).reshape(-1)
        wi = wi - (wz[0] if wz.size == 1 else wz.reshape((-1,) + (1,) * (w.ndim - 1)))
    _, pb, pe, strides, dil = _conv_geometry(ctx, x.shape, w.shape)
    return conv(xi.astype(np.int64), wi.astype(np.int64), None, strides, pb, pe, dil,
                ctx.attr("group", 1)).astype(np.int32)


def iconv_compute(ctx, out, x, w, xz, wz, bias=None) -> None:
    """out[n, m, o...] = sum(c, k...: (X - xz)[pad-guarded, 0 outside] * (W - wz)[m, c, k...]) in i32."""
    outs, pb, pe, strides, dil = _conv_geometry(ctx, x.shape, w.shape)
    xz, wz = nonzero_zero_point(ctx, xz), nonzero_zero_point(ctx, wz)
    group = ctx.attr("group", 1)
    cg, kernel = w.shape[1], list(w.shape[2:])
    mg = canon(w.shape[0] // group) if isinstance(w.shape[0], int) else None
    if group != 1 and mg is None:
        raise ctx.unsupported("grouped integer conv needs a static output channel count")
    static = isinstance(cg, int) and all(isinstance(k, int) for k in kernel)
    if static and (xz is None or xz.rank == 0 or all(isinstance(d, int) and d == 1 for d in xz.shape)):
        geometry = (outs, pb, pe, strides, dil)
        if group == 1 and len(kernel) == 2 and dil[1] == 1:
            return conv_rows(ctx, out, x, w, xz, wz, bias, geometry)
        return conv_im2col(ctx, out, x, w, xz, wz, bias, geometry, group, mg)
    c = Var("c")
    kv = [Var(f"k{i}") for i in range(len(kernel))]
    axes = [(c, cg)] + list(zip(kv, kernel))
    i32 = DType.i32

    def zp(buf, m):
        if buf is None:
            return None
        if buf.rank == 0 or all(isinstance(d, int) and d == 1 for d in buf.shape):
            return cast(buf[(0,) * buf.rank], i32)
        return cast(buf[(m,)], i32)

    def body(n, m, *o):
        ch = c if group == 1 else (m // mg) * ctx.dim(cg) + c
        pos = [oi * s + k * d - ctx.dim(p) for oi, k, s, d, p in zip(o, kv, strides, dil, pb)]
        xv = cast(x[(n, ch, *pos)], i32)
        xzv = zp(xz, m)
        if xzv is not None:
            xv = xv - xzv
        cond = pad_guard(ctx, pos, x.shape[2:], pb, pe)
        if cond is not None:
            xv = select(cond, xv, Const(0, i32))
        wv = cast(w[(m, c, *kv)], i32)
        wzv = zp(wz, m)
        if wzv is not None:
            wv = wv - wzv
        acc = rsum(axes, xv * wv)
        return acc if bias is None else acc + cast(bias[(m,)], i32)

    ctx.compute(out, body)


def _convint_infer(ctx: InferCtx):
    x, w = ctx.in_types[0], ctx.in_types[1]
    for t in (x, w):
        if t.dtype not in (DType.u8, DType.i8):
            raise ctx.error(f"operands must be u8 or i8, got {t.dtype.value}")
    return [TensorType(DType.i32, _iconv_shape(ctx, x, w))]


def _convint_ref(ctx: RefCtx, *args):
    x, w, xz, wz = _args(ctx, args, 4)
    return [iconv_np(ctx, x, w, xz, wz)]


def _convint_lower(ctx) -> None:
    x, w, xz, wz = _args(ctx, ctx.inputs, 4)
    y = ctx.out(0)
    geometry = _conv_geometry(ctx, x.shape, w.shape)
    if depthwise_qconv(ctx, y, x, xz, w, wz, None, geometry):  # int8_depthwise.py
        return
    acc = vnni_conv(ctx, y.shape, x, xz, w, wz, None, geometry)
    if acc is not None:  # constant W on the VNNI GEMM (int8_gemm.py)
        ctx.compute(y, lambda *ix: acc[ix])
        return
    iconv_compute(ctx, y, x, w, xz, wz)


define("onnx.ConvInteger", infer=_convint_infer, reference=_convint_ref, lower=_convint_lower,
       kind="matmul", arity=(2, 4))


# ---- requantizing contractions: QLinearMatMul, QLinearConv ------------------------------------


def _vec(p: np.ndarray) -> np.ndarray:
    return np.asarray(p, np.float32).reshape(-1)


def _qlmm_infer(ctx: InferCtx):
    a, _, _, b, _, _, _, yzp = ctx.in_types
    for t, what in ((a, "a"), (b, "b")):
        if t.dtype not in (DType.u8, DType.i8):
            raise ctx.error(f"{what} must be u8 or i8, got {t.dtype.value}")
    return [TensorType(yzp.dtype, matmul_shape(ctx, a.shape, b.shape))]


def _qlmm_mult_np(a_s, b_s, y_s):
    return np.float32(_vec(a_s)[0]) * _vec(b_s) / np.float32(_vec(y_s)[0])


def _qlmm_ref(ctx: RefCtx, a, a_s, azp, b, b_s, bzp, y_s, yzp):
    acc = matmul_integer(a, b, azp, bzp)
    return [requant_np(acc, _qlmm_mult_np(a_s, b_s, y_s), yzp, ctx.out_type().dtype)]


def _qlmm_lower(ctx) -> None:
    a, a_s, azp, b, b_s, bzp, y_s, yzp = ctx.inputs
    y = ctx.out(0)
    # constant B on the VNNI GEMM (int8_gemm.py), the requantization in its stores
    requant = (lambda j: _f32(per_element(a_s, 0)) * _f32(per_element(b_s, j)) / _f32(per_element(y_s, 0)),
               cast(per_element(yzp, 0), DType.i64), y.dtype)
    if vnni_matmul(ctx, y, a, azp, b, bzp, requant):
        return
    acc = ctx.temp(DType.i32, y.shape, "acc")
    i32 = DType.i32

    def loader(x, z, axis: int):
        # a's zero point is one element or one per row, b's one element or one per column
        return lambda idx: cast(x[idx], i32) - cast(per_element(z, idx[axis]), i32)

    if not vnni_matmul(ctx, acc, a, azp, b, bzp):  # constant B on the VNNI GEMM (int8_gemm.py)
        matmul_compute(ctx, acc, a.shape, b.shape, loader(a, azp, -2 if a.rank > 1 else -1),
                       b_loader(ctx, 3, bzp))

    def body(*ix):
        mult = _f32(per_element(a_s, 0)) * _f32(per_element(b_s, ix[-1])) / _f32(per_element(y_s, 0))
        return requant_expr(acc[ix], mult, per_element(yzp, 0), y.dtype)

    ctx.compute(y, body)


define("onnx.QLinearMatMul", infer=_qlmm_infer, reference=_qlmm_ref, lower=_qlmm_lower, kind="matmul",
       arity=8)


def _qlconv_infer(ctx: InferCtx):
    x, _, _, w, _, _, _, yzp = ctx.in_types[:8]
    return [TensorType(yzp.dtype, _iconv_shape(ctx, x, w))]


def _qlconv_ref(ctx: RefCtx, *args):
    x, x_s, xz, w, w_s, wz, y_s, yz, b = _args(ctx, args, 9)
    acc = iconv_np(ctx, x, w, xz, wz)
    if b is not None:
        acc = acc + b.astype(np.int32).reshape((1, -1) + (1,) * (x.ndim - 2))
    mult = _qlmm_mult_np(x_s, w_s, y_s)
    mult = mult.reshape((1, -1) + (1,) * (x.ndim - 2)) if mult.size > 1 else mult.reshape(())
    return [requant_np(acc, mult, yz, ctx.out_type().dtype)]


def _qlconv_lower(ctx) -> None:
    x, x_s, xz, w, w_s, wz, y_s, yz, b = _args(ctx, ctx.inputs, 9)
    y = ctx.out(0)
    # constant W on the VNNI GEMM (int8_gemm.py) with the requantization in its stores, else on
    # the f32 GEMM where exact, else the integer loops
    requant = (lambda j: _f32(per_element(x_s, 0)) * _f32(per_element(w_s, j)) / _f32(per_element(y_s, 0)),
               cast(per_element(yz, 0), DType.i64), y.dtype)
    geometry = _conv_geometry(ctx, x.shape, w.shape)
    if depthwise_qconv(ctx, y, x, xz, w, wz, b, geometry, requant):  # int8_depthwise.py
        return
    if vnni_conv(ctx, y.shape, x, xz, w, wz, b, geometry, requant, y) is not None:
        return
    acc = float_conv(ctx, y.shape, x, xz, w, wz, b)
    if acc is None:
        acc = ctx.temp(DType.i32, y.shape, "acc")
        iconv_compute(ctx, acc, x, w, xz, wz, b)

    def body(*ix):
        mult = _f32(per_element(x_s, 0)) * _f32(per_element(w_s, ix[1])) / _f32(per_element(y_s, 0))
        return requant_expr(acc[ix], mult, per_element(yz, 0), y.dtype)

    ctx.compute(y, body)


define("onnx.QLinearConv", infer=_qlconv_infer, reference=_qlconv_ref, lower=_qlconv_lower, kind="matmul",
       arity=(8, 9))


# ---- com.microsoft QLinearAdd / QLinearMul -----------------------------------------------------


def _qlbin_infer(ctx: InferCtx):
    ts = _args(ctx, ctx.in_types, 8)
    a, b = ts[0], ts[3]
    if a.dtype is not b.dtype or a.dtype not in (DType.u8, DType.i8):
        raise ctx.error(f"A and B must both be u8 or both i8, got {a.dtype.value} and {b.dtype.value}")
    return [TensorType(a.dtype, ctx.broadcast(a.shape, b.shape))]


def _qlbin_np(mul: bool):
    def ref(ctx: RefCtx, *args):
        a, a_s, az, b, b_s, bz, c_s, cz = _args(ctx, args, 8)
        f = np.float32
        da = a.astype(np.int32) - np.int32(az.reshape(-1)[0])
        db = b.astype(np.int32) - np.int32(bz.reshape(-1)[0])
        sa, sb, sc = f(_vec(a_s)[0]), f(_vec(b_s)[0]), f(_vec(c_s)[0])
        if mul:
            v = (da.astype(f) * db.astype(f)) * (sa * sb / sc)
        else:
            v = (sa / sc) * da.astype(f) + (sb / sc) * db.astype(f)
        if cz is not None:  # onnxruntime adds the zero point in f32 before rounding
            v = v + f(cz.reshape(-1)[0])
        lo, hi = qrange(ctx.out_type().dtype)
        return [np.clip(np.rint(v), lo, hi).astype(a.dtype)]

    return ref


def _qlbin_lower(mul: bool):
    def lower(ctx) -> None:
        a, a_s, az, b, b_s, bz, c_s, cz = _args(ctx, ctx.inputs, 8)
        y = ctx.out(0)
        i32, f = DType.i32, DType.f32

        def body(*ix):
            da = cast(cast(a[broadcast_indices(ix, a.shape)], i32) - cast(per_element(az, 0), i32), f)
            db = cast(cast(b[broadcast_indices(ix, b.shape)], i32) - cast(per_element(bz, 0), i32), f)
            sa, sb, sc = _f32(per_element(a_s, 0)), _f32(per_element(b_s, 0)), _f32(per_element(c_s, 0))
            v = (da * db) * (sa * sb / sc) if mul else (sa / sc) * da + (sb / sc) * db
            if cz is not None:
                v = v + cast(per_element(cz, 0), f)
            lo, hi = qrange(y.dtype)
            return cast(clamp(K.unary("round", v), Const(float(lo), f), Const(float(hi), f)), y.dtype)

        ctx.compute(y, body)

    return lower


for _name, _mul in (("QLinearAdd", False), ("QLinearMul", True)):
    define(f"com.microsoft.{_name}", infer=_qlbin_infer, reference=_qlbin_np(_mul), lower=_qlbin_lower(_mul),
           kind="elementwise", arity=(7, 8), numpy_broadcast=True)


# ---- com.microsoft MatMulIntegerToFloat / DynamicQuantizeMatMul --------------------------------


def _scaled_out_np(acc, a_s, b_s, bias):
    """onnxruntime's float output processor: f32(acc) * (a_scale * b_scale[col]) + bias[col]."""
    y = acc.astype(np.float32) * (np.float32(_vec(a_s)[0]) * _vec(b_s))
    return y if bias is None else y + bias.astype(np.float32)


def _scaled_out_lower(ctx, y, acc, a_s: K.Expr, b_s, bias) -> None:
    def body(*ix):
        v = cast(acc[ix], DType.f32) * (a_s * _f32(per_element(b_s, ix[-1])))
        return v if bias is None else v + _f32(bias[broadcast_indices(ix, bias.shape)])

    ctx.compute(y, body)


def _mmif_infer(ctx: InferCtx):
    a, b = ctx.in_types[0], ctx.in_types[1]
    for t, what in ((a, "A"), (b, "B")):
        if t.dtype not in (DType.u8, DType.i8):
            raise ctx.error(f"{what} must be u8 or i8, got {t.dtype.value}")
    return [TensorType(ctx.in_types[2].dtype, matmul_shape(ctx, a.shape, b.shape))]


def _mmif_ref(ctx: RefCtx, *args):
    a, b, a_s, b_s, az, bz, bias = _args(ctx, args, 7)
    acc = matmul_integer(a, b, az, bz)
    return [_scaled_out_np(acc, a_s, b_s, bias).astype(ctx.out_type().dtype.np)]


def _mmif_lower(ctx) -> None:
    a, b, a_s, b_s, az, bz, bias = _args(ctx, ctx.inputs, 7)
    y = ctx.out(0)
    acc = ctx.temp(DType.i32, y.shape, "acc")
    if not vnni_matmul(ctx, acc, a, az, b, bz):  # constant B on the VNNI GEMM (int8_gemm.py)
        matmul_compute(ctx, acc, a.shape, b.shape, zp_loader(a, az, -2 if a.rank > 1 else -1),
                       b_loader(ctx, 1, bz))
    _scaled_out_lower(ctx, y, acc, _f32(per_element(a_s, 0)), b_s, bias)


define("com.microsoft.MatMulIntegerToFloat", infer=_mmif_infer, reference=_mmif_ref, lower=_mmif_lower,
       kind="matmul", arity=(4, 7))


def _dqmm_infer(ctx: InferCtx):
    a, b = ctx.in_types[0], ctx.in_types[1]
    if a.dtype is not DType.f32 or b.dtype not in (DType.u8, DType.i8):
        raise ctx.error(f"A must be f32 and B u8 or i8, got {a.dtype.value} and {b.dtype.value}")
    return [TensorType(DType.f32, matmul_shape(ctx, a.shape, b.shape))]


def _dqmm_ref(ctx: RefCtx, *args):
    a, b, b_s, bz, bias = _args(ctx, args, 5)
    scale, zp = dynamic_qparams_np(a)
    aq = quantize_np(a, scale, zp, DType.u8)
    acc = matmul_integer(aq, b, np.array(zp), bz)
    return [_scaled_out_np(acc, np.array(scale), b_s, bias)]


def _dqmm_lower(ctx) -> None:
    """A's uint8 parameters (as DynamicQuantizeLinear), A quantized, the i32 contraction, then
    the float epilogue."""
    a, b, b_s, bz, bias = _args(ctx, ctx.inputs, 5)
    y = ctx.out(0)
    sc, zp = ctx.temp(DType.f32, (), "a_scale"), ctx.temp(DType.u8, (), "a_zp")
    dynamic_qparams_lower(ctx, a, sc, zp)
    aq = ctx.temp(DType.u8, a.shape, "aq")
    ctx.compute(aq, lambda *ix: quantize_expr(a[ix], sc[()], zp[()], DType.u8))
    acc = ctx.temp(DType.i32, y.shape, "acc")
    i32 = DType.i32
    if not vnni_matmul(ctx, acc, aq, zp, b, bz):  # constant B on the VNNI GEMM (int8_gemm.py)
        matmul_compute(ctx, acc, a.shape, b.shape, lambda idx: cast(aq[idx], i32) - cast(zp[()], i32),
                       b_loader(ctx, 1, bz))
    _scaled_out_lower(ctx, y, acc, sc[()], b_s, bias)


define("com.microsoft.DynamicQuantizeMatMul", infer=_dqmm_infer, reference=_dqmm_ref, lower=_dqmm_lower,
       kind="matmul", arity=(3, 5))
