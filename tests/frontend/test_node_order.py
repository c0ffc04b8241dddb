"""Graphs whose nodes are not in topological order (onnxruntime's float16 converter with
keep_io_types appends the input Casts at the end) import in dependency order; a name no node
defines is still refused naming it."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnxcc.errors import ImportError_
from onnxcc.frontend import load_onnx
from onnxcc.frontend.node_order import topological
from onnxcc.interp import run as interp_run
from onnxcc.testing import ort_run


def _unsorted(cast_input: str = "x") -> onnx.ModelProto:
    # y = Relu(Cast(x) * 2): the Cast, which the others read, written last
    nodes = [helper.make_node("Mul", ["xh", "two"], ["m"]),
             helper.make_node("Relu", ["m"], ["yh"]),
             helper.make_node("Cast", ["yh"], ["y"], to=TensorProto.FLOAT),
             helper.make_node("Cast", [cast_input], ["xh"], to=TensorProto.FLOAT16)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])],
                          [onnx.numpy_helper.from_array(np.array(2, np.float16), "two")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_unsorted_nodes_import_in_dependency_order(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(_unsorted(), path)
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    (got,) = interp_run(load_onnx(str(path)), [x])
    np.testing.assert_allclose(got, ort_run(path, {"x": x})["y"], rtol=1e-3, atol=1e-3)


def test_a_sorted_graph_keeps_its_order():
    nodes = list(_unsorted().graph.node)
    sorted_nodes = [nodes[3], *nodes[:3]]
    order = topological(sorted_nodes, {"x", "two"}, lambda n: n.input)
    assert [i for i, _ in order] == [0, 1, 2, 3]
    assert [i for i, _ in topological(nodes, {"x", "two"}, lambda n: n.input)] == [3, 0, 1, 2]


def test_an_undefined_name_is_still_refused(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(_unsorted("nowhere"), path)
    with pytest.raises(ImportError_, match='uses "nowhere"'):
        load_onnx(str(path))
