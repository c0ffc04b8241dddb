"""Sequences and optionals resolved at import (frontend/sequences.py), checked through the
numpy interpreter against onnxruntime, and their refusals."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from onnxcc.errors import GuardError, ImportError_, OnnxccError, UnsupportedOp, ValueDependentError
from onnxcc.frontend import load_onnx
from onnxcc.interp import run
from onnxcc.io_structure import flatten_inputs, group_outputs, parse_spec, spec_of, structure_of

F = TensorProto.FLOAT


def _seq_vi(name, shape=None):
    return helper.make_tensor_sequence_value_info(name, F, shape)


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _interp(model, inputs: list, values=None):
    """What a user gets: structure from the values, flattened in, grouped out."""
    from onnxcc.conformance import input_structure

    module = load_onnx(model, structure=input_structure(model, inputs), values=values)
    st = structure_of(module.attrs)
    assert st is not None
    outs = run(module, flatten_inputs(st, inputs))
    return list(group_outputs(st, dict(zip(module.main.attrs["outputs"], outs))).values())


def _ort(model, inputs: list):
    import onnxruntime as ort

    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, {vi.name: x for vi, x in zip(model.graph.input, inputs)})


def _same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if isinstance(w, list):
            assert isinstance(g, list) and len(g) == len(w)
            for a, b in zip(g, w):
                np.testing.assert_allclose(a, b, rtol=1e-6)
        else:
            np.testing.assert_allclose(g, w, rtol=1e-6)


def _list_ops_model():
    # at = seq[-1]; erased = seq without item 0; n = len; cat = ConcatFromSequence(erased, new_axis)
    nodes = [
        helper.make_node("SequenceAt", ["s", "minus1"], ["at"]),
        helper.make_node("SequenceErase", ["s", "zero"], ["erased"]),
        helper.make_node("SequenceLength", ["s"], ["n"]),
        helper.make_node("ConcatFromSequence", ["erased"], ["cat"], axis=0, new_axis=1),
        helper.make_node("SequenceInsert", ["erased", "at", "zero"], ["ins"]),
    ]
    inits = [helper.make_tensor("minus1", TensorProto.INT64, [], [-1]),
             helper.make_tensor("zero", TensorProto.INT64, [], [0])]
    return _model(nodes, [_seq_vi("s", [2, "w"])],
                  [helper.make_tensor_value_info("at", F, None),
                   helper.make_tensor_value_info("n", TensorProto.INT64, None),
                   helper.make_tensor_value_info("cat", F, None), _seq_vi("ins")], inits)


def test_list_ops_match_onnxruntime():
    m = _list_ops_model()
    rng = np.random.default_rng(0)
    xs = [[rng.standard_normal((2, 3)).astype(np.float32) for _ in range(3)]]
    got = _interp(m, xs)
    _same(got, _ort(m, xs))
    assert int(got[1]) == 3


def test_split_to_sequence_and_sequence_map_match_onnxruntime():
    body = helper.make_graph([helper.make_node("Mul", ["e", "e"], ["sq"])], "body",
                             [helper.make_tensor_value_info("e", F, None)],
                             [helper.make_tensor_value_info("sq", F, None)])
    nodes = [helper.make_node("SplitToSequence", ["x"], ["s"], axis=1, keepdims=0),
             helper.make_node("SequenceMap", ["s"], ["sq"], body=body)]
    m = _model(nodes, [helper.make_tensor_value_info("x", F, [2, 4])], [_seq_vi("sq")])
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    got = _interp(m, [x])
    _same(got, _ort(m, [x]))
    assert len(got[0]) == 4 and got[0][0].shape == (2,)


def test_optional_absent_and_present():
    nodes = [helper.make_node("OptionalHasElement", ["o"], ["has"])]
    ovi = helper.make_value_info("o", helper.make_optional_type_proto(helper.make_tensor_type_proto(F, [2])))
    m = _model(nodes, [ovi], [helper.make_tensor_value_info("has", TensorProto.BOOL, [])], opset=18)
    assert bool(_interp(m, [None])[0]) is False
    assert bool(_interp(m, [np.ones(2, np.float32)])[0]) is True


def test_position_from_an_input_needs_its_value():
    m = _model([helper.make_node("SequenceAt", ["s", "p"], ["y"])],
               [_seq_vi("s", [2]), helper.make_tensor_value_info("p", TensorProto.INT64, [])],
               [helper.make_tensor_value_info("y", F, None)])
    xs = [np.ones(2, np.float32), 2 * np.ones(2, np.float32)]
    with pytest.raises(ValueDependentError) as e:
        load_onnx(m, structure={"s": "seq:2"})
    assert e.value.inputs == ["p"] and e.value.all_inputs == ["s", "p"]
    module = load_onnx(m, structure={"s": "seq:2"}, values={"p": [1]})
    assert module.main.attrs["value_guard"] == ["p:1"]  # the build holds only for p == 1
    out = run(module, [xs[0], xs[1], np.int64(1)])
    np.testing.assert_array_equal(out[0], xs[1])


def test_position_computed_from_data_is_refused_by_name():
    nodes = [helper.make_node("ReduceMax", ["x"], ["m"], keepdims=0),
             helper.make_node("Cast", ["m"], ["p"], to=TensorProto.INT64),
             helper.make_node("SequenceAt", ["s", "p"], ["y"], name="pick")]
    m = _model(nodes, [_seq_vi("s", [2]), helper.make_tensor_value_info("x", F, [3])],
               [helper.make_tensor_value_info("y", F, None)])
    with pytest.raises(UnsupportedOp, match=r'pick.*position depends on data'):
        load_onnx(m, structure={"s": "seq:2"})


def test_loop_appending_on_a_data_condition_cannot_return_its_sequence():
    """A while loop on data that appends to a sequence stays a tensor Loop whose appended
    elements are a scan output (frontend/sequences.py StackedSeq); the sequence itself, of a
    length only the run tells, cannot be a graph output (the C ABI names each element)."""
    body = helper.make_graph(
        [helper.make_node("ReduceSum", ["x"], ["t"], keepdims=0),
         helper.make_node("Greater", ["t", "zero_f"], ["c_out"]),
         helper.make_node("SequenceInsert", ["s_in", "x"], ["s_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("c", TensorProto.BOOL, []), _seq_vi("s_in")],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []), _seq_vi("s_out")])
    nodes = [helper.make_node("SequenceEmpty", [], ["e"]),
             helper.make_node("Loop", ["", "true"], ["s"], body=body, name="grow")]
    nodes[1].input.append("e")
    inits = [helper.make_tensor("true", TensorProto.BOOL, [], [True]), helper.make_tensor("zero_f", F, [], [0.0])]
    m = _model(nodes, [helper.make_tensor_value_info("x", F, [2])], [_seq_vi("s")], inits)
    with pytest.raises(ImportError_, match=r'output "s".*number of times only the run tells'):
        load_onnx(m)


def test_sequence_input_needs_its_structure():
    m = _model([helper.make_node("SequenceLength", ["s"], ["n"])], [_seq_vi("s", [2])],
               [helper.make_tensor_value_info("n", TensorProto.INT64, [])])
    with pytest.raises(ImportError_, match=r'input "s" is a sequence.*seq:N'):
        load_onnx(m)
    with pytest.raises(ImportError_, match=r"elements no shape"):
        load_onnx(_model([helper.make_node("SequenceLength", ["s"], ["n"])], [_seq_vi("s")],
                         [helper.make_tensor_value_info("n", TensorProto.INT64, [])]), structure={"s": "seq:2"})


def test_specs_round_trip_and_bad_ones_are_named():
    for text in ("seq:3", "seq:2:ranks=1,2", "none", "some", "some:seq:1:ranks=0", "tensor"):
        assert parse_spec(text).text() == text
    assert spec_of([np.zeros(2), np.zeros((1, 2))], optional=False) == "seq:2:ranks=1,2"
    assert spec_of(None, optional=True) == "none"
    with pytest.raises(OnnxccError, match=r"'x'.*seq:N"):
        parse_spec("seq:two", "x")


def test_flatten_checks_the_compiled_structure():
    st = {"inputs": [["s", "seq:2"], ["o", "none"]], "outputs": [["r", "seq:1"], ["q", "none"]]}
    a = np.zeros(2)
    assert list(flatten_inputs(st, [[a, a], None])) == ["s.0", "s.1"]
    with pytest.raises(GuardError, match=r'input "s".*sequence of 2 tensors, got 3'):
        flatten_inputs(st, [[a, a, a], None])
    with pytest.raises(GuardError, match=r'input "o".*absent'):
        flatten_inputs(st, [[a, a], a])
    assert group_outputs(st, {"r.0": a}) == {"r": [a], "q": None}


def test_model_text_has_no_sequence():
    """The IR holds tensors only: the module prints and parses back."""
    from onnxcc.ir import parse_module

    module = load_onnx(_list_ops_model(), structure={"s": "seq:3"})
    text = str(module)
    assert str(parse_module(text)) == text
    assert [p.name for p in module.main.params] == ["s.0", "s.1", "s.2"]


def test_graph_output_structure_is_recorded():
    m = _list_ops_model()
    module = load_onnx(m, structure={"s": "seq:3"})
    st = structure_of(module.attrs)
    assert st == {"inputs": [["s", "seq:3:ranks=2,2,2"]],
                  "outputs": [["at", "tensor"], ["n", "tensor"], ["cat", "tensor"], ["ins", "seq:3:ranks=2,2,2"]]}


def test_unrolled_loop_with_scan_output_matches_onnxruntime():
    """A Loop carrying a sequence is unrolled; its scan output is stacked."""
    body = helper.make_graph(
        [helper.make_node("Cast", ["i"], ["fi"], to=F),
         helper.make_node("Add", ["x", "fi"], ["y"]),
         helper.make_node("SequenceInsert", ["s_in", "y"], ["s_out"]),
         helper.make_node("Identity", ["c"], ["c_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("c", TensorProto.BOOL, []), _seq_vi("s_in")],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []), _seq_vi("s_out"),
         helper.make_tensor_value_info("y", F, None)])
    nodes = [helper.make_node("SequenceEmpty", [], ["e"]),
             helper.make_node("Loop", ["three", "", "e"], ["s", "ys"], body=body),
             helper.make_node("SequenceLength", ["s"], ["n"])]
    inits = [helper.make_tensor("three", TensorProto.INT64, [], [3])]
    m = _model(nodes, [helper.make_tensor_value_info("x", F, [2])],
               [_seq_vi("s"), helper.make_tensor_value_info("ys", F, None),
                helper.make_tensor_value_info("n", TensorProto.INT64, [])], inits)
    x = np.array([1.0, 2.0], np.float32)
    got = _interp(m, [x])
    _same(got, _ort(m, [x]))
    assert got[1].shape == (3, 2) and int(got[2]) == 3


def test_if_over_sequences_with_unknown_condition_keeps_both_branches():
    """Same structure in both branches: one If yielding the elements as tensors."""
    def branch(name, scale):
        return helper.make_graph(
            [helper.make_node("Mul", ["x", f"k{name}"], [f"y{name}"]),
             helper.make_node("SequenceConstruct", ["x", f"y{name}"], [f"s{name}"])], name, [],
            [_seq_vi(f"s{name}")], initializer=[helper.make_tensor(f"k{name}", F, [], [scale])])
    nodes = [helper.make_node("If", ["c"], ["s"], then_branch=branch("t", 2.0), else_branch=branch("e", 3.0)),
             helper.make_node("ConcatFromSequence", ["s"], ["cat"], axis=0)]
    m = _model(nodes, [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                       helper.make_tensor_value_info("x", F, [2])],
               [helper.make_tensor_value_info("cat", F, None)])
    module = load_onnx(m)
    assert sum(op.name == "onnx.If" for op in module.main.body.ops) == 1
    x = np.array([1.0, 2.0], np.float32)
    for c in (True, False):
        _same(run(module, [np.array(c), x]), _ort(m, [np.array(c), x]))


def test_a_body_yielding_a_sequence_its_op_cannot_carry_is_refused():
    body = helper.make_graph([helper.make_node("SequenceConstruct", ["x"], ["s"])], "body", [],
                             [helper.make_tensor_value_info("s", F, None)])  # untyped: looks like a tensor
    nodes = [helper.make_node("If", ["c"], ["y"], then_branch=body, else_branch=body, name="pick")]
    m = _model(nodes, [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                       helper.make_tensor_value_info("x", F, [2])], [helper.make_tensor_value_info("y", F, None)])
    with pytest.raises(UnsupportedOp, match=r"pick.*is a sequence or optional"):
        load_onnx(m)


def test_if_whose_branches_differ_in_length_needs_the_condition():
    def branch(name, n):
        return helper.make_graph([helper.make_node("SequenceConstruct", ["x"] * n, [f"s{name}"])], name, [],
                                 [_seq_vi(f"s{name}")])
    nodes = [helper.make_node("If", ["c"], ["s"], then_branch=branch("t", 1), else_branch=branch("e", 2)),
             helper.make_node("SequenceLength", ["s"], ["n"])]
    m = _model(nodes, [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                       helper.make_tensor_value_info("x", F, [2])],
               [helper.make_tensor_value_info("n", TensorProto.INT64, [])])
    with pytest.raises(ValueDependentError, match=r'input "c"'):
        load_onnx(m)
    module = load_onnx(m, values={"c": [0]})
    assert int(run(module, [np.array(False), np.ones(2, np.float32)])[0]) == 2
    assert module.main.attrs["value_guard"] == ["c:0"]


def test_an_op_of_another_domain_given_a_sequence_is_refused():
    nodes = [helper.make_node("SequenceConstruct", ["x"], ["s"]),
             helper.make_node("Gelu", ["s"], ["y"], domain="com.microsoft", name="odd")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [2])],
                          [helper.make_tensor_value_info("y", F, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    with pytest.raises(UnsupportedOp, match=r"odd.*over a sequence or optional"):
        load_onnx(m)


def test_split_along_a_symbolic_dim_needs_the_dim():
    from onnxcc.errors import DimDependentError

    m = _model([helper.make_node("SplitToSequence", ["x"], ["s"], axis=0, keepdims=0, name="unbind")],
               [helper.make_tensor_value_info("x", F, ["n", 2])], [_seq_vi("s")])
    with pytest.raises(DimDependentError, match=r'unbind.*input "x" dim 0') as e:
        load_onnx(m)
    assert e.value.dims == [("x", 0, "n")]
    module = load_onnx(m, dims={"n": 3})
    assert str(module.main.guard) == "Eq(n, 3)"  # this build holds for n == 3 only
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    got = run(module, [x])
    assert [g.tolist() for g in got] == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]
