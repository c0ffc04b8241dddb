"""Mish's tanh(softplus(x)) runs as one vmath function (vmath.tanh_softplus, chosen by the
expression emitter for that composition): the ONNX Mish op and the Softplus -> Tanh -> Mul
chain exporters write before opset 18, alone and fused into a LayerNormalization, compiled
through the user path and compared with onnxruntime over the whole float range that
matters (deep negative tails, the rounding-to-1 region, large values)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxcc
from onnxcc.testing import ort_run

WIDTH = 96


def _model(mish_op: bool, layernorm: bool, elem: int) -> onnx.ModelProto:
    n = helper.make_node
    if mish_op:
        nodes = [n("Mish", ["x"], ["a"])]
    else:
        nodes = [n("Softplus", ["x"], ["sp"]), n("Tanh", ["sp"], ["t"]), n("Mul", ["x", "t"], ["a"])]
    inits = []
    out = "a"
    if layernorm:
        dt = np.float32 if elem == TensorProto.FLOAT else np.float64
        rng = np.random.default_rng(3)
        inits = [numpy_helper.from_array((1 + 0.1 * rng.standard_normal(WIDTH)).astype(dt), "g"),
                 numpy_helper.from_array((0.1 * rng.standard_normal(WIDTH)).astype(dt), "b")]
        nodes.append(n("LayerNormalization", ["a", "g", "b"], ["y"], axis=-1, epsilon=1e-5))
        out = "y"
    shape = ["rows", WIDTH]
    g = helper.make_graph(nodes, "mish", [helper.make_tensor_value_info("x", elem, shape)],
                          [helper.make_tensor_value_info(out, elem, shape)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)


def _inputs(rows: int, dt) -> np.ndarray:
    rng = np.random.default_rng(rows)
    x = rng.uniform(-6, 6, (rows, WIDTH))
    x[0, :48] = np.linspace(-120, 60, 48)  # underflow tail, rounding to 1, the clamp above 20
    x[0, 48:] = np.linspace(-1e-3, 1e-3, 48)
    return x.astype(dt)


@pytest.mark.parametrize("mish_op,layernorm,elem", [
    (True, False, TensorProto.FLOAT), (False, False, TensorProto.FLOAT), (False, True, TensorProto.FLOAT),
    (True, False, TensorProto.DOUBLE)])
def test_mish_matches_onnxruntime(tmp_path, mish_op, layernorm, elem):
    model = _model(mish_op, layernorm, elem)
    onnxcc.compile(model, tmp_path / "m", name="mish")
    lib = onnxcc.load(tmp_path / "m")
    dt = np.float32 if elem == TensorProto.FLOAT else np.float64
    tol = dict(rtol=2e-6, atol=1e-6) if dt == np.float32 else dict(rtol=1e-13, atol=1e-13)
    for rows in (1, 5, 33):
        x = _inputs(rows, dt)
        got = lib.run({"x": x})
        got = np.asarray(next(iter(got.values())))
        want = next(iter(ort_run(model, {"x": x}).values()))
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got, want, **tol)


def test_mish_kernel_uses_one_function(tmp_path):
    """The fused kernel calls the composed function, not tanh of softplus (whose log and three
    divisions cost 2x)."""
    text = onnxcc.compile(_model(False, True, TensorProto.FLOAT), tmp_path / "ll", name="mish", emit="llvm").text
    assert "onnxcc.math.tanh_softplus.f32" in text
    assert "onnxcc.math.softplus.f32" not in text
