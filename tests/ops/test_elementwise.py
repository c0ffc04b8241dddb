"""Elementwise ops: symbolic shape rules and value propagation on textual IR, the numpy
references against onnxruntime on single-node models, and shape errors."""

import numpy as np
import pytest
import sympy

from onnxcc.errors import PassError, ShapeError
from onnxcc.ir import sym
from onnxcc.ir.parser import parse_module
from onnxcc.ops.dtypes import onnx_dtype, onnx_enum
from onnxcc.passes.shape_inference import infer_shapes

F32, I64, I32, BOOL = np.float32, np.int64, np.int32, np.bool_
ENVS = ({"N": 1, "M": 3}, {"N": 5, "M": 2})

# ---- shape rules on textual IR ----------------------------------------------------------------------


def test_broadcast_symbolic_dims(infer_ir):
    m = infer_ir("""module @t {
  sym N in [1, 64]
  sym M in [1, 64]
  func @main(%a: f32[N, 1], %b: f32[M]) -> (f32[?, ?]) {
    %0 = onnx.Add(%a, %b) loc("add0") : (f32[?, ?])
    %1 = onnx.Relu(%0) : (f32[?, ?])
    %2 = onnx.Less(%1, %a) : (f32[?, ?])
    return %2
  }
}""")
    text = str(m)
    assert "onnx.Add(%a, %b) loc(\"add0\") : (f32[N, M])" in text
    assert "onnx.Relu(%0) : (f32[N, M])" in text
    assert "onnx.Less(%1, %a) : (bool[N, M])" in text
    assert "constraint" not in text


def test_broadcast_records_constraint(infer_ir):
    m = infer_ir("""module @t {
  sym N in [1, 64]
  sym M in [1, 64]
  func @main(%a: f32[N, 4], %b: f32[M, 4]) -> (f32[?, ?]) {
    %0 = onnx.Mul(%a, %b) loc("mul0") : (f32[?, ?])
    return %0
  }
}""")
    text = str(m)
    assert 'constraint N == M  // node "mul0": broadcast dim -2 (N == M)' in text
    assert "onnx.Mul(%a, %b) loc(\"mul0\") : (f32[N, 4])" in text


def test_variadic_where_cast_shapes(infer_ir):
    m = infer_ir("""module @t {
  sym N in [1, 64]
  func @main(%a: f32[N, 1], %b: f32[1, 3], %c: bool[N, 3], %i: i64[N])
      -> (f32[?, ?], f32[?, ?], i32[?], f32[?]) {
    %0 = onnx.Max(%a, %b, %a) : (f32[?, ?])
    %1 = onnx.Where(%c, %a, %b) : (f32[?, ?])
    %2 = onnx.Cast(%a) {to = 6} : (f32[?, ?])
    %3 = onnx.CastLike(%i, %a) : (f32[?])
    return %0, %1, %2, %3
  }
}""")
    text = str(m)
    assert "onnx.Max(%a, %b, %a) : (f32[N, 3])" in text
    assert "onnx.Where(%c, %a, %b) : (f32[N, 3])" in text
    assert "onnx.Cast(%a) {to = 6} : (i32[N, 1])" in text
    assert "onnx.CastLike(%i, %a) : (f32[N])" in text


def test_integer_value_propagation():
    m = parse_module("""module @t {
  sym N in [1, 4096]
  func @main(%x: f32[N]) -> (i64[2]) {
    %d = cc.dims() {dims = [#dim<N>, 8]} : (i64[2])
    %two = cc.const() {value = dense<i64[]: [2]>} : (i64[])
    %neg = cc.const() {value = dense<i64[2]: [-7, 7]>} : (i64[2])
    %m = onnx.Mul(%d, %two) : (i64[2])
    %q = onnx.Div(%d, %two) : (i64[2])
    %r = onnx.Mod(%d, %two) : (i64[2])
    %s = onnx.Sub(%q, %d) : (i64[2])
    %a = onnx.Abs(%s) : (i64[2])
    %t = onnx.Div(%neg, %two) : (i64[2])
    %mx = onnx.Max(%d, %two) : (i64[2])
    %e = onnx.Equal(%d, %two) : (bool[2])
    %w = onnx.Where(%e, %neg, %m) : (i64[2])
    %c = onnx.Cast(%m) {to = 1} : (f32[2])
    return %w
  }
}""")
    values = infer_shapes(m)
    ops = {o.results[0].name: o.results[0] for o in m.main.body.ops if o.results}
    N = sym("N")

    def val(name):
        return list(values[ops[name]])

    assert val("m") == [2 * N, 16]
    assert val("q") == [sympy.floor(N / 2), 4]
    assert val("r") == [sympy.Mod(N, 2), 0]
    assert val("t") == [-3, 3]  # integer Div truncates toward zero
    assert val("mx") == [sympy.Max(N, 2), 8]
    assert ops["e"] not in values  # Equal(N, 2) cannot be decided at compile time
    assert val("c") == [2 * N, 16]  # an integer dim cast to float keeps its value (float arange over seq)


def test_equal_where_value_chain():
    # exporter pattern: Where(Equal(shape, -1), fallback, shape) with provable comparisons
    m = parse_module("""module @t {
  sym N in [1, 4096]
  func @main(%x: f32[N]) -> (i64[2]) {
    %d = cc.dims() {dims = [#dim<N>, -1]} : (i64[2])
    %k = cc.const() {value = dense<i64[]: [-1]>} : (i64[])
    %one = cc.const() {value = dense<i64[2]: [1, 1]>} : (i64[2])
    %e = onnx.Equal(%d, %k) : (bool[2])
    %w = onnx.Where(%e, %one, %d) : (i64[2])
    %l = onnx.Less(%d, %one) : (bool[2])
    %n = onnx.Not(%l) : (bool[2])
    return %w
  }
}""")
    values = infer_shapes(m)
    res = {o.results[0].name: o.results[0] for o in m.main.body.ops if o.results}
    assert list(values[res["e"]]) == [0, 1]
    assert list(values[res["w"]]) == [sym("N"), 1]
    assert list(values[res["l"]]) == [0, 1]
    assert list(values[res["n"]]) == [1, 0]


def test_float_constants_in_shape_arithmetic():
    # torch's legacy export of `math.ceil(h / 2) * 2` (MobileViT's patch padding): the dim goes
    # through f32 Div / Ceil / Mul by the constant 2.0 and back to i64; dyadic constants are
    # tracked, others (0.1, inexact in f32 arithmetic) are not
    m = parse_module("""module @t {
  sym H in [1, 4096]
  func @main(%x: f32[H]) -> (i64[1]) {
    %d = cc.dims() {dims = [#dim<H>]} : (i64[1])
    %f = onnx.Cast(%d) {to = 1} : (f32[1])
    %two = cc.const() {value = dense<f32[]: [2.0]>} : (f32[])
    %half = cc.const() {value = dense<f32[]: [0.5]>} : (f32[])
    %tenth = cc.const() {value = dense<f32[]: [0.1]>} : (f32[])
    %q = onnx.Div(%f, %two) : (f32[1])
    %c = onnx.Ceil(%q) : (f32[1])
    %m = onnx.Mul(%c, %two) : (f32[1])
    %i = onnx.Cast(%m) {to = 7} : (i64[1])
    %h = onnx.Mul(%f, %half) : (f32[1])
    %t = onnx.Mul(%f, %tenth) : (f32[1])
    %sixteen = cc.const() {value = dense<f32[]: [16.0]>} : (f32[])
    %root = onnx.Pow(%sixteen, %half) : (f32[])
    %side = onnx.Cast(%root) {to = 7} : (i64[])
    %hroot = onnx.Pow(%f, %half) : (f32[1])
    return %i
  }
}""")
    values = infer_shapes(m)
    res = {o.results[0].name: o.results[0] for o in m.main.body.ops if o.results}
    H = sym("H")
    assert list(values[res["i"]]) == [2 * sympy.ceiling(H / 2)]
    assert list(values[res["h"]]) == [H / 2]
    assert res["t"] not in values
    # DINOv2's `int(num_positions ** 0.5)`: a constant root that is exact; a symbolic one is not
    assert values[res["side"]].item() == 4 and res["hroot"] not in values


def test_onnx_dtype_mapping():
    from onnx import TensorProto

    from onnxcc.ir import DType

    assert onnx_dtype(TensorProto.FLOAT) is DType.f32
    assert onnx_dtype(TensorProto.BOOL) is DType.bool
    assert onnx_enum(DType.i64) == TensorProto.INT64
    for e in (1, 2, 3, 5, 6, 7, 9, 10, 11, 12, 13, 16):
        assert onnx_enum(onnx_dtype(e)) == e
    assert onnx_dtype(TensorProto.STRING) is DType.string
    with pytest.raises(ValueError, match="COMPLEX64"):
        onnx_dtype(TensorProto.COMPLEX64)


# ---- errors ------------------------------------------------------------------------------------------


def test_static_broadcast_mismatch_names_node():
    m = parse_module("""module @t {
  func @main(%a: f32[2, 3], %b: f32[4]) -> (f32[?, ?]) {
    %0 = onnx.Add(%a, %b) loc("add_bad") : (f32[?, ?])
    return %0
  }
}""")
    with pytest.raises(ShapeError, match=r'node "add_bad" \(onnx.Add\): broadcast dim -1: 3 != 4'):
        infer_shapes(m)


def test_broadcast_mismatch_through_pipeline(build_node):
    from onnxcc.passes import run_pipeline

    _, m = build_node("Add", [("a", F32, ["N", 3]), ("b", F32, [2, 5])])
    with pytest.raises(PassError, match='node "n0"') as e:
        run_pipeline(m, "shape-inference")
    assert isinstance(e.value.cause, ShapeError)


@pytest.mark.parametrize("text,msg", [
    ("%0 = onnx.Where(%a, %a, %a) loc(\"w\") : (f32[?])", "condition must be bool, got f32"),
    ("%0 = onnx.Add(%a, %i) loc(\"w\") : (f32[?])", "operand dtypes differ: expected f32, got i64"),
    ("%0 = onnx.PRelu(%a, %b) loc(\"w\") : (f32[?])", "slope: rank 2 does not broadcast to rank 1"),
    ("%0 = onnx.Cast(%a) {to = 14} loc(\"w\") : (f32[?])", "unsupported onnx element type COMPLEX64"),
])
def test_elementwise_errors(text, msg):
    m = parse_module(f"""module @t {{
  func @main(%a: f32[4], %i: i64[4], %b: f32[1, 4]) -> (f32[?]) {{
    {text}
    return %0
  }}
}}""")
    with pytest.raises(ShapeError, match='node "w"') as e:
        infer_shapes(m)
    assert msg in str(e.value)


# ---- numpy references vs onnxruntime -----------------------------------------------------------------

UNARY = {
    "Neg": None, "Abs": None, "Sqrt": (0.1, 3), "Reciprocal": (0.5, 3), "Exp": None, "Log": (0.1, 3),
    "Tanh": None, "Erf": None, "Sigmoid": None, "Relu": None, "Floor": None, "Ceil": None, "Round": None,
    "Sign": None, "Sin": None, "Cos": None, "Tan": (-1, 1), "Asin": (-0.9, 0.9), "Acos": (-0.9, 0.9),
    "Atan": None, "Sinh": None, "Cosh": None, "Asinh": None, "Acosh": (1.1, 3), "Atanh": (-0.9, 0.9),
    "Softplus": None, "Softsign": None, "HardSigmoid": None, "HardSwish": None, "Elu": None, "Selu": None,
    "Celu": None, "LeakyRelu": None, "ThresholdedRelu": None, "Mish": None, "Identity": None,
}


@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary_vs_ort(op, ort_check):
    rng = UNARY[op] or (-3, 3)
    ort_check(op, [("x", F32, ["N", "M", 3], *rng)], envs=ENVS, opset=18,
              expect_shapes=["f32[N, M, 3]"])


@pytest.mark.parametrize("op,attrs", [
    ("Elu", {"alpha": 0.3}), ("LeakyRelu", {"alpha": 0.2}), ("Celu", {"alpha": 0.5}),
    ("ThresholdedRelu", {"alpha": 0.4}), ("HardSigmoid", {"alpha": 0.5, "beta": 0.1}),
    ("Selu", {"alpha": 1.5, "gamma": 0.7}),
])
def test_unary_attrs_vs_ort(op, attrs, ort_check):
    ort_check(op, [("x", F32, ["N", 4])], attrs, envs=ENVS, opset=18)


@pytest.mark.parametrize("approx", ["none", "tanh"])
def test_gelu_vs_ort(approx, ort_check):
    ort_check("Gelu", [("x", F32, ["N", 8], -4, 4)], {"approximate": approx}, envs=ENVS, opset=20)


def test_round_half_to_even_and_isinf(ort_check):
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 2.4, np.inf, -np.inf, np.nan], dtype=F32)
    ort_check("Round", [("x", F32, [9])], consts={"x": x})
    ort_check("IsNaN", [("x", F32, [9])], consts={"x": x})
    for pos, neg in ((1, 1), (0, 1), (1, 0)):
        attrs = {"detect_positive": pos, "detect_negative": neg}
        ort_check("IsInf", [("x", F32, [9])], attrs, consts={"x": x})


BINARY_F = ["Add", "Sub", "Mul", "Div", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"]


@pytest.mark.parametrize("op", BINARY_F)
def test_binary_float_broadcast_vs_ort(op, ort_check):
    ort_check(op, [("a", F32, ["N", 1, 4]), ("b", F32, ["M", 1], 0.5, 2)], envs=ENVS)


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Mod", "Equal", "Greater", "Min", "Max"])
def test_binary_int_vs_ort(op, ort_check):
    b = np.array([-3, -2, 2, 3], dtype=I64)
    ort_check(op, [("a", I64, ["N", 4], -10, 10), ("b", I64, [4])], consts={"b": b}, envs=ENVS)
    ort_check(op, [("a", I32, ["N", 4], -10, 10), ("b", I32, [4])], consts={"b": b.astype(I32)}, envs=ENVS)


def test_mod_fmod_and_pow_vs_ort(ort_check):
    ort_check("Mod", [("a", F32, ["N", 4], -5, 5), ("b", F32, [4], 0.5, 2)], {"fmod": 1}, envs=ENVS)
    ort_check("Mod", [("a", I32, ["N", 4], -9, 9), ("b", I32, [4], 1, 4)], {"fmod": 1}, envs=ENVS)
    ort_check("Pow", [("a", F32, ["N", 4], 0.1, 2), ("b", F32, [4], -2, 2)], envs=ENVS)
    ort_check("Pow", [("a", F32, ["N", 4], 0.1, 2), ("b", I64, [1], 0, 3)], envs=ENVS)
    ort_check("Pow", [("a", I64, ["N", 4], 0, 5), ("b", I64, [4], 0, 3)], envs=ENVS)


def test_logical_and_bitwise_vs_ort(ort_check):
    for op in ("And", "Or", "Xor"):
        ort_check(op, [("a", BOOL, ["N", 3]), ("b", BOOL, [3])], envs=ENVS)
    ort_check("Not", [("a", BOOL, ["N", 3])], envs=ENVS)
    for op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor"):
        ort_check(op, [("a", I32, ["N", 3], -50, 50), ("b", I32, [3], -50, 50)], envs=ENVS, opset=18)
    ort_check("BitwiseNot", [("a", I32, ["N", 3], -50, 50)], envs=ENVS, opset=18)
    for d in ("LEFT", "RIGHT"):
        ort_check("BitShift", [("a", np.uint8, ["N", 3], 0, 255), ("b", np.uint8, [3], 0, 4)],
                  {"direction": d}, envs=ENVS)
        ort_check("BitShift", [("a", np.uint32, ["N", 3], 0, 1000), ("b", np.uint32, [3], 0, 8)],
                  {"direction": d}, envs=ENVS)


@pytest.mark.parametrize("op", ["Min", "Max", "Sum", "Mean"])
def test_variadic_vs_ort(op, ort_check):
    ort_check(op, [("a", F32, ["N", 1]), ("b", F32, [1, "M"]), ("c", F32, ["M"])], envs=ENVS,
              expect_shapes=["f32[N, M]"])
    ort_check(op, [("a", F32, ["N", 2])], envs=ENVS)


def test_where_prelu_vs_ort(ort_check):
    ort_check("Where", [("c", BOOL, ["N", 1]), ("x", F32, [1, "M"]), ("y", F32, ["N", "M"])], envs=ENVS,
              expect_shapes=["f32[N, M]"])
    ort_check("Where", [("c", BOOL, ["N", 3]), ("x", I64, [3]), ("y", I64, [1])], envs=ENVS)
    ort_check("PRelu", [("x", F32, ["N", 3, "M"]), ("s", F32, [3, 1])], envs=ENVS,
              expect_shapes=["f32[N, 3, M]"])
    ort_check("PRelu", [("x", F32, ["N", 3]), ("s", F32, [1])], envs=ENVS)


def test_cast_vs_ort(ort_check):
    from onnx import TensorProto as T

    ort_check("Cast", [("x", F32, ["N", 3], -100, 100)], {"to": T.INT32}, envs=ENVS)
    ort_check("Cast", [("x", F32, ["N", 3], -2, 2)], {"to": T.BOOL}, envs=ENVS)
    ort_check("Cast", [("x", I64, ["N", 3], -9, 9)], {"to": T.FLOAT}, envs=ENVS)
    ort_check("Cast", [("x", BOOL, ["N", 3])], {"to": T.INT64}, envs=ENVS)
    ort_check("Cast", [("x", F32, ["N", 3])], {"to": T.FLOAT16}, envs=ENVS)
    ort_check("Cast", [("x", np.float16, ["N", 3])], {"to": T.DOUBLE}, envs=ENVS)
    ort_check("CastLike", [("x", F32, ["N", 3], -9, 9), ("like", I32, [1])], envs=ENVS)


def test_clip_vs_ort(ort_check):
    lo, hi = np.array(-0.5, dtype=F32), np.array(0.7, dtype=F32)
    ort_check("Clip", [("x", F32, ["N", 4]), ("lo", F32, []), ("hi", F32, [])], consts={"lo": lo, "hi": hi},
              envs=ENVS)
    m = ort_check("Clip", [("x", F32, ["N", 4]), None, ("hi", F32, [])], consts={"hi": hi}, envs=ENVS)
    assert "absent = [1]" in str(m)
    ort_check("Clip", [("x", F32, ["N", 4]), ("lo", F32, [])], consts={"lo": lo}, envs=ENVS)
    ort_check("Clip", [("x", I64, ["N", 4], -9, 9), ("lo", I64, []), ("hi", I64, [])],
              consts={"lo": np.array(-2), "hi": np.array(3)}, envs=ENVS)
    ort_check("Clip", [("x", F32, ["N", 4])], {"min": -0.3, "max": 0.4}, envs=ENVS, opset=6)


def test_dropout_inference_vs_ort(ort_check):
    ort_check("Dropout", [("x", F32, ["N", 4])], envs=ENVS)
    m = ort_check("Dropout", [("x", F32, ["N", 4])], n_outputs=2, envs=ENVS)
    assert "bool[N, 4]" in str(m)


def test_float16_compute_vs_ort(ort_check):
    ort_check("Add", [("a", np.float16, ["N", 4]), ("b", np.float16, [4])], envs=ENVS, rtol=1e-3, atol=1e-3)
    ort_check("Sigmoid", [("a", np.float16, ["N", 4])], envs=ENVS, rtol=1e-3, atol=1e-3)
