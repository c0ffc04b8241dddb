"""RandomUniform(Like) and RandomNormal(Like) (ops/random.py).

Random draws have no oracle to match element for element, so the tests check what a user
relies on: shape and dtype, the range and the first two moments against the attributes
(n = 20000 draws: the mean's standard error is ~0.7% of the scale, the bounds below are
over 5 of them), that a seed fixes the draws, that two unseeded nodes differ, and that the
library and the numpy interpreter draw the same values."""

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as h

from onnxcc.errors import OnnxccError
from onnxcc.interp import run as interp_run
from onnxcc.testing import jit_compile


def model(nodes, inputs, outputs, opset=22):
    vis = [h.make_tensor_value_info(n, t, s) for n, t, s in inputs]
    m = h.make_model(h.make_graph(nodes, "g", vis, [h.make_empty_tensor_value_info(o) for o in outputs]),
                     opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def run_both(m, *xs):
    mod, _, k = jit_compile(m)
    got, want = k(*xs), interp_run(mod, list(xs))
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=1e-5, atol=1e-6)
    return got


@pytest.mark.parametrize("dtype_attr,want", [({}, np.float32), ({"dtype": TP.DOUBLE}, np.float64)])
def test_uniform_like_range_and_moments(dtype_attr, want):
    m = model([h.make_node("RandomUniformLike", ["x"], ["y"], low=-1.0, high=3.0, seed=7.0, **dtype_attr)],
              [("x", TP.FLOAT, ["N", 5000])], ["y"])
    y, = run_both(m, np.zeros((4, 5000), np.float32))
    assert y.dtype == want and y.shape == (4, 5000)
    assert y.min() >= -1.0 and y.max() < 3.0
    assert abs(y.mean() - 1.0) < 0.05 and abs(y.std() - 4 / np.sqrt(12)) < 0.05


def test_normal_moments_and_static_shape():
    m = model([h.make_node("RandomNormal", [], ["y"], shape=[100, 200], mean=2.0, scale=0.5, seed=1.0)],
              [], ["y"])
    y, = run_both(m)
    assert y.dtype == np.float32 and y.shape == (100, 200)
    assert abs(y.mean() - 2.0) < 0.02 and abs(y.std() - 0.5) < 0.02
    assert np.abs(y - 2.0).max() < 0.5 * 5.8  # Box-Muller's radius bound at 24-bit uniforms


def test_seed_fixes_draws_and_unseeded_nodes_differ():
    nodes = [h.make_node("RandomNormalLike", ["x"], ["a"], seed=3.0),
             h.make_node("RandomNormalLike", ["x"], ["b"], seed=3.0),
             h.make_node("RandomNormalLike", ["x"], ["c"], seed=4.0),
             h.make_node("RandomUniformLike", ["x"], ["d"], name="first"),
             h.make_node("RandomUniformLike", ["x"], ["e"], name="second")]
    m = model(nodes, [("x", TP.FLOAT, [64])], ["a", "b", "c", "d", "e"])
    a, b, c, d, e = run_both(m, np.zeros(64, np.float32))
    np.testing.assert_array_equal(a, b)
    assert (a != c).mean() > 0.9 and (d != e).mean() > 0.9


def test_integer_dtype_is_refused_with_the_node():
    m = model([h.make_node("RandomUniform", [], ["y"], shape=[3], dtype=TP.INT32, name="noise")], [], ["y"])
    with pytest.raises(OnnxccError, match=r"noise.*i32 is not supported"):
        jit_compile(m)
