"""Fusion keeps the views in the middle of a view chain (regression: the dynamo-exported
nn.TransformerEncoderLayer's `Reshape -> Unsqueeze -> Transpose -> Squeeze -> Gather` split
of the packed QKV projection lost the Reshape view, and the fused matmul loaded an
unknown buffer)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh

import onnxcc
from onnxcc.testing import ort_run, random_inputs


def _qkv_split_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes = [
        oh.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2]),
        oh.make_node("MatMul", ["t", "w"], ["m"]),
        oh.make_node("Shape", ["t"], ["s"], start=0, end=2),
        oh.make_node("Concat", ["s", "tail"], ["sh"], axis=0),
        oh.make_node("Reshape", ["m", "sh"], ["r"]),  # view of m
        oh.make_node("Unsqueeze", ["r", "zero"], ["u"]),  # view of a view
        oh.make_node("Transpose", ["u"], ["tt"], perm=[3, 1, 2, 0, 4]),
        oh.make_node("Squeeze", ["tt", "minus2"], ["sq"]),
        oh.make_node("Gather", ["sq", "i0"], ["q"], axis=0),
        oh.make_node("Gather", ["sq", "i1"], ["k"], axis=0),
        oh.make_node("Transpose", ["q"], ["qt"], perm=[1, 0, 2]),
        oh.make_node("Transpose", ["k"], ["kt"], perm=[1, 2, 0]),
        oh.make_node("MatMul", ["qt", "kt"], ["y"]),
    ]
    inits = [
        nh.from_array(rng.standard_normal((8, 24)).astype(np.float32), "w"),
        nh.from_array(np.array([3, 8], np.int64), "tail"),
        nh.from_array(np.array([0], np.int64), "zero"),
        nh.from_array(np.array([-2], np.int64), "minus2"),
        nh.from_array(np.array(0, np.int64), "i0"),
        nh.from_array(np.array(1, np.int64), "i1"),
    ]
    g = oh.make_graph(nodes, "qkv_split", [oh.make_tensor_value_info("x", TP.FLOAT, ["batch", "seq", 8])],
                      [oh.make_tensor_value_info("y", TP.FLOAT, None)], inits)
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_fused_consumer_of_a_view_of_a_view_compiles_and_runs(tmp_path):
    m = _qkv_split_model()
    onnxcc.compile(m, tmp_path)
    model = onnxcc.load(tmp_path)
    for k, dims in enumerate([{"batch": 1, "seq": 1}, {"batch": 2, "seq": 5}]):
        feeds = random_inputs(m, dims, seed=k)
        np.testing.assert_allclose(model.run(feeds)["y"], ort_run(m, feeds)["y"], rtol=1e-4, atol=1e-5)
