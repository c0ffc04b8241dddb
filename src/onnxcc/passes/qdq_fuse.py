"""qdq-fuse: QDQ-format groups (DequantizeLinear -> float op -> QuantizeLinear) into the
QOperator ops whose lowerings run the integer kernels.

onnxruntime's `quantize_static` writes QDQ format by default: every quantized tensor is
dequantized before the float op that reads it and quantized again after. Run as written, a
conv is a float conv over dequantized values and never reaches the int8 kernels
(ops/int8_gemm.py, ops/int8_depthwise.py); onnxruntime fuses each group into its integer op
at session creation, so the integer arithmetic (exact i32 sums, one f32 requantization) is
what the model means in practice and what the oracle computes. The groups rewritten:

    Q(Conv(DQ(x), DQ(W), [DQ(B:i32)]))     -> QLinearConv(x, .., W, .., B)
    Q(MatMul(DQ(a), DQ(b)))                -> QLinearMatMul(a, .., b, ..)
    Q(Gemm(DQ(a), DQ(W), [DQ(C:i32)]))     -> com.microsoft.QGemm(a, .., W, .., C, ..)
    Q(Add(DQ(a), DQ(b))), Q(Mul(..))        -> com.microsoft.QLinearAdd / QLinearMul
    Q(GlobalAveragePool(DQ(x)))            -> com.microsoft.QLinearGlobalAveragePool
    Q(Concat(DQ(a), DQ(b)..)), other scales -> com.microsoft.QLinearConcat
    Q(MaxPool(DQ(x))), Q(Concat(DQ(x), DQ(y))), Q(Reshape(DQ(x))).. -> the same op on the 8-bit
                                             values (one scale and zero point on every side)

A Relu or a Clip with constant bounds between the contraction and the Q folds too: Q is
monotone, so Q(clip(v, lo, hi)) = clip(Q(v), Q(lo), Q(hi)); the clamp vanishes when Q(lo) and
Q(hi) saturate to the type's ends (a Relu before a Q whose zero point is the type's minimum,
what the quantizer writes) and stays as an 8-bit Clip on the fused result otherwise.

Applied only where the integer op computes the same quantity (up to the rounding of the one
requantization, which then is onnxruntime's):
- every DQ / Q is 8-bit (u8 / i8) with an f32 scale, no blocks, and its scale and zero point
  are constants; activation scales and zero points are one element (per tensor);
- weights (W, and b where it is constant) are constants with one scale, or one per output
  channel along the output axis (Conv: axis 0; MatMul: the columns of a 2-D b; Gemm: N);
- a bias is an i32 DQ with zero points 0 and scale x_scale * w_scale (per channel, equal to
  within 1e-6 relative: the quantizer computes the product itself), so adding it to the i32
  sums is adding it in float;
- the float op's result has one use (the Q, or the Relu / Clip before it, which has one use);
- the float op is exactly the contraction: Gemm with alpha = beta = 1, no transA, a 2-D A.
Everything else stays as written (still correct, through the float ops).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..ir import DType, Module, Op, TensorType, Value
from ..ops import get_opdef, onnx_inputs
from .base import ModulePass, PassContext, register_pass
from .canonicalize import const_value, new_const
from .dce import dce
from .rewrite import RewritePattern, Rewriter, apply_patterns

_INT8 = (DType.u8, DType.i8)
_MONOTONE = ("onnx.MaxPool", "onnx.GlobalMaxPool")
"""ops that pick one of their inputs by order: they commute with an increasing DQ; the ops that
only move elements are those whose OpDef takes strings (ops/strings.py MOVES_ELEMENTS)"""
_TINY = float(np.finfo(np.float32).tiny)
_BIAS_RTOL = 1e-6
"""a bias scale this close to x_scale * w_scale (relative) counts as equal: the quantizer
rounds the product once in f32 or f64, the fused op's multiplier is that product anyway"""


@dataclass
class _Deq:
    """A DequantizeLinear's operands: the quantized value, its scale and zero point data
    (zero point None when absent) and the normalized axis."""

    q: Value
    scale: Value
    zp: Value | None
    s: np.ndarray
    z: np.ndarray
    axis: int


@dataclass
class _Quant:
    op: Op
    scale: Value
    zp: Value | None
    s: np.ndarray
    z: np.ndarray
    dtype: DType


def _deq(v: Value, module: Module) -> _Deq | None:
    """The DequantizeLinear producing `v` with constant 8- or 32-bit integer params, else None."""
    op = v.owner
    if not isinstance(op, Op) or op.name != "onnx.DequantizeLinear" or op.attrs.get("block_size", 0):
        return None
    ins = onnx_inputs(op, list(op.operands))
    x, scale, zp = ins + [None] * (3 - len(ins))
    if x.type.dtype not in (*_INT8, DType.i32) or v.type.dtype is not DType.f32 or scale.type.dtype is not DType.f32:
        return None
    s = const_value(scale, module)
    z = np.zeros(1, np.int64) if zp is None else const_value(zp, module)
    if s is None or z is None:
        return None
    rank = x.type.rank
    axis = int(op.attrs.get("axis", 1))
    axis = axis + rank if axis < 0 else axis
    return _Deq(x, scale, zp, np.asarray(s, np.float32).reshape(-1), np.asarray(z, np.int64).reshape(-1), axis)


def _quant(op: Op, module: Module) -> _Quant | None:
    """A per-tensor 8-bit QuantizeLinear of an f32 value with constant params, else None."""
    ins = onnx_inputs(op, list(op.operands))
    x, scale = ins[0], ins[1]
    zp = ins[2] if len(ins) > 2 else None
    dt = op.results[0].type.dtype
    if dt not in _INT8 or op.attrs.get("block_size", 0) or x.type.dtype is not DType.f32:
        return None
    if scale.type.dtype is not DType.f32:
        return None
    s = const_value(scale, module)
    z = np.zeros(1, np.int64) if zp is None else const_value(zp, module)
    if s is None or z is None or s.size != 1 or z.size != 1:
        return None
    if not (np.isfinite(s).all() and float(s.reshape(-1)[0]) > 0):
        return None  # a scale the quantizer never writes (0, inf, nan): left to the op's own rule
    return _Quant(op, scale, zp, np.asarray(s, np.float32).reshape(-1), np.asarray(z, np.int64).reshape(-1), dt)


def _activation(d: _Deq | None) -> bool:
    """an 8-bit value quantized per tensor"""
    return d is not None and d.q.type.dtype in _INT8 and d.s.size == 1 and d.z.size == 1


def _weight(d: _Deq | None, module: Module, channels: int, axis: int) -> bool:
    """constant 8-bit weights quantized per tensor or per channel along `axis`"""
    if d is None or d.q.type.dtype not in _INT8 or const_value(d.q, module) is None:
        return False
    if d.s.size == 1 and d.z.size == 1:
        return True
    return d.axis == axis and d.s.size == channels and d.z.size in (1, channels)


def _bias_ok(b: _Deq | None, module: Module, x: _Deq, w: _Deq, channels: int) -> bool:
    """an i32 bias of one value per channel, zero point 0, scale x_scale * w_scale"""
    if b is None or b.q.type.dtype is not DType.i32 or np.any(b.z != 0) or const_value(b.q, module) is None:
        return False
    if b.q.type.shape != (channels,) or b.s.size not in (1, channels):
        return False
    want = (np.float64(x.s[0]) * w.s.astype(np.float64)) * np.ones(channels)
    got = b.s.astype(np.float64) * np.ones(channels)
    return bool(np.all(np.abs(got - want) <= _BIAS_RTOL * np.abs(want)))


class _FuseQdq(RewritePattern):
    """Anchored on the QuantizeLinear that closes a group."""

    op_names = ("onnx.QuantizeLinear",)

    def __init__(self, module: Module):
        self.module = module

    def match_and_rewrite(self, op: Op, rewriter: Rewriter) -> bool:
        q = _quant(op, self.module)
        if q is None:
            return False
        v = op.operands[0]
        clamp = self._clamp(v, q)
        if clamp is None:
            return False
        core, bounds = clamp
        if not isinstance(core.owner, Op) or len(core.uses) != 1 or len(core.owner.results) != 1:
            return False
        f = core.owner
        build = {"onnx.Conv": self._conv, "onnx.MatMul": self._matmul, "onnx.Gemm": self._gemm,
                 "onnx.Add": self._binary, "onnx.Mul": self._binary,
                 "onnx.GlobalAveragePool": self._gap}.get(f.name)
        if build is None and (f.name in _MONOTONE or getattr(get_opdef(f.name), "strings", False)):
            build = self._move
        if build is None:
            return False
        made = build(f, q, rewriter)
        if made is None and f.name == "onnx.Concat":
            made = self._concat(f, q, rewriter)
        if made is None:
            return False
        result = made
        if bounds is not None:  # the clamp the Relu / Clip leaves on the 8-bit result
            lo, hi = (new_const(TensorType(q.dtype, ()), np.array(b), op.loc) for b in bounds)
            for c in (lo, hi):
                rewriter.insert_before(op, c)
            clip = Op("onnx.Clip", [made, lo.results[0], hi.results[0]], [op.results[0].type], {}, loc=op.loc)
            result = rewriter.insert_before(op, clip).results[0]
        rewriter.replace_op(op, [result])
        return True

    # ---- the Relu / Clip between the float op and the Q ------------------------------------

    def _clamp(self, v: Value, q: _Quant) -> tuple[Value, tuple[int, int] | None] | None:
        """(the float op's result, the 8-bit clamp left to apply or None) where `v` is that
        result, or a Relu / constant Clip of it; None where the clamp cannot fold."""
        op = v.owner
        if not isinstance(op, Op) or op.name not in ("onnx.Relu", "onnx.Clip"):
            return v, None
        if len(v.uses) != 1 or len(op.results) != 1:
            return None
        lo, hi = float(op.attrs.get("min", -np.inf)), float(op.attrs.get("max", np.inf))
        if op.name == "onnx.Relu":
            lo = 0.0
        else:
            ins = onnx_inputs(op, list(op.operands))
            for k, b in ((1, "lo"), (2, "hi")):
                if k < len(ins) and ins[k] is not None:
                    c = const_value(ins[k], self.module)
                    if c is None or c.size != 1:
                        return None
                    if b == "lo":
                        lo = float(c.reshape(-1)[0])
                    else:
                        hi = float(c.reshape(-1)[0])
        qlo, qhi = _qrange(q.dtype)
        ql, qh = (int(_quantize(x, q)) for x in (lo, hi))
        if ql > qh:
            return None
        return op.operands[0], (None if (ql, qh) == (qlo, qhi) else (ql, qh))

    # ---- the groups ------------------------------------------------------------------------

    def _conv(self, f: Op, q: _Quant, rw: Rewriter) -> Value | None:
        ins = onnx_inputs(f, list(f.operands))
        x = _deq(ins[0], self.module)
        w = _deq(ins[1], self.module) if len(ins) > 1 else None
        if not _activation(x) or w is None or w.q.type.rank < 3:
            return None
        assert x is not None
        m = w.q.type.shape[0]
        if not isinstance(m, int) or not _weight(w, self.module, m, 0):
            return None
        bias = ins[2] if len(ins) > 2 else None
        b = None if bias is None else _deq(bias, self.module)
        if bias is not None and not _bias_ok(b, self.module, x, w, m):
            return None
        # (zero points are made only once the group is known to fuse: nothing is left behind)
        operands = [x.q, x.scale, self._zp(x, f, rw), w.q, w.scale, self._zp(w, f, rw),
                    q.scale, self._zp(q, f, rw)]
        if b is not None:
            operands.append(b.q)
        attrs = {k: v for k, v in f.attrs.items() if k != "absent"}
        return self._emit(rw, q, "onnx.QLinearConv", operands, attrs, f)

    def _matmul(self, f: Op, q: _Quant, rw: Rewriter) -> Value | None:
        a = _deq(f.operands[0], self.module)
        b = _deq(f.operands[1], self.module)
        if not _activation(a) or b is None or b.q.type.dtype not in _INT8:
            return None
        assert a is not None
        if const_value(b.q, self.module) is None:
            # a product of two activations: the integer path has no GEMM call for it (slower
            # than the float GEMM the unfused group takes), so it stays as written
            return None
        n = b.q.type.shape[-1] if b.q.type.rank == 2 else None
        if not (b.s.size == 1 and b.z.size == 1) and not (isinstance(n, int) and _weight(b, self.module, n, 1)):
            return None
        operands = [a.q, a.scale, self._zp(a, f, rw), b.q, b.scale, self._zp(b, f, rw), q.scale, self._zp(q, f, rw)]
        return self._emit(rw, q, "onnx.QLinearMatMul", operands, {}, f)

    def _gemm(self, f: Op, q: _Quant, rw: Rewriter) -> Value | None:
        ins = onnx_inputs(f, list(f.operands))
        if f.attrs.get("transA", 0) or float(f.attrs.get("alpha", 1.0)) != 1.0:
            return None
        if float(f.attrs.get("beta", 1.0)) != 1.0:
            return None
        a = _deq(ins[0], self.module)
        w = _deq(ins[1], self.module)
        if not _activation(a) or w is None or a is None or a.q.type.rank != 2 or w.q.type.rank != 2:
            return None
        tb = int(f.attrs.get("transB", 0))
        n = w.q.type.shape[0 if tb else 1]
        if not isinstance(n, int) or not _weight(w, self.module, n, 0 if tb else 1):
            return None
        c: Value | None = None
        if len(ins) > 2 and ins[2] is not None:
            b = _deq(ins[2], self.module)
            if not _bias_ok(b, self.module, a, w, n):
                return None
            assert b is not None
            c = b.q
        operands = [a.q, a.scale, self._zp(a, f, rw), w.q, w.scale, self._zp(w, f, rw)]
        attrs: dict = {"transB": tb} if tb else {}
        if c is None:
            attrs["absent"] = [6]
        else:
            operands.append(c)
        operands += [q.scale, self._zp(q, f, rw)]
        return self._emit(rw, q, "com.microsoft.QGemm", operands, attrs, f)

    def _binary(self, f: Op, q: _Quant, rw: Rewriter) -> Value | None:
        a = _deq(f.operands[0], self.module)
        b = _deq(f.operands[1], self.module)
        if not (_activation(a) and _activation(b)) or a is None or b is None:
            return None
        if not (a.q.type.dtype is b.q.type.dtype is q.dtype):
            return None  # onnxruntime's QLinearAdd / Mul: A, B and C of one type
        name = "com.microsoft.QLinearAdd" if f.name == "onnx.Add" else "com.microsoft.QLinearMul"
        operands = [a.q, a.scale, self._zp(a, f, rw), b.q, b.scale, self._zp(b, f, rw), q.scale, self._zp(q, f, rw)]
        return self._emit(rw, q, name, operands, {}, f)

    def _gap(self, f: Op, q: _Quant, rw: Rewriter) -> Value | None:
        x = _deq(f.operands[0], self.module)
        if not _activation(x) or x is None or x.q.type.dtype is not q.dtype or x.q.type.rank != 4:
            return None
        operands = [x.q, x.scale, self._zp(x, f, rw), q.scale, self._zp(q, f, rw)]
        return self._emit(rw, q, "com.microsoft.QLinearGlobalAveragePool", operands, {"channels_last": 0}, f)

    def _move(self, f: Op, q: _Quant, rw: Rewriter) -> Value | None:
        """an op that only moves elements (or takes maxima) whose data operands are all DQs
        with the Q's scale and zero point: the same op on the 8-bit values (Q(DQ(x)) is x,
        DQ increasing); a float operand of another kind (Pad's value) refuses"""
        operands = []
        for v in f.operands:
            if not v.type.dtype.is_float:
                operands.append(v)  # indices, shapes, Where's condition
                continue
            x = _deq(v, self.module)
            if not _activation(x) or x is None or x.q.type.dtype is not q.dtype:
                return None
            if x.s[0] != q.s[0] or x.z[0] != q.z[0] or not np.isfinite(x.s[0]) or abs(x.s[0]) < _TINY:
                return None
            operands.append(x.q)
        if all(a is b for a, b in zip(operands, f.operands, strict=True)):
            return None
        return self._emit(rw, q, f.name, operands, dict(f.attrs), f)

    def _concat(self, f: Op, q: _Quant, rw: Rewriter) -> Value | None:
        """a Concat of DQs of other scales -> com.microsoft.QLinearConcat, which requantizes
        each part as DQ then Q do (the same f32 operations, so the same 8-bit values)"""
        parts = [_deq(v, self.module) for v in f.operands]
        if not all(_activation(x) and x is not None and x.q.type.dtype is q.dtype for x in parts):
            return None
        operands = [q.scale, self._zp(q, f, rw)]
        for x in parts:
            assert x is not None
            operands += [x.q, x.scale, self._zp(x, f, rw)]
        return self._emit(rw, q, "com.microsoft.QLinearConcat", operands, {"axis": f.attrs.get("axis", 0)}, f)

    # ---- building ----------------------------------------------------------------------------

    def _zp(self, d: _Deq | _Quant, anchor: Op, rw: Rewriter) -> Value:
        """the zero point operand; a constant 0 of the quantized type where it is absent (the
        QLinear ops take it positionally)"""
        if d.zp is not None:
            return d.zp
        dt = d.dtype if isinstance(d, _Quant) else d.q.type.dtype
        c = new_const(TensorType(dt, ()), np.zeros((), dt.np), anchor.loc)
        return rw.insert_before(anchor, c).results[0]

    def _emit(self, rw: Rewriter, q: _Quant, name: str, operands: list[Value], attrs: dict, f: Op) -> Value:
        t = q.op.results[0].type
        new = Op(name, operands, [TensorType(q.dtype, t.shape)], attrs, loc=f.loc)
        return rw.insert_before(q.op, new).results[0]


def _qrange(dt: DType) -> tuple[int, int]:
    info = np.iinfo(dt.np)
    return int(info.min), int(info.max)


def _quantize(x: float, q: _Quant) -> int:
    """QuantizeLinear of one f32 value (infinities saturate), as the op computes it"""
    lo, hi = _qrange(q.dtype)
    if np.isinf(x):
        return lo if x < 0 else hi
    v = float(np.rint(np.float32(x) / q.s[0])) + float(q.z[0])
    return int(min(max(v, lo), hi))


def qdq_fuse(module: Module) -> bool:
    changed = apply_patterns(module, [_FuseQdq(module)])
    if changed:
        dce(module)
    return changed


@register_pass
@dataclass(frozen=True)
class QdqFusePass(ModulePass):
    """DequantizeLinear -> Conv / MatMul / Gemm / Add / Mul / GlobalAveragePool ->
    QuantizeLinear groups into QLinearConv, QLinearMatMul, QGemm, QLinearAdd / QLinearMul,
    QLinearGlobalAveragePool (the integer kernels), where the semantics match."""

    name: ClassVar[str] = "qdq-fuse"

    def run(self, module: Module, ctx: PassContext) -> bool:
        return qdq_fuse(module)
