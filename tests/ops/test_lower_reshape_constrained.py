"""Reshape whose element counts agree only under a recorded constraint lowers to a copy,
not a view (regression: torch's legacy exporter bakes a traced length into a reshape
target, `f32[seq, batch, 64] -> [5, 4*batch, 16]`, and the kernel verifier rejected the
view of a differently sized buffer)."""

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h

from onnxcc import print_ir
from onnxcc.frontend import load_onnx
from onnxcc.passes import run_pipeline
from onnxcc.testing import check_lowering


def _baked_model():
    nodes = [h.make_node("Reshape", ["x", "target"], ["r"]),  # only valid for seq == 5
             h.make_node("Relu", ["r"], ["y"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, ["seq", "batch", 8])],
                     [h.make_empty_tensor_value_info("y")],
                     [onnx.numpy_helper.from_array(np.array([5, 0, 8], np.int64), "target")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_reshape_with_constrained_element_count_lowers_as_copy():
    m = _baked_model()
    mod = load_onnx(m)
    run_pipeline(mod, "shape-inference,canonicalize")
    assert "constraint" in print_ir(mod)  # the count is only equal when seq == 5
    check_lowering(m, [{"seq": 5, "batch": 1}, {"seq": 5, "batch": 3}])
