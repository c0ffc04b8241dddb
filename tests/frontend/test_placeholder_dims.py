"""A dim_param like "?" (paddle2onnx writes it for every unknown dim) names no dim: two of them are
not tied together, as onnxruntime does not tie them (a PaddleOCR classifier with x: [-1, 3, ?, ?]
was refused at H=48, W=192)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

import onnxcc


def test_question_mark_dims_are_independent(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 3, "?", "?"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph([helper.make_node("ReduceMean", ["x"], ["y"], axes=[3], keepdims=0)], "g", [x], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "q.onnx"
    path.write_bytes(m.SerializeToString())
    mod = onnxcc.load_model(path)
    shape = mod.main.params[0].type.shape
    assert shape[2] != shape[3]  # two symbols, not one
    onnxcc.compile(path, tmp_path / "out")
    run = onnxcc.load(tmp_path / "out")
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 3, 48, 192)).astype(np.float32)}
    want = ort.InferenceSession(str(path)).run(None, feeds)[0]
    np.testing.assert_allclose(run.run(feeds)["y"], want, rtol=1e-5, atol=1e-6)
