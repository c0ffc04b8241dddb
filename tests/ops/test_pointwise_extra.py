"""BitCast, Shrink and Bernoulli (ops/pointwise_extra.py).

BitCast against numpy's `view` (the definition), also between computed values through the
full pipeline (fusion must not inline a producer into a view of another type); Shrink vs
onnxruntime; Bernoulli by its statistics (shape, dtype, values in {0, 1}, mean near p) and
the interpreter drawing the same bits as the library."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as h

import onnxcc
from onnxcc.errors import OnnxccError
from onnxcc.interp import run as interp_run
from onnxcc.testing import jit_compile, ort_run


def model(nodes, inputs, opset=26, outputs=("y",)):
    vis = [h.make_tensor_value_info(n, t, s) for n, t, s in inputs]
    m = h.make_model(h.make_graph(nodes, "g", vis, [h.make_empty_tensor_value_info(o) for o in outputs]),
                     opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 10
    return m


CASES = [  # (input numpy dtype, ONNX enum of the input, ONNX enum of the target, target numpy dtype)
    (np.float32, TP.FLOAT, TP.INT32, np.int32),
    (np.int32, TP.INT32, TP.FLOAT, np.float32),
    (np.float64, TP.DOUBLE, TP.UINT64, np.uint64),
    (np.float16, TP.FLOAT16, TP.INT16, np.int16),
    (np.int16, TP.INT16, TP.FLOAT16, np.float16),
    (np.int8, TP.INT8, TP.UINT8, np.uint8),
    (np.bool_, TP.BOOL, TP.UINT8, np.uint8),
]


def sample(dtype, shape, seed=0):
    rng = np.random.default_rng(seed)
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(bool)
    if np.dtype(dtype).kind == "f":
        x = rng.normal(size=shape).astype(dtype)
        x.reshape(-1)[:3] = [np.inf, -0.0, np.nan][: x.size]
        return x
    info = np.iinfo(dtype)
    # values whose bits are not a NaN pattern in the target type: NaNs compare by bits below
    return rng.integers(max(info.min, -30000), min(info.max, 30000), size=shape).astype(dtype)


@pytest.mark.parametrize("src,src_e,to_e,to", CASES)
def test_bitcast_is_numpy_view(src, src_e, to_e, to):
    m = model([h.make_node("BitCast", ["x"], ["y"], to=to_e)], [("x", src_e, ["N", 3])])
    mod, _, k = jit_compile(m)
    for n in (1, 4):
        x = sample(src, (n, 3), seed=n)
        want = x.view(to)
        for got in (k(x)[0], interp_run(mod, [x])[0]):
            assert got.dtype == want.dtype and got.shape == want.shape
            assert got.tobytes() == want.tobytes()  # bit for bit (NaNs included)


def test_uint8_to_bool_reads_nonzero_bytes_as_true():
    m = model([h.make_node("BitCast", ["x"], ["y"], to=TP.BOOL)], [("x", TP.UINT8, [4])])
    mod, _, k = jit_compile(m)
    x = np.array([0, 1, 2, 255], np.uint8)
    for got in (k(x)[0], interp_run(mod, [x])[0]):
        np.testing.assert_array_equal(got, [False, True, True, True])


def test_bitcast_between_computed_values_through_the_library(tmp_path):
    # y = bitcast<i32>(x + 1) + 1: the Add before the view and the one after it stay apart
    nodes = [h.make_node("Add", ["x", "one"], ["a"]), h.make_node("BitCast", ["a"], ["b"], to=TP.INT32),
             h.make_node("Add", ["b", "ione"], ["y"])]
    m = model(nodes, [("x", TP.FLOAT, ["N"])])
    m.graph.initializer.extend([onnx.numpy_helper.from_array(np.array(1.0, np.float32), "one"),
                                onnx.numpy_helper.from_array(np.array(1, np.int32), "ione")])
    onnxcc.compile(m, tmp_path, name="bc")
    lib = onnxcc.load(tmp_path)
    x = np.array([0.0, 1.5, -2.0, 1e30], np.float32)
    got = lib.run([x])["y"]
    np.testing.assert_array_equal(got, (x + 1).view(np.int32) + 1)


def test_bitcast_needs_the_same_width():
    m = model([h.make_node("BitCast", ["x"], ["y"], to=TP.INT64)], [("x", TP.FLOAT, [3])])
    with pytest.raises(OnnxccError, match="same bit width: f32 has 32 bits, i64 has 64"):
        jit_compile(m)


@pytest.mark.parametrize("dtype,elem", [(np.float32, TP.FLOAT), (np.int32, TP.INT32), (np.float64, TP.DOUBLE)])
@pytest.mark.parametrize("lambd,bias", [(1.5, 0.0), (0.5, 1.25)])
def test_shrink_against_onnxruntime(dtype, elem, lambd, bias):
    m = model([h.make_node("Shrink", ["x"], ["y"], lambd=lambd, bias=bias)], [("x", elem, ["N"])], opset=13)
    mod, _, k = jit_compile(m)
    for n in (1, 9):
        x = np.linspace(-4, 4, n).astype(dtype)
        want = ort_run(m, {"x": x})["y"]
        for got in (k(x)[0], interp_run(mod, [x])[0]):
            assert got.dtype == want.dtype
            np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("dtype_attr,want_dtype", [(None, np.float32), (TP.DOUBLE, np.float64), (TP.INT32, np.int32)])
def test_bernoulli_statistics(dtype_attr, want_dtype):
    attrs = {} if dtype_attr is None else {"dtype": dtype_attr}
    m = model([h.make_node("Bernoulli", ["p"], ["y"], seed=5.0, **attrs)], [("p", TP.FLOAT, ["N", 500])], opset=22)
    mod, _, k = jit_compile(m)
    p = np.repeat(np.array([0.0, 0.2, 0.5, 0.9, 1.0], np.float32)[:, None], 500, axis=1)
    y = k(p)[0]
    assert y.shape == p.shape and y.dtype == want_dtype
    assert set(np.unique(y).tolist()) <= {0, 1}
    means = y.astype(np.float64).mean(axis=1)
    # 500 draws: the standard error is at most 0.023; 4.5 of them is 0.1
    np.testing.assert_allclose(means, [0.0, 0.2, 0.5, 0.9, 1.0], atol=0.1)
    assert means[0] == 0.0 and means[-1] == 1.0  # p = 0 never fires, p = 1 always does
    np.testing.assert_array_equal(interp_run(mod, [p])[0], y)  # the reference draws the same bits


def test_bernoulli_seed_changes_the_draws():
    draws = []
    for seed in (1.0, 2.0):
        m = model([h.make_node("Bernoulli", ["p"], ["y"], seed=seed)], [("p", TP.FLOAT, [256])], opset=22)
        draws.append(jit_compile(m)[2](np.full(256, 0.5, np.float32))[0])
    assert 0.3 < float(np.mean(draws[0] != draws[1])) < 0.7  # independent-looking streams


@pytest.mark.parametrize("src_e,to_e,bits", [
    (TP.INT16, TP.FLOAT16, np.array([0x7C01, 0x7E01, 0xFE0C, 0x7FFF, 0xFC00], np.uint16)),
    (TP.INT16, TP.BFLOAT16, np.array([0x7F81, 0x7FC1, 0xFF85, 0x0001, 0x8000], np.uint16)),
    (TP.INT32, TP.FLOAT, np.array([0x7F800001, 0x7FC00001, 0xFF800005, 1, 0x80000000], np.uint32)),
])
def test_bitcast_keeps_nan_payloads_and_subnormals(src_e, to_e, bits):
    # signalling NaNs, payloads and subnormals come out bit for bit (no float conversion quiets them)
    m = model([h.make_node("BitCast", ["x"], ["y"], to=to_e)], [("x", src_e, ["N"])])
    mod, _, k = jit_compile(m)
    x = bits.view(np.int16 if bits.dtype == np.uint16 else np.int32)
    for got in (k(x)[0], interp_run(mod, [x])[0]):
        np.testing.assert_array_equal(np.asarray(got).view(bits.dtype), bits)


def test_bitcast_to_a_bf16_output_keeps_signalling_nans_through_the_library(tmp_path):
    m = model([h.make_node("BitCast", ["x"], ["y"], to=TP.BFLOAT16)], [("x", TP.INT16, ["N"])])
    onnxcc.compile(m, tmp_path, name="bc16")
    bits = np.array([0x7F81, 0xFF85, 0x3F80, 0x0001], np.uint16)
    got = onnxcc.load(tmp_path).run([bits.view(np.int16)])["y"]  # bf16 outputs come back as their bits
    np.testing.assert_array_equal(np.asarray(got).view(np.uint16), bits)


@pytest.mark.parametrize("f8", [TP.FLOAT8E4M3FN, TP.FLOAT8E5M2])
def test_bitcast_float8_bytes_both_ways(f8):
    bits = np.arange(256, dtype=np.uint8)  # every pattern, NaNs and infinities included
    m = model([h.make_node("BitCast", ["x"], ["a"], to=f8), h.make_node("BitCast", ["a"], ["y"], to=TP.UINT8)],
              [("x", TP.UINT8, ["N"])])
    mod, _, k = jit_compile(m)
    for got in (k(bits)[0], interp_run(mod, [bits])[0]):
        np.testing.assert_array_equal(got, bits)


def test_bitcast_sub_byte_is_refused_by_name():
    m = model([h.make_node("BitCast", ["x"], ["y"], to=TP.UINT4)], [("x", TP.INT4, [4])])
    with pytest.raises(OnnxccError, match=r"BitCast.*packed sub-byte types"):
        jit_compile(m)
