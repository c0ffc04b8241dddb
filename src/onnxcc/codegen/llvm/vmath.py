"""The one vector libm of both backends: float math as branch-free LLVM IR functions.

`math_function(module, "tanh", F32)` defines (once per module) an internal, always-inline
function `onnxcc.math.tanh.f32` built from adds, multiplies, fmas, selects, bit casts and the
few intrinsics every target lowers natively (fma, sqrt, fabs, floor, roundeven, min/max,
copysign, saturating fp->int). No branches and no libm calls: on the CPU the loop vectorizer
widens a fused loop that calls these (a scalar `tanhf` call keeps the whole loop scalar), and
on NVPTX there is no libm at all. The IR is target independent; tests JIT it on the host and
compare it with mpmath in ulps (tests/codegen/test_vmath_functions.py; run it as a script
for the table). Worst error measured over each function's whole domain (4000 random points
plus log-spaced magnitudes, denormals, near-singular points), f32 / f64 ulps:

    exp 0.8/1.0  expm1 2.8/1.3  log 0.8/1.2  log1p 1.7/1.8  log2 1.2/1.3  sin 0.5/1.9
    cos 0.5/2.1  tan 0.5/3.2  tanh 1.4/2.3  sigmoid 1.8/1.8  softplus 2.2/2.1  erf 1.4/1.2
    asin 2.3/3.2  acos 2.1/3.0  atan 1.3/1.8  sinh 1.1/1.1  cosh 1.0/0.9  asinh 2.0/1.8
    acosh 2.2/2.6  atanh 2.5/2.3  pow 0.5/1.2 (x in [1e-30, 1e30], results up to overflow)
    tanh_softplus 2.2/3.2  erf_div 1.7/1.8 (f32 erf: 1.41 and erf_div 1.71 on dense [-4.5, 4.5] samples)
    gelu (f32 only) 2.4 for x >= -1, 3.9 below, down to the denormal results

Methods, per function:
- exp: n = round(x / ln 2), r = x - n ln 2 (two-part ln 2), Taylor polynomial, 2**n in two
  steps (so results down into the denormals are not flushed); expm1: Taylor below
  |x| < ln(2)/2, else exp(x) - 1.
- log: x = m 2**e with m in [sqrt(1/2), sqrt(2)) (denormals scaled up first), log(m) =
  f - s (f - R(s**2)), s = f/(2+f) (the atanh series); log2 the same scaled by 1/ln 2;
  log1p(x) = log(u) * x / (u - 1) with u = 1 + x.
- sin/cos/tan: quadrant reduction by pi/2, Taylor polynomials on [-pi/4, pi/4]. f32 runs in
  double: below 2**28 a three-part Cody-Waite split whose first two parts are exact products;
  above, a table-driven Payne-Hanek reduction (x = M 2**E, (2**E 2/pi) mod 4 from a table
  of 105 rows, products exact). f64: Cody-Waite with fmas below 1, above it an integer
  Payne-Hanek (M times a 192-bit window of 2/pi, 64x64-bit products from 32-bit halves).
  Both are accurate over the whole range, the hardest reductions included.
- atan: 1/x above 1, then the tan(pi/6) shift below tan(pi/12), Taylor; asin, acos via atan.
- tanh: f32 a fitted odd polynomial below 0.55 and (1 - e) / (1 + e), e = exp(-2|x|) by the
  shifter exp (`_exp_parts`, |x| clamped at 10) with both products in the fmas, above (32
  vector ops a tanh-GELU vector against 48 for 1 - 2/(exp(2|x|) + 1) by `_exp`; 1.5 ulp on
  60000 points of [-12, 12], 1.4 before); f64 via expm1. sinh/cosh via exp (series for
  small sinh); asinh/acosh/atanh via log1p.
- sigmoid 1/(1 + exp(-x)) = c / (c + c exp(-x)), c = 2**-32 (f64 2**-64), x clamped to
  [-104, 25] (f64 [-746, 40]), where c exp(-x) is a normal number: exp by its reduction with k
  rounded by a shifter constant, 2**(k - 32) from the shifter's bits (`_exp_parts`, f32:
  a fitted degree-6 polynomial), computed as S / (S + P) with S = 2**(32 - k) and P the
  polynomial times 2**32 (the same quotient times a power of two: the same result, the
  scaling an add instead of an fma: these loops are bound by x86's FMA pipe, one 512-bit op
  a cycle, with the add pipe beside it), one division that rounds the
  denormal results too, no NaN blend: 15 vector ops per 16 f32 elements against 18 for the
  e = exp(-|x|), (e or 1) / (1 + e) form before it (and 22 before that). Error bound, f32:
  1.8 ulp on the sample above, 2.32 ulp on 60000 points of [-25, 3] (the form before: 2.16
  on the same points), held to 2.4 by the dense test; f64 1.8. softplus max(x, 0) +
  log1p(exp(-|x|)).
- tanh_softplus (Mish's tanh(softplus(x)), which the expression emitters call for that
  composition): n / (n + 2) with n = e (e + 2), e = exp(x) (tanh(log(1 + e)) = ((1 + e)**2 - 1)
  / ((1 + e)**2 + 1)): one exp and one division instead of two exps, a log and three
  divisions, and all terms positive (no cancellation). x is clamped to [-104, 20] (f64
  [-746, 40]; the result has rounded to 0 below, to 1 above) and e computed scaled by 2**32
  (f64 2**64) by the shifter exp, so every term is a normal number and the division rounds
  the denormal results; no NaN blend (Mish alone 0.72-0.86x its time with `_exp`).
- erf: below 1 a polynomial (f64 Taylor, f32 x + x P(x**2), a fit); above, erfc(x) =
  exp(-x**2) Q(x) with Q an interpolant of exp(x**2) erfc(x) (f64 Chebyshev by Clenshaw; f32
  a power-basis fit weighted by the error it makes in erf, with exp(-x**2) by the shifter
  exp); coefficients below, computed with mpmath. erf_div(x, c) = erf(x / c), the exact
  GELU's erf(x / sqrt 2): f32 without the division (x times 1/c, the small branch's leading
  term corrected by an fma step), 1.71 ulp against erf of the exact quotient.
- gelu (f32, the exact GELU x Phi(x) of exporters' x * 0.5 * (1 + erf(x / sqrt 2)), which the
  expression emitters call for that whole product): Phi(-|x|) = exp(-x**2 / 2) R(|x|) / 2,
  R a degree 4/5 rational (the shifter exp, reduced on the exact x**2 by one fma), and
  Phi(x) = 1 - Phi(-x) for x >= 0: no erf, and no cancellation where the graph's 1 + erf
  has it (x < 0: onnxruntime's error there is 4.3e-8 |x|, up to 160 ulp).
- pow: exp(y log|x|) with the IEEE special cases (sign for odd integer y, NaN for negative x
  and non-integer y, pow(x, 0) = pow(1, y) = 1); f32 runs in f64 and is rounded once (<= 1
  ulp); f64 takes integer |y| <= 1024 by unrolled binary powering when every product is
  exact (checked with fmas: exact results stay exact), otherwise y log|x| in double-double
  (log to ~2**-60), so the error stays a few ulp up to the overflow threshold.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
from llvmlite import ir

from .helpers import I32, I64, intrinsic

F32 = ir.FloatType()
F64 = ir.DoubleType()

#: the functions this module provides (all unary but pow)
FUNCTIONS = ("exp", "expm1", "log", "log1p", "log2", "sin", "cos", "tan", "pow", "tanh", "sigmoid", "softplus",
             "erf", "erf_div", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
             "tanh_softplus")
#: functions defined for f32 only (their f64 callers keep the plain form): the exact GELU
F32_FUNCTIONS = ("gelu",)
#: the functions of two arguments
BINARY_FUNCTIONS = ("pow", "erf_div")

#: LLVM intrinsics that lower to scalar libm calls (or, on NVPTX, to undefined functions),
#: and the function replacing each
INTRINSIC_REPLACEMENTS = {"llvm.exp": "exp", "llvm.log": "log", "llvm.log2": "log2", "llvm.sin": "sin",
                          "llvm.cos": "cos", "llvm.tan": "tan", "llvm.pow": "pow"}

# Chebyshev coefficients of Q(x) = exp(x**2) erfc(x) on [lo, hi] for f64 (interpolation at 30
# first-kind nodes), evaluated at u = (2x - lo - hi) / (hi - lo) by Clenshaw's recurrence.
_ERFC_Q = {
    "f64": (1.0, 6.0, [
        0.20196598791223083, -0.147884835533987, 0.05188222158351389, -0.017525709964867527,
        0.005721802417478219, -0.0018109803028142997, 0.0005570714353927344, -0.00016689473052528832,
        4.878565911493746e-05, -1.3935932859822488e-05, 3.895514595190115e-06, -1.0668392337070025e-06,
        2.865502572057316e-07, -7.555861081756622e-08, 1.957586342968354e-08, -4.987110132992565e-09,
        1.2501871239431183e-09, -3.0858852312872416e-10, 7.504484747602075e-11, -1.799019306443203e-11,
        4.253478301220761e-12, -9.923156075370268e-13, 2.2852946889956604e-13, -5.197545127186086e-14,
        1.1678402563368202e-14, -2.5933001174246888e-15, 5.693123694895126e-16, -1.2358968293313467e-16,
        2.6494001992231862e-17, -5.394020788469484e-18]),
}

# f32 erf: below 1, erf(x) = x + x P(x**2) (P = erf(x)/x - 1, so the f32 rounding of
# 2/sqrt(pi) costs nothing: as the leading coefficient it alone was 0.9 ulp); above, Q as a
# polynomial in its u. Both fitted against mpmath (Lawson's weighted minimax at Chebyshev
# nodes, each coefficient rounded to f32 before the next ones are refitted): P for relative
# error (degree 5: 0.68 ulp estimated; degree 6, 0.02, measured 1.12 ulp in all, one fma
# more), Q for the error it makes in erf, exp(-x**2) (Q_fit - Q): 0.22 ulp estimated at
# degree 7, where the unweighted fit (uniform relative error 4e-8) needed degree 11 for the
# same. With _EXP_ERF_F32: 1.41 ulp measured on 66000 points (1.78 with the fits before, 42
# vector ops a GELU vector against 49).
_ERF_SMALL_F32 = (0.12837912142276764, -0.37612324953079224, 0.11280175298452377, -0.026711227372288704,
                  0.004917483776807785, -0.0005631216336041689)
# exp(r) for erf's exp(-x**2) Q: its relative error reaches erf times erfc(x) <= 0.16, so a
# degree 5 does (1.05e-7, 0.28 ulp at x = 1; fitted as _EXP_F32 below)
_EXP_ERF_F32 = (1.0, 1.0, 0.499992311000824, 0.16667112708091736, 0.04189017787575722, 0.008312688209116459)
_ERFC_Q_F32 = (0.21080654859542847, -0.11144959181547165, 0.056605014950037, -0.026339421048760414,
               0.009954177774488926, -0.014900232665240765, -0.009115711785852909, -0.0066442652605473995)

# pi/2 as a sum of three doubles (Cody-Waite). "f32" (used in f64 arithmetic): the first two
# have 24 significant bits, so k * part is exact for |k| < 2**29; "f64": three doubles, with fma
_PIO2 = {"f32": (1.5707963705062866, -4.371138828673793e-08, -1.7151244994428829e-15),
         "f64": (1.5707963267948966, 6.123233995736766e-17, -1.4973849048591698e-33)}
# floor(2/pi * 2**1216): the bits the large-argument (Payne-Hanek) reductions of sin/cos/tan
# take their tables from (checked against mpmath in the tests)
TWO_OVER_PI_1216 = int(
    "A2F9836E4E441529FC2757D1F534DDC0DB6295993C439041FE5163ABDEBBC561B7246E3A424DD2E006492EEA09D1921C"
    "FE1DEB1CB129A73EE88235F52EBB4484E99C7026B45F7E413991D639835339F49C845F8BBDF9283B1FF897FFDE05980F"
    "EF2F118B5A0A6D1F6D367ECF27CB09B74F463F669E5FEA2D7527BAC7EBE5F17B3D0739F78A5292EA6BFB5FB11F8D5D08"
    "56033046FC7B6BAB",
    16)
_TWO_OVER_PI_BITS = TWO_OVER_PI_1216 >> (1216 - 256)  # the first 256 (f32)
_PH_MAX_E = 104  # f32 x = M 2**E with M a 24-bit integer: E <= 104
_PH_FROM = float(2 ** 28)  # |x| from here takes the table (below, Cody-Waite is exact)
# tanh(x) / x as a polynomial in x**2 on [0, 0.55**2] (least squares at Chebyshev nodes against
# mpmath; relative error 9e-10)
_TANH_F32 = (0.9999999990813541, -0.3333331123195477, 0.13332467939077722, -0.05384336944869202,
             0.021042167769626408, -0.006238845482553957)
# exp(r) on |r| <= ln(2)/2 (f32, `_exp_parts`: sigmoid, tanh, tanh_softplus): 1 + r + r**2 q(r), q of degree
# 4 by least squares (relative error) at Chebyshev nodes against mpmath, rounded to f32:
# relative error 3.8e-9, one fma shorter than the Taylor polynomial `_exp` uses. NOTE: a
# degree-5 fit (9.2e-8) took sigmoid to 3.1 ulp: that error is up to 1.5 ulp where the
# result's significand is near 2
_EXP_F32 = (1.0, 1.0, 0.49999988079071045, 0.16666516661643982, 0.04166955500841141, 0.00836905837059021,
            0.0013750892831012607)
# ln 2 = hi + lo, hi with trailing zero bits so n * hi is exact
_LN2 = {"f32": (0.693359375, -2.12194440e-4), "f64": (6.93147180369123816490e-01, 1.90821492927058770002e-10)}


def type_tag(ty: ir.Type) -> str:
    if ty == F32:
        return "f32"
    if ty == F64:
        return "f64"
    raise TypeError(f"math functions exist for float and double, not {ty}")


def math_function(module: ir.Module, name: str, ty: ir.Type) -> ir.Function:
    """The function `name` (see FUNCTIONS) over `ty` (float or double), defined in
    `module` on first use."""
    tag = type_tag(ty)
    full = f"onnxcc.math.{name}.{tag}"
    fn = module.globals.get(full)
    if fn is not None:
        return fn
    build = _BUILDERS.get(name)
    if build is None:
        raise KeyError(f"no math function {name!r} (have {', '.join(FUNCTIONS)})")
    nargs = 2 if name in BINARY_FUNCTIONS else 1
    fn = ir.Function(module, ir.FunctionType(ty, [ty] * nargs), name=full)
    fn.linkage = "internal"
    fn.attributes.add("alwaysinline")
    fn.attributes.add("nounwind")
    fn.attributes.add("readnone")
    m = _Math(fn, ty, ir.IRBuilder(fn.append_basic_block("entry")))
    m.b.ret(build(m, *fn.args))
    return fn


class _Math:
    """A builder over one math function, with float helpers for its type."""

    def __init__(self, fn: ir.Function, ty: ir.Type, builder: ir.IRBuilder):
        self.fn, self.ty = fn, ty
        self.module = fn.module
        self.tag = type_tag(ty)
        self.f64 = ty == F64
        self.ity = I64 if self.f64 else I32
        self.mant = 52 if self.f64 else 23
        self.bias = 1023 if self.f64 else 127
        self.b = builder

    def wide(self) -> _Math:
        """The same function and builder, computing in double (f32 functions that need the
        extra precision)."""
        return _Math(self.fn, F64, self.b)

    # constants and intrinsics
    def c(self, v: float) -> ir.Constant:
        return ir.Constant(self.ty, v)

    def i(self, v: int) -> ir.Constant:
        return ir.Constant(self.ity, v)

    def intr(self, name: str, *args: ir.Value) -> ir.Value:
        fn = intrinsic(self.module, name, args[0].type, [a.type for a in args])
        return self.b.call(fn, list(args))

    def call(self, name: str, *args: ir.Value) -> ir.Value:
        return self.b.call(math_function(self.module, name, args[0].type), list(args))

    # arithmetic
    def add(self, a, b): return self.b.fadd(a, b)
    def sub(self, a, b): return self.b.fsub(a, b)
    def mul(self, a, b): return self.b.fmul(a, b)
    def div(self, a, b): return self.b.fdiv(a, b)
    def fma(self, a, b, c): return self.intr("llvm.fma", a, b, c)
    def abs(self, a): return self.intr("llvm.fabs", a)
    def sqrt(self, a): return self.intr("llvm.sqrt", a)
    def floor(self, a): return self.intr("llvm.floor", a)
    def copysign(self, mag, sign): return self.intr("llvm.copysign", mag, sign)
    def minnum(self, a, b): return self.intr("llvm.minnum", a, b)
    def maxnum(self, a, b): return self.intr("llvm.maxnum", a, b)
    def sel(self, c, a, b): return self.b.select(c, a, b)
    def lt(self, a, b): return self.b.fcmp_ordered("<", a, b)
    def gt(self, a, b): return self.b.fcmp_ordered(">", a, b)
    def eq(self, a, b): return self.b.fcmp_ordered("==", a, b)
    def isnan(self, a): return self.b.fcmp_unordered("uno", a, a)

    def nan(self) -> ir.Constant:
        return self.c(math.nan)

    def horner(self, x: ir.Value, coeffs: Sequence[float]) -> ir.Value:
        """coeffs[0] + x * (coeffs[1] + x * (...)), with fmas."""
        acc = self.c(coeffs[-1])
        for k in reversed(coeffs[:-1]):
            acc = self.fma(acc, x, self.c(k))
        return acc

    def clenshaw(self, u: ir.Value, coeffs: Sequence[float]) -> ir.Value:
        """sum_k coeffs[k] T_k(u)."""
        b1, b2 = self.c(0.0), self.c(0.0)
        two_u = self.mul(u, self.c(2.0))
        for ck in reversed(coeffs[1:]):
            b1, b2 = self.add(self.fma(two_u, b1, self.b.fneg(b2)), self.c(ck)), b1
        return self.add(self.fma(u, b1, self.b.fneg(b2)), self.c(coeffs[0]))

    def pow2(self, k: ir.Value) -> ir.Value:
        """2**k for an integer k (of self.ity) in the normal range."""
        bits = self.b.shl(self.b.add(k, self.i(self.bias)), self.i(self.mant))
        return self.b.bitcast(bits, self.ty)


def _taylor(n: int, k0: int = 0, step: int = 1, alternate: bool = False) -> list[float]:
    """[1/k!, ...] for k = k0, k0 + step, ... (n terms), signs alternating if asked."""
    return [(-1.0) ** j * (1.0 / math.factorial(k0 + j * step)) if alternate else
            1.0 / math.factorial(k0 + j * step) for j in range(n)]


# ---- exp, expm1 ---------------------------------------------------------------------------


def _exp(m: _Math, x):
    return _exp_scaled(m, x, 0)


def _exp_scaled(m: _Math, x, shift: int):
    """exp(x) * 2**shift, with no intermediate overflow (shift in [-1, 0])."""
    b = m.b
    lo, hi = (-746.0, 710.0 - shift) if m.f64 else (-104.0, 89.0 - shift)
    xc = m.minnum(m.maxnum(x, m.c(lo)), m.c(hi))
    n = m.intr("llvm.roundeven", m.mul(xc, m.c(1.0 / math.log(2.0))))
    l_hi, l_lo = _LN2[m.tag]
    r = m.fma(b.fneg(n), m.c(l_hi), xc)
    r = m.fma(b.fneg(n), m.c(l_lo), r)
    p = m.horner(r, _taylor(14 if m.f64 else 8))
    ni = b.add(b.fptosi(n, I32), ir.Constant(I32, shift))
    if m.f64:
        ni = b.sext(ni, I64)
    n1 = b.ashr(ni, m.i(1))
    n2 = b.sub(ni, n1)
    y = m.mul(m.mul(p, m.pow2(n1)), m.pow2(n2))
    return m.sel(m.isnan(x), x, y)


def _expm1(m: _Math, x):
    small = m.lt(m.abs(x), m.c(0.34657359027997264))
    series = m.mul(x, m.horner(x, [1.0 / math.factorial(k + 1) for k in range(16 if m.f64 else 8)]))
    big = m.sub(m.call("exp", x), m.c(1.0))
    return m.sel(small, series, big)


# ---- log, log1p ---------------------------------------------------------------------------


def _log_reduce(m: _Math, x):
    """(e, f) for a positive finite x = (1 + f) 2**e, 1 + f in [sqrt(1/2), sqrt(2)) (e as a float)."""
    b = m.b
    shift = 54 if m.f64 else 24
    tiny = m.lt(x, m.c(2.2250738585072014e-308 if m.f64 else 1.1754943508222875e-38))
    xs = m.sel(tiny, m.mul(x, m.c(float(2 ** shift))), x)
    ix = b.bitcast(xs, m.ity)
    e = b.sub(b.lshr(ix, m.i(m.mant)), m.i(m.bias))
    e = b.sub(e, b.select(tiny, m.i(shift), m.i(0)))
    mbits = b.or_(b.and_(ix, m.i((1 << m.mant) - 1)), m.i(m.bias << m.mant))
    mant = b.bitcast(mbits, m.ty)
    big = m.gt(mant, m.c(math.sqrt(2.0)))
    mant = m.sel(big, m.mul(mant, m.c(0.5)), mant)
    e = b.add(e, b.zext(big, m.ity))
    return b.sitofp(e, m.ty), m.sub(mant, m.c(1.0))


def _log_parts(m: _Math, x):
    """(e, log(mant)) for a positive finite x = mant * 2**e (e as a float)."""
    ef, f = _log_reduce(m, x)
    s = m.div(f, m.add(f, m.c(2.0)))
    z = m.mul(s, s)
    R = m.mul(z, m.horner(z, [2.0 / (2 * k + 3) for k in range(11 if m.f64 else 4)]))
    return ef, m.sub(f, m.mul(s, m.sub(f, R)))


def _two_sum(m: _Math, a, b):
    """(s, err) with s = fl(a + b) and a + b = s + err exactly."""
    s = m.add(a, b)
    bb = m.sub(s, a)
    return s, m.add(m.sub(a, m.sub(s, bb)), m.sub(b, bb))


def _log_dd(m: _Math, x):
    """log(x) as hi + lo, relative error ~2**-60, for a positive finite double x (pow's
    y log x must be exact to more than double precision). log(1 + f) = 2 atanh(s), s =
    f / (2 + f) carried as s + s_lo; the series tail beyond 2s is ~1% of it, so plain
    doubles suffice there."""
    ef, f = _log_reduce(m, x)
    u = m.add(f, m.c(2.0))
    u_lo = m.add(m.sub(m.c(2.0), u), f)  # exact: |f| < 2
    s = m.div(f, u)
    s_lo = m.div(m.sub(m.fma(m.b.fneg(s), u, f), m.mul(s, u_lo)), u)
    z = m.mul(s, s)
    tail = m.mul(m.mul(s, z), m.horner(z, [2.0 / (2 * k + 3) for k in range(11)]))
    l_hi, l_lo = _LN2["f64"]
    hi, lo = _two_sum(m, m.mul(ef, m.c(l_hi)), m.mul(s, m.c(2.0)))  # e * l_hi is exact
    lo = m.add(lo, m.add(m.fma(ef, m.c(l_lo), tail), m.mul(s_lo, m.c(2.0))))
    top = m.add(hi, lo)
    return top, m.sub(lo, m.sub(top, hi))


def _log_specials(m: _Math, x, y):
    y = m.sel(m.eq(x, m.c(math.inf)), x, y)
    y = m.sel(m.lt(x, m.c(0.0)), m.nan(), y)
    y = m.sel(m.eq(x, m.c(0.0)), m.c(-math.inf), y)
    return m.sel(m.isnan(x), x, y)


def _log(m: _Math, x):
    ef, lm = _log_parts(m, x)
    l_hi, l_lo = _LN2[m.tag]
    return _log_specials(m, x, m.fma(ef, m.c(l_hi), m.fma(ef, m.c(l_lo), lm)))


def _log2(m: _Math, x):
    ef, lm = _log_parts(m, x)
    hi, lo = 1.4426950408889634, 2.0355273740931033e-17  # log2(e) = hi + lo
    if not m.f64:
        hi, lo = float(np.float32(hi)), hi - float(np.float32(hi))
    return _log_specials(m, x, m.fma(lm, m.c(hi), m.fma(lm, m.c(lo), ef)))


def _log1p(m: _Math, x):
    u = m.add(x, m.c(1.0))
    d = m.sub(u, m.c(1.0))
    y = m.mul(m.call("log", u), m.div(x, d))
    y = m.sel(m.eq(d, m.c(0.0)), x, y)
    return m.sel(m.eq(u, m.c(math.inf)), u, y)


# ---- trigonometry -------------------------------------------------------------------------


def _reduce_pio2(m: _Math, x, split: str):
    """(r, q): x = q pi/2 + r, |r| <= pi/4 (q as i32, only its low two bits matter)."""
    b = m.b
    k = m.intr("llvm.roundeven", m.mul(x, m.c(2.0 / math.pi)))
    nk = b.fneg(k)
    p1, p2, p3 = _PIO2[split]
    r = m.fma(nk, m.c(p1), x)
    r = m.fma(nk, m.c(p2), r)
    r = m.fma(nk, m.c(p3), r)
    fn = intrinsic(m.module, "llvm.fptosi.sat", I64, [m.ty], [I64, m.ty])
    q = b.trunc(b.call(fn, [k]), I32)
    return r, q


def _sin_poly(m: _Math, r, terms: int):
    z = m.mul(r, r)
    s = m.horner(z, [-v for v in _taylor(terms, 3, 2, alternate=True)])  # -1/3!, 1/5!, ...
    return m.fma(m.mul(r, z), s, r)


def _cos_poly(m: _Math, r, terms: int):
    z = m.mul(r, r)
    c = m.horner(z, _taylor(terms, 4, 2, alternate=True))  # 1/4!, -1/6!, ...
    return m.fma(m.mul(z, z), c, m.fma(z, m.c(-0.5), m.c(1.0)))


def _trig(m: _Math, x, which: str):
    """sin, cos or tan; f32 computes in double (exact reduction, short polynomials) and
    rounds once."""
    if m.f64:
        w, xw, split, terms = m, x, "f64", 8
    else:
        w, xw, split, terms = m.wide(), m.b.fpext(x, F64), "f32", 5
    r, q = _reduce_pio2(w, xw, split)
    if m.f64:
        r_big, q_big = _reduce_large_f64(m, x)
        big = m.b.fcmp_unordered(">=", m.abs(x), m.c(_PH64_FROM))  # NaN, inf too: made NaN below
    else:
        r_big, q_big = _reduce_large_f32(m, w, x)
        big = m.b.fcmp_unordered(">=", m.abs(x), m.c(_PH_FROM))
    r, q = w.sel(big, r_big, r), m.b.select(big, q_big, q)
    s, c = _sin_poly(w, r, terms), _cos_poly(w, r, terms)
    if which == "tan":
        odd, _ = _quadrant_bits(w, q)
        y = w.sel(odd, w.b.fneg(w.div(c, s)), w.div(s, c))
    else:  # cos(r + q pi/2) = sin(r + (q + 1) pi/2)
        odd, neg = _quadrant_bits(w, q, 1 if which == "cos" else 0)
        v = w.sel(odd, c, s)
        y = w.sel(neg, w.b.fneg(v), v)
    if not m.f64:
        y = m.b.fptrunc(y, F32)
    return m.sel(m.eq(m.abs(x), m.c(math.inf)), m.nan(), m.sel(m.isnan(x), x, y))


def _ph_rows() -> list[tuple[float, float, float]]:
    """Per E in [0, _PH_MAX_E]: (2**E * 2/pi) mod 4 as h + mid + lo, h a multiple of 2**-22
    and mid of 2**-46 below 2**-22 (both 24-bit, so M * h and M * mid are exact doubles)."""
    rows = []
    for e in range(_PH_MAX_E + 1):
        f = (_TWO_OVER_PI_BITS << e) % (4 << 256)
        h = f >> (256 - 22)
        rest = f - (h << (256 - 22))
        mid = rest >> (256 - 46)
        lo = rest - (mid << (256 - 46))
        rows.append((h / 2 ** 22, mid / 2 ** 46, lo / 2 ** 256))
    return rows


def _ph_table(module: ir.Module, part: int) -> ir.GlobalVariable:
    name = f"onnxcc.math.two_over_pi.{part}"
    gv = module.globals.get(name)
    if gv is None:
        ty = ir.ArrayType(F64, _PH_MAX_E + 1)
        # NVPTX keeps tables in the constant address space; every other target in the default one
        space = 4 if (module.triple or "").startswith("nvptx") else 0
        gv = ir.GlobalVariable(module, ty, name, addrspace=space)
        gv.global_constant = True
        gv.linkage = "internal"
        gv.initializer = ir.Constant(ty, [row[part] for row in _ph_rows()])
    return gv


def _reduce_large_f32(m: _Math, w: _Math, x):
    """(r, q) like _reduce_pio2 for an f32 x of any finite magnitude, in double: x = M 2**E
    (M the 24-bit significand), x 2/pi mod 4 = M ((2**E 2/pi) mod 4) from the table; the
    products with its two 24-bit parts are exact, so r keeps ~70 bits after cancellation."""
    b = m.b
    def i32(v):
        return ir.Constant(I32, v)

    bits = b.bitcast(x, I32)
    e = b.sub(b.and_(b.lshr(bits, i32(23)), i32(0xFF)), i32(150))
    e = b.select(b.icmp_signed("<", e, i32(0)), i32(0), e)
    e = b.select(b.icmp_signed(">", e, i32(_PH_MAX_E)), i32(_PH_MAX_E), e)
    sig = w.b.sitofp(b.or_(b.and_(bits, i32(0x7FFFFF)), i32(0x800000)), F64)
    parts = []
    for k in range(3):
        gv = _ph_table(m.module, k)
        ptr = b.gep(gv, [i32(0), e], inbounds=True, source_etype=gv.value_type)
        parts.append(w.mul(sig, b.load(ptr, typ=F64)))
    hi, mid, lo = parts
    t = w.sub(hi, w.mul(w.c(4.0), w.floor(w.mul(hi, w.c(0.25)))))  # exact: hi mod 4
    t = w.add(t, mid)  # exact: < 8, a multiple of 2**-46
    k = w.intr("llvm.roundeven", t)
    r = w.mul(w.add(w.sub(t, k), lo), w.c(math.pi / 2))
    q = b.fptosi(k, I32)
    neg = b.icmp_signed("<", bits, i32(0))  # sin(-x) = -sin(x): -x = (-q) pi/2 + (-r)
    return w.sel(neg, b.fneg(r), r), b.select(neg, b.sub(i32(0), q), q)


_PH64_WORDS = 1216 // 64 + 1  # 2/pi as little-endian 64-bit words, one zero word on top
_PH64_FROM = 1.0  # |x| from here takes the f64 table (E >= -52 keeps the window inside it)


def _ph64_table(module: ir.Module) -> ir.GlobalVariable:
    name = "onnxcc.math.two_over_pi.words"
    gv = module.globals.get(name)
    if gv is None:
        ty = ir.ArrayType(I64, _PH64_WORDS)
        space = 4 if (module.triple or "").startswith("nvptx") else 0
        gv = ir.GlobalVariable(module, ty, name, addrspace=space)
        gv.global_constant = True
        gv.linkage = "internal"
        mask = (1 << 64) - 1
        words = [(TWO_OVER_PI_1216 >> (64 * i)) & mask for i in range(_PH64_WORDS)]
        gv.initializer = ir.Constant(ty, [w - (1 << 64) if w >> 63 else w for w in words])
    return gv


def _mul_wide(b: ir.IRBuilder, x, y):
    """(hi, lo) of the 128-bit product of two unsigned i64s, from 32-bit halves (no i128:
    every target lowers this, and it vectorizes)."""
    def c(v):
        return ir.Constant(I64, v)

    m32 = c(0xFFFFFFFF)
    x0, x1 = b.and_(x, m32), b.lshr(x, c(32))
    y0, y1 = b.and_(y, m32), b.lshr(y, c(32))
    p00, p01, p10, p11 = b.mul(x0, y0), b.mul(x0, y1), b.mul(x1, y0), b.mul(x1, y1)
    mid = b.add(b.add(b.lshr(p00, c(32)), b.and_(p01, m32)), b.and_(p10, m32))
    lo = b.or_(b.and_(p00, m32), b.shl(mid, c(32)))
    hi = b.add(b.add(p11, b.lshr(p01, c(32))), b.add(b.lshr(p10, c(32)), b.lshr(mid, c(32))))
    return hi, lo


def _reduce_large_f64(m: _Math, x):
    """(r, q) like _reduce_pio2 for an f64 x of any finite magnitude >= 1, in integers:
    x = M 2**E (M the 53-bit significand); the 192 bits of (2**E 2/pi) mod 4 from weight 2**1
    down are a funnel-shifted window of the 2/pi words; M times them mod 2**192 is x 2/pi
    mod 4 as a 2.190 fixed-point number, whose top 128 bits give r to full precision."""
    b = m.b
    def c(v):
        return ir.Constant(I64, v)

    bits = b.bitcast(x, I64)
    e = b.sub(b.and_(b.lshr(bits, c(52)), c(0x7FF)), c(1075))
    e = b.select(b.icmp_signed("<", e, c(-52)), c(-52), e)
    e = b.select(b.icmp_signed(">", e, c(971)), c(971), e)
    sig = b.or_(b.and_(bits, c((1 << 52) - 1)), c(1 << 52))
    shift = b.sub(c(1216 - 190), e)  # the window is floor(2/pi 2**1216) >> shift, mod 2**192
    j, o = b.lshr(shift, c(6)), b.and_(shift, c(63))
    gv = _ph64_table(m.module)
    words = []
    for k in range(4):
        ptr = b.gep(gv, [ir.Constant(I32, 0), b.add(j, c(k))], inbounds=True, source_etype=gv.value_type)
        words.append(b.load(ptr, typ=I64))
    fshr = intrinsic(m.module, "llvm.fshr", I64, [I64, I64, I64])
    f2, f1, f0 = (b.call(fshr, [words[k + 1], words[k], o]) for k in range(3))
    h2, _ = _mul_wide(b, sig, f2)  # the low word only rounds r below its precision
    h1, l1 = _mul_wide(b, sig, f1)
    w1 = b.add(l1, h2)
    carry = b.zext(b.icmp_unsigned("<", w1, h2), I64)
    w2 = b.add(b.add(b.mul(sig, f0), h1), carry)  # only the low 64 bits survive mod 2**192
    # nearest quadrant from the top two bits, then the signed remainder (w2 - q 2**62) : w1
    q = b.lshr(b.add(w2, c(1 << 61)), c(62))
    rest = b.sub(w2, b.shl(q, c(62)))
    frac = m.fma(b.sitofp(rest, F64), m.c(2.0 ** -62), m.mul(b.uitofp(w1, F64), m.c(2.0 ** -126)))
    r = m.mul(frac, m.c(math.pi / 2))
    qi = b.trunc(q, I32)
    neg = b.icmp_signed("<", bits, c(0))
    return m.sel(neg, b.fneg(r), r), b.select(neg, b.sub(ir.Constant(I32, 0), qi), qi)


def _quadrant_bits(m: _Math, q, add: int = 0) -> tuple[ir.Value, ir.Value]:
    b = m.b
    q = b.add(q, ir.Constant(I32, add))
    odd = b.icmp_unsigned("!=", b.and_(q, ir.Constant(I32, 1)), ir.Constant(I32, 0))
    neg = b.icmp_unsigned("!=", b.and_(q, ir.Constant(I32, 2)), ir.Constant(I32, 0))
    return odd, neg


def _sin(m: _Math, x):
    return _trig(m, x, "sin")


def _cos(m: _Math, x):
    return _trig(m, x, "cos")


def _tan(m: _Math, x):
    return _trig(m, x, "tan")


def _atan(m: _Math, x):
    a = m.abs(x)
    inv = m.gt(a, m.c(1.0))
    t = m.sel(inv, m.div(m.c(1.0), a), a)
    sqrt3 = math.sqrt(3.0)
    shift = m.gt(t, m.c(0.2679491924311227))  # tan(pi/12)
    ts = m.div(m.fma(t, m.c(sqrt3), m.c(-1.0)), m.add(t, m.c(sqrt3)))
    t2 = m.sel(shift, ts, t)
    z = m.mul(t2, t2)
    p = m.horner(z, [(-1.0) ** (k + 1) / (2 * k + 3) for k in range(14 if m.f64 else 6)])
    at = m.fma(m.mul(t2, z), p, t2)
    at = m.sel(shift, m.add(m.c(math.pi / 6), at), at)
    at = m.sel(inv, m.sub(m.c(math.pi / 2), at), at)
    y = m.copysign(at, x)
    return m.sel(m.isnan(x), x, y)


def _asin(m: _Math, x):
    one = m.c(1.0)
    d = m.sqrt(m.mul(m.sub(one, x), m.add(one, x)))
    return m.call("atan", m.div(x, d))


def _acos(m: _Math, x):
    one = m.c(1.0)
    q = m.sqrt(m.div(m.sub(one, x), m.add(one, x)))
    return m.mul(m.c(2.0), m.call("atan", q))


# ---- hyperbolic ---------------------------------------------------------------------------


def _sinh(m: _Math, x):
    a = m.abs(x)
    z = m.mul(x, x)
    series = m.fma(m.mul(x, z), m.horner(z, _taylor(10 if m.f64 else 6, 3, 2)), x)
    t = _half_exp(m, a)
    big = m.copysign(m.sub(t, m.div(m.c(0.25), t)), x)
    return m.sel(m.lt(a, m.c(1.0)), series, big)


def _half_exp(m: _Math, a):
    """exp(a) / 2 for a >= 0, finite as long as the result is."""
    return _exp_scaled(m, a, -1)


def _cosh(m: _Math, x):
    t = _half_exp(m, m.abs(x))
    return m.add(t, m.div(m.c(0.25), t))


def _tanh(m: _Math, x):
    a = m.abs(x)
    if not m.f64:
        # |x| >= 0.55: (1 - e) / (1 + e), e = exp(-2|x|) <= 1/3 by the shifter exp with the
        # products folded into the two fmas (|x| clamped at 10, where the result has rounded
        # to 1 and e is still normal): 32 vector ops a tanh-GELU vector against 48 for
        # 1 - 2 / (exp(2|x|) + 1) by the general exp
        small = m.mul(x, m.horner(m.mul(x, x), _TANH_F32))
        p, scale = _exp_parts(m, m.sel(m.lt(m.c(10.0), a), m.c(10.0), a), -2.0, 0)
        one = m.c(1.0)
        e = m.mul(p, scale)  # exact (scale a power of two, e normal): 1 -+ e round as the fmas did
        big = m.div(m.sub(one, e), m.add(one, e))
        return m.sel(m.lt(a, m.c(0.55)), small, m.copysign(big, x))
    em = m.call("expm1", m.mul(a, m.c(2.0)))
    y = m.div(em, m.add(em, m.c(2.0)))
    y = m.sel(m.gt(a, m.c(22.0 if m.f64 else 10.0)), m.c(1.0), y)
    return m.copysign(y, x)


def _exp_parts(m: _Math, x, f: float, off: int, coeffs_f32: Sequence[float] = _EXP_F32, square_of=None,
               recip: bool = False):
    """(p, scale) with p * scale = exp(f x) * 2**-off, for f a power of two (either sign) and
    x already clamped to where that is a normal number: the hot loops of sigmoid (SiLU),
    tanh (tanh-GELU) and tanh_softplus (Mish), so every vector op counts. The caller
    multiplies, or folds the product into an fma of its own.
    - k = round(f x / ln 2) by adding a shifter 1.5 2**mant + bias - off: t's low mantissa
      bits are then k + bias - off (no round, no float->int conversion, which is poison on
      NaN), and shifting t's bits left by mant gives 2**(k - off) in one integer op;
    - the reduction is done on x, s = x - k ln2 / f (ln 2 / f in two parts, k times the
      first exact), so f x is never formed, and the polynomial in s takes exp's
      coefficients times f**i;
    - a NaN x passes every step (its shifted bits give some finite scale; NaN times it is
      NaN), so there is no NaN blend;
    - `square_of`, where given, is a with x = a * a rounded (`_gelu`): the first reduction
      step is then fma(a, a, -k ln2_hi / f) (k ln2_hi / f exact), so exp(f a**2) of the exact
      square comes out, one add fewer than adding the square's rounding error to the reduced
      argument, and one rounding fewer;
    - `recip`: (P, S) with P / S = exp(f x), P = p 2**off (the coefficients scaled by 2**off)
      and S = 2**(off - k) (the shifter rounds -f x / ln 2 instead, whose bits give the
      reciprocal scale): sigmoid's 1 / (1 + exp(-x)) is then S / (S + P), an add where the
      scaling took an fma (x86's FMA pipe is what these loops are bound by: one 512-bit op a
      cycle, the add pipe beside it idle), and a NaN x still gives a NaN P."""
    b = m.b
    shifter = m.c(1.5 * 2.0 ** m.mant + m.bias + (off if recip else -off))
    g = -f if recip else f  # k (or -k for recip) = round(g x / ln 2)
    t = m.fma(x, m.c(g / math.log(2.0)), shifter)
    k = m.sub(t, shifter)
    l_hi, l_lo = _LN2[m.tag]
    if square_of is not None:
        r = m.fma(square_of, square_of, m.mul(k, m.c(-l_hi / g)))
    else:
        r = m.fma(k, m.c(-l_hi / g), x)
    r = m.fma(k, m.c(-l_lo / g), r)
    coeffs = _taylor(14) if m.f64 else coeffs_f32
    up = 2.0 ** off if recip else 1.0
    p = m.horner(r, [c * f ** j * up for j, c in enumerate(coeffs)])
    return p, b.bitcast(b.shl(b.bitcast(t, m.ity), m.i(m.mant)), m.ty)


def _clamp(m: _Math, x, lo: float, hi: float):
    """x clamped to [lo, hi], NaN passing: each clamp a select on an ordered compare, which
    x86 lowers to one max / min whose NaN operand order returns x (llvm.maxnum would drop the
    NaN: two more ops and a blend)."""
    x = m.sel(m.gt(m.c(lo), x), m.c(lo), x)
    return m.sel(m.lt(m.c(hi), x), m.c(hi), x)


# sigmoid(x) = c / (c + c exp(-x)), c = 2**-off: x is clamped to [lo, hi] (below lo the
# result rounds to 0, above hi to 1) and off keeps c exp(-x) normal over that range, so the
# one division rounds the result, denormals included
_SIGMOID_RANGE = {"f32": (-104.0, 25.0, 32), "f64": (-746.0, 40.0, 64)}


def _sigmoid(m: _Math, x):
    # 15 vector ops per 16 f32 elements (two clamps, the shifter exp with c added in its last
    # fma, the division) against 18 for exp(-|x|) then num / (1 + e) with num = e or 1 by the
    # sign of x (an abs, a compare and a blend): SiLU alone 8-10% faster in cache. NOTE: a
    # reciprocal estimate (`fdiv arcp`: vrcp14ps and a Newton step) measured slower than
    # vdivps on this machine's Zen 4 core (three more FMA-port ops) and less accurate.
    # c / (c + c exp(-x)) as S / (S + P) (`_exp_parts` recip: P / S = exp(-x), S = 2**(off - k)
    # normal over the clamp's range): the same quotient scaled by a power of two, so the same
    # roundings and the same result, with the scaling fma an add (one 512-bit FMA-pipe op of
    # 11 fewer a SiLU vector)
    lo, hi, off = _SIGMOID_RANGE[m.tag]
    p, s = _exp_parts(m, _clamp(m, x, lo, hi), -1.0, off, recip=True)
    return m.div(s, m.add(s, p))


def _softplus(m: _Math, x):
    # max(x, 0) + log1p(exp(-|x|)): no overflow for large x, full accuracy for very negative x
    t = m.call("log1p", m.call("exp", m.b.fneg(m.abs(x))))
    return m.add(m.maxnum(x, m.c(0.0)), t)


# tanh_softplus: x clamped to [lo, hi] (above hi the result has rounded to 1, below lo to 0)
# and e = exp(x) computed scaled, E = e 2**up, so that E, E (E + 2 2**up) and 2 2**(2 up)
# are normal numbers over that range (denormal results come out of the one division)
_TANH_SOFTPLUS_RANGE = {"f32": (-104.0, 20.0, 32), "f64": (-746.0, 40.0, 64)}


def _tanh_softplus(m: _Math, x):
    # tanh(log(1 + e)) = n / (n + 2), n = e (e + 2): with E = e c, c = 2**up, that is
    # N / (N + 2 c**2), N = E (E + 2 c), the sum E + 2 c folded into the exp's last fma
    lo, hi, up = _TANH_SOFTPLUS_RANGE[m.tag]
    p, scale = _exp_parts(m, _clamp(m, x, lo, hi), 1.0, -up)
    e = m.mul(p, scale)  # exact (a power of two, E normal): E + 2 c rounds as the fma did, on the add pipe
    n = m.mul(e, m.add(e, m.c(2.0 * 2.0 ** up)))
    return m.div(n, m.add(n, m.c(2.0 * 2.0 ** (2 * up))))


def _asinh(m: _Math, x):
    a = m.abs(x)
    one = m.c(1.0)
    a2 = m.mul(a, a)
    small = m.call("log1p", m.add(a, m.div(a2, m.add(one, m.sqrt(m.add(one, a2))))))
    big = m.add(m.call("log", a), m.c(math.log(2.0)))
    y = m.sel(m.gt(a, m.c(2.0 ** (28 if m.f64 else 12))), big, small)
    return m.copysign(y, x)


def _acosh(m: _Math, x):
    t = m.sub(x, m.c(1.0))
    small = m.call("log1p", m.add(t, m.sqrt(m.fma(t, t, m.mul(t, m.c(2.0))))))
    big = m.add(m.call("log", x), m.c(math.log(2.0)))
    y = m.sel(m.gt(x, m.c(2.0 ** (28 if m.f64 else 12))), big, small)
    return m.sel(m.lt(x, m.c(1.0)), m.nan(), y)


def _atanh(m: _Math, x):
    a = m.abs(x)
    y = m.mul(m.c(0.5), m.call("log1p", m.div(m.mul(a, m.c(2.0)), m.sub(m.c(1.0), a))))
    return m.copysign(y, x)


# ---- erf ----------------------------------------------------------------------------------


def _erf(m: _Math, x):
    return _erf_f64(m, x) if m.f64 else _erf_f32(m, x, x)


def _erf_div(m: _Math, x, c):
    """erf(x / c) (the exact GELU's erf(x / sqrt 2), c a constant there). f32: no division:
    y = x (1/c) (1/c folds to a constant) is within an ulp of x / c, and the big branch takes
    it as its argument (an argument off by d moves erf by erfc(y) 2 y d, at most 0.3 ulp, at
    y = 1); the small branch, where erf ~ its argument, adds x / c corrected by one fma step
    (q = y + (x - y c) / c: within a hair of correctly rounded) as its leading term. For an
    infinite x, q is NaN but the big branch is taken. 3 vector ops against one vdivps (the
    GELU loop measured 8% faster with x times 1/sqrt 2 than with the division, [4, 512, 768]
    at 1 thread)."""
    if m.f64:
        return _erf_f64(m, m.div(x, c))
    r = m.div(m.c(1.0), c)
    y = m.mul(x, r)
    q = m.fma(m.fma(m.b.fneg(y), c, x), r, y)
    return _erf_f32(m, y, q)


def _erf_f64(m: _Math, x):
    b = m.b
    a = m.abs(x)
    z = m.mul(x, x)
    lo, hi, cheb = _ERFC_Q["f64"]
    ac = m.minnum(a, m.c(hi))
    u = m.fma(ac, m.c(2.0 / (hi - lo)), m.c(-(lo + hi) / (hi - lo)))
    two_sqrtpi = 2.0 / math.sqrt(math.pi)
    small = m.mul(x, m.horner(z, [two_sqrtpi * (-1.0) ** n / (math.factorial(n) * (2 * n + 1)) for n in range(19)]))
    q = m.clenshaw(u, cheb)
    h = m.mul(ac, ac)
    lo_bits = m.fma(ac, ac, b.fneg(h))  # ac*ac = h + lo_bits exactly
    e = m.mul(m.call("exp", b.fneg(h)), m.sub(m.c(1.0), lo_bits))
    big = m.copysign(m.sub(m.c(1.0), m.mul(e, q)), x)
    return m.sel(m.isnan(x), x, m.sel(m.lt(a, m.c(1.0)), small, big))


def _erf_f32(m: _Math, x, lead):
    """erf(x) in f32 (the exact GELU's loop), with `lead` (x itself, or a more accurate value
    of the argument x approximates: `_erf_div`) the small branch's argument.
    Below 1: lead + lead P(lead**2); above, 1 - exp(-h) Q(|x|), h = x**2, |x| clamped at 4
    NaN-passing, so a NaN x comes out of the big branch as NaN with no blend. exp(-h) by the
    shifter exp (h <= 16: a normal result), its scale applied in the fma that forms 1 - e Q.
    No correction for the rounding of h (f64's lo_bits): it moves exp(-h) by h 2**-24
    relative, and erf by erfc(x) h 2**-24, at most 0.2 ulp (x = 1)."""
    b = m.b
    a = m.abs(x)
    lo, hi = 1.0, 4.0
    ac = m.sel(m.lt(m.c(hi), a), m.c(hi), a)
    u = m.fma(ac, m.c(2.0 / (hi - lo)), m.c(-(lo + hi) / (hi - lo)))
    small = m.fma(lead, m.horner(m.mul(lead, lead), _ERF_SMALL_F32), lead)
    q = m.horner(u, _ERFC_Q_F32)
    p, scale = _exp_parts(m, m.mul(ac, ac), -1.0, 0, _EXP_ERF_F32)
    big = m.fma(b.fneg(m.mul(p, q)), scale, m.c(1.0))
    # the sign after the blend: the big branch's, and a zero's (lead + x P is +0 for x = -0
    # when lead is `_erf_div`'s corrected quotient)
    return m.copysign(m.sel(m.lt(a, m.c(1.0)), small, big), x)


# ---- the exact GELU (f32) ---------------------------------------------------------------------

#: R(a) = exp(a**2 / 2) erfc(a / c) for a in [0, 13.25], c = sqrt 2 rounded to f32 (the divisor
#: exporters write), as P(a) / Q(a) of degrees 4 / 5 with P(0) = Q(0) = 1: Lawson's weighted
#: least squares for relative error at 5000 Chebyshev nodes against mpmath, each coefficient
#: rounded to f32 before the rest were refitted; relative error 1.5e-8 with these f32
#: coefficients (exact arithmetic). R falls from 1 to 0.1 like the Mills ratio, which a
#: polynomial in a could not follow on this range at a useful degree (11 gave 4e-7 relative);
#: all coefficients positive, so Horner in f32 adds little error.
_GELU_P = (1.0, 0.8997335433959961, 0.38275569677352905, 0.08655517548322678, 0.008970357477664948)
_GELU_Q = (1.0, 1.6976184844970703, 1.237254023551941, 0.4909186363220215, 0.10847850143909454,
           0.011242909356951714)
#: |x| clamp: the shifter exp's scale 2**(k - 1) has zero bits (is exactly 0) once
#: a**2 / (2 ln 2) rounds to 126, from a = 13.19 to 13.24, so GELU(x <= -13.19) is exactly -0
#: (true value below 2e-37), GELU(-inf) NaN as the graph's -inf * 0, and a is never past 13.24
#: (k = -127 would wrap the scale's bits)
_GELU_CLAMP = 13.2


def _gelu(m: _Math, x):
    """x Phi(x) = x / 2 (1 + erf(x / c)), c = sqrt 2 rounded to f32: the exact GELU of a
    whole `x * 0.5 * (1 + erf(x / sqrt 2))` (codegen/llvm/gelu_forms.py), f32 only.
    Phi(-a) = erfc(a / c) / 2 = exp(-a**2 / 2) R(a) / 2 for a = |x| (clamped): the shifter
    exp with its 2**-1 in the scale, reduced on the exact a**2 (`_exp_parts` square_of),
    the rational R, then Phi = Phi(-a) for x < 0 and 1 - Phi(-a) otherwise, so
    neither side cancels (the graph's 1 + erf(x / c) does for x < 0: its error there, and
    onnxruntime's, is absolute, up to 4.3e-8 |x|). In the LayerNorm chain's first pass
    (x86 AVX-512, counted in the assembly): 30 arithmetic vector ops per 16 floats, one of
    them a division, against 37 for h + h erf_div(x, c) (two branches of erf, each a
    polynomial, one with an exp), whose constants also did not all fit the registers (6.5
    reloads a vector). Error: see tests/codegen/test_vmath_gelu.py."""
    if m.f64:
        raise TypeError("vmath gelu is f32 only (the f64 GELU stays h + h erf_div)")
    a = m.abs(x)
    ac = m.sel(m.lt(m.c(_GELU_CLAMP), a), m.c(_GELU_CLAMP), a)  # NaN passes
    h = m.mul(ac, ac)
    p, scale = _exp_parts(m, h, -0.5, 1, square_of=ac)
    rat = m.div(m.horner(ac, _GELU_P), m.horner(ac, _GELU_Q))
    e = m.mul(p, rat)
    below = m.mul(e, scale)  # Phi(-a)
    # 1 - Phi(-a) = Phi(a): below is exact where scale is normal, so the sum rounds as the fma
    # 1 - e scale did (and where it is not, both are 1), on the add pipe
    above = m.sub(m.c(1.0), below)
    return m.mul(x, m.sel(m.lt(x, m.c(0.0)), below, above))


# ---- pow ----------------------------------------------------------------------------------


def _pow(m: _Math, x, y):
    b = m.b
    if not m.f64:  # f32 pow in double, rounded once
        r = b.call(math_function(m.module, "pow", F64), [b.fpext(x, F64), b.fpext(y, F64)])
        return b.fptrunc(r, F32)
    c = m.c
    yint = m.eq(m.floor(y), y)
    ay = m.abs(y)
    # integer |y| <= 1024 by binary powering, unrolled, taken only when every product that
    # counts was exact (its fma residual is 0): then x**|y| is exact and 1 / x**|y| rounds once
    n = b.fptosi(m.minnum(ay, c(1024.0)), I32)
    acc, base = c(1.0), x
    inexact = ir.Constant(ir.IntType(1), 0)
    zero32 = ir.Constant(I32, 0)
    for bit in range(11):
        on = b.icmp_unsigned("!=", b.and_(n, ir.Constant(I32, 1 << bit)), zero32)
        prod = m.mul(acc, base)
        lost = b.fcmp_unordered("!=", m.fma(acc, base, b.fneg(prod)), c(0.0))
        inexact = b.or_(inexact, b.and_(on, lost))
        acc = m.sel(on, prod, acc)
        sq = m.mul(base, base)
        used = b.icmp_unsigned("!=", b.lshr(n, ir.Constant(I32, bit + 1)), zero32)  # a higher bit reads it
        inexact = b.or_(inexact, b.and_(used, b.fcmp_unordered("!=", m.fma(base, base, b.fneg(sq)), c(0.0))))
        base = sq
    r_int = m.sel(m.lt(y, c(0.0)), m.div(c(1.0), acc), acc)
    use_int = b.and_(b.and_(yint, b.fcmp_ordered("<=", ay, c(1024.0))), b.not_(inexact))
    # the general case: exp(y log|x|) with y log|x| in double-double, and IEEE special cases
    ax = m.abs(x)
    l_hi, l_lo = _log_dd(m, ax)
    l_hi = _log_specials(m, ax, l_hi)  # log 0 = -inf, log inf = inf
    p = m.mul(y, l_hi)
    p_lo = m.add(m.fma(y, l_hi, b.fneg(p)), m.mul(y, l_lo))
    p_lo = m.sel(m.lt(m.abs(p), c(math.inf)), p_lo, c(0.0))
    r = m.call("exp", p)
    r = m.sel(m.lt(r, c(math.inf)), m.fma(r, p_lo, r), r)  # exp(p + p_lo) = exp(p) (1 + p_lo)
    half = m.mul(y, c(0.5))
    odd = b.and_(yint, b.fcmp_unordered("!=", m.floor(half), half))
    sign = b.icmp_signed("<", b.bitcast(x, I64), ir.Constant(I64, 0))
    r = m.sel(b.and_(odd, sign), b.fneg(r), r)
    bad = b.and_(b.and_(m.lt(x, c(0.0)), b.not_(yint)), b.fcmp_ordered("!=", x, c(-math.inf)))
    r = m.sel(bad, m.nan(), r)
    r = m.sel(use_int, r_int, r)
    one_special = b.and_(m.eq(ax, c(1.0)), m.eq(ay, c(math.inf)))
    r = m.sel(b.or_(one_special, m.eq(x, c(1.0))), c(1.0), r)
    return m.sel(m.eq(y, c(0.0)), c(1.0), r)


_BUILDERS: dict[str, Callable] = {
    "exp": _exp, "expm1": _expm1, "log": _log, "log1p": _log1p, "log2": _log2, "sin": _sin, "cos": _cos,
    "tan": _tan, "pow": _pow, "tanh": _tanh, "sigmoid": _sigmoid, "softplus": _softplus, "erf": _erf,
    "erf_div": _erf_div,
    "tanh_softplus": _tanh_softplus, "gelu": _gelu,
    "asin": _asin, "acos": _acos, "atan": _atan, "sinh": _sinh,
    "cosh": _cosh, "asinh": _asinh, "acosh": _acosh, "atanh": _atanh,
}
assert set(_BUILDERS) == set(FUNCTIONS) | set(F32_FUNCTIONS)
