"""Shared fixtures of the runtime tests."""

import onnx
import pytest
from onnx import TensorProto, helper


@pytest.fixture()
def model_path(tmp_path):
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    p = tmp_path / "relu.onnx"
    onnx.save(m, str(p))
    return p
