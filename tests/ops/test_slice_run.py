"""Slices whose bounds the data decides (ops/slice_run.py): the result length is a run-time
symbol with range [0, the sliced dim], bound where the slice runs (printed `bind slice := ...`
in the kernel text), and the ops after it compute on the true length. Checked through the
user path (compile, load, run) against onnxruntime, exact for these copies and sums (rtol
1e-6), at starts and ends that are negative, past the end, crossed (an empty slice), and with
steps 1, 2 and -1; and inside a Loop body (EmbeddingBag's TorchScript export)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from onnxcc.errors import RuntimeCallError
from onnxcc.frontend import load_onnx
from onnxcc.passes import run_pipeline
from onnxcc.passes.lower import lower_function
from onnxcc.testing import compile_lib, ort_run


def _const(name, v):
    return nh.from_array(np.array(v, np.int64), name)


def _slice_model(step: int):
    """out = 2 * x[min(p) : max(p) : step] along axis 0; the bounds are reductions of an
    int64 input, so only the run knows them."""
    nodes = [h.make_node("ReduceMin", ["p"], ["s"], keepdims=1), h.make_node("ReduceMax", ["p"], ["e"], keepdims=1),
             h.make_node("Slice", ["x", "s", "e", "ax", "st"], ["y"]),
             h.make_node("Mul", ["y", "two"], ["out"]), h.make_node("ReduceSum", ["y"], ["tot"], keepdims=0)]
    vis = [h.make_tensor_value_info("x", T.FLOAT, ["N", 3]), h.make_tensor_value_info("p", T.INT64, [2])]
    outs = [h.make_tensor_value_info("out", T.FLOAT, None), h.make_tensor_value_info("tot", T.FLOAT, None)]
    inits = [_const("ax", [0]), _const("st", [step]), nh.from_array(np.array([2.0], np.float32), "two")]
    m = h.make_model(h.make_graph(nodes, "g", vis, outs, inits), opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_the_length_is_bound_where_the_slice_runs():
    mod = load_onnx(_slice_model(1))
    run_pipeline(mod, "shape-inference,canonicalize")
    assert "sym slice in [0, " in str(mod)
    text = str(lower_function(mod, mod.main, "k"))
    assert "run slice <= N" in text and "bind slice := " in text


@pytest.mark.parametrize("step", [1, 2, -1])
def test_data_bounds_match_onnxruntime(step, tmp_path):
    m = _slice_model(step)
    model = compile_lib(m, tmp_path)
    rng = np.random.default_rng(step + 5)
    # (N, p): inside, negative (from the end), past the end, crossed / empty, the whole dim
    cases = [(7, [1, 5]), (7, [-6, -1]), (4, [2, 40]), (6, [3, 3]), (5, [-100, 100]), (1, [0, 1])]
    for n, p in cases:
        f = {"x": rng.standard_normal((n, 3)).astype(np.float32), "p": np.array(p, np.int64)}
        if step < 0:  # a reversed slice runs from the max down to the min
            f["p"] = f["p"][::-1].copy()
        want, got = ort_run(m, f), model.run(f)
        for k in ("out", "tot"):
            assert got[k].shape == want[k].shape, (n, p, k)
            np.testing.assert_allclose(got[k], want[k], rtol=1e-6, atol=1e-6)


def _bag_model():
    """EmbeddingBag as TorchScript exports it: a Loop over the bags (trip count B) whose body
    slices the flat ids at offsets[i]:offsets[i + 1] (gathered at the iteration number) and
    takes the mean of the gathered rows; the body's condition is a Cast of a captured `true`."""
    body = h.make_graph(
        [h.make_node("Gather", ["offs", "i"], ["a"]), h.make_node("Gather", ["ends", "i"], ["bi"]),
         h.make_node("Unsqueeze", ["a", "z"], ["a1"]), h.make_node("Unsqueeze", ["bi", "z"], ["b1"]),
         h.make_node("Slice", ["flat", "a1", "b1", "z"], ["sl"]),
         h.make_node("Gather", ["w", "sl"], ["rows"]),
         h.make_node("ReduceMean", ["rows"], ["mean"], axes=[0], keepdims=0),
         h.make_node("Cast", ["true"], ["c_out"], to=T.BOOL)],
        "body", [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("c", T.BOOL, [])],
        [h.make_tensor_value_info("c_out", T.BOOL, []), h.make_tensor_value_info("mean", T.FLOAT, None)])
    nodes = [h.make_node("Shape", ["ids"], ["sh"]), h.make_node("ReduceProd", ["sh"], ["bt"], keepdims=0),
             h.make_node("Gather", ["sh", "zero"], ["b"]), h.make_node("Gather", ["sh", "one"], ["t"]),
             h.make_node("Range", ["zero", "bt", "t"], ["offs"]), h.make_node("Add", ["offs", "t"], ["ends"]),
             h.make_node("Reshape", ["ids", "m1"], ["flat"]),
             h.make_node("Loop", ["b", "true"], ["bags"], body=body)]
    inits = [_const("zero", 0), _const("one", 1), _const("z", [0]), _const("m1", [-1]),
             nh.from_array(np.array(True), "true"),
             nh.from_array(np.random.default_rng(0).standard_normal((50, 8)).astype(np.float32), "w")]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("ids", T.INT64, ["B", "T"])],
                     [h.make_tensor_value_info("bags", T.FLOAT, None)], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_a_loop_body_slicing_a_run_time_length_matches_onnxruntime(tmp_path):
    m = _bag_model()
    model = compile_lib(m, tmp_path)
    rng = np.random.default_rng(1)
    for b, t in ((3, 5), (1, 1), (6, 2)):
        f = {"ids": rng.integers(0, 50, (b, t)).astype(np.int64)}
        want, got = ort_run(m, f)["bags"], model.run(f)["bags"]
        assert got.shape == want.shape == (b, 8)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def _branch_model():
    """An If on data whose else branch sums x[min(p) : max(p)] (a run-time length bound
    inside the branch; codegen runs that branch as its own function) and whose then branch
    gives zeros; the result is used after the If."""
    else_g = h.make_graph(
        [h.make_node("Slice", ["x", "s", "e", "ax"], ["y"]), h.make_node("ReduceSum", ["y", "ax"], ["r"], keepdims=1)],
        "else", [], [h.make_tensor_value_info("r", T.FLOAT, None)])
    then_g = h.make_graph([h.make_node("ReduceSum", ["x", "ax"], ["r0"], keepdims=1),
                           h.make_node("Mul", ["r0", "zero_f"], ["r1"])],
                          "then", [], [h.make_tensor_value_info("r1", T.FLOAT, None)])
    nodes = [h.make_node("ReduceMin", ["p"], ["s"], keepdims=1), h.make_node("ReduceMax", ["p"], ["e"], keepdims=1),
             h.make_node("Equal", ["s", "e"], ["same"]), h.make_node("Squeeze", ["same"], ["c"]),
             h.make_node("If", ["c"], ["o"], then_branch=then_g, else_branch=else_g),
             h.make_node("Add", ["o", "o"], ["out"])]
    vis = [h.make_tensor_value_info("x", T.FLOAT, ["N", 3]), h.make_tensor_value_info("p", T.INT64, [2])]
    inits = [_const("ax", [0]), nh.from_array(np.array([0.0], np.float32), "zero_f")]
    m = h.make_model(h.make_graph(nodes, "g", vis, [h.make_tensor_value_info("out", T.FLOAT, None)], inits),
                     opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_an_if_branch_slicing_a_run_time_length_matches_onnxruntime(tmp_path):
    m = _branch_model()
    model = compile_lib(m, tmp_path)
    rng = np.random.default_rng(2)
    for n, p in ((6, [1, 4]), (6, [2, 2]), (3, [0, 9]), (5, [-2, 5])):
        f = {"x": rng.standard_normal((n, 3)).astype(np.float32), "p": np.array(p, np.int64)}
        want, got = ort_run(m, f)["out"], model.run(f)["out"]
        assert got.shape == want.shape == (1, 3)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def _one_offset_model():
    """y = 3 * x[i : i + 1] with i = max(p): a one-element slice at a data position, typed 1
    (`span_bound`), so it broadcasts against z (shape [1, 3] against [4, 3])."""
    nodes = [h.make_node("ReduceMax", ["p"], ["i"], keepdims=1), h.make_node("Add", ["i", "one"], ["j"]),
             h.make_node("Slice", ["x", "i", "j", "ax"], ["y"]), h.make_node("Mul", ["y", "z"], ["out"])]
    vis = [h.make_tensor_value_info("x", T.FLOAT, ["N", 3]), h.make_tensor_value_info("p", T.INT64, [2]),
           h.make_tensor_value_info("z", T.FLOAT, [4, 3])]
    m = h.make_model(h.make_graph(nodes, "g", vis, [h.make_tensor_value_info("out", T.FLOAT, None)],
                                  [_const("ax", [0]), _const("one", [1])]), opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_a_one_offset_slice_is_typed_one_and_checked_at_run_time(tmp_path):
    m = _one_offset_model()
    mod = load_onnx(m)
    run_pipeline(mod, "shape-inference,canonicalize")
    assert str(mod.main.result_types[0]) == "f32[4, 3]"
    model = compile_lib(m, tmp_path)
    rng = np.random.default_rng(4)
    z = rng.standard_normal((4, 3)).astype(np.float32)
    for n, p in ((5, [0, 3]), (2, [1, -7]), (3, [2, -2])):
        f = {"x": rng.standard_normal((n, 3)).astype(np.float32), "p": np.array(p, np.int64), "z": z}
        want, got = ort_run(m, f)["out"], model.run(f)["out"]
        assert got.shape == want.shape == (4, 3)
        np.testing.assert_allclose(got, want, rtol=1e-6)
    # past the end the slice is empty (onnxruntime: a [0, 3] result): an error here, never a wrong answer
    with pytest.raises(RuntimeCallError, match="assert"):
        model.run({"x": np.ones((2, 3), np.float32), "p": np.array([5, 0], np.int64), "z": z})
