"""A while loop that counts to a symbolic bound and appends to a sequence (how torch.onnx's
dynamo exporter writes `for i in range(n): out.append(f(i))`, EmbeddingBag's export): the
sequence becomes a scan output of a tensor Loop (frontend/sequences.py `StackedSeq`), the
loop's trip count is proved from the counter (ops/loop_count.py: `i + 1 < n` from i = 0
runs n times), and ConcatFromSequence reads the stacked elements. Checked through the user
path against onnxruntime (exact copies: rtol 1e-6) for new_axis 0 and 1 and a nonzero axis,
and in the IR text: the result has the symbolic extent, not a trip-count symbol."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import onnxcc
from onnxcc.errors import RuntimeCallError
from onnxcc.interp import run as interp_run
from onnxcc.passes import run_pipeline
from onnxcc.testing import compile_lib, ort_run

F = T.FLOAT


def _seq_vi(name):
    return h.make_value_info(name, h.make_sequence_type_proto(h.make_tensor_type_proto(F, None)))


def _model(axis: int, new_axis: int, counted: bool = True):
    """out = ConcatFromSequence([2 * x[i:i+1, :] for i in range(N)]); the loop is a while loop
    on `i + 1 < N` (counted) or on a data condition (`sum(x[i]) > -1e9`, not counted)."""
    stop = [h.make_node("Less", ["i_next", "n"], ["c_out"])] if counted else [
        h.make_node("ReduceSum", ["row"], ["rs"], keepdims=0), h.make_node("Greater", ["rs", "neg"], ["c_out"])]
    body = h.make_graph(
        [h.make_node("Unsqueeze", ["i_in", "z"], ["i1"]), h.make_node("Add", ["i1", "one"], ["i2"]),
         h.make_node("Slice", ["x", "i1", "i2", "z"], ["row"]), h.make_node("Mul", ["row", "two"], ["elem"]),
         h.make_node("SequenceInsert", ["s_in", "elem"], ["s_out"]),
         h.make_node("Add", ["i_in", "one_s"], ["i_next"]), *stop],
        "body", [h.make_tensor_value_info("it", T.INT64, []), h.make_tensor_value_info("c", T.BOOL, []),
                 h.make_tensor_value_info("i_in", T.INT64, []), _seq_vi("s_in")],
        [h.make_tensor_value_info("c_out", T.BOOL, []), h.make_tensor_value_info("i_next", T.INT64, []),
         _seq_vi("s_out")])
    nodes = [h.make_node("Shape", ["x"], ["sh"], start=0, end=1), h.make_node("Squeeze", ["sh", "z"], ["n"]),
             h.make_node("Less", ["zero", "n"], ["c0"]), h.make_node("SequenceEmpty", [], ["e"]),
             h.make_node("Loop", ["", "c0", "zero", "e"], ["i_last", "s"], body=body, name="grow"),
             h.make_node("ConcatFromSequence", ["s"], ["out"], axis=axis, new_axis=new_axis)]
    inits = [nh.from_array(np.array(v, np.int64), k) for k, v in (("z", [0]), ("one", [1]), ("one_s", 1),
                                                                   ("zero", 0))]
    inits += [nh.from_array(np.array(2.0, np.float32), "two"), nh.from_array(np.array(-1e9, np.float32), "neg")]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", F, ["N", 3])],
                     [h.make_tensor_value_info("out", F, None)], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_the_counted_loop_has_the_symbolic_extent():
    mod = onnxcc.load_onnx(_model(0, 0))
    run_pipeline(mod, "shape-inference,canonicalize,shape-inference")
    text = str(mod)
    assert "onnx.Loop" in text and "iters" not in text
    assert mod.main.result_types[0].shape == (mod.main.params[0].type.shape[0], 3)


@pytest.mark.parametrize(("axis", "new_axis"), [(0, 0), (1, 0), (0, 1), (1, 1), (-1, 1)])
def test_appended_elements_match_onnxruntime(axis, new_axis, tmp_path):
    m = _model(axis, new_axis)
    model = compile_lib(m, tmp_path)
    mod = onnxcc.load_onnx(m)
    rng = np.random.default_rng(axis + 3 * new_axis)
    for n in (1, 4, 9):
        f = {"x": rng.standard_normal((n, 3)).astype(np.float32)}
        want = ort_run(m, f)["out"]
        for got in (model.run(f)["out"], interp_run(mod, [f["x"]])[0]):  # native and the interpreter
            assert got.shape == want.shape, (n, got.shape, want.shape)
            np.testing.assert_allclose(got, want, rtol=1e-6)


def test_a_data_condition_with_no_bound_compiles_on_a_capacity(tmp_path):
    """No bound: the appended slices' count gets a capacity (ops/loop_capacity.py) and later
    ops compute on it. This loop never ends (x[i:i+1] of i >= N is empty, its sum 0 passes the
    condition; onnxruntime loops for ever): the empty slice, typed one row, fails the kernel
    with a clear error instead."""
    m = _model(0, 0, counted=False)
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    onnxcc.compile(path, tmp_path / "art", loop_capacity=(4, 64))
    with pytest.raises(RuntimeCallError, match=r"code 4 \(kernel assertion failed\)"):
        onnxcc.load(tmp_path / "art").run({"x": np.ones((3, 3), np.float32)})


def _growing_counted():
    """for i in range(N): y = concat([y, 2 * x[i:i+1]]) as a while loop on `i + 1 < N` with the
    counter carried (no scan output): the grown state's bound is init + N rows."""
    body = h.make_graph(
        [h.make_node("Unsqueeze", ["i_in", "z"], ["i1"]), h.make_node("Add", ["i1", "one"], ["i2"]),
         h.make_node("Slice", ["x", "i1", "i2", "z"], ["row"]), h.make_node("Mul", ["row", "two"], ["elem"]),
         h.make_node("Concat", ["y_in", "elem"], ["y_out"], axis=0),
         h.make_node("Add", ["i_in", "one_s"], ["i_next"]), h.make_node("Less", ["i_next", "n"], ["c_out"])],
        "body", [h.make_tensor_value_info("it", T.INT64, []), h.make_tensor_value_info("c", T.BOOL, []),
                 h.make_tensor_value_info("i_in", T.INT64, []), h.make_tensor_value_info("y_in", F, None)],
        [h.make_tensor_value_info("c_out", T.BOOL, []), h.make_tensor_value_info("i_next", T.INT64, []),
         h.make_tensor_value_info("y_out", F, None)])
    nodes = [h.make_node("Shape", ["x"], ["sh"], start=0, end=1), h.make_node("Squeeze", ["sh", "z"], ["n"]),
             h.make_node("Less", ["zero", "n"], ["c0"]),
             h.make_node("Loop", ["", "c0", "zero", "y0"], ["i_last", "y"], body=body, name="grow")]
    inits = [nh.from_array(np.array(v, np.int64), k) for k, v in (("z", [0]), ("one", [1]), ("one_s", 1),
                                                                   ("zero", 0))]
    inits.append(nh.from_array(np.array(2.0, np.float32), "two"))
    ins = [h.make_tensor_value_info("x", F, ["N", 3]), h.make_tensor_value_info("y0", F, [1, 3])]
    g = h.make_graph(nodes, "g", ins, [h.make_tensor_value_info("y", F, None)], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_a_counted_loop_growing_its_state_needs_no_dim_flag(tmp_path):
    m = _growing_counted()
    mod = onnxcc.load_onnx(m)
    run_pipeline(mod, "shape-inference,canonicalize,shape-inference")
    text = str(mod)
    assert "counted_trips = [#dim<N>]" in text
    assert str(onnxcc.ir.parse_module(text)) == text  # the attribute parses back
    model = compile_lib(m, tmp_path)
    rng = np.random.default_rng(7)
    for n in (1, 2, 6):
        f = {"x": rng.standard_normal((n, 3)).astype(np.float32), "y0": rng.standard_normal((1, 3)).astype(np.float32)}
        want, got = ort_run(m, f)["y"], model.run(f)["y"]
        assert got.shape == want.shape == (n + 1, 3)
        np.testing.assert_allclose(got, want, rtol=1e-6)
