"""codegen/cuda_math: the device math functions, JIT-compiled for the host (the IR is target
independent) and compared with mpmath in ulps, plus IEEE special values against numpy."""

from __future__ import annotations

import ctypes
import functools
import math

import llvmlite.binding as llvm
import mpmath as mp
import numpy as np
import pytest
from llvmlite import ir

from onnxcc.codegen import cuda_math as cm
from onnxcc.codegen.cpu import parse_modules, target_machine
from onnxcc.codegen.cpu import optimize as optimize_module
from onnxcc.codegen.llvm_helpers import I64, PTR, for_range

# name -> (mpmath reference, sampling: (lo, hi, "lin" | "log"))
REFERENCE = {
    "exp": (mp.exp, (-80, 80, "lin")),
    "expm1": (mp.expm1, (-5, 5, "lin")),
    "log": (mp.log, (1e-30, 1e30, "log")),
    "log1p": (mp.log1p, (-0.99, 100, "lin")),
    "sin": (mp.sin, (-100, 100, "lin")),
    "cos": (mp.cos, (-100, 100, "lin")),
    "tan": (mp.tan, (-10, 10, "lin")),
    "tanh": (mp.tanh, (-12, 12, "lin")),
    "erf": (mp.erf, (-7, 7, "lin")),
    "asin": (mp.asin, (-1, 1, "lin")),
    "acos": (mp.acos, (-1, 1, "lin")),
    "atan": (mp.atan, (-100, 100, "lin")),
    "sinh": (mp.sinh, (-80, 80, "lin")),
    "cosh": (mp.cosh, (-80, 80, "lin")),
    "asinh": (mp.asinh, (1e-6, 1e6, "log")),
    "acosh": (mp.acosh, (1, 1e6, "log")),
    "atanh": (mp.atanh, (-0.999, 0.999, "lin")),
    "pow": (mp.power, (0.01, 10, "lin")),
}
MAX_ULP = {"f32": 3.0, "f64": 4.0}
MAX_ULP_F64 = {"pow": 64.0}  # exp(y log x) in double: the error grows with |y log x|


@functools.cache
def _engine():
    mod = ir.Module("cuda_math_test")
    for name in cm.FUNCTIONS:
        for ty in (cm.F32, cm.F64):
            f = cm.math_function(mod, name, ty)
            w = ir.Function(mod, ir.FunctionType(ir.VoidType(), [PTR, PTR, PTR, I64]),
                            f"t_{name}_{cm.type_tag(ty)}")
            b = ir.IRBuilder(w.append_basic_block())
            a, a2, o, n = w.args
            with for_range(b, n, "i") as i:
                args = [b.load(b.gep(a, [i], source_etype=ty), typ=ty)]
                if name == "pow":
                    args.append(b.load(b.gep(a2, [i], source_etype=ty), typ=ty))
                b.store(b.call(f, args), b.gep(o, [i], source_etype=ty))
            b.ret_void()
    tm = target_machine(jit=True)
    ref = parse_modules(mod)
    optimize_module(ref, tm, 2)
    ee = llvm.create_mcjit_compiler(ref, tm)
    ee.finalize_object()
    return ee


def run(name: str, x: np.ndarray, y: np.ndarray | None = None) -> np.ndarray:
    tag = "f32" if x.dtype == np.float32 else "f64"
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(
        _engine().get_function_address(f"t_{name}_{tag}"))
    x = np.ascontiguousarray(x)
    y = x if y is None else np.ascontiguousarray(y.astype(x.dtype))
    out = np.empty_like(x)
    fn(x.ctypes.data, y.ctypes.data, out.ctypes.data, x.size)
    return out


def _samples(name: str, dt, n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(sum(map(ord, name)))  # stable across processes
    lo, hi, kind = REFERENCE[name][1]
    x = np.exp(rng.uniform(math.log(lo), math.log(hi), n)) if kind == "log" else rng.uniform(lo, hi, n)
    if name in ("asinh", "atanh", "sin", "tan", "erf", "tanh", "atan", "sinh", "expm1", "log1p", "asin"):
        x = np.concatenate([x, rng.uniform(-1e-3, 1e-3, n // 8)])  # small arguments keep relative accuracy
    if name == "asinh":
        x = x * np.where(rng.random(x.size) < 0.5, -1, 1)
    return x.astype(dt), rng.uniform(-6, 6, x.size).astype(dt)


@pytest.mark.parametrize("tag", ["f32", "f64"])
@pytest.mark.parametrize("name", cm.FUNCTIONS)
def test_cuda_math_accuracy(name, tag):
    dt = np.float32 if tag == "f32" else np.float64
    x, y = _samples(name, dt, 300 if tag == "f32" else 150)
    got = run(name, x, y if name == "pow" else None)
    mp.mp.dps = 40
    ref_fn = REFERENCE[name][0]
    worst = 0.0
    for xi, yi, gi in zip(x, y, got):
        r = ref_fn(mp.mpf(float(xi)), mp.mpf(float(yi))) if name == "pow" else ref_fn(mp.mpf(float(xi)))
        rv = dt(float(r))
        if not np.isfinite(rv):
            continue
        ulp = float(np.spacing(np.abs(rv))) if rv != 0 else float(np.finfo(dt).smallest_subnormal)
        worst = max(worst, abs(float(gi) - float(r)) / ulp)
    limit = MAX_ULP_F64.get(name, MAX_ULP[tag]) if tag == "f64" else MAX_ULP[tag]
    assert worst <= limit, f"{name} {tag}: {worst:.1f} ulp"


SPECIALS = {
    "exp": [np.inf, -np.inf, np.nan, 0.0, -0.0, 1000.0, -1000.0, -103.0],
    "expm1": [np.inf, -np.inf, np.nan, 0.0, 1e-10],
    "log": [0.0, -0.0, -1.0, np.inf, np.nan, 1e-40, 1.0, 2.0],
    "log1p": [-1.0, -2.0, np.inf, np.nan, 0.0, 1e-10],
    "sin": [np.inf, np.nan, 0.0, -0.0, 1e-8],
    "cos": [np.inf, np.nan, 0.0],
    "tan": [0.0, np.nan, np.inf],
    "tanh": [np.inf, -np.inf, np.nan, 0.0, -0.0, 20.0, -20.0, 1e-8],
    "erf": [np.inf, -np.inf, np.nan, 0.0, -0.0, 3.9, 4.1, 6.5, -1.0, 1.0, 1e-8],
    "asin": [1.0, -1.0, 2.0, np.nan],
    "acos": [1.0, -1.0, 2.0, np.nan],
    "atan": [np.inf, -np.inf, np.nan, 0.0, 1.0],
    "sinh": [np.inf, -np.inf, np.nan, 0.0, 89.0, -89.0, 710.0],
    "cosh": [np.inf, -np.inf, np.nan, 0.0, 89.0, 710.0],
    "asinh": [np.inf, -np.inf, np.nan, 0.0, 1e30],
    "acosh": [1.0, 0.5, np.inf, np.nan, 1e30],
    "atanh": [1.0, -1.0, 2.0, np.nan, 0.0],
}
NUMPY = {"erf": np.vectorize(lambda v: v if math.isnan(v) else math.erf(v)), "asin": np.arcsin,
         "acos": np.arccos, "atan": np.arctan, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh}


@pytest.mark.parametrize("tag", ["f32", "f64"])
def test_cuda_math_special_values(tag):
    dt = np.float32 if tag == "f32" else np.float64
    for name, xs in SPECIALS.items():
        x = np.array(xs, dt)
        with np.errstate(all="ignore"):
            want = NUMPY.get(name, getattr(np, name, None))(x.astype(np.float64)).astype(dt)
        got = run(name, x)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=0, err_msg=f"{name} {tag} at {xs}")


@pytest.mark.parametrize("tag", ["f32", "f64"])
def test_cuda_math_pow_cases(tag):
    dt = np.float32 if tag == "f32" else np.float64
    cases = [(2, 0.5), (-2, 2), (-2, 3), (-2, 0.5), (0, -1), (-0.0, -1), (-0.0, 3), (0, 2), (np.nan, 0),
             (1, np.nan), (-1, np.inf), (np.inf, -2), (-np.inf, 3), (-np.inf, 0.5), (3, 4), (2, -2), (7, 11), (-8, 1 / 3)]
    a = np.array([c[0] for c in cases], dt)
    b = np.array([c[1] for c in cases], dt)
    got = run("pow", a, b)
    with np.errstate(all="ignore"):
        want = np.power(a, b)
    np.testing.assert_allclose(got, want, rtol=1e-6 if tag == "f32" else 1e-14, atol=0)
    num = ~np.isnan(want)
    assert list(np.signbit(got[num])) == list(np.signbit(want[num]))  # -0.0 and -inf where IEEE says so
    ints = run("pow", np.array([3, 7, -5, 10], dt), np.array([4, 11, 3, 6], dt))
    assert list(ints) == [81, 7 ** 11, -125, 10 ** 6]  # integer powers are exact
