"""Depthwise convolutions at stride 2 (the paired-tap lowering, ops/nn.py `_pair_taps`)
compiled once at symbolic N, H, W and compared with onnxruntime at odd and even sizes
(rtol 1e-4, atol 1e-4: sums of up to 25 products), plus inputs holding inf and nan: the
extra load each row of taps makes reads the next window's first column, and must not leak
into this window's output."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from compiled_model import assert_matches_onnxruntime, lib_fixture
from onnx import TensorProto, helper, numpy_helper

C = 6
# (name, out channels, kernel, attrs): group C everywhere
CONVS = [
    ("k3_s2_p1", 6, (3, 3), dict(pads=[1, 1, 1, 1], strides=[2, 2])),
    ("k3_s2_valid", 6, (3, 3), dict(strides=[2, 2])),
    ("k5_s2_p2", 6, (5, 5), dict(pads=[2, 2, 2, 2], strides=[2, 2])),
    ("k3_s2_mult2", 12, (3, 3), dict(pads=[0, 1, 1, 0], strides=[2, 2])),
    ("k3_s12_same", 6, (3, 3), dict(auto_pad="SAME_UPPER", strides=[1, 2])),
    ("k1x3_s2", 6, (1, 3), dict(pads=[0, 1, 0, 1], strides=[2, 2])),
]


def _model(path):
    rng = np.random.default_rng(11)
    nodes, inits, outs = [], [], []
    for name, m, k, attrs in CONVS:
        w = rng.standard_normal((m, 1, *k)).astype(np.float32)
        bias = rng.standard_normal(m).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w_{name}"), numpy_helper.from_array(bias, f"b_{name}")]
        nodes.append(helper.make_node("Conv", ["x", f"w_{name}", f"b_{name}"], [name], group=C, **attrs))
        outs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", C, "H", "W"])
    g = helper.make_graph(nodes, "dw", [x], outs, inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


built = lib_fixture("dw", _model)


def _compare(path, lib, x, where):
    assert_matches_onnxruntime(path, lib, {"x": x}, rtol=1e-4, atol=1e-4, where=where)


@pytest.mark.parametrize("n,h,w", [(1, 5, 7), (3, 9, 10), (1, 17, 33), (2, 32, 64), (1, 40, 37)])
def test_stride2_depthwise_matches_onnxruntime(built, n, h, w):
    path, lib = built
    x = np.random.default_rng(h * w).standard_normal((n, C, h, w)).astype(np.float32)
    _compare(path, lib, x, (n, h, w))


def test_inf_and_nan_reach_only_their_own_windows(built):
    """Columns of inf, -inf and nan: every output whose window holds none of them stays
    finite, the rest are what onnxruntime gives (nan where inf meets a weight of the other
    sign or nan)."""
    path, lib = built
    x = np.random.default_rng(3).standard_normal((1, C, 12, 21)).astype(np.float32)
    x[:, :, :, 6] = np.inf
    x[:, 1, :, 11] = np.nan
    x[:, 2, 4, 16] = -np.inf
    _compare(path, lib, x, "non-finite input")
    got = lib.run({"x": x})["k3_s2_valid"]
    assert np.isfinite(got[:, 0, :, 0]).all()  # columns 0..2 only
