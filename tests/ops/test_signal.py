"""DFT (ops/signal.py): native lowering and numpy reference vs onnxruntime for forward,
inverse, one-sided and irfft, real and complex input, attribute (opset 19) and input (20)
axis, with dft_length; compiled once with a symbolic batch dim, run at two batch sizes."""

import numpy as np
import onnx
import pytest
from onnx import helper as h

from onnxcc.errors import OnnxccError
from onnxcc.interp import run as interp_run
from onnxcc.testing import jit_compile, ort_run

F32 = np.float32


def model(node, x_shape, inits=None, opset=19):
    vis = [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, x_shape)]
    inits = [onnx.numpy_helper.from_array(np.asarray(a), n) for n, a in (inits or {}).items()]
    m = h.make_model(h.make_graph([node], "g", vis, [h.make_empty_tensor_value_info("y")], inits),
                     opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def check(m, x_shape, rtol=1e-4, atol=1e-4):
    mod, _, k = jit_compile(m)
    for seed, n in enumerate((1, 3)):
        shape = [n if d == "N" else d for d in x_shape]
        x = np.random.default_rng(seed).uniform(-2, 2, size=shape).astype(F32)
        want = ort_run(m, {"x": x})["y"]
        for got in (k(x)[0], interp_run(mod, [x])[0]):
            assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape)
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=f"N={n}")


# (inverse, onesided, last dim): one-sided forward takes real input, one-sided inverse complex
@pytest.mark.parametrize("inverse,onesided,c",
                         [(0, 0, 1), (0, 0, 2), (1, 0, 1), (1, 0, 2), (0, 1, 1), (1, 1, 2)])
@pytest.mark.parametrize("axis", [1, 2])
def test_dft_opset19(inverse, onesided, axis, c):
    shape = ["N", 8, 7, c] if not (inverse and onesided) else ["N", 5, 5, c]
    node = h.make_node("DFT", ["x"], ["y"], axis=axis, inverse=inverse, onesided=onesided)
    check(model(node, shape), shape)


@pytest.mark.parametrize("length", [5, 12])
@pytest.mark.parametrize("inverse", [0, 1])
def test_dft_opset20_length_and_axis_inputs(length, inverse):
    shape = ["N", 8, 6, 2]
    node = h.make_node("DFT", ["x", "n", "a"], ["y"], inverse=inverse)
    inits = {"n": np.array(length, np.int64), "a": np.array(-2, np.int64)}
    check(model(node, shape, inits, opset=20), shape)


def test_dft_opset20_default_axis_is_minus_two():
    shape = ["N", 4, 6, 1]
    check(model(h.make_node("DFT", ["x"], ["y"], onesided=1), shape, opset=20), shape)


def test_dft_one_sided_needs_real_input():
    with pytest.raises(OnnxccError, match="needs real input"):
        jit_compile(model(h.make_node("DFT", ["x"], ["y"], onesided=1), ["N", 4, 6, 2]))


def test_dft_refuses_the_last_axis():
    node = h.make_node("DFT", ["x"], ["y"], axis=3)
    with pytest.raises(OnnxccError, match="not the last dim"):
        jit_compile(model(node, ["N", 4, 6, 2]))


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
@pytest.mark.parametrize("size,dtype", [(10, 1), (7, 11)])
def test_windows_with_a_constant_size(op, periodic, size, dtype):
    node = h.make_node(op, ["n"], ["y"], periodic=periodic, output_datatype=dtype)
    m = h.make_model(h.make_graph([node], "g", [], [h.make_empty_tensor_value_info("y")],
                                  [onnx.numpy_helper.from_array(np.array(size, np.int64), "n")]),
                     opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 10
    mod, _, k = jit_compile(m)
    want = ort_run(m, {})["y"]
    for got in (k()[0], interp_run(mod, [])[0]):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_window_size_known_only_at_run_time_is_refused():
    node = h.make_node("HannWindow", ["n"], ["y"])
    size = h.make_tensor_value_info("n", onnx.TensorProto.INT64, [])
    m = h.make_model(h.make_graph([node], "g", [size], [h.make_empty_tensor_value_info("y")]),
                     opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 10
    with pytest.raises(OnnxccError, match="depends on data"):
        jit_compile(m)


def test_inverse_dft_is_exact_to_f32_rounding():
    # The node cases test_dft_inverse(_opset19) expect numpy's float32 FFT, whose round-off
    # leaves 1.9e-7 in imaginary parts that are exactly 0 (beyond their atol 1e-7). The
    # lowering sums in f64, so every element is the exact result rounded once to f32.
    node = h.make_node("DFT", ["x"], ["y"], axis=1, inverse=1)
    shape = [1, 10, 10, 2]
    x = np.zeros(shape, F32)
    x[..., 0] = np.arange(10, dtype=F32)[:, None] * 10 + np.arange(10, dtype=F32) / 7
    _, _, k = jit_compile(model(node, shape))
    got = k(x)[0]
    z = np.fft.ifft(x[..., 0].astype(np.float64) + 1j * x[..., 1], axis=1)
    exact = np.stack([z.real, z.imag], -1)
    np.testing.assert_allclose(got, exact, rtol=2 ** -23, atol=1e-12)


def test_irfft_with_axis_at_run_time_skips_length_one_dims():
    # test_dft_irfft: x [1, 6, 10, 2], axis an input; along dim 0 (length 1) an irfft has no
    # samples, which once divided by zero while building that candidate
    from onnxcc import conformance as conf

    r = conf.run_case(conf.get_case("test_dft_irfft"), conf.compiled_executor)
    assert r.status == "pass", r.detail


# the table form (ops/signal_table.py): a symbolic signal length cut or zero-padded to a constant
# dft_length, odd and even, irfft included (its table weighs each bin and its mirror). The
# interpreter (numpy's FFT) is the oracle at every length; onnxruntime too, except for an irfft
# whose spectrum is not N // 2 + 1 bins long, where it gives neither numpy's cut / zero-padded
# result nor the direct sum's (both agree)
@pytest.mark.parametrize("length,inverse,onesided,c", [(9, 1, 1, 2), (10, 1, 1, 2), (7, 0, 1, 1), (6, 1, 0, 2)])
def test_dft_table_with_a_symbolic_signal_length(length, inverse, onesided, c):
    node = h.make_node("DFT", ["x", "n", "a"], ["y"], inverse=inverse, onesided=onesided)
    m = model(node, [2, "L", 3, c], {"n": np.array(length, np.int64), "a": np.array(1, np.int64)}, opset=20)
    mod, prog, k = jit_compile(m)
    assert "twiddles" in str(prog)
    for sig in (2, length // 2 + 1, length + 3):
        x = np.random.default_rng(sig).uniform(-2, 2, size=(2, sig, 3, c)).astype(F32)
        got = k(x)[0]
        wants = [interp_run(mod, [x])[0]]
        if not (inverse and onesided) or sig == length // 2 + 1:
            wants.append(ort_run(m, {"x": x})["y"])
        for want in wants:
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"L={sig}")


# f32 transforms of 64 points or more sum in f32 against the table, a GEMM when the axis is the
# one before the parts (axis 2 here; axis 1 a loop nest); round-off of an f32 FFT's order
@pytest.mark.parametrize("inverse,onesided,c,axis", [(0, 1, 1, 2), (1, 0, 2, 2), (1, 1, 2, 2), (0, 0, 2, 1)])
def test_dft_long_f32_as_gemm(inverse, onesided, c, axis):
    from onnxcc.kernel.schedule import describe_schedules, schedule_program

    shape = ["N", 3, 65 if inverse and onesided else 128, c] if axis == 2 else ["N", 100, 3, c]
    node = h.make_node("DFT", ["x"], ["y"], axis=axis, inverse=inverse, onesided=onesided)
    m = model(node, shape)
    _, prog, k = jit_compile(m)
    schedule_program(prog)
    assert ("gemm" in describe_schedules(prog)) == (axis == 2)
    for n in (1, 5):
        x = np.random.default_rng(n).uniform(-2, 2, size=[n if d == "N" else d for d in shape]).astype(F32)
        want = ort_run(m, {"x": x})["y"]
        np.testing.assert_allclose(k(x)[0], want, rtol=1e-4, atol=2e-5 * (1 if inverse else 128))
