"""Lowerings of the elementwise ops (ops/elementwise.py) to kernel computes: JIT-compiled and
compared with onnxruntime at several settings of the symbolic dims (one of them 1). Ops are
grouped into few models to keep JIT time small; each model compiles once and runs on every
feed set."""

from functools import partial

import numpy as np
import onnx
import pytest
from onnx import helper as h

from onnxcc.interp import run as interp_run
from onnxcc.testing import check_jit, check_lowering, jit_compile, spec_inputs, spec_model

F32, F16, F64, I64, I32, BOOL = np.float32, np.float16, np.float64, np.int64, np.int32, np.bool_
DIMS = ({"N": 1, "M": 3}, {"N": 6, "M": 7})


def check(m, inputs, dims_list=DIMS, rtol=1e-4, atol=1e-5):
    """Compile once; at each dims setting compare values, dtypes and shapes with onnxruntime."""
    return check_jit(m, dims_list, rtol, atol, feeds=partial(spec_inputs, inputs))


def n(op, ins, out, **attrs):
    return h.make_node(op, ins, [out], **attrs)


# ---- unary math ------------------------------------------------------------------------------------

#: unary ops -> which input they read: x in (-3, 3), p in (1.05, 3) (log, sqrt...), u in (-0.95, 0.95)
UNARY = {
    "Neg": "x", "Abs": "x", "Exp": "x", "Tanh": "x", "Sigmoid": "x", "Floor": "x", "Ceil": "x", "Round": "x",
    "Sign": "x", "Sin": "x", "Cos": "x", "Tan": "x", "Atan": "x", "Sinh": "x", "Cosh": "x", "Asinh": "x",
    "Softplus": "x", "Softsign": "x", "Relu": "x", "Mish": "x", "Erf": "x",
    "Sqrt": "p", "Reciprocal": "p", "Log": "p", "Acosh": "p", "Asin": "u", "Acos": "u", "Atanh": "u",
}


def test_lower_unary_math_ops():
    inputs = [("x", F32, ["N", 5], -3.0, 3.0), ("p", F32, ["N", 5], 1.05, 3.0),
              ("u", F32, ["N", 5], -0.95, 0.95)]
    nodes = [n(op, [src], f"y_{op}") for op, src in UNARY.items()]
    check(spec_model(nodes, inputs, [f"y_{op}" for op in UNARY]), inputs)


def test_lower_unary_via_check_lowering():
    x = h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 3])
    nodes = [n("Sigmoid", ["x"], "s"), n("Mul", ["x", "s"], "y")]  # SiLU
    g = h.make_graph(nodes, "g", [x], [h.make_empty_tensor_value_info("y")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    check_lowering(m, [{"N": 1}, {"N": 5}])


def test_lower_activations_with_attributes():
    inputs = [("x", F32, ["N", 5], -3.0, 3.0), ("s5", F32, [5]), ("sn", F32, ["N", 1])]
    nodes = [
        n("Gelu", ["x"], "gelu"), n("Gelu", ["x"], "gelu_tanh", approximate="tanh"),
        n("Elu", ["x"], "elu"), n("Elu", ["x"], "elu_a", alpha=0.7),
        n("Selu", ["x"], "selu"), n("Selu", ["x"], "selu_a", alpha=1.5, gamma=1.1),
        n("Celu", ["x"], "celu", alpha=1.3),
        n("LeakyRelu", ["x"], "leaky"), n("LeakyRelu", ["x"], "leaky_a", alpha=0.2),
        n("ThresholdedRelu", ["x"], "thr", alpha=0.3),
        n("HardSigmoid", ["x"], "hsig"), n("HardSigmoid", ["x"], "hsig_a", alpha=0.3, beta=0.4),
        n("HardSwish", ["x"], "hswish"),
        n("PRelu", ["x", "s5"], "prelu_row"), n("PRelu", ["x", "sn"], "prelu_col"),
    ]
    check(spec_model(nodes, inputs, [nd.output[0] for nd in nodes], opset=20), inputs)


def _special(rng, shape):
    x = rng.uniform(-2, 2, size=shape).astype(F32)
    flat = x.reshape(-1)
    flat[::4] = np.inf
    flat[1::4] = -np.inf
    flat[2::5] = np.nan
    return x


def test_lower_isnan_isinf():
    inputs = [("x", F32, ["N", 6], _special)]
    nodes = [n("IsNaN", ["x"], "nan"), n("IsInf", ["x"], "inf"),
             n("IsInf", ["x"], "pos", detect_negative=0), n("IsInf", ["x"], "neg", detect_positive=0),
             n("IsInf", ["x"], "none", detect_negative=0, detect_positive=0)]
    check(spec_model(nodes, inputs, [nd.output[0] for nd in nodes], opset=20), inputs)


# ---- binary ops with broadcasting over symbolic dims -----------------------------------------------


def test_lower_binary_float_broadcast():
    inputs = [("a", F32, ["N", "M"]), ("b", F32, ["M"]), ("c", F32, ["N", 1]), ("e", I64, ["M"], 0, 4),
              ("cond", BOOL, ["N", 1])]
    inits = {"two": np.array(2, I64), "three": np.array(3.0, F32), "half": np.array([0.5], F32)}
    nodes = [
        n("Add", ["a", "b"], "add"), n("Sub", ["b", "a"], "sub"), n("Mul", ["a", "c"], "mul"),
        n("Div", ["a", "c"], "div"), n("Abs", ["a"], "abs_a"), n("Pow", ["abs_a", "b"], "pow"),
        n("Pow", ["a", "two"], "pow2"), n("Pow", ["a", "three"], "pow3"),
        n("Pow", ["abs_a", "half"], "pow_half"),
        n("Pow", ["a", "e"], "pow_int"), n("Mod", ["a", "c"], "fmod", fmod=1),
        n("Min", ["a", "b", "c"], "min"), n("Max", ["a", "b", "c"], "max"), n("Sum", ["a", "b", "c"], "sum"),
        n("Mean", ["a", "b", "c"], "mean"), n("Sum", ["a"], "sum1"), n("Max", ["b"], "max1"),
        n("Round", ["a"], "ra"), n("Round", ["c"], "rc"), n("Equal", ["ra", "rc"], "eq"),
        n("Less", ["a", "b"], "lt"), n("Greater", ["a", "c"], "gt"), n("LessOrEqual", ["ra", "rc"], "le"),
        n("GreaterOrEqual", ["ra", "b"], "ge"), n("Where", ["lt", "a", "c"], "where"),
        n("Where", ["cond", "b", "c"], "where_bc"),
    ]
    outs = [nd.output[0] for nd in nodes if nd.output[0] not in ("abs_a", "ra", "rc")]
    check(spec_model(nodes, inputs, outs, inits), inputs)


def _nonzero(dtype):
    def make(rng, shape):
        v = rng.integers(1, 7, size=shape) * rng.choice([-1, 1], size=shape)
        return v.astype(dtype)
    return make


@pytest.mark.parametrize("dt", [I64, I32])
def test_lower_integer_ops(dt):
    inputs = [("a", dt, ["N", "M"], -20, 20), ("b", dt, ["M"], _nonzero(dt)), ("p", dt, ["N", 1], 0, 4)]
    inits = {"lo": np.array(-5, dt), "hi": np.array(7, dt)}
    nodes = [
        n("Add", ["a", "b"], "add"), n("Sub", ["a", "b"], "sub"), n("Mul", ["a", "b"], "mul"),
        n("Div", ["a", "b"], "div"), n("Mod", ["a", "b"], "mod"), n("Mod", ["a", "b"], "fmod", fmod=1),
        n("Pow", ["a", "p"], "pow"), n("Min", ["a", "b"], "min"), n("Max", ["a", "b", "p"], "max"),
        n("Abs", ["a"], "abs"), n("Neg", ["a"], "neg"), n("Sign", ["a"], "sign"),
        n("Relu", ["a"], "relu"), n("Equal", ["a", "b"], "eq"), n("Less", ["a", "b"], "lt"),
        n("Greater", ["a", "p"], "gt"), n("Clip", ["a", "lo", "hi"], "clip"),
        n("BitwiseAnd", ["a", "b"], "band"), n("BitwiseOr", ["a", "b"], "bor"),
        n("BitwiseXor", ["a", "p"], "bxor"),
        n("BitwiseNot", ["a"], "bnot"), n("Where", ["gt", "a", "b"], "where"),
    ]
    check(spec_model(nodes, inputs, [nd.output[0] for nd in nodes], inits), inputs)


@pytest.mark.parametrize("dt", [np.uint8, np.uint32, np.uint64])
def test_lower_bitshift(dt):
    bits = np.dtype(dt).itemsize * 8
    inputs = [("a", dt, ["N", "M"], 0, 200), ("s", dt, ["M"], 0, bits)]
    nodes = [n("BitShift", ["a", "s"], "left", direction="LEFT"),
             n("BitShift", ["a", "s"], "right", direction="RIGHT")]
    check(spec_model(nodes, inputs, ["left", "right"]), inputs)


def test_lower_logical_ops():
    inputs = [("p", BOOL, ["N", "M"]), ("q", BOOL, ["M"]), ("x", F32, ["N", "M"]), ("y", F32, ["N", 1])]
    nodes = [n("And", ["p", "q"], "and"), n("Or", ["p", "q"], "or"), n("Xor", ["p", "q"], "xor"),
             n("Not", ["p"], "not"), n("Equal", ["p", "q"], "eq"), n("Where", ["q", "x", "y"], "where")]
    check(spec_model(nodes, inputs, [nd.output[0] for nd in nodes]), inputs)


# ---- casts, Clip, Dropout, Identity ----------------------------------------------------------------


def test_lower_cast_and_castlike():
    T = onnx.TensorProto
    inputs = [("x", F32, ["N", 4], -100.0, 100.0), ("hf", F16, ["N", 4]), ("i", I64, ["N", 4], -50, 50),
              ("bo", BOOL, ["N", 4]), ("d", F64, ["N", 4])]
    casts = [("hf", T.FLOAT), ("hf", T.DOUBLE), ("hf", T.INT32), ("x", T.FLOAT16), ("d", T.FLOAT16),
             ("x", T.INT32), ("x", T.BOOL), ("x", T.FLOAT), ("x", T.DOUBLE), ("i", T.FLOAT), ("i", T.INT32),
             ("i", T.BOOL), ("bo", T.FLOAT), ("bo", T.INT64), ("d", T.FLOAT), ("d", T.INT64)]
    nodes = [n("Cast", [src], f"cast{k}", to=to) for k, (src, to) in enumerate(casts)]
    nodes += [n("CastLike", ["i", "x"], "like_f"), n("CastLike", ["hf", "d"], "like_d"),
              n("CastLike", ["x", "hf"], "like_h")]
    check(spec_model(nodes, inputs, [nd.output[0] for nd in nodes]), inputs)


def test_lower_clip_bounds():
    inputs = [("x", F32, ["N", 5], -3.0, 3.0), ("z", F32, ["N", 5])]
    inits = {"lo": np.array(-1.0, F32), "hi": np.array(1.5, F32), "big": np.array(2.0, F32)}
    nodes = [
        n("Clip", ["x", "lo", "hi"], "both"), n("Clip", ["x", "", "hi"], "only_max"),
        n("Clip", ["x", "lo"], "only_min"), n("Clip", ["x"], "none"),
        n("Clip", ["x", "big", "lo"], "min_gt_max"),
        h.make_node("ReduceMean", ["z"], ["zm"], keepdims=0),  # a bound only the run knows
        n("Clip", ["x", "zm", "big"], "runtime_min"),
    ]
    check(spec_model(nodes, inputs, ["both", "only_max", "only_min", "none", "min_gt_max", "runtime_min"], inits),
          inputs)


def test_lower_dropout_and_identity_are_views():
    inputs = [("x", F32, ["N", 5])]
    inits = {"r": np.array(0.3, F32), "off": np.array(False), "on": np.array(True),
             "zero": np.array(0.0, F32)}
    nodes = [
        h.make_node("Dropout", ["x"], ["d0", "m0"]), h.make_node("Dropout", ["x", "r", "off"], ["d1", "m1"]),
        h.make_node("Dropout", ["x", "zero", "on"], ["d2"]), n("Identity", ["x"], "id"),
        n("Relu", ["d1"], "after_view"),
    ]
    m = spec_model(nodes, inputs, ["d0", "m0", "m1", "d2", "id", "after_view"], inits)
    prog = check(m, inputs)
    text = str(prog)
    assert "= view(in0)" in text  # d1 feeds Relu through a view, not a copy
    assert "out1[i0, i1] = true" in text


def _check_dropout(x, y, mask, ratio):
    """y = x / (1 - ratio) where kept, 0 where dropped; kept fraction within 4.5 sigma of 1 - ratio."""
    assert mask.dtype == BOOL and mask.shape == x.shape and y.shape == x.shape
    np.testing.assert_allclose(y, np.where(mask, x / (1 - ratio), 0), rtol=1e-6)
    n, p = x.size, 1 - ratio
    assert abs(mask.sum() - n * p) <= 4.5 * np.sqrt(n * p * (1 - p))


def test_lower_dropout_training_constant_flag():
    # training_mode a constant true, ratio absent (0.5): masked at compile time's choice
    inputs = [("x", F32, ["N", 50])]
    m = spec_model([h.make_node("Dropout", ["x", "", "on"], ["y", "mask"], seed=3)], inputs, ["y", "mask"],
              {"on": np.array(True)})
    mod, _, k = jit_compile(m)
    x = np.random.default_rng(0).uniform(1, 2, (40, 50)).astype(F32)
    y, mask = k(x)
    _check_dropout(x, y, mask, 0.5)
    for got, want in zip(interp_run(mod, [x]), (y, mask)):  # the reference draws the same mask
        np.testing.assert_array_equal(got, want)


def test_lower_dropout_training_flag_at_run_time():
    inputs = [("x", F32, ["N", 50]), ("t", BOOL, [1])]
    m = spec_model([h.make_node("Dropout", ["x", "r", "t"], ["y", "mask"])], inputs, ["y", "mask"],
              {"r": np.array(0.25, F32)})
    mod, _, k = jit_compile(m)
    x = np.random.default_rng(1).uniform(-2, 2, (40, 50)).astype(F32)
    y, mask = k(x, np.array([False]))
    np.testing.assert_array_equal(y, x)
    assert mask.all() and mask.dtype == BOOL
    y, mask = k(x, np.array([True]))
    _check_dropout(x, y, mask, 0.25)
    assert not mask.all()
    np.testing.assert_array_equal(interp_run(mod, [x, np.array([True])])[1], mask)


@pytest.mark.parametrize("dt", [F16, F64])
def test_lower_dropout_training_other_float_types(dt):
    # the mask is drawn in f64 whatever the type; y rounds x / (1 - ratio) once to it
    inputs = [("x", dt, ["N", 64])]
    m = spec_model([h.make_node("Dropout", ["x", "r", "on"], ["y", "mask"], seed=7)], inputs, ["y", "mask"],
              {"r": np.array(0.3, F32), "on": np.array(True)})
    mod, _, k = jit_compile(m)
    x = np.random.default_rng(2).uniform(-3, 3, (30, 64)).astype(dt)
    y, mask = k(x)
    assert y.dtype == dt
    scale = 1 / (1 - np.float64(np.float32(0.3)))
    np.testing.assert_array_equal(y, np.where(mask, x.astype(np.float64) * scale, 0).astype(dt))
    for got, want in zip(interp_run(mod, [x]), (y, mask)):
        np.testing.assert_array_equal(got, want)


# ---- what the lowering writes ----------------------------------------------------------------------


def test_lower_elementwise_kernel_text():
    inputs = [("a", F32, ["N", "M"]), ("b", F32, ["M"]), ("i", I64, ["N", "M"]), ("j", I64, ["M"])]
    nodes = [n("Pow", ["a", "two"], "sq"), n("Add", ["sq", "b"], "add"), n("Div", ["i", "j"], "idiv"),
             n("Mod", ["i", "j"], "imod"), n("Gelu", ["a"], "gelu")]
    m = spec_model(nodes, inputs, ["add", "idiv", "imod", "gelu"], {"two": np.array(2.0, F32)}, opset=20)
    _, prog, _ = jit_compile(m)
    text = str(prog)
    assert "in0[i0, i1] * in0[i0, i1]" in text  # x ** 2 is a product, the constant exponent inlined
    assert "[i0, i1] + in1[i1]" in text  # b broadcasts along the trailing dim
    assert "truncdiv(in2[i0, i1], in3[i1])" in text  # ONNX integer Div truncates
    assert "in2[i0, i1] % in3[i1]" in text  # Mod fmod=0: floor mod
    assert "erf(in0[i0, i1] * " in text
    assert len(list(prog.computes())) == 5


def test_lower_f16_math_in_f32():
    inputs = [("x", F16, ["N", 5])]
    nodes = [n("Relu", ["x"], "relu"), n("Sigmoid", ["x"], "sig"), n("Add", ["x", "x"], "add")]
    m = spec_model(nodes, inputs, ["relu", "sig", "add"])
    _, prog, _ = jit_compile(m)
    assert "sigmoid(f32(in0[i0, i1]))" in str(prog)
    check(m, inputs, rtol=2e-3, atol=1e-3)
