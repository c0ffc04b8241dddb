"""fold-conv-affine on ONNX models: the fold happens in the default pipeline (no
BatchNormalization / Mul / Add left after a Conv with constant weights), leaves the rest
alone, and the folded graph matches onnxruntime (rtol 1e-5, atol 1e-5: the folded weights
differ from the unfolded pair by one f32 rounding per weight)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxcc.frontend import load_onnx
from onnxcc.passes import run_pipeline
from onnxcc.passes.pipelines import DEFAULT_GRAPH_PIPELINE
from onnxcc.testing import jit_run, ort_run

C, M = 3, 6


def _model(bn_inputs: bool = False, second_use: bool = False) -> onnx.ModelProto:
    rng = np.random.default_rng(7)
    f = np.float32
    inits = [numpy_helper.from_array(rng.standard_normal((M, C, 3, 3)).astype(f), "w"),
             numpy_helper.from_array(rng.standard_normal(M).astype(f), "b"),
             numpy_helper.from_array(rng.standard_normal((M, 1, 3, 3)).astype(f), "wd"),
             numpy_helper.from_array(rng.standard_normal((M, 1, 1)).astype(f), "mul"),
             numpy_helper.from_array(rng.standard_normal((1, M, 1, 1)).astype(f), "add")]
    bn = {"scale": 1 + 0.1 * rng.standard_normal(M), "bias": rng.standard_normal(M),
          "mean": 0.1 * rng.standard_normal(M), "var": rng.uniform(0.5, 1.5, M)}
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", C, "H", "W"])]
    for k, v in bn.items():
        if bn_inputs:
            inputs.append(helper.make_tensor_value_info(k, TensorProto.FLOAT, [M]))
        else:
            inits.append(numpy_helper.from_array(v.astype(f), k))
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("BatchNormalization", ["c1", "scale", "bias", "mean", "var"], ["n1"], epsilon=1e-3),
             helper.make_node("Relu", ["n1"], ["r1"]),
             helper.make_node("Conv", ["r1", "wd"], ["c2"], pads=[1, 1, 1, 1], group=M),
             helper.make_node("Mul", ["c2", "mul"], ["m2"]),
             helper.make_node("Add", ["add", "m2"], ["y"])]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if second_use:
        outs.append(helper.make_tensor_value_info("c1", TensorProto.FLOAT, None))
    g = helper.make_graph(nodes, "convbn", inputs, outs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _ops(model: onnx.ModelProto):
    m = load_onnx(model)
    run_pipeline(m, DEFAULT_GRAPH_PIPELINE)
    return m, [op.name for op in m.main.body.ops]


def _feeds(model: onnx.ModelProto, n: int, h: int, w: int) -> dict:
    rng = np.random.default_rng(n * h * w)
    feeds = {"x": rng.standard_normal((n, C, h, w)).astype(np.float32)}
    for i in model.graph.input[1:]:
        feeds[i.name] = rng.uniform(0.5, 1.5, M).astype(np.float32)
    return feeds


def _check(model: onnx.ModelProto, m) -> None:
    for n, h, w in ((1, 7, 9), (3, 16, 5)):
        feeds = _feeds(model, n, h, w)
        want = ort_run(model, feeds)
        got = jit_run(m, feeds)
        assert len(got) == len(want)
        for (name, a), b in zip(want.items(), got, strict=True):
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5, err_msg=f"{name} at {(n, h, w)}")


def test_bn_and_per_channel_mul_add_fold_into_the_convs():
    model = _model()
    m, ops = _ops(model)
    assert ops.count("onnx.Conv") == 2
    assert not {"onnx.BatchNormalization", "onnx.Mul", "onnx.Add"} & set(ops), ops
    _check(model, m)


def test_bn_with_parameters_from_inputs_stays():
    model = _model(bn_inputs=True)
    m, ops = _ops(model)
    assert "onnx.BatchNormalization" in ops
    assert "onnx.Mul" not in ops  # the second conv's constant affine still folds
    _check(model, m)


def test_conv_output_used_twice_is_not_folded():
    model = _model(second_use=True)
    m, ops = _ops(model)
    assert "onnx.BatchNormalization" in ops
    _check(model, m)
