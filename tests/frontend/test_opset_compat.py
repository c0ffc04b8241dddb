"""Old ai.onnx opsets through the importer (frontend/opset_compat.py): each per-op rule
against onnxruntime (or numpy where onnxruntime has no kernel for that opset), the ops the
version converter upgrades exactly, and the error paths (conversion failure, too new)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxcc.errors import ImportError_, UnsupportedOp
from onnxcc.frontend import load_onnx
from onnxcc.frontend.opset_compat import RULES, TARGET_OPSET
from onnxcc.interp import run as interp_run
from onnxcc.ops import get_opdef
from onnxcc.testing import ort_run

F32 = TensorProto.FLOAT
RTOL, ATOL = 1e-5, 1e-6
RNG = np.random.default_rng(0)
X4 = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)


def _model(nodes, opset, inputs, n_out=1, inits=()):
    if not isinstance(nodes, list):
        nodes = [nodes]
    ins = [helper.make_tensor_value_info(n, F32, list(a.shape)) for n, a in inputs]
    outs = [helper.make_tensor_value_info(o, F32, None) for o in nodes[-1].output[:n_out]]
    inits = [numpy_helper.from_array(a, n) for n, a in inits]
    graph = helper.make_graph(nodes, "g", ins, outs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=7)


def _ours(model, inputs):
    return interp_run(load_onnx(model.SerializeToString()), [a for _, a in inputs])


def _vs_ort(model, inputs, rtol=RTOL, atol=ATOL):
    want = list(ort_run(model, dict(inputs)).values())
    got = _ours(model, inputs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


# ---- the rules -----------------------------------------------------------------------------------

def test_rules_are_keyed_by_since_version():
    for op_type, since in RULES:
        assert onnx.defs.get_schema(op_type, since, "").since_version == since, (op_type, since)
        assert since < TARGET_OPSET


def test_prelu6_slope_is_per_channel():
    # onnxruntime has no PRelu-6 kernel: numpy on the opset-6 meaning (slope along axis 1)
    slope = np.array([0.1, 0.2, 0.3], np.float32)
    m = _model(helper.make_node("PRelu", ["x", "s"], ["y"]), 6, [("x", X4)], inits=[("s", slope)])
    (got,) = _ours(m, [("x", X4)])
    s = slope[None, :, None, None]
    np.testing.assert_allclose(got, np.where(X4 < 0, X4 * s, X4), rtol=RTOL, atol=ATOL)


def test_prelu7_slope_is_numpy_broadcast():
    slope = np.array([0.1, 0.2, 0.3, 0.4, 0.5], np.float32)
    m = _model(helper.make_node("PRelu", ["x", "s"], ["y"]), 7, [("x", X4)], inits=[("s", slope)])
    _vs_ort(m, [("x", X4)])


@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("opset,axis", [(9, None), (9, 0), (11, 2), (11, -1), (12, -3)])
def test_softmax_family_coerces_to_2d(op_type, opset, axis):
    attrs = {} if axis is None else {"axis": axis}
    m = _model(helper.make_node(op_type, ["x"], ["y"], **attrs), opset, [("x", X4)])
    _vs_ort(m, [("x", X4)])


def test_batch_norm_spatial0_is_per_activation():
    params = [(n, (RNG.random((3, 4, 5)) + 0.5).astype(np.float32)) for n in ("s", "b", "m", "v")]
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], spatial=0, epsilon=1e-2)
    m = _model(node, 7, [("x", X4)], inits=params)
    _vs_ort(m, [("x", X4)])


def test_batch_norm6_is_test():
    # onnxruntime runs BatchNormalization-6 as inference whatever is_test says; so does onnxcc
    params = [(n, (RNG.random(3) + 0.5).astype(np.float32)) for n in ("s", "b", "m", "v")]
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], is_test=1, epsilon=1e-3,
                            consumed_inputs=[0, 0, 0, 1, 1])
    m = _model(node, 6, [("x", X4)], inits=params)
    (got,) = _ours(m, [("x", X4)])
    s, b, mu, v = (p[1][None, :, None, None] for p in params)
    np.testing.assert_allclose(got, (X4 - mu) / np.sqrt(v + 1e-3) * s + b, rtol=1e-5, atol=1e-5)


def test_batch_norm_training_outputs_are_refused():
    params = [(n, (RNG.random(3) + 0.5).astype(np.float32)) for n in ("s", "b", "m", "v")]
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "mean", "var"], name="bn")
    m = _model(node, 7, [("x", X4)], n_out=3, inits=params)
    with pytest.raises(UnsupportedOp, match=r"BatchNormalization.*bn.*training"):
        load_onnx(m)


_SCALES = np.array([1, 1, 2, 3], np.float32)


@pytest.mark.parametrize("form", ["Upsample-7", "Upsample-9", "Resize-10"])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_upsample_forms_import_as_upsample(form, mode):
    op_type, opset = form.split("-")
    x = X4[:, :, :3, :3]
    if opset == "7":
        node, inits = helper.make_node("Upsample", ["x"], ["y"], scales=list(_SCALES), mode=mode), []
    else:
        node, inits = helper.make_node(op_type, ["x", "s"], ["y"], mode=mode), [("s", _SCALES)]
    m = _model(node, int(opset), [("x", x)], inits=inits)
    if get_opdef("onnx.Upsample") is None:  # the op is not in this build: a clear refusal
        with pytest.raises(UnsupportedOp, match=f"{op_type}.*onnx.Upsample"):
            load_onnx(m)
        return
    module = load_onnx(m)
    up = [op for op in module.main.body.ops if op.name == "onnx.Upsample"]
    assert len(up) == 1 and up[0].attrs["mode"] == mode
    scales = up[0].operands[1].owner
    assert scales.name == "cc.const" and list(np.asarray(scales.attrs["value"])) == list(_SCALES)
    _vs_ort(m, [("x", x)])


def test_legacy_broadcast_axis():
    # onnxruntime has no Add-6 kernel for this: numpy on the opset-6 meaning
    b = np.array([0.1, 0.2, 0.3], np.float32)
    node = helper.make_node("Add", ["x", "b"], ["y"], broadcast=1, axis=1)
    m = _model(node, 6, [("x", X4)], inits=[("b", b)])
    (got,) = _ours(m, [("x", X4)])
    np.testing.assert_allclose(got, X4 + b[None, :, None, None], rtol=RTOL, atol=ATOL)
    c = np.arange(5, dtype=np.float32)
    m = _model(helper.make_node("Mul", ["x", "c"], ["y"], broadcast=1), 6, [("x", X4)], inits=[("c", c)])
    np.testing.assert_allclose(_ours(m, [("x", X4)])[0], X4 * c, rtol=RTOL, atol=ATOL)


def test_legacy_broadcast_zero_needs_equal_shapes():
    c = np.arange(5, dtype=np.float32)
    m = _model(helper.make_node("Sub", ["x", "c"], ["y"], name="sub"), 6, [("x", X4)], inits=[("c", c)])
    with pytest.raises(UnsupportedOp, match=r"Sub.*sub.*broadcast=0"):
        load_onnx(m)


def _scan8(batch: int, with_lens: bool = False):
    vi = lambda n, s: helper.make_tensor_value_info(n, F32, s)  # noqa: E731
    body = helper.make_graph(
        [helper.make_node("Add", ["sum_in", "next"], ["sum_out"]),
         helper.make_node("Identity", ["sum_out"], ["scan_out"])],
        "body", [vi("sum_in", [2]), vi("next", [2])], [vi("sum_out", [2]), vi("scan_out", [2])])
    ins = ["lens" if with_lens else "", "initial", "x"]
    node = helper.make_node("Scan", ins, ["y", "z"], name="scan", num_scan_inputs=1, body=body)
    inputs = [("initial", RNG.standard_normal((batch, 2)).astype(np.float32)),
              ("x", RNG.standard_normal((batch, 3, 2)).astype(np.float32))]
    inits = [("lens", np.array([3] * batch, np.int32))] if with_lens else []
    return _model(node, 8, inputs, n_out=2, inits=inits), inputs


@pytest.mark.parametrize("batch", [1, 3])
def test_scan8_batch_axis(batch):
    m, inputs = _scan8(batch)
    _vs_ort(m, inputs)


def test_scan8_sequence_lens_is_refused():
    m, _ = _scan8(2, with_lens=True)
    with pytest.raises(UnsupportedOp, match=r"Scan.*scan.*sequence_lens"):
        load_onnx(m)


def test_rule_inside_a_subgraph():
    # a set-aside node in an If branch is found and imported through its rule
    slope = np.array([0.1, 0.2, 0.3], np.float32)
    branch = helper.make_graph(
        [helper.make_node("PRelu", ["x", "s"], ["t"])], "then", [],
        [helper.make_tensor_value_info("t", F32, None)])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", F32, None)])
    node = helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=other)
    m = _model(node, 6, [("x", X4)], inits=[("s", slope), ("c", np.array(True))])
    (got,) = _ours(m, [("x", X4)])
    want = np.where(X4 < 0, X4 * slope[None, :, None, None], X4)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


# ---- what the version converter upgrades exactly ---------------------------------------------------

_I64 = np.int64
CONVERTED = {
    "Slice-1": (9, helper.make_node("Slice", ["x"], ["y"], starts=[0, 1], ends=[2, 100], axes=[1, 3]), []),
    "Pad-2": (9, helper.make_node("Pad", ["x"], ["y"], pads=[0, 1, 0, 2, 0, 0, 1, 1], value=1.5), []),
    "Pad-2-reflect": (10, helper.make_node("Pad", ["x"], ["y"], pads=[0, 0, 1, 2, 0, 0, 1, 1],
                                           mode="reflect"), []),
    "Clip-6": (6, helper.make_node("Clip", ["x"], ["y"], min=-0.5, max=0.7), []),
    "Unsqueeze-1": (9, helper.make_node("Unsqueeze", ["x"], ["y"], axes=[0, 3]), []),
    "ReduceSum-1": (9, helper.make_node("ReduceSum", ["x"], ["y"], axes=[1], keepdims=0), []),
    "ReduceMean-1": (7, helper.make_node("ReduceMean", ["x"], ["y"], axes=[1, 2]), []),
    "Dropout-7": (7, helper.make_node("Dropout", ["x"], ["y"], ratio=0.3), []),
    "Gemm-7": (7, helper.make_node("Gemm", ["x2", "w", "c"], ["y"], transB=1),
               [("w", RNG.random((6, 5))), ("c", RNG.random(6))]),
    "MaxPool-1": (7, helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2]), []),
    "Reshape-5": (5, helper.make_node("Reshape", ["x", "shape"], ["y"]),
                  [("shape", np.array([2, -1], _I64))]),
}


@pytest.mark.parametrize("name", sorted(CONVERTED))
def test_converter_upgrades_exactly(name):
    opset, node, inits = CONVERTED[name]
    inits = [(n, a.astype(np.float32) if a.dtype.kind == "f" else a) for n, a in inits]
    x = X4[0, 0] if "x2" in node.input else X4
    inputs = [("x2" if "x2" in node.input else "x", x)]
    _vs_ort(_model(node, opset, inputs, inits=inits), inputs)


def test_split2_attribute_becomes_input():
    node = helper.make_node("Split", ["x"], ["y", "z"], axis=1, split=[1, 2])
    _vs_ort(_model(node, 9, [("x", X4)], n_out=2), [("x", X4)])


def test_old_model_keeps_its_opset_in_the_module():
    m = _model(helper.make_node("Relu", ["x"], ["y"]), 6, [("x", X4)])
    assert load_onnx(m).attrs["opset"] == 6


# ---- errors ----------------------------------------------------------------------------------------

def test_conversion_failure_is_one_line():
    # LSTM-1 (output_sequence attribute) has no adapter in onnx's converter and no rule here
    w = RNG.random((1, 8, 5)).astype(np.float32)
    r = RNG.random((1, 8, 2)).astype(np.float32)
    node = helper.make_node("LSTM", ["x", "w", "r"], ["y"], hidden_size=2)
    x = X4[0]
    m = _model(node, 1, [("x", x)], inits=[("w", w), ("r", r)])
    with pytest.raises(ImportError_) as e:
        load_onnx(m)
    msg = str(e.value)
    assert "\n" not in msg and "opset 1" in msg and "LSTM" in msg and "Traceback" not in msg


def test_opset_newer_than_onnx_knows():
    m = _model(helper.make_node("Relu", ["x"], ["y"]), onnx.defs.onnx_opset_version() + 1, [("x", X4)])
    with pytest.raises(ImportError_, match="newer than the installed onnx knows"):
        load_onnx(m)


# ---- opset 1-5 forms the converter has no adapter for ------------------------------------------------

def _x_model(node, opset, n_out=1, inits=()):
    return _model(node, opset, [("x", X4)], n_out=n_out, inits=inits)


def test_split1_attribute_and_equal_parts():
    m = _x_model(helper.make_node("Split", ["x"], ["a", "b"], axis=1, split=[1, 2]), 1, n_out=2)
    got = _ours(m, [("x", X4)])
    assert [g.shape for g in got] == [(2, 1, 4, 5), (2, 2, 4, 5)]
    np.testing.assert_array_equal(np.concatenate(got, axis=1), X4)
    m = _x_model(helper.make_node("Split", ["x"], ["a", "b", "c"], axis=1), 1, n_out=3)
    for k, g in enumerate(_ours(m, [("x", X4)])):
        np.testing.assert_array_equal(g, X4[:, k:k + 1])


def test_tile1_repeats_one_axis():
    inits = [("t", np.array(3, np.int64)), ("a", np.array(2, np.int64))]
    (got,) = _ours(_x_model(helper.make_node("Tile", ["x", "t", "a"], ["y"]), 5, inits=inits), [("x", X4)])
    np.testing.assert_array_equal(got, np.tile(X4, (1, 1, 3, 1)))


def test_cast1_string_target():
    node = helper.make_node("Cast", ["x"], ["y"], to="INT32")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", F32, list(X4.shape))],
                          [helper.make_tensor_value_info("y", TensorProto.INT32, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 5)], ir_version=7)
    (got,) = _ours(m, [("x", X4)])
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, X4.astype(np.int32))


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad1_paddings_attribute(mode):
    pads = [0, 0, 1, 2, 0, 0, 2, 1]
    node = helper.make_node("Pad", ["x"], ["y"], paddings=pads, mode=mode, value=0.5)
    (got,) = _ours(_x_model(node, 1), [("x", X4)])
    widths = list(zip(pads[:4], pads[4:]))
    want = np.pad(X4, widths, mode=mode, **({"constant_values": 0.5} if mode == "constant" else {}))
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
