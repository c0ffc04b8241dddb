"""The lowering paths of LRN, LpNormalization and MeanVarianceNormalization against onnxruntime:
LRN's windows summed tap by tap (odd, even, wider than the channels, with inf / NaN at the edge
channels whose taps are clamped and masked) or as a loop past MAX_UNROLLED_WINDOW, beta 0.75
(r * sqrt(r)) or another; LpNormalization over an inner axis through its temp (zero norms
give 0), over the last axis in the body; MVN's statistics in temps over any axes (all of
them: a rank-0 temp). Symbolic batch and spatial dims, two shapes each."""

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as h

from onnxcc.interp import run as interp_run
from onnxcc.ops.norm import MAX_UNROLLED_WINDOW
from onnxcc.testing import jit_compile, ort_run


def _model(node, shape, opset=17):
    m = h.make_model(h.make_graph([node], "g", [h.make_tensor_value_info("x", TP.FLOAT, shape)],
                                  [h.make_tensor_value_info("y", TP.FLOAT, None)]),
                     opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _check(node, shape, concrete, edit=None, rtol=1e-5, atol=1e-6, interp=False):
    m = _model(node, shape)
    mod, _, k = jit_compile(m)
    for dims in concrete:
        x = np.random.default_rng(sum(dims)).standard_normal(dims).astype(np.float32)
        if edit is not None:
            edit(x)
        want = interp_run(mod, [x])[0] if interp else ort_run(m, {"x": x})["y"]
        np.testing.assert_allclose(k(x)[0], want, rtol=rtol, atol=atol, err_msg=str(dims))


@pytest.mark.parametrize("size,beta", [(5, 0.75), (3, 0.6), (4, 0.75), (9, 0.75), (MAX_UNROLLED_WINDOW + 3, 0.75)])
def test_lrn(size, beta):
    node = h.make_node("LRN", ["x"], ["y"], size=size, beta=beta, alpha=0.01, bias=1.5)
    # onnxruntime refuses even sizes: the numpy interpreter is their oracle
    _check(node, ["N", 7, "H", "W"], [(1, 7, 1, 3), (2, 7, 5, 19)], interp=size % 2 == 0)


def test_lrn_inf_and_nan_at_the_edge_channels():
    def edit(x):
        x[0, 0, 0, :] = np.inf
        x[-1, -1, -1, :2] = np.nan
        x[0, -1, 0, 0] = -np.inf

    # the numpy interpreter is the oracle here: onnxruntime slides its window sum (adding and
    # subtracting squares), so an inf channel leaves NaN in channels whose window never held it
    node = h.make_node("LRN", ["x"], ["y"], size=5)
    m = _model(node, ["N", 6, "H", "W"])
    mod, _, k = jit_compile(m)
    x = np.random.default_rng(0).standard_normal((2, 6, 3, 5)).astype(np.float32)
    edit(x)
    want = interp_run(mod, [x])[0]
    got = k(x)[0]
    assert np.array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("axis,p", [(1, 2), (1, 1), (0, 2), (2, 2), (-1, 2), (-1, 1)])
def test_lp_normalization(axis, p):
    def edit(x):
        x[0, :, 0, 0] = 0.0  # a zero norm over axis 1 (and zeros along the others)

    node = h.make_node("LpNormalization", ["x"], ["y"], axis=axis, p=p)
    _check(node, ["N", 5, "H", "W"], [(1, 5, 1, 1), (2, 5, 3, 17)], edit)


@pytest.mark.parametrize("axes", [[0, 2, 3], [1], [2, 3], [0, 1, 2, 3], [3]])
def test_mean_variance_normalization(axes):
    node = h.make_node("MeanVarianceNormalization", ["x"], ["y"], axes=axes)
    _check(node, ["N", 4, "H", "W"], [(1, 4, 2, 3), (3, 4, 6, 17)], rtol=1e-4, atol=1e-5)
