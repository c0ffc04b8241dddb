"""The importer validates what it reads (issue 17): each malformed model is refused with one
line naming the problem (what the ONNX checker and onnxruntime refuse), or given the spec's
meaning; never a TypeError or a `shape rule failed: IndexError`."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from onnxcc.cli import main
from onnxcc.errors import ImportError_
from onnxcc.frontend import load_onnx
from onnxcc.interp import run as interp_run

vi = helper.make_tensor_value_info
F = TensorProto.FLOAT


def _model(nodes, inputs=None, outputs=None, inits=(), ir=8, value_info=()):
    g = helper.make_graph(nodes, "g", [vi("x", F, [2])] if inputs is None else inputs,
                          [vi("y", F, [2])] if outputs is None else outputs, list(inits),
                          value_info=list(value_info))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = ir
    return m


def _refused(m, *needles):
    with pytest.raises(ImportError_) as e:
        load_onnx(m)
    msg = str(e.value)
    assert "\n" not in msg and "TypeError" not in msg and "shape rule failed" not in msg, msg
    for n in needles:
        assert n in msg, msg
    return msg


def _scan_strings():
    body = helper.make_graph([helper.make_node("Add", ["s", "xi"], ["s2"]),
                              helper.make_node("Identity", ["s2"], ["o"])], "body",
                             [vi("s", F, [2]), vi("xi", F, [2])], [vi("s2", F, [2]), vi("o", F, [2])])
    node = helper.make_node("Scan", ["s0", "xs"], ["sN", "os"], name="scan", body=body, num_scan_inputs=1)
    a = next(a for a in node.attribute if a.name == "num_scan_inputs")
    a.type, a.strings[:] = AttributeProto.STRINGS, [b"1"]
    a.ClearField("i")
    return _model([node], [vi("s0", F, [2]), vi("xs", F, [3, 2])], [vi("sN", F, [2]), vi("os", F, [3, 2])])


def test_attribute_typed_as_strings():
    _refused(_scan_strings(), 'node "scan" (Scan', "attribute 'num_scan_inputs' must be INT, got STRINGS")


def test_float_in_an_int_attribute():
    m = _model([helper.make_node("Softmax", ["x"], ["y"], name="sm", axis=0)])
    a = m.graph.node[0].attribute[0]
    a.type, a.f = AttributeProto.FLOAT, 0.5
    a.ClearField("i")
    _refused(m, 'node "sm"', "attribute 'axis' must be INT, got FLOAT")


@pytest.mark.parametrize("inputs,needle", [(["x"], "has 1 inputs, takes exactly 2"),
                                           (["", "x"], 'required input 0 ("A") is missing'),
                                           (["x", "x", "x"], "has 3 inputs, takes exactly 2")])
def test_required_input_arity(inputs, needle):
    _refused(_model([helper.make_node("Add", inputs, ["y"], name="add")]), 'node "add" (Add', needle)


def test_missing_required_attribute():
    body = helper.make_graph([helper.make_node("Identity", ["s"], ["s2"])], "body", [vi("s", F, [2])],
                             [vi("s2", F, [2])])
    node = helper.make_node("Scan", ["x"], ["y"], name="scan", body=body)
    _refused(_model([node]), "required attribute 'num_scan_inputs' is missing")


@pytest.mark.parametrize("et,needle", [(0, "elem_type 0 (UNDEFINED)"), (99, "elem_type 99, which is no ONNX")])
def test_output_elem_type(et, needle):
    m = _model([helper.make_node("Relu", ["x"], ["y"])])
    m.graph.output[0].type.tensor_type.elem_type = et
    _refused(m, 'graph output "y"', needle)


def test_output_declared_with_another_dtype():
    m = _model([helper.make_node("Relu", ["x"], ["y"])], outputs=[vi("y", TensorProto.INT64, [2])])
    _refused(m, 'graph output "y" is declared i64, but the graph computes f32')


@pytest.mark.parametrize("ir,needle", [(0, "ir_version is not set"), (99, "ir_version 99 is newer")])
def test_ir_version(ir, needle):
    _refused(_model([helper.make_node("Relu", ["x"], ["y"])], ir=ir), needle)


def test_conflicting_value_info_is_a_hint():
    # onnxruntime and the ONNX checker accept it; the computed type wins
    m = _model([helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Neg", ["h"], ["y"])],
               value_info=[vi("h", TensorProto.INT64, [7, 7])])
    mod = load_onnx(m)
    x = np.array([-1, 2], np.float32)
    np.testing.assert_array_equal(interp_run(mod, [x])[0], [0, -2])


def test_duplicate_graph_output_names():
    m = _model([helper.make_node("Relu", ["x"], ["y"])], outputs=[vi("y", F, [2]), vi("y", F, [2])])
    _refused(m, 'graph output name "y" is used twice')


@pytest.mark.parametrize("what", ["no nodes and outputs", "nothing"])
def test_empty_graph(what):
    m = _model([], outputs=[]) if what == "no nodes and outputs" else _model([], inputs=[], outputs=[])
    _refused(m, "the graph has no outputs")


def test_negative_initializer_dims():
    w = numpy_helper.from_array(np.array([1, 2], np.float32), "w")
    w.dims[:] = [-2]
    _refused(_model([helper.make_node("Add", ["x", "w"], ["y"])], inits=[w]), 'initializer "w" has a negative dim')


def _input_and_initializer(ir):
    w = numpy_helper.from_array(np.array([1, 2], np.float32), "w")
    return _model([helper.make_node("Add", ["x", "w"], ["y"])], inputs=[vi("x", F, [2]), vi("w", F, [2])],
                  inits=[w], ir=ir)


def test_input_named_like_an_initializer_is_an_input_from_ir4():
    mod = load_onnx(_input_and_initializer(8))
    main_fn = mod.functions["main"] if isinstance(mod.functions, dict) else mod.functions[0]
    assert [a.name for a in main_fn.body.args] == ["x", "w"]
    x, w = np.zeros(2, np.float32), np.full(2, 5, np.float32)
    np.testing.assert_array_equal(interp_run(mod, [x, w])[0], [5, 5])  # overridden, not the default
    # before IR 4 every initializer is listed as an input too: a constant
    mod3 = load_onnx(_input_and_initializer(3))
    np.testing.assert_array_equal(interp_run(mod3, [x])[0], [1, 2])


def test_cli_refusal_is_one_line(tmp_path):
    p = tmp_path / "m.onnx"
    onnx.save(_scan_strings(), str(p))
    res = CliRunner().invoke(main, ["ir", str(p)])
    assert res.exit_code == 1
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "num_scan_inputs" in lines[0]


def test_input_with_a_default_end_to_end(tmp_path):
    """Compiled: the input is an input; a dict call that leaves it out gets the initializer."""
    import onnxcc

    p = tmp_path / "m.onnx"
    onnx.save(_input_and_initializer(8), str(p))
    onnxcc.compile(p, tmp_path / "art", name="dflt")
    cm = onnxcc.load(tmp_path / "art")
    assert [t["name"] for t in cm.inputs] == ["x", "w"]
    x = np.zeros(2, np.float32)
    np.testing.assert_array_equal(cm.run({"x": x})["y"], [1, 2])  # the default
    np.testing.assert_array_equal(cm.run({"x": x, "w": np.full(2, 5, np.float32)})["y"], [5, 5])
    with pytest.raises(Exception, match="takes 2 inputs"):
        cm.run([x])  # positional calls give every input
