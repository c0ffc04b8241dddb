"""A GEMM whose extents are static takes the wide-or-narrow tile choice in Python
(codegen/cpu/gemm_static.py): only the tiles that run are emitted, so LLVM compiles one
task function and one micro-kernel width instead of both; the result still matches
onnxruntime. With symbolic extents both stay, chosen per call (test_gemm_narrow_packed.py)."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnxcc
from onnxcc.testing import ort_run


def _static(length: int, cin: int = 129, cout: int = 128) -> onnx.ModelProto:
    """Conv1d (k 3, pad 1) + Relu over `length` frames: its im2col columns are packed per
    call and its weights prepacked, the GEMM form with the wide-or-narrow choice."""
    rng = np.random.default_rng(7)
    w = rng.standard_normal((cout, cin, 3)).astype(np.float32) / np.sqrt(cin * 3)
    b = rng.standard_normal(cout).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3], pads=[1, 1]),
             helper.make_node("Relu", ["c"], ["y"])]
    g = helper.make_graph(nodes, "static", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, length])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.ravel()),
                           helper.make_tensor("b", TensorProto.FLOAT, b.shape, b)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _widths(llvm: str) -> set[int]:
    return {int(w) for w in re.findall(r'onnxcc\.gemm\.ukr\.\d+x(\d+)\.', llvm)}


@pytest.mark.parametrize("length", [17, 40])  # 17 columns: narrow tiles waste less; 40: wide
def test_static_extents_emit_one_tile_width(tmp_path, length):
    model = _static(length)
    path = tmp_path / "c.onnx"
    onnx.save(model, path)
    llvm = onnxcc.compile(path, tmp_path / "ll", emit="llvm").text
    assert "gemm.narrow" not in llvm  # no run-time choice left
    tasks = re.findall(r'^define \w+ void @"([^"]+\.gemm\.out0(?:\.\d+)?)"', llvm, re.MULTILINE)
    assert len(tasks) == 1, tasks
    assert len(_widths(llvm)) == 1
    onnxcc.compile(path, tmp_path / "art")
    x = np.random.default_rng(3).standard_normal((1, 129, length)).astype(np.float32)
    got = onnxcc.load(tmp_path / "art").run({"x": x})["y"]
    want = ort_run(model, {"x": x})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_static_choice_agrees_with_the_run_time_rule(tmp_path):
    """The narrow width is picked for the short length, the wide one for the longer: as the
    per-call comparison of padded columns would."""
    widths = {}
    for length in (17, 40):
        path = tmp_path / f"c{length}.onnx"
        onnx.save(_static(length), path)
        widths[length] = _widths(onnxcc.compile(path, tmp_path / f"ll{length}", emit="llvm").text).pop()
    assert widths[17] < widths[40]
