"""An If whose branch binds a run-time symbol and whose result later ops compute on: the
pattern torchvision's detection heads export (`batched_nms`: `if boxes.numel() == 0: keep =
empty else: keep = nms(boxes, scores)`, then boxes[keep]). Compiled through the user path and
compared with onnxruntime, including calls that take the empty branch."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from compiled_model import lib_fixture
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

from onnxcc.testing import ort_run


def _const(name: str, arr) -> onnx.NodeProto:
    return h.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(arr)))


def nms_if_model() -> onnx.ModelProto:
    """boxes b[N, 4], scores s[N]: the boxes scoring above 0.5 (NonZero), NMS over them in
    the else branch of an If on their count being 0, then the kept boxes and scores"""
    then = h.make_graph([_const("empty", np.zeros([0], np.int64))], "then", [],
                        [h.make_tensor_value_info("empty", T.INT64, [0])])
    other = h.make_graph([
        _const("z", np.array([0], np.int64)),
        h.make_node("Unsqueeze", ["bb", "z"], ["b3"]),
        h.make_node("Unsqueeze", ["ss", "z"], ["s2"]), h.make_node("Unsqueeze", ["s2", "z"], ["s3"]),
        _const("most", np.array([100], np.int64)), _const("iou", np.array([0.5], np.float32)),
        h.make_node("NonMaxSuppression", ["b3", "s3", "most", "iou"], ["sel"]),
        _const("two", np.array([2], np.int64)),
        h.make_node("Gather", ["sel", "two"], ["k2"], axis=1),
        h.make_node("Squeeze", ["k2", "one"], ["keep"]),
    ], "else", [], [h.make_tensor_value_info("keep", T.INT64, ["K"])])
    g = h.make_graph([
        _const("t", np.array(0.5, np.float32)), _const("one", np.array([1], np.int64)),
        _const("zero", np.array(0, np.int64)), _const("ax0", np.array([0], np.int64)),
        h.make_node("Greater", ["s", "t"], ["m"]),
        h.make_node("NonZero", ["m"], ["nz"]),
        h.make_node("Squeeze", ["nz", "ax0"], ["idx"]),
        h.make_node("Gather", ["b", "idx"], ["bb"], axis=0),
        h.make_node("Gather", ["s", "idx"], ["ss"], axis=0),
        h.make_node("Shape", ["bb"], ["shp"]),
        h.make_node("ReduceProd", ["shp"], ["n"], keepdims=0),
        h.make_node("Equal", ["n", "zero"], ["cond"]),
        h.make_node("If", ["cond"], ["kept"], then_branch=then, else_branch=other),
        h.make_node("Gather", ["bb", "kept"], ["boxes"], axis=0),
        h.make_node("Gather", ["ss", "kept"], ["scores"], axis=0),
    ], "g", [h.make_tensor_value_info("b", T.FLOAT, ["N", 4]), h.make_tensor_value_info("s", T.FLOAT, ["N"])],
        [h.make_tensor_value_info("boxes", T.FLOAT, ["M", 4]), h.make_tensor_value_info("scores", T.FLOAT, ["M"])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    onnx.checker.check_model(m, full_check=True)
    return m


built = lib_fixture("if_nms", lambda path: onnx.save(nms_if_model(), path))


@pytest.mark.parametrize("n,scale", [(20, 1.0), (7, 1.0), (5, 0.1), (1, 1.0)])
def test_nms_in_a_branch_then_gathered(built, n, scale):
    """scale 0.1: no score passes 0.5, so the empty branch runs and the outputs are empty"""
    path, model = built
    rng = np.random.default_rng(n)
    f = {"b": np.sort(rng.random((n, 4), dtype=np.float32) * 10, -1), "s": rng.random(n, dtype=np.float32) * scale}
    want, got = ort_run(path, f), model.run(f)
    assert set(got) == set(want)
    for k, w in want.items():
        assert got[k].shape == w.shape, k
        np.testing.assert_array_equal(got[k], w, err_msg=k)
    if scale < 0.5:
        assert got["boxes"].shape == (0, 4)
