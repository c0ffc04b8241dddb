"""NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (ops/loss.py): native lowering and numpy
reference vs onnxruntime, compiled once at symbolic shapes and run at two settings of the
dims; shape rules and refusals."""

import numpy as np
import onnx
import pytest
from onnx import helper as h

from onnxcc.errors import OnnxccError, RuntimeCallError, ShapeError
from onnxcc.interp import run as interp_run
from onnxcc.testing import jit_compile, ort_run

F32, F64, I64, I32 = np.float32, np.float64, np.int64, np.int32
DIMS = ({"N": 1, "D": 1}, {"N": 5, "D": 3})
C = 4


def model(node, inputs, n_out=1, opset=18):
    vis = [h.make_tensor_value_info(n, onnx.helper.np_dtype_to_tensor_dtype(np.dtype(t)), s)
           for n, t, s in inputs]
    outs = [h.make_empty_tensor_value_info(o) for o in node.output[:n_out]]
    m = h.make_model(h.make_graph([node], "g", vis, outs), opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def feeds(inputs, dims, seed, ignore=None):
    rng = np.random.default_rng(seed)
    out = {}
    for n, t, s in inputs:
        shape = tuple(dims[d] if isinstance(d, str) else d for d in s)
        if np.dtype(t).kind == "i":
            v = rng.integers(0, C, size=shape)
            if ignore is not None:  # about a third of the targets are the ignored class
                v = np.where(rng.random(shape) < 0.35, ignore, v)
            out[n] = v.astype(t)
        else:
            out[n] = rng.uniform(-2.0, 2.0, size=shape).astype(t)
    return out


def check(node, inputs, n_out=1, ignore=None, rtol=1e-5, atol=1e-5):
    """Compile once; at each dims setting the native kernel and the interpreter match onnxruntime."""
    m = model(node, inputs, n_out)
    mod, _, k = jit_compile(m)
    for seed, dims in enumerate(DIMS):
        f = feeds(inputs, dims, seed, ignore)
        want = list(ort_run(m, f).values())
        args = [f[a.name] for a in mod.main.params]
        for got in (k(*args), interp_run(mod, args)):
            assert len(got) == len(want)
            for g, w in zip(got, want):
                assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
                np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"at {dims}")


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ii", [None, 2, -1])
def test_nll_loss(reduction, weighted, ii):
    inputs = [("x", F32, ["N", C, "D", 2]), ("t", I64, ["N", "D", 2])]
    inputs += [("w", F32, [C])] if weighted else []
    attrs = {"reduction": reduction} | ({} if ii is None else {"ignore_index": ii})
    node = h.make_node("NegativeLogLikelihoodLoss", [i[0] for i in inputs], ["y"], **attrs)
    check(node, inputs, ignore=ii)


def test_nll_loss_2d_int32_target_f64():
    inputs = [("x", F64, ["N", C]), ("t", I32, ["N"])]
    check(h.make_node("NegativeLogLikelihoodLoss", ["x", "t"], ["y"], reduction="mean"), inputs)


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("weighted,ii", [(False, None), (True, None), (True, 0), (False, -5)])
@pytest.mark.parametrize("log_prob", [False, True])
def test_softmax_cross_entropy(reduction, weighted, ii, log_prob):
    inputs = [("x", F32, ["N", C, "D"]), ("t", I64, ["N", "D"])]
    inputs += [("w", F32, [C])] if weighted else []
    attrs = {"reduction": reduction} | ({} if ii is None else {"ignore_index": ii})
    outs = ["y", "lp"] if log_prob else ["y"]
    node = h.make_node("SoftmaxCrossEntropyLoss", [i[0] for i in inputs], outs, **attrs)
    check(node, inputs, n_out=len(outs), ignore=ii)


def test_target_out_of_range_fails_at_run_time():
    inputs = [("x", F32, ["N", C]), ("t", I64, ["N"])]
    m = model(h.make_node("NegativeLogLikelihoodLoss", ["x", "t"], ["y"], reduction="sum"), inputs)
    _, _, k = jit_compile(m)
    with pytest.raises(RuntimeCallError, match="index out of range"):
        k(np.zeros((2, C), F32), np.array([1, C], I64))


def test_shape_rule_checks_target():
    inputs = [("x", F32, ["N", C, 3]), ("t", I64, ["N", 4])]
    m = model(h.make_node("NegativeLogLikelihoodLoss", ["x", "t"], ["y"], reduction="none"), inputs)
    with pytest.raises((ShapeError, OnnxccError), match="target dim 1"):
        jit_compile(m)


def test_shape_rule_none_keeps_symbolic_dims():
    inputs = [("x", F32, ["N", C, "D"]), ("t", I64, ["N", "D"])]
    m = model(h.make_node("SoftmaxCrossEntropyLoss", ["x", "t"], ["y", "lp"], reduction="none"), inputs, 2)
    mod, _, _ = jit_compile(m)
    text = str(mod)
    assert "-> (f32[N, D], f32[N, 4, D])" in text, text
