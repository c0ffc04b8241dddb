"""vmath through whole kernels: every transcendental elementwise op, JIT-compiled as an ONNX
model over a vector (so the vectorized loop and its scalar tail are what runs), compared in
ulps with numpy's double-precision result; Pow's constant exponents strength-reduced; and
the check that no compiled loop calls a scalar libm function (sample models and a tanh-GELU
model through the full pipeline, asserting on the optimized assembly)."""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper as h

import onnxcc
from onnxcc.testing import jit_compile

ROOT = Path(__file__).resolve().parents[2]
N = 1003  # not a multiple of any vector width: the scalar tail runs too

# op -> (numpy reference in double, sampled argument range, worst ulp allowed in f32)
OPS = {
    "Exp": (np.exp, (-104, 89), 3), "Log": (np.log, (1e-30, 1e30), 3), "Tanh": (np.tanh, (-12, 12), 3),
    "Sin": (np.sin, (-1e4, 1e4), 3), "Cos": (np.cos, (-1e4, 1e4), 3), "Tan": (np.tan, (-10, 10), 3),
    "Asin": (np.arcsin, (-1, 1), 3), "Acos": (np.arccos, (-1, 1), 3), "Atan": (np.arctan, (-1e6, 1e6), 3),
    "Sinh": (np.sinh, (-89, 89), 3), "Cosh": (np.cosh, (-89, 89), 3), "Asinh": (np.arcsinh, (-1e6, 1e6), 3),
    "Acosh": (np.arccosh, (1, 1e6), 3), "Atanh": (np.arctanh, (-1, 1), 3),
    "Erf": (np.vectorize(math.erf), (-6, 6), 3), "Sigmoid": (lambda v: 1 / (1 + np.exp(-v)), (-100, 100), 3),
    "Softplus": (lambda v: np.logaddexp(v, 0), (-100, 100), 3),
}
SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40, 1.0, -1.0, 1e30, -1e30], np.float32)


def _model(op: str, extra: list | None = None, inits: dict | None = None) -> onnx.ModelProto:
    x = h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N"])
    y = h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["N"])
    node = h.make_node(op, ["x", *(extra or [])], ["y"])
    init = [onnx.numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in (inits or {}).items()]
    m = h.make_model(h.make_graph([node], "g", [x], [y], init), opset_imports=[h.make_opsetid("", 18)])
    m.ir_version = 10
    return m


def _ulps(got: np.ndarray, want64: np.ndarray) -> float:
    """Worst error of `got` (f32) in ulps of the f32-rounded reference; NaNs and infinities
    must match exactly."""
    with np.errstate(over="ignore"):
        want = want64.astype(np.float32)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan), "NaN where the reference is not (or the reverse)"
    inf = np.isinf(want)
    assert np.array_equal(got[inf], want[inf]), "wrong infinity"
    fin = ~nan & ~inf
    ulp = np.spacing(np.abs(want[fin])).astype(np.float64)
    ulp = np.maximum(ulp, float(np.finfo(np.float32).smallest_subnormal))
    return float(np.max(np.abs(got[fin].astype(np.float64) - want64[fin]) / ulp, initial=0.0))


#: LLVM intrinsics that the x86 and NVPTX backends lower to libm calls (scalar ones, even for
#: a vector operand: llvm.sin.v8f32 becomes eight sinf calls)
LIBM_INTRINSICS = ("sin", "cos", "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "tanh", "exp", "exp2",
                   "exp10", "log", "log2", "log10", "pow", "powi")


def _external_calls(llvm_ir: str) -> set[str]:
    """Functions the optimized IR calls that it does not define, libm-backed intrinsics
    included."""
    defined = set(re.findall(r"^define [^@]*@\"?([\w.$]+)", llvm_ir, re.MULTILINE))
    called = set(re.findall(r"\bcall [^@]*@\"?([\w.$]+)", llvm_ir))
    return {c for c in called - defined
            if not c.startswith("llvm.") or c.split(".")[1] in LIBM_INTRINSICS}


@pytest.mark.parametrize("op", sorted(OPS))
def test_unary_op_vectorized_and_accurate(op):
    ref, (lo, hi), limit = OPS[op]
    _, _, k = jit_compile(_model(op))
    # the loop body is vector code, and nothing outside the kernel is called
    assert re.search(r"<\d+ x float>", k.optimized_ir), f"{op}: the loop was not vectorized"
    assert _external_calls(k.optimized_ir) == set(), f"{op} calls {_external_calls(k.optimized_ir)}"
    rng = np.random.default_rng(len(op))
    if lo > 0 and hi / lo > 1e3:
        x = np.exp(rng.uniform(math.log(lo), math.log(hi), N))
    else:
        x = rng.uniform(lo, hi, N)
    x = np.concatenate([x.astype(np.float32), SPECIALS])
    (got,) = k(x, syms={"N": x.size})
    with np.errstate(all="ignore"):
        want = ref(x.astype(np.float64))
    worst = _ulps(got, want)
    assert worst <= limit, f"{op}: {worst:.2f} ulp"


# exponent -> whether the kernel must compute it without the general pow
POW_EXPONENTS = {2.0: True, 3.0: True, 4.0: True, -1.0: True, -2.0: True, -3.0: True, -4.0: False,
                 0.5: True, -0.5: True, 1.5: False, 7.0: False, -2.5: False}


@pytest.mark.parametrize("y", sorted(POW_EXPONENTS))
def test_pow_constant_exponent(y):
    _, prog, k = jit_compile(_model("Pow", ["e"], {"e": y}))
    assert ("pow(" not in str(prog)) == POW_EXPONENTS[y], str(prog)
    assert _external_calls(k.optimized_ir) == set()
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.uniform(-4, 4, N), np.exp(rng.uniform(-20, 20, N)),
                        [0.0, -0.0, np.inf, -np.inf, np.nan, 1e20, -1e20, 1e-20]]).astype(np.float32)
    (got,) = k(x, syms={"N": x.size})
    with np.errstate(all="ignore"):
        want = np.power(x.astype(np.float64), y)
    # IEEE pow (and onnxruntime) where numpy's differs: pow(-inf, 0.5) = inf, pow(-0, 0.5) = +0
    want[x == -np.inf] = math.pow(-math.inf, y)
    if y > 0:
        want[(x == 0) & np.signbit(x)] = math.pow(-0.0, y)
    assert _ulps(got, want) <= 4.0
    num = ~np.isnan(want)
    assert np.array_equal(np.signbit(got[num]), np.signbit(want[num].astype(np.float32)))  # +-0, +-inf


def _gelu_tanh_model() -> onnx.ModelProto:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from gelu_tanh import build_model
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return build_model()


#: what a compiled CPU library may call: the runtime's thread pool (and its size, for GEMM
#: blocking), and memory primitives
RUNTIME_CALLS = {"onnxcc_parallel_for", "onnxcc_num_threads", "memcpy", "memset", "memmove"}


@pytest.mark.parametrize("name", ["gelu_tanh", "gelu_layernorm", "transformer", "mlp"])
def test_no_scalar_libm_call_in_compiled_models(name, tmp_path):
    """The guard against the libm cliff: a compiled model's assembly calls nothing but the
    runtime (a `tanhf`, `logf`, `sinf`, `expf`, ... call keeps its loop scalar)."""
    if name == "gelu_tanh":
        path = tmp_path / "gelu_tanh.onnx"
        onnx.save(_gelu_tanh_model(), path)
    else:
        path = ROOT / "models" / f"{name}.onnx"
    art = onnxcc.compile(path, tmp_path / "out", emit="asm")
    targets = set(re.findall(r"^\s*(?:call|jmp)q?\s+\*?([\w.$@]+)", art.text, re.MULTILINE))
    defined = set(re.findall(r"^([\w.$]+):", art.text, re.MULTILINE))
    external = {t.removesuffix("@PLT") for t in targets if not t.startswith(".L")} - defined
    assert external <= RUNTIME_CALLS, f"{name} calls {sorted(external - RUNTIME_CALLS)}"
    if name.startswith("gelu"):  # the fused GELU loop runs on packed vectors
        assert re.search(r"\bv?(?:mul|fmadd\d+|add)ps\b", art.text)


def test_tanh_gelu_as_x_times_a_sigmoid(tmp_path):
    """tanh-GELU's x * (1 + tanh(u)) * 0.5 (either operand order of the sum) is emitted as
    x sigmoid(2 u), and its argument s (x + k x**3) as 2 u = x (2 s + 2 s k x**2)
    (codegen/llvm/gelu_forms.py): no tanh left in the kernel, and the result within 3 ulp
    of the exact double GELU of the same constants over the range, its cancelling tail (u
    down to -40), specials and f32 extremes included, plus what any f32 evaluation of u
    costs: u rounded (the graph's four roundings, the kernel's three, each 2**-24 relative)
    moves the result by (1 - sigmoid(2 u)) |2 u| 4 2**-24 relative, up to 8 (1 - sigmoid)
    |2 u| ulps (about 160 at u = -10: the graph's own f32 evaluation is off by as much)."""
    n = h.make_node
    k, s = 0.044715, math.sqrt(2 / math.pi)
    for order in (["t", "one"], ["one", "t"]):
        nodes = [n("Mul", ["x", "x"], ["x2"]), n("Mul", ["x2", "x"], ["x3"]), n("Mul", ["x3", "k"], ["kx3"]),
                 n("Add", ["x", "kx3"], ["i"]), n("Mul", ["i", "s"], ["u"]), n("Tanh", ["u"], ["t"]),
                 n("Add", order, ["t1"]), n("Mul", ["x", "t1"], ["xt"]), n("Mul", ["xt", "half"], ["y"])]
        inits = [onnx.numpy_helper.from_array(np.asarray(v, np.float32), nm)
                 for nm, v in (("k", k), ("s", s), ("one", 1.0), ("half", 0.5))]
        g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N"])],
                         [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["N"])], inits)
        m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
        m.ir_version = 10
        out = tmp_path / order[0]
        ll = onnxcc.compile(m, out / "ll", name="g", emit="llvm").text  # the fused loop, through fuse
        assert "onnxcc.math.sigmoid" in ll and "onnxcc.math.tanh" not in ll
        onnxcc.compile(m, out / "lib", name="g")
        rng = np.random.default_rng(9)
        x = np.concatenate([rng.uniform(-12, 12, N), rng.uniform(-6, -2, N // 2), SPECIALS,
                            [3.4e38, -3.4e38, 1e10, -1e10]]).astype(np.float32)
        got = np.asarray(onnxcc.load(out / "lib").run({"x": x})["y"])
        with np.errstate(all="ignore"):
            xd = x.astype(np.float64)
            u2 = 2.0 * float(np.float32(s)) * (xd + float(np.float32(k)) * xd ** 3)
            sig = 1.0 / (1.0 + np.exp(-u2))
            want = xd * sig  # x (1 + tanh(u)) / 2 exactly: no overflow of x * 2 at 3.4e38
            slack = np.nan_to_num(8.0 * (1.0 - sig) * np.abs(u2))
        nan, inf = np.isnan(want), np.isinf(want)
        assert np.array_equal(np.isnan(got), nan) and np.array_equal(got[inf], want[inf])
        fin = ~nan & ~inf
        # where sigmoid(2 u) is denormal (u < -43.7) x scales its absolute error: there the
        # bound is 4 |x| of the smallest denormal, plus u's rounding (relative, as above)
        tiny = fin & (np.abs(want) < 2 * float(np.finfo(np.float32).tiny) * np.maximum(np.abs(x), 1))
        big = fin & ~tiny
        ulp = np.spacing(np.abs(want[big]).astype(np.float32)).astype(np.float64)
        ulps = np.abs(got[big].astype(np.float64) - want[big]) / ulp
        assert (ulps <= 3.0 + slack[big]).all(), float(np.max(ulps - slack[big]))
        err = np.abs(got[tiny].astype(np.float64) - want[tiny])
        bound = 4 * np.abs(x[tiny]) * float(np.finfo(np.float32).smallest_subnormal) \
            + slack[tiny] * 2.0 ** -24 * np.abs(want[tiny])
        assert (err <= bound).all()
