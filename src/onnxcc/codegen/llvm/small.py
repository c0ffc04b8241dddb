"""The small types in LLVM: 8-bit and 4-bit floats, sub-byte integers (shared by both backends).

In registers a small float is an f32 holding a value the type can represent, a sub-byte
integer an i8 holding a value in the type's range. Memory holds the bit patterns: one
byte per 8-bit float, sub-byte types packed (ONNX's and DLPack's layout: element k of the
flattened tensor sits in byte k // per, bits (k % per) * bits upward, per = 8 // bits).

- `encode(b, v, dt)`: a float (f32 or f64) rounded to nearest even into `dt`'s bit pattern
  (an i8), without saturation: past the largest finite value e5m2 gives inf and the other
  8-bit floats NaN (a saturating conversion clamps first; ops/elementwise.py does);
  f4e2m1, which has neither inf nor NaN, always saturates and maps NaN to the zero of the
  opposite sign (+NaN to -0), as ml_dtypes and so the ONNX reference do. fnuz types have no -0: a zero result is +0.
- `decode(b, code, dt)`: an i8 bit pattern to the f32 it stands for.
- `wrap_int(b, v, dt)`: an i8 wrapped into a sub-byte integer's range (two's complement).

All of it is branch-free integer and float arithmetic (no tables), so loops vectorize.
"""

from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from onnxcc.ir import DType

from .helpers import intrinsic

I8 = ir.IntType(8)
I32 = ir.IntType(32)
F32 = ir.FloatType()
F64 = ir.DoubleType()


@dataclass(frozen=True)
class FloatFormat:
    bits: int  # 8 or 4
    mant: int  # mantissa bits
    emin: int  # exponent of the smallest normal value
    max: float  # largest finite value
    kind: str  # "fn" (NaN = all ones, no inf), "fnuz" (NaN = -0's code, no inf, no -0), "ieee", "f4"

    @property
    def bias(self) -> int:
        return 1 - self.emin


FORMATS: dict[DType, FloatFormat] = {
    DType.f8e4m3fn: FloatFormat(8, 3, -6, 448.0, "fn"),
    DType.f8e4m3fnuz: FloatFormat(8, 3, -7, 240.0, "fnuz"),
    DType.f8e5m2: FloatFormat(8, 2, -14, 57344.0, "ieee"),
    DType.f8e5m2fnuz: FloatFormat(8, 2, -15, 57344.0, "fnuz"),
    DType.f4e2m1: FloatFormat(4, 1, 0, 6.0, "f4"),
}


def is_small_float(dt: DType) -> bool:
    return dt in FORMATS or dt is DType.f8e8m0


def _c(ty: ir.Type, v) -> ir.Constant:
    return ir.Constant(ty, v)


def _float_layout(ty: ir.Type) -> tuple[ir.IntType, int, int]:
    """(same-width integer type, fraction bits, exponent bias) of f32 / f64."""
    return (ir.IntType(64), 52, 1023) if ty == F64 else (I32, 23, 127)


def _pow2(b: ir.IRBuilder, e: ir.Value, ty: ir.Type, name: str) -> ir.Value:
    """2**e as a float of type `ty`, e an integer of ty's width within the normal range."""
    ity, frac, bias = _float_layout(ty)
    return b.bitcast(b.shl(b.add(e, _c(ity, bias)), _c(ity, frac)), ty, name=name)


def encode(b: ir.IRBuilder, v: ir.Value, dt: DType) -> ir.Value:
    """Round a float to the nearest (ties to even) value of `dt`; its bit pattern as i8.
    f8e8m0 (powers of two, no sign): the exponent of |v| as an f32, rounded down (NaN and
    inf give 0xFF, NaN); the Cast lowering rounds up or to nearest before."""
    if dt is DType.f8e8m0:
        if v.type == F64:
            v = b.fptrunc(v, F32, name="e8m0.f32")
        return b.trunc(b.lshr(b.bitcast(v, I32), _c(I32, 23)), I8, name="e8m0.bits")  # the sign drops out
    f = FORMATS[dt]
    ty = v.type
    ity, frac, tbias = _float_layout(ty)
    width = ity.width
    u = b.bitcast(v, ity, name="f8.u")
    sign = b.trunc(b.lshr(u, _c(ity, width - 1)), I8, name="f8.sign")
    a = b.call(_fabs(b.module, ty), [v], name="f8.abs")
    if f.kind == "f4":  # saturating (NaN handled below)
        a = b.call(_minnum(b.module, ty), [a, _c(ty, f.max)], name="f4.sat")
    # the quantum at a's binade (the subnormal one below emin): 2**(max(e, emin) - mant)
    ea = b.sub(b.and_(b.lshr(b.bitcast(a, ity), _c(ity, frac)), _c(ity, (1 << (width - 1 - frac)) - 1)),
               _c(ity, tbias), name="f8.e")
    e = b.select(b.icmp_signed("<", ea, _c(ity, f.emin)), _c(ity, f.emin), ea, name="f8.emax")
    scaled = b.fmul(a, _pow2(b, b.sub(_c(ity, f.mant), e), ty, "f8.inv"), name="f8.scaled")
    rounded = b.call(_roundeven(b.module, ty), [scaled], name="f8.rint")
    r = b.fmul(rounded, _pow2(b, b.sub(e, _c(ity, f.mant)), ty, "f8.q"), name="f8.r")  # exact
    # the bit pattern of r (finite, at most max): normal or subnormal
    ur = b.bitcast(r, ity)
    er = b.sub(b.and_(b.lshr(ur, _c(ity, frac)), _c(ity, (1 << (width - 1 - frac)) - 1)), _c(ity, tbias))
    m = b.and_(b.lshr(ur, _c(ity, frac - f.mant)), _c(ity, (1 << f.mant) - 1))
    normal = b.or_(b.shl(b.add(er, _c(ity, f.bias)), _c(ity, f.mant)), m, name="f8.normal")
    sub = b.fptoui(b.fmul(r, _c(ty, 2.0 ** (f.mant - f.emin))), ity, name="f8.sub")
    mag = b.trunc(b.select(b.icmp_signed("<", er, _c(ity, f.emin)), sub, normal), I8, name="f8.mag")
    sbit = b.shl(sign, _c(I8, f.bits - 1))
    if f.kind == "fnuz":  # no -0
        sbit = b.select(b.icmp_unsigned("==", mag, _c(I8, 0)), _c(I8, 0), sbit)
    code = b.or_(mag, sbit, name="f8.code")
    isnan = b.fcmp_unordered("uno", v, v, name="f8.isnan")
    if f.kind == "f4":
        return b.select(isnan, b.xor(sbit, _c(I8, 8)), code, name="f4.bits")  # NaN: the zero of the other sign
    over = b.fcmp_ordered(">", r, _c(ty, f.max), name="f8.over")
    if f.kind == "fn":
        nan = b.or_(b.shl(sign, _c(I8, 7)), _c(I8, 0x7F))
        code = b.select(over, nan, code)
    elif f.kind == "fnuz":
        nan = _c(I8, 0x80)
        code = b.select(over, nan, code)
    else:  # ieee: overflow is inf, NaN keeps its sign
        code = b.select(over, b.or_(b.shl(sign, _c(I8, 7)), _c(I8, 0x7C)), code)
        nan = b.or_(b.shl(sign, _c(I8, 7)), _c(I8, 0x7E))
    return b.select(isnan, nan, code, name="f8.bits")


def decode(b: ir.IRBuilder, code: ir.Value, dt: DType) -> ir.Value:
    """The f32 value of an i8 bit pattern of `dt`."""
    if dt is DType.f8e8m0:  # 2**(code - 127); 0 is 2**-127 (an f32 subnormal); 0xFF NaN
        c = b.zext(code, I32, name="e8m0.c")
        bits = b.select(b.icmp_unsigned("==", c, _c(I32, 0)), _c(I32, 0x400000), b.shl(c, _c(I32, 23)))
        nan = b.icmp_unsigned("==", c, _c(I32, 0xFF))
        return b.select(nan, _c(F32, float("nan")), b.bitcast(bits, F32), name="e8m0")
    f = FORMATS[dt]
    c = b.zext(code, I32, name="f8.c")
    ebits = f.bits - 1 - f.mant
    sign = b.lshr(c, _c(I32, f.bits - 1))
    ef = b.and_(b.lshr(c, _c(I32, f.mant)), _c(I32, (1 << ebits) - 1), name="f8.ef")
    m = b.and_(c, _c(I32, (1 << f.mant) - 1), name="f8.m")
    normal = b.bitcast(b.or_(b.shl(b.add(ef, _c(I32, 127 - f.bias)), _c(I32, 23)), b.shl(m, _c(I32, 23 - f.mant))),
                       F32, name="f8.normal")
    sub = b.fmul(b.uitofp(m, F32), _c(F32, 2.0 ** (f.emin - f.mant)), name="f8.sub")
    mag = b.select(b.icmp_unsigned("==", ef, _c(I32, 0)), sub, normal, name="f8.mag")
    val = b.select(b.icmp_unsigned("!=", sign, _c(I32, 0)), b.fneg(mag), mag, name="f8.val")
    nan = _c(F32, float("nan"))
    if f.kind == "fn":
        return b.select(b.icmp_unsigned("==", b.and_(c, _c(I32, 0x7F)), _c(I32, 0x7F)), nan, val, name="f8")
    if f.kind == "fnuz":
        return b.select(b.icmp_unsigned("==", c, _c(I32, 0x80)), nan, val, name="f8")
    if f.kind == "ieee":
        special = b.icmp_unsigned("==", ef, _c(I32, (1 << ebits) - 1))
        inf = b.select(b.icmp_unsigned("!=", sign, _c(I32, 0)), _c(F32, float("-inf")), _c(F32, float("inf")))
        return b.select(special, b.select(b.icmp_unsigned("==", m, _c(I32, 0)), inf, nan), val, name="f8")
    return val


def wrap_int(b: ir.IRBuilder, v: ir.Value, dt: DType) -> ir.Value:
    """An i8 reduced to `dt`'s bits: sign-extended from them (i4, i2) or masked (u4, u2)."""
    k = 8 - dt.bits
    if dt.is_signed:
        return b.ashr(b.shl(v, _c(I8, k)), _c(I8, k), name=f"{dt.value}.wrap")
    return b.and_(v, _c(I8, (1 << dt.bits) - 1), name=f"{dt.value}.wrap")


def float_to_small_int(b: ir.IRBuilder, v: ir.Value, dt: DType) -> ir.Value:
    """A float to a sub-byte integer as ml_dtypes (and so the ONNX reference) casts: toward
    zero, and 0 where the truncated value is out of range or NaN."""
    lo, hi = (-(1 << (dt.bits - 1)), (1 << (dt.bits - 1)) - 1) if dt.is_signed else (0, (1 << dt.bits) - 1)
    t = b.call(_trunc(b.module, v.type), [v], name="trunc")
    inside = b.and_(b.fcmp_ordered(">=", t, _c(v.type, float(lo))), b.fcmp_ordered("<=", t, _c(v.type, float(hi))))
    t = b.select(inside, t, _c(v.type, 0.0))
    return b.fptosi(t, I8, name=f"to.{dt.value}")


def _intrinsic(module: ir.Module, name: str, ty: ir.Type, nargs: int) -> ir.Function:
    return intrinsic(module, name, ty, [ty] * nargs)


def _fabs(module, ty):
    return _intrinsic(module, "llvm.fabs", ty, 1)


def _minnum(module, ty):
    return _intrinsic(module, "llvm.minnum", ty, 2)


def _roundeven(module, ty):
    return _intrinsic(module, "llvm.roundeven", ty, 1)


def _trunc(module, ty):
    return _intrinsic(module, "llvm.trunc", ty, 1)
