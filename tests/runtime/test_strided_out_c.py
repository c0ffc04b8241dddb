"""Strided outputs from C (issue 15, item 5): tests/runtime/strided_out.c calls two artifacts,
built with -fsanitize=address,undefined where the compiler has them, writing into strided
views (steps, row pitch + byte_offset, negative strides, transposed, past the in-frame
scratch): each view must hold what the compact call gives (float32, relative tolerance 1e-6:
the same kernel, its compact result scattered), and every byte outside the view must be
untouched. Strides under which elements share memory (zero, overlapping) and a strided
output over an input's bytes are refused with a message, the memory untouched."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from onnx import TensorProto, helper

from onnxcc.testing_c import driver_rows, relu_mul_add_model, run_sanitized_driver, save_graph

HERE = Path(__file__).parent
pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")


def tw_model(path: Path) -> Path:
    """Two outputs: p = a + a, q = a * a."""
    vi = helper.make_tensor_value_info
    g = helper.make_graph([helper.make_node("Add", ["a", "a"], ["p"]), helper.make_node("Mul", ["a", "a"], ["q"])],
                          "tw", [vi("a", TensorProto.FLOAT, ["N", 4])],
                          [vi("p", TensorProto.FLOAT, ["N", 4]), vi("q", TensorProto.FLOAT, ["N", 4])])
    return save_graph(g, path)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("strided_out")
    models = {"so": relu_mul_add_model(tmp / "so.onnx", "so"), "tw": tw_model(tmp / "tw.onnx")}
    lines, dirs = run_sanitized_driver(tmp, models, HERE / "strided_out.c")
    so, tw = dirs["so"], dirs["tw"]
    rows = driver_rows(lines, ("rc", "right"))
    return rows, so, tw


@pytest.mark.parametrize("case", ["compact", "step-2", "row-pitch-offset", "negative", "negative-rows-gap",
                                  "transposed", "big-step-2", "big-transposed", "strided-in-and-out",
                                  "in-place-compact-strides", "two-outputs", "one-strided-one-compact"])
def test_strided_outputs_match_compact(results, case):
    rc, right, msg = results[0][case]
    assert (rc, right) == (0, 1), msg


@pytest.mark.parametrize("case", ["zero-stride", "zero-stride-inner", "overlapping-steps", "overlapping-rows"])
def test_outputs_whose_elements_share_memory_are_refused(results, case):
    rc, untouched, msg = results[0][case]
    assert rc == 4 and untouched == 1, (case, rc, msg)  # SO_ERR_SHAPE, nothing written
    assert msg.startswith('output "y" dim ') and "makes two elements share memory" in msg, msg


def test_strided_outputs_over_inputs_or_each_other_are_refused(results):
    rows = results[0]
    rc, untouched, msg = rows["over-input"]
    assert (rc, untouched) == (1, 1), msg
    assert msg.startswith('output "y" overlaps input "a" in memory') and "both compact" in msg, msg
    rc, untouched, msg = rows["interleaved-outputs"]
    assert (rc, untouched) == (1, 1), msg
    assert msg.startswith('output "q" overlaps output "p" in memory'), msg


def test_header_and_metadata_list_strided_outputs(results):
    _, so, tw = results
    assert json.loads((so / "so.json").read_text())["strided_outputs"] == ["y"]
    assert json.loads((tw / "tw.json").read_text())["strided_outputs"] == ["p", "q"]
    header = (tw / "tw.h").read_text()
    assert "outputs may have any strides under which every element has bytes of its own" in header
    assert "Served strided: p, q" in header
