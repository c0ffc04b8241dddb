"""Dilated convs whose outer taps read only padding on small planes, with symbolic extents
(ops/conv_deadtaps.py `tap_regimes`): the generic version lowers the conv once per interval
of H / W where a tap set is dead, behind an if on the extents, and the full conv last.
Compared with onnxruntime (rtol / atol 1e-4) on planes on both sides of every threshold:

- y:  3x3 at dilation 12, pads 12, bias, then Relu (an ASPP branch): centre tap alone for
      H <= 12 / W <= 12;
- y2: 3x3 at dilation (6, 4), stride (2, 1), no bias: thresholds H <= 6 and W <= 4;
- z:  a 1-D conv, kernel 3 at dilation 8, pads 8: L <= 8;
- z2: a 1-D conv at dilation 2 with pads (0, 4) (asymmetric): tap 0 alone for L <= 2 (too
      small a plane for its own lowering, `MIN_REGIME_EXTENT`), taps 0 and 1 for L of 3 or
      4, all three from 5.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from compiled_model import built_fixture
from onnx import TensorProto, helper, numpy_helper

from onnxcc.testing import ort_run

C, M = 8, 12


def _model() -> onnx.ModelProto:
    rng = np.random.default_rng(5)

    def w(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32),
                                       name)

    inits = [w("w", M, C, 3, 3), w("b", M), w("w2", M, C, 3, 3), w("w1", M, C, 3), w("w12", M, C, 3)]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], dilations=[12, 12], pads=[12, 12, 12, 12]),
        helper.make_node("Relu", ["c"], ["y"]),
        helper.make_node("Conv", ["x", "w2"], ["y2"], dilations=[6, 4], pads=[6, 4, 6, 4], strides=[2, 1]),
        helper.make_node("Conv", ["s", "w1"], ["z"], dilations=[8], pads=[8, 8]),
        helper.make_node("Conv", ["s", "w12"], ["z2"], dilations=[2], pads=[0, 4]),
    ]
    g = helper.make_graph(
        nodes, "taps",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", C, "H", "W"]),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, ["N", C, "L"])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "y2", "z", "z2")], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


built = built_fixture("taps", _model)


def test_regimes_are_guarded_by_the_extents(built):
    _, kernel, _ = built
    for cond in ("if ((H <= 12) & (W <= 12))", "if (H <= 12)", "if (W <= 12)", "if ((H <= 6) & (W <= 4))",
                 "if (L <= 8)", "if ((L <= 4) & (L >= 3))"):
        assert cond in kernel, cond
    assert "if (L <= 2)" not in kernel
    assert kernel.count("if (") == 8


@pytest.mark.parametrize("n,h,w,length", [(1, 1, 1, 1), (1, 4, 5, 8), (2, 6, 4, 9), (1, 7, 5, 3), (1, 12, 12, 4),
                                          (1, 13, 12, 5), (1, 12, 13, 2), (1, 13, 13, 8), (2, 21, 30, 64)])
def test_matches_onnxruntime_across_thresholds(built, n, h, w, length):
    path, _, lib = built
    rng = np.random.default_rng(n * 1000 + h * 31 + w)
    feeds = {"x": rng.standard_normal((n, C, h, w)).astype(np.float32),
             "s": rng.standard_normal((n, C, length)).astype(np.float32)}
    got, want = lib.run(feeds), ort_run(path, feeds)
    for k in ("y", "y2", "z", "z2"):
        np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-4, err_msg=k)
