"""A failed node-imposed constraint names where each of its symbols was bound (issue 17)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from onnxcc.errors import GuardError
from onnxcc.testing import compile_lib


def test_constraint_names_where_each_symbol_was_bound(tmp_path):
    vi = helper.make_tensor_value_info
    g = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")], "g",
                          [vi("a", TensorProto.FLOAT, ["M", "k"]), vi("b", TensorProto.FLOAT, ["k2", "N"])],
                          [vi("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    cm = compile_lib(m, tmp_path, name="mm")
    with pytest.raises(GuardError) as e:
        cm.run({"a": np.zeros((3, 5), np.float32), "b": np.zeros((6, 2), np.float32)})
    assert str(e.value).startswith('constraint k == k2 does not hold (k = 5 from input "a" dim 1; '
                                   'k2 = 6 from input "b" dim 0), needed by node "mm"')
    y = cm.run({"a": np.ones((3, 5), np.float32), "b": np.ones((5, 2), np.float32)})["y"]
    np.testing.assert_allclose(y, np.full((3, 2), 5, np.float32))


def test_a_kernel_error_code_is_named(tmp_path):
    """a Gather index past the data (held-out index_select at T = 1) fails the call with the
    code's name, as the CUDA runtime names it, not a bare number"""
    from onnxcc.errors import RuntimeCallError

    vi = helper.make_tensor_value_info
    g = helper.make_graph([helper.make_node("Gather", ["x", "i"], ["y"], axis=1, name="g")], "g",
                          [vi("x", TensorProto.FLOAT, ["B", "T"]), vi("i", TensorProto.INT64, [2])],
                          [vi("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    cm = compile_lib(m, tmp_path, name="g")
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(cm.run({"x": x, "i": np.array([0, 2])})["y"], x[:, [0, 2]])
    with pytest.raises(RuntimeCallError, match=r"with code 2 \(index out of range\)"):
        cm.run({"x": x, "i": np.array([0, 3])})
