"""STFT and MelWeightMatrix (ops/signal_extra.py): native lowering and numpy reference vs
onnxruntime. STFT compiled once with a symbolic batch and signal length (the frame count
is then a formula of it), run at two lengths; window or frame_length, one-sided or not,
real or complex signal. MelWeightMatrix at a few sizes, rates and edges."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as h

from onnxcc.errors import OnnxccError
from onnxcc.interp import run as interp_run
from onnxcc.testing import jit_compile, ort_run


def model(node, inputs, inits):
    vis = [h.make_tensor_value_info(n, t, s) for n, t, s in inputs]
    inits = [onnx.numpy_helper.from_array(np.asarray(a), n) for n, a in inits.items()]
    m = h.make_model(h.make_graph([node], "g", vis, [h.make_empty_tensor_value_info("y")], inits),
                     opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 10
    return m


# (onesided, window or frame_length, channels): a one-sided transform takes a real signal
@pytest.mark.parametrize("onesided,use_window,c", [(1, True, 1), (1, False, 1), (0, True, 1), (0, False, 1),
                                                   (0, True, 2)])
def test_stft(onesided, use_window, c):
    inits = {"step": np.array(3, np.int64)}
    if use_window:
        inits["w"] = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(10) / 10)).astype(np.float32)
        ins = ["x", "step", "w"]
    else:
        inits["len"] = np.array(10, np.int64)
        ins = ["x", "step", "", "len"]
    m = model(h.make_node("STFT", ins, ["y"], onesided=onesided), [("x", TP.FLOAT, ["B", "L", c])], inits)
    mod, _, k = jit_compile(m)
    for b, length in ((1, 10), (2, 37)):
        x = np.random.default_rng(length).uniform(-1, 1, size=(b, length, c)).astype(np.float32)
        want = ort_run(m, {"x": x})["y"]
        for got in (k(x)[0], interp_run(mod, [x])[0]):
            assert got.shape == want.shape, (got.shape, want.shape)
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


# the table form (ops/signal_table.py): odd and even frame lengths, the window a constant (folded
# into the table) or a graph input (a factor of the frames), f32 (a GEMM) and f64
@pytest.mark.parametrize("fl,onesided,window,c,dtype", [
    (9, 1, "const", 1, TP.FLOAT), (16, 1, "input", 1, TP.FLOAT), (7, 0, "input", 2, TP.FLOAT),
    (12, 0, None, 2, TP.FLOAT), (11, 1, "const", 1, TP.DOUBLE), (64, 1, "const", 1, TP.FLOAT)])
def test_stft_twiddle_table(fl, onesided, window, c, dtype):
    npdt = np.float32 if dtype == TP.FLOAT else np.float64
    hann = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(fl) / fl)).astype(npdt)
    inits: dict = {"step": np.array(5, np.int64)}
    ins, vis = ["x", "step"], [("x", dtype, ["B", "L", c])]
    if window == "const":
        inits["w"] = hann
        ins.append("w")
    elif window == "input":
        vis.append(("w", dtype, [fl]))
        ins.append("w")
    else:
        inits["len"] = np.array(fl, np.int64)
        ins += ["", "len"]
    m = model(h.make_node("STFT", ins, ["y"], onesided=onesided), vis, inits)
    _, prog, k = jit_compile(m)
    assert "twiddles" in str(prog)
    for b, length in ((1, fl), (3, 4 * fl + 3)):
        x = np.random.default_rng(length).uniform(-1, 1, size=(b, length, c)).astype(npdt)
        feeds = {"x": x, **({"w": hann} if window == "input" else {})}
        want = ort_run(m, feeds)["y"]
        got = k(*feeds.values())[0]
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5 * fl)
        if onesided:  # the DC bin of a real signal has no imaginary part, as an FFT gives
            assert np.all(got[:, :, 0, 1] == 0)


def test_stft_frame_longer_than_signal_is_refused():
    m = model(h.make_node("STFT", ["x", "step", "", "len"], ["y"]), [("x", TP.FLOAT, [1, 8, 1])],
              {"step": np.array(2, np.int64), "len": np.array(16, np.int64)})
    with pytest.raises(OnnxccError, match="frame length <= signal length"):
        jit_compile(m)


@pytest.mark.parametrize("mels,dft,rate,lo,hi", [(8, 16, 8192, 0.0, 4096.0), (10, 64, 16000, 20.0, 7600.0),
                                                 (5, 33, 22050, 100.0, 8000.0)])
def test_mel_weight_matrix(mels, dft, rate, lo, hi):
    inits = {"m": np.array(mels, np.int32), "d": np.array(dft, np.int32), "r": np.array(rate, np.int32),
             "lo": np.array(lo, np.float32), "hi": np.array(hi, np.float32)}
    m = model(h.make_node("MelWeightMatrix", ["m", "d", "r", "lo", "hi"], ["y"]), [], inits)
    mod, _, k = jit_compile(m)
    want = ort_run(m, {})["y"]
    for got in (k()[0], interp_run(mod, [])[0]):
        assert got.shape == want.shape == (dft // 2 + 1, mels) and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_mel_weight_matrix_rates_read_at_run_time():
    # sizes fixed, the rate and the edges graph inputs: one build serves every value of them
    inits = {"m": np.array(6, np.int64), "d": np.array(32, np.int64)}
    ins = [("r", TP.INT64, []), ("lo", TP.FLOAT, []), ("hi", TP.FLOAT, [])]
    m = model(h.make_node("MelWeightMatrix", ["m", "d", "r", "lo", "hi"], ["y"]), ins, inits)
    mod, _, k = jit_compile(m)
    for rate, lo, hi in ((8000, 0.0, 4000.0), (16000, 300.0, 5000.0)):
        feeds = {"r": np.array(rate, np.int64), "lo": np.array(lo, np.float32), "hi": np.array(hi, np.float32)}
        want = ort_run(m, feeds)["y"]
        args = [feeds[n] for n in ("r", "lo", "hi")]
        for got in (k(*args)[0], interp_run(mod, args)[0]):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_mel_filters_past_the_last_bin_fail_at_run_time():
    inits = {"m": np.array(5, np.int64), "d": np.array(33, np.int64)}
    ins = [("r", TP.INT64, []), ("lo", TP.FLOAT, []), ("hi", TP.FLOAT, [])]
    m = model(h.make_node("MelWeightMatrix", ["m", "d", "r", "lo", "hi"], ["y"]), ins, inits)
    mod, _, k = jit_compile(m)
    args = [np.array(22050, np.int64), np.array(100.0, np.float32), np.array(11025.0, np.float32)]
    with pytest.raises(OnnxccError, match="index out of range"):
        k(*args)
    with pytest.raises(OnnxccError, match="outside the 17 bins of dft_length 33"):
        interp_run(mod, args)
