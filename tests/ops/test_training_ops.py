"""ai.onnx.preview.training Adagrad, Adam and Momentum (ops/training.py): native lowering and
numpy reference vs onnx's reference evaluator (onnxruntime's default build has no training
ops), at T = 0 (no bias correction / whole gradient) and T > 0, one and two tensors."""

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as h
from onnx.reference import ReferenceEvaluator

from onnxcc.errors import OnnxccError
from onnxcc.interp import run as interp_run
from onnxcc.testing import jit_compile

OPSETS = [h.make_opsetid("", 21), h.make_opsetid("ai.onnx.preview.training", 1)]
SHAPES = [[3], [2, 4]]


def model(op, groups, n_out, **attrs):
    names = [f"{g}{i}" for g in groups for i in range(len(SHAPES))]
    outs = [f"out{k}_{i}" for k in range(n_out) for i in range(len(SHAPES))]
    node = h.make_node(op, ["R", "T", *names], outs, domain="ai.onnx.preview.training", **attrs)
    vis = [h.make_tensor_value_info("R", TP.FLOAT, []), h.make_tensor_value_info("T", TP.INT64, [])]
    vis += [h.make_tensor_value_info(n, TP.FLOAT, SHAPES[int(n[-1])]) for n in names]
    m = h.make_model(h.make_graph([node], "g", vis, [h.make_empty_tensor_value_info(o) for o in outs]),
                     opset_imports=OPSETS)
    m.ir_version = 10
    return m, names


def check(m, names, t):
    rng = np.random.default_rng(t)
    feeds = {"R": np.array(0.1, np.float32), "T": np.array(t, np.int64)}
    for n in names:
        v = rng.uniform(-2, 2, size=SHAPES[int(n[-1])]).astype(np.float32)
        feeds[n] = np.abs(v) if n[0] == "H" else v  # squared-gradient sums are >= 0
    want = ReferenceEvaluator(m).run(None, feeds)
    mod, _, k = jit_compile(m)
    args = [feeds[i.name] for i in m.graph.input]
    for got in (k(*args), interp_run(mod, args)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == np.float32
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("t", [0, 3])
def test_adagrad(t):
    m, names = model("Adagrad", "XGH", 2, decay_factor=0.1, epsilon=1e-5, norm_coefficient=0.01)
    check(m, names, t)


@pytest.mark.parametrize("t", [0, 3])
def test_adam(t):
    m, names = model("Adam", "XGVH", 3, alpha=0.9, beta=0.99, epsilon=1e-6, norm_coefficient=0.01,
                     norm_coefficient_post=0.02)
    check(m, names, t)


@pytest.mark.parametrize("t", [0, 3])
@pytest.mark.parametrize("mode", ["standard", "nesterov"])
def test_momentum(t, mode):
    m, names = model("Momentum", "XGV", 2, alpha=0.9, beta=0.5, mode=mode, norm_coefficient=0.01)
    check(m, names, t)


def test_momentum_unknown_mode_is_an_error():
    m, _ = model("Momentum", "XGV", 2, alpha=0.9, beta=0.5, mode="heavy", norm_coefficient=0.0)
    with pytest.raises(OnnxccError, match="mode 'heavy' is not one of standard, nesterov"):
        jit_compile(m)


def test_mismatched_state_shape_is_an_error():
    m, _ = model("Adagrad", "XGH", 2)
    m.graph.input[-1].CopyFrom(h.make_tensor_value_info("H1", TP.FLOAT, [2, 5]))
    with pytest.raises(OnnxccError, match="input 7 against X1"):
        jit_compile(m)
