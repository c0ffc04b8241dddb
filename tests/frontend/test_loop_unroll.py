"""A tensor Loop whose carried value changes shape across iterations (issue 15, ONNX's
test_loop11 pattern: a Slice at the iteration number, or a Concat that grows the carried
value) is unrolled at import once its trip count is known; a trip count M given as an input
keeps the Loop, M read into a symbol at dispatch (one build for every M); a scan output of
changing shape still needs M's value (`onnxcc run --inputs` builds for it)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto as T
from onnx import helper as h

import onnxcc
from onnxcc.cli import main
from onnxcc.compiler import compile_model
from onnxcc.errors import GuardError
from onnxcc.frontend import load_onnx
from onnxcc.testing import ort_run


def _growing(trip_const: int | None = None) -> onnx.ModelProto:
    """y_out = Concat(y_in, [i * 1.5]): the carried value grows by one element per iteration."""
    body = h.make_graph(
        [h.make_node("Identity", ["c_in"], ["c_out"]),
         h.make_node("Cast", ["i"], ["fi"], to=T.FLOAT),
         h.make_node("Mul", ["fi", "k"], ["v"]),
         h.make_node("Unsqueeze", ["v", "ax0"], ["v1"]),
         h.make_node("Concat", ["y_in", "v1"], ["y_out"], axis=0),
         h.make_node("ReduceSum", ["y_out"], ["s"], keepdims=0)],
        "body", [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("c_in", T.BOOL, []),
                 h.make_tensor_value_info("y_in", T.FLOAT, None)],
        [h.make_tensor_value_info("c_out", T.BOOL, []), h.make_tensor_value_info("y_out", T.FLOAT, None),
         h.make_tensor_value_info("s", T.FLOAT, [])])
    inits = [h.make_tensor("k", T.FLOAT, [], [1.5]), h.make_tensor("ax0", T.INT64, [1], [0]),
             h.make_tensor("cond", T.BOOL, [], [True])]
    inputs = [h.make_tensor_value_info("y", T.FLOAT, ["n"])]
    if trip_const is None:
        inputs.insert(0, h.make_tensor_value_info("trip", T.INT64, []))
    else:
        inits.append(h.make_tensor("trip", T.INT64, [], [trip_const]))
    g = h.make_graph([h.make_node("Loop", ["trip", "cond", "y"], ["res", "sums"], body=body, name="grow")],
                     "g", inputs, [h.make_tensor_value_info("res", T.FLOAT, None),
                                   h.make_tensor_value_info("sums", T.FLOAT, None)], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_known_trip_count_unrolls_and_types_each_iteration():
    mod = load_onnx(_growing(3))
    main_f = mod.functions["main"]
    assert not any(o.name == "onnx.Loop" for o in main_f.walk())
    assert [str(t) for t in main_f.result_types] == ["f32[n + 3]", "f32[3]"]


def test_a_trip_count_input_keeps_the_loop_with_one_build_for_every_value(tmp_path):
    """M given as an input with no value: the Loop is kept (not unrolled per value), M read
    into the symbol trip_0 at dispatch (value-symbols), the growing state sized from it;
    onnxruntime agrees at several M with one library. M = 0 is out of the symbol's range:
    refused naming the input (a value version serves it)."""
    m = _growing()
    onnx.save(m, str(tmp_path / "grow.onnx"))
    text = str(compile_model(tmp_path / "grow.onnx", tmp_path / "ir", emit="ir").module)
    assert "onnx.Loop" in text and 'value_symbols = ["trip_0=trip[0]"]' in text
    onnxcc.compile(tmp_path / "grow.onnx", tmp_path / "art")
    model = onnxcc.load(tmp_path / "art")
    for trip, n in ((3, 2), (1, 4), (17, 1)):
        feeds = {"trip": np.array(trip, np.int64), "y": np.arange(n, dtype=np.float32)}
        got, want = model.run(feeds), ort_run(m, feeds)
        for k in ("res", "sums"):
            assert got[k].shape == want[k].shape, (trip, n, k)
            np.testing.assert_allclose(got[k], want[k], rtol=1e-6)
    with pytest.raises(GuardError, match=r'input "trip" element 0: trip_0 = 0, out of range'):
        model.run({"trip": np.array(0, np.int64), "y": np.arange(2, dtype=np.float32)})


@pytest.mark.parametrize("trip,n", [(3, 2), (1, 4)])
def test_through_onnxcc_run_matches_onnxruntime(tmp_path, trip, n):
    m = _growing()
    onnx.save(m, str(tmp_path / "grow.onnx"))
    feeds = {"trip": np.array(trip, np.int64), "y": np.arange(n, dtype=np.float32)}
    np.savez(tmp_path / "in.npz", **feeds)
    r = CliRunner().invoke(main, ["run", str(tmp_path / "grow.onnx"), "--inputs", str(tmp_path / "in.npz"),
                                  "--outputs", str(tmp_path / "out.npz"), "--cache-dir", str(tmp_path / "cache"),
                                  "--check"])
    assert r.exit_code == 0, r.output
    got, want = np.load(tmp_path / "out.npz"), ort_run(m, feeds)
    for k in ("res", "sums"):
        assert got[k].shape == want[k].shape
        np.testing.assert_allclose(got[k], want[k], rtol=1e-6)
