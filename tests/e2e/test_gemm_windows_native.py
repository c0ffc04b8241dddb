"""GEMMs that pack B per call run in windows of packed panels (codegen/cpu/gemm.py
`WINDOW_BYTES`): pack a window, multiply it, pack the next. Shapes here make many windows,
a last short one, interleaved batches (a conv's packed B per batch above
INTERLEAVE_MIN_BYTES) and non-interleaved ones, all compared with onnxruntime (rtol 1e-4,
atol 1e-4: sums of up to 400 products)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from compiled_model import lib_fixture
from onnx import TensorProto, helper, numpy_helper

from onnxcc.codegen.cpu.gemm import WINDOW_BYTES
from onnxcc.testing import ort_run


def _model(path):
    rng = np.random.default_rng(11)
    w = numpy_helper.from_array((rng.standard_normal((24, 16, 3, 3)) * 0.1).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(24).astype(np.float32), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["conv"]),
             helper.make_node("MatMul", ["p", "q"], ["mm"])]  # B = q: packed per call, no const
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16, "H", "W"]),
           helper.make_tensor_value_info("p", TensorProto.FLOAT, ["M", "K"]),
           helper.make_tensor_value_info("q", TensorProto.FLOAT, ["K", "J"])]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("conv", "mm")]
    g = helper.make_graph(nodes, "win", ins, outs, [w, b])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


built = lib_fixture("win", _model)


# (N, H, W) of the conv, (M, K, J) of the matmul
@pytest.mark.parametrize("conv,mm", [((1, 45, 47), (37, 400, 2000)), ((3, 33, 29), (5, 300, 1537)),
                                     ((2, 7, 9), (64, 16, 33))])
def test_windowed_gemms_match_onnxruntime(built, conv, mm):
    path, lib = built
    rng = np.random.default_rng(sum(conv) + sum(mm))
    n, h, w = conv
    m, k, j = mm
    feeds = {"x": rng.standard_normal((n, 16, h, w)).astype(np.float32),
             "p": rng.standard_normal((m, k)).astype(np.float32),
             "q": rng.standard_normal((k, j)).astype(np.float32)}
    # the first two cases pack more than one window of B (panels of 48 or 32 columns)
    if conv[1] > 30:
        assert n * 16 * 9 * h * w * 4 > 2 * WINDOW_BYTES and k * j * 4 > 2 * WINDOW_BYTES
    want = ort_run(path, feeds)
    got = lib.run(feeds)
    for name in ("conv", "mm"):
        assert got[name].shape == want[name].shape, name
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-4, err_msg=f"{name} at {conv}, {mm}")
