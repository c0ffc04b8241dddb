"""ReduceMax / ReduceMin keep the values of dims cast to float (OpDef.float_values), so a
shape computed in float from the largest side (torchvision's detection transform: pad both
sides up to a multiple of 32 of max(H, W)) stays symbolic instead of depending on data."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

import onnxcc
from onnxcc.testing import ort_run


def _const(name: str, arr) -> onnx.NodeProto:
    return h.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(arr)))


def pad_to_stride_model(reduce: str) -> onnx.ModelProto:
    nodes = [
        _const("i23", np.array([2, 3], np.int64)), _const("s32", np.array(32.0, np.float32)),
        _const("z6", np.zeros(6, np.int64)), _const("ax0", np.array([0], np.int64)),
        h.make_node("Shape", ["x"], ["shp"]),
        h.make_node("Gather", ["shp", "i23"], ["hw"], axis=0),
        h.make_node("Cast", ["hw"], ["hwf"], to=T.FLOAT),
        h.make_node(reduce, ["hwf"], ["side"], keepdims=0),
        h.make_node("Div", ["side", "s32"], ["q"]), h.make_node("Ceil", ["q"], ["qc"]),
        h.make_node("Mul", ["qc", "s32"], ["padded"]), h.make_node("Cast", ["padded"], ["padded_i"], to=T.INT64),
        h.make_node("Unsqueeze", ["padded_i", "ax0"], ["padded1"]),
        h.make_node("Sub", ["padded1", "hw"], ["extra"]),
        _const("zero", np.array([0], np.int64)),
        h.make_node("Max", ["extra", "zero"], ["grow"]),  # ReduceMin's side: the other one is not cut
        h.make_node("Concat", ["z6", "grow"], ["pads"], axis=0),
        h.make_node("Pad", ["x", "pads"], ["y"]),
    ]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [1, 3, "H", "W"])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 3, "P", "Q"])])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


@pytest.mark.parametrize("reduce", ["ReduceMax", "ReduceMin"])
def test_padded_to_a_stride_of_the_largest_side(reduce, tmp_path):
    path = tmp_path / "pad.onnx"
    onnx.save(pad_to_stride_model(reduce), path)
    onnxcc.compile(path, tmp_path / "art")  # refused before: "depends on data"
    model = onnxcc.load(tmp_path / "art")
    rng = np.random.default_rng(0)
    for hw in ((20, 45), (64, 64), (33, 7)):
        f = {"x": rng.standard_normal((1, 3, *hw)).astype(np.float32)}
        want, got = ort_run(path, f)["y"], model.run(f)["y"]
        assert got.shape == want.shape, hw
        np.testing.assert_array_equal(got, want)
