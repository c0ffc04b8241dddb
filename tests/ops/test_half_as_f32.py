"""Half-precision Conv and MatMul lowered on f32 buffers (ops/half_as_f32.py): the results
match onnxruntime (which also computes them in f32) to one half ulp, and the kernel program
holds the f32 sums the GEMM path takes, rounded to the half type after them."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import onnxcc
from onnxcc.testing import ort_run


def _model(elem: int) -> onnx.ModelProto:
    """y = MatMul(Conv(x, w, b) flattened over its last dim, m): a conv and a matmul, half typed"""
    r = np.random.default_rng(0)
    dt = onnx.helper.tensor_dtype_to_np_dtype(elem)
    inits = {"w": r.standard_normal((6, 3, 3, 3)) * 0.3, "b": r.standard_normal(6) * 0.1,
             "m": r.standard_normal((5, 4)) * 0.3}
    nodes = [h.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             h.make_node("MatMul", ["c", "m"], ["y"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", elem, ["N", 3, "H", 5])],
                     [h.make_tensor_value_info("y", elem, None)],
                     [onnx.numpy_helper.from_array(v.astype(dt), k) for k, v in inits.items()])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("elem", [T.FLOAT16])
def test_half_conv_and_matmul_match_onnxruntime(elem, tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(_model(elem), path)
    onnxcc.compile(path, tmp_path / "lib")
    lib = onnxcc.load(tmp_path / "lib")
    r = np.random.default_rng(1)
    for shape in ((1, 3, 4, 5), (2, 3, 9, 5)):
        x = r.standard_normal(shape).astype(np.float16)
        got, want = lib.run({"x": x})["y"], ort_run(path, {"x": x})["y"]
        assert got.dtype == want.dtype == np.float16 and got.shape == want.shape
        # one f16 rounding of the same f32 value: at most one ulp apart
        np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=1e-3, atol=1e-3)
    text = onnxcc.compile(path, tmp_path / "kir", emit="kernel").text
    # every sum writes an f32 buffer (the conv's may carry the f16 rounding as an epilogue
    # when its reader widens it again)
    sums = [ln.split("[")[0].strip() for ln in text.splitlines() if "sum(" in ln and " = " in ln]
    assert len(sums) == 2 and all(f"temp {name}: f32[" in text for name in sums), sums
    assert "f32[6, 3, 3, 3]" in text  # the weights widened at compile time
