"""QDQ-format models (onnxruntime's quantize_static default) on the integer kernels: the
qdq-fuse pass (passes/qdq_fuse.py) turns their DQ -> Conv / MatMul / Gemm / Add -> Q groups
into the QLinear ops, and the results equal onnxruntime's, which fuses the same groups.

Exactness: where onnxruntime fuses a group, both compute the same i32 sums and the same f32
requantization, so the 8-bit results are equal (the float path, unfused, differs from them
by one step where the scaled sum is within an f32 rounding of .5; measured on
convnet_qdq_s8_s8_pc cut at its last conv: 1 element in 49152 at N=2, 64x48). Where
onnxruntime's own kernels disagree there is no single answer: its QLinearAdd rounds a sum of
147.49998 to 147 in its scalar loop and to 148 in its vector loop (a MobileNetV2 QDQ twin,
1 element of 576 after features.9's Add); ours gives 147, the f32 formula's value. The files
are those of test_quant_exported.py (tests/data/quant, made by models/export_quant.py)."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnx.utils
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import onnxcc
from onnxcc.codegen.cpu.backend import CpuBackend
from onnxcc.compiler import load_module
from onnxcc.passes import run_pipeline
from onnxcc.passes.pipelines import DEFAULT_GRAPH_PIPELINE
from onnxcc.testing import ort_run

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compiled_model import assert_matches_onnxruntime
from quant_inputs import DATA, feeds

CONVNET = DATA / "convnet_qdq_s8_s8_pc.onnx"
BERT = DATA / "bert_qdq_u8_s8.onnx"


def _ops(path) -> Counter:
    m = load_module(path)
    run_pipeline(m, DEFAULT_GRAPH_PIPELINE)
    return Counter(op.name for op in m.walk())


def test_convnet_groups_become_qlinear_ops():
    ops = _ops(CONVNET)
    # c1, the strided c2, the depthwise dw, the 1x1 pw (channels-last after qnhwc-region); the
    # head Gemm; the residual Add; the pool
    assert ops["onnx.QLinearConv"] + ops["cc.qlinearconv_nhwc"] == 4 and ops["onnx.Conv"] == 0
    assert ops["com.microsoft.QGemm"] == 1 and ops["onnx.Gemm"] == 0
    assert ops["com.microsoft.QLinearAdd"] == 1 and ops["onnx.Add"] == 0
    assert ops["com.microsoft.QLinearGlobalAveragePool"] == 1
    # MaxPool and Flatten between a DQ and a Q of the same parameters run on the i8 values:
    # one DequantizeLinear is left, the output's
    assert ops["onnx.DequantizeLinear"] == 1 and ops["onnx.QuantizeLinear"] == 1


def test_bert_weight_matmuls_become_qlinear_matmuls():
    ops = _ops(BERT)
    # 12 projections by constant weights fuse; the 4 attention products of two activations
    # stay float MatMuls (no integer GEMM call for them)
    assert ops["onnx.QLinearMatMul"] == 12 and ops["onnx.MatMul"] == 4
    assert ops["com.microsoft.QLinearAdd"] > 0


def _cut_at_last_conv(tmp_path: Path) -> Path:
    """the conv net up to its 1x1 conv's DequantizeLinear: onnxruntime fuses all four convs
    there (in the whole net the residual's second reader keeps two of them float)"""
    out = tmp_path / "convnet_to_pw.onnx"
    onnx.utils.extract_model(str(CONVNET), str(out), ["x"], ["/pw/Conv_output_0_DequantizeLinear_Output"])
    return out


def test_convnet_convs_equal_onnxruntime_exactly(tmp_path):
    path = _cut_at_last_conv(tmp_path)
    onnxcc.compile(path, tmp_path / "lib")
    lib = onnxcc.load(tmp_path / "lib")
    for k, dims in enumerate([{"N": 2, "H": 64, "W": 48}, {"N": 1, "H": 17, "W": 29}]):
        assert_matches_onnxruntime(path, lib, feeds(path, dims, k), where=dims)
    if CpuBackend().int8_dot():
        text = onnxcc.compile(path, tmp_path / "kir", emit="kernel").text
        assert "onnxcc_i8gemm" in text  # the dense convs on the VNNI GEMM


def _relu_model(zero_point: int) -> onnx.ModelProto:
    """x -> Q -> DQ -> Conv(DQ(W), DQ(B)) -> Relu -> Q(zero_point) -> DQ"""
    r = np.random.default_rng(3)
    m, c = 16, 8
    ws = r.uniform(2e-3, 4e-3, m).astype(np.float32)
    xs = np.float32(0.03)
    inits = {"xs": xs, "xz": np.int8(-2), "w": r.integers(-127, 128, (m, c, 3, 3)).astype(np.int8), "ws": ws,
             "wz": np.zeros(m, np.int8), "b": r.integers(-3000, 3000, m).astype(np.int32), "bs": xs * ws,
             "ys": np.float32(0.05), "yz": np.int8(zero_point)}
    nodes = [h.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             h.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             h.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=0),
             h.make_node("DequantizeLinear", ["b", "bs"], ["bd"], axis=0),
             h.make_node("Conv", ["xd", "wd", "bd"], ["c"], pads=[1, 1, 1, 1]),
             h.make_node("Relu", ["c"], ["r"]),
             h.make_node("QuantizeLinear", ["r", "ys", "yz"], ["yq"]),
             h.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, ["N", c, "H", "W"])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)],
                     [onnx.numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("zero_point", [-128, -20])
def test_relu_before_the_quantizer_folds(tmp_path, zero_point):
    """zero point -128: the Relu vanishes; -20: it is an 8-bit clamp at -20 on the fused result.
    Both within one output step of onnxruntime, and never below the zero point."""
    model = _relu_model(zero_point)
    ops = _ops(model)
    assert ops["onnx.QLinearConv"] == 1 and ops["onnx.Relu"] == 0
    assert ops["onnx.Clip"] == (0 if zero_point == -128 else 1)
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    onnxcc.compile(path, tmp_path / "lib")
    lib = onnxcc.load(tmp_path / "lib")
    for k, dims in enumerate([(1, 9, 7), (2, 16, 5)]):
        x = np.random.default_rng(k).standard_normal((dims[0], 8, dims[1], dims[2])).astype(np.float32)
        want, got = ort_run(path, {"x": x})["y"], lib.run({"x": x})["y"]
        step = 0.05
        assert np.abs(got - want).max() <= step * 1.001
        assert np.mean(got == want) > 0.999
        assert got.min() >= -1e-7  # the Relu's clamp: nothing below the zero point's value 0


@pytest.mark.slow
@pytest.mark.parametrize("path,settings", [
    (CONVNET, [{"N": 1, "H": 32, "W": 32}, {"N": 4, "H": 64, "W": 64}, {"N": 2, "H": 17, "W": 23}]),
    (BERT, [{"B": 1, "T": 16}, {"B": 2, "T": 64}, {"B": 4, "T": 33}]),
])
def test_qdq_models_equal_onnxruntime(tmp_path, path, settings):
    """the whole models, at three shapes each: measured equal to onnxruntime (its optimized
    session, which fuses the same groups) on these inputs"""
    onnxcc.compile(path, tmp_path / "lib")
    lib = onnxcc.load(tmp_path / "lib")
    for k, dims in enumerate(settings):
        assert_matches_onnxruntime(path, lib, feeds(path, dims, k), where=f"{path.stem} {dims}")


def test_qattention_projection_on_the_int8_gemm(tmp_path):
    """com.microsoft.QAttention's QKV projection by a constant weight runs on the VNNI GEMM
    (the same exact i32 sums); the attention after it is f32 in another order than
    onnxruntime's: 1e-4"""
    r = np.random.default_rng(7)
    hin, d, heads = 32, 32, 4
    inits = {"w": r.integers(-128, 128, (hin, 3 * d)).astype(np.int8),
             "b": r.uniform(-0.2, 0.2, 3 * d).astype(np.float32), "xs": np.array([0.02], np.float32),
             "ws": r.uniform(0.005, 0.02, 3 * d).astype(np.float32), "xz": np.array([120], np.uint8),
             "wz": np.zeros(3 * d, np.int8)}
    node = h.make_node("QAttention", ["x", "w", "b", "xs", "ws", "", "xz", "wz"], ["y"], num_heads=heads,
                       domain="com.microsoft")
    g = h.make_graph([node], "g", [h.make_tensor_value_info("x", T.UINT8, ["B", "S", hin])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)],
                     [onnx.numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    path = tmp_path / "qattn.onnx"
    onnx.save(model, path)
    onnxcc.compile(path, tmp_path / "lib")
    lib = onnxcc.load(tmp_path / "lib")
    for k, (b, s) in enumerate([(1, 7), (3, 33)]):
        x = np.random.default_rng(k).integers(0, 256, (b, s, hin)).astype(np.uint8)
        assert_matches_onnxruntime(path, lib, {"x": x}, rtol=1e-4, atol=1e-4, where=x.shape)
    if CpuBackend().int8_dot():
        assert "onnxcc_i8gemm" in onnxcc.compile(path, tmp_path / "kir", emit="kernel").text
