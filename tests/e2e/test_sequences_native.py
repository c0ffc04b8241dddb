"""Sequence and optional inputs and outputs through the native build: a build specialised on
their structure, each element a tensor of the C ABI, the loader taking lists and None
(io_structure.py, frontend/sequences.py); numerics against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import onnxcc
from onnxcc.errors import GuardError, ImportError_

F = T.FLOAT


def _model(nodes, inputs, outputs, opset=18):
    m = h.make_model(h.make_graph(nodes, "g", inputs, outputs), opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _ort(model, feeds: dict):
    import onnxruntime as ort

    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


@pytest.fixture(scope="module")
def seq_model():
    # out = [x * s[k] for k], plus an optional passed through, plus whether it is present
    body = h.make_graph([h.make_node("Mul", ["e", "x"], ["p"])], "body",
                        [h.make_tensor_value_info("e", F, None)], [h.make_tensor_value_info("p", F, None)])
    opt_t = h.make_optional_type_proto(h.make_tensor_type_proto(F, [2]))
    nodes = [h.make_node("SequenceMap", ["s"], ["out"], body=body),
             h.make_node("Identity", ["o"], ["o_out"]),
             h.make_node("OptionalHasElement", ["o"], ["has"])]
    return _model(nodes, [h.make_tensor_sequence_value_info("s", F, ["n"]), h.make_tensor_value_info("x", F, ["n"]),
                          h.make_value_info("o", opt_t)],
                  [h.make_tensor_sequence_value_info("out", F, None), h.make_value_info("o_out", opt_t),
                   h.make_tensor_value_info("has", T.BOOL, [])])


@pytest.fixture(scope="module")
def built(seq_model, tmp_path_factory):
    d = tmp_path_factory.mktemp("seq")
    onnxcc.compile(seq_model, d, name="seqm", input_structure={"s": "seq:2", "o": "none"})
    return d


def test_sequence_in_and_out_match_onnxruntime(seq_model, built):
    lib = onnxcc.load(built)
    assert [t["name"] for t in lib.inputs] == ["s.0", "s.1", "x"]
    assert [t["name"] for t in lib.outputs] == ["out.0", "out.1", "has"]
    rng = np.random.default_rng(1)
    x = rng.standard_normal(3).astype(np.float32)
    s = [rng.standard_normal(3).astype(np.float32) for _ in range(2)]
    got = lib.run([s, x, None])
    assert got["o_out"] is None and bool(got["has"]) is False
    want = _ort(seq_model, {"s": s, "x": x, "o": None})
    assert len(got["out"]) == len(want[0]) == 2
    for g, w in zip(got["out"], want[0]):
        np.testing.assert_allclose(g, w, rtol=1e-6)
    # another length of the same element shape: a new dim, same build
    y = lib.run({"s": [np.ones(5, np.float32)] * 2, "x": np.full(5, 2, np.float32)})
    np.testing.assert_array_equal(y["out"][1], np.full(5, 2, np.float32))


def test_another_structure_is_a_clear_guard_error(built):
    lib = onnxcc.load(built)
    x = np.ones(3, np.float32)
    with pytest.raises(GuardError, match=r'input "s".*sequence of 2 tensors, got 3'):
        lib.run([[x, x, x], x, None])
    with pytest.raises(GuardError, match=r'input "o".*absent'):
        lib.run([[x, x], x, np.ones(2, np.float32)])


def test_header_documents_the_flattening(built):
    text = (built / "seqm.h").read_text()
    assert "input s: seq:2:ranks=1,1" in text and "input o: none" in text
    assert "output out: seq:2:ranks=1,1" in text


def test_compile_without_structure_names_the_input(seq_model, tmp_path):
    with pytest.raises(ImportError_, match=r'input "s" is a sequence'):
        onnxcc.compile(seq_model, tmp_path / "x")


def test_position_input_with_a_default_is_guarded(tmp_path):
    """An overridable position (an input with an initializer): the build folds its default
    and the dispatcher checks it; another value is a guard error naming the input."""
    nodes = [h.make_node("SequenceConstruct", ["a", "b"], ["s"]), h.make_node("SequenceAt", ["s", "p"], ["y"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("a", F, [2]), h.make_tensor_value_info("b", F, [2]),
                                  h.make_tensor_value_info("p", T.INT64, [])],
                     [h.make_tensor_value_info("y", F, None)], initializer=[h.make_tensor("p", T.INT64, [], [1])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    m.ir_version = 8
    onnxcc.compile(m, tmp_path, name="pick")
    lib = onnxcc.load(tmp_path)
    a, b = np.zeros(2, np.float32), np.ones(2, np.float32)
    np.testing.assert_array_equal(lib.run({"a": a, "b": b})["y"], b)
    with pytest.raises(GuardError, match=r'input "p" has another value'):
        lib.run({"a": a, "b": b, "p": np.array(0, np.int64)})


def test_value_versions_keep_the_imported_value_guard(tmp_path):
    """A position folded at import and a Reshape target folded by specialize-value: the
    value version checks both values."""
    import json

    nodes = [h.make_node("SequenceConstruct", ["a", "a"], ["s"]), h.make_node("SequenceAt", ["s", "p"], ["x"]),
             h.make_node("Reshape", ["x", "shape"], ["y"])]
    m = _model(nodes, [h.make_tensor_value_info("a", F, [6]), h.make_tensor_value_info("p", T.INT64, []),
                       h.make_tensor_value_info("shape", T.INT64, [2])], [h.make_tensor_value_info("y", F, None)])
    onnxcc.compile(m, tmp_path, name="vv", specialize_value={"p": [[1]], "shape": [[2, 3]]})
    meta = json.loads((tmp_path / "vv.json").read_text())
    guards = [{g["input"] for g in v.get("value_guards", [])} for v in meta["versions"]]
    assert all("p" in g for g in guards) and {"p", "shape"} in guards
    lib = onnxcc.load(tmp_path)
    a = np.arange(6, dtype=np.float32)
    np.testing.assert_array_equal(lib.run([a, np.array(1, np.int64), np.array([2, 3], np.int64)])["y"],
                                  a.reshape(2, 3))
    with pytest.raises(GuardError):
        lib.run([a, np.array(0, np.int64), np.array([2, 3], np.int64)])


def test_session_takes_lists_with_a_structure(seq_model, tmp_path):
    sess = onnxcc.Session(seq_model, cache=str(tmp_path / "cache"), background=False,
                          input_structure={"s": "seq:2", "o": "none"})
    x = np.ones(4, np.float32)
    out = sess.run([[x, 2 * x], x, None])
    np.testing.assert_array_equal(out["out"][1], 2 * x)
    assert out["o_out"] is None and sess.stats.calls == 1


def test_split_along_an_input_dim_builds_for_the_dim_given(tmp_path):
    """`build_for_inputs` (run --inputs, the Session, the conformance harness): a sequence's
    length that hangs on an input dim gets a build for that dim, guarded on it."""
    from onnxcc.compiler import CompileOptions
    from onnxcc.compiler.value_versions import build_for_inputs

    m = _model([h.make_node("SplitToSequence", ["x"], ["s"], axis=0, keepdims=0)],
               [h.make_tensor_value_info("x", F, ["n", 2])], [h.make_tensor_sequence_value_info("s", F, None)])
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    notes = []
    build_for_inputs(lambda o: onnxcc.compile(m, tmp_path, **{**o.__dict__, "name": "unbind"}), CompileOptions(),
                     lambda names: {"x": x}, notes.append)
    assert notes and 'input "x" dim 0' in notes[0] and "--specialize n=3" in notes[0]
    lib = onnxcc.load(tmp_path)
    got = lib.run([x])["s"]
    assert [g.tolist() for g in got] == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]
    with pytest.raises(GuardError, match="n == 3"):
        lib.run([np.zeros((4, 2), np.float32)])


def test_inference_session_takes_lists_with_a_structure(seq_model, tmp_path):
    """onnxruntime's calling convention: a sequence feed is a list; an absent optional may be
    left out of the feeds."""
    sess = onnxcc.InferenceSession(seq_model.SerializeToString(), cache_dir=tmp_path,
                                   input_structure={"s": "seq:2", "o": "none"})
    x = np.arange(3, dtype=np.float32)
    out, o_out, has = sess.run(None, {"s": [x, x], "x": x})
    assert len(out) == 2 and o_out is None and bool(has) is False
    np.testing.assert_array_equal(out[0], x * x)
