"""Quantized conv chains channels-last (passes/qnhwc_region.py, ops/int8_nhwc.py): the 8-bit
results equal onnxruntime's exactly, on a synthetic QOperator chain with symbolic N, H, W
(dense, strided, depthwise, 1x1 and dilated convs, a residual QLinearAdd, an 8-bit MaxPool, a
QLinearConcat and a QLinearGlobalAveragePool; u8 and s8 activations) and on the QDQ
squeezenet twin of models/export_quant.py (built here when its float model is in the zoo).

Both sides compute the same i32 sums and the same f32 requantization, so every 8-bit element
is compared for equality; the feature map after the residual Add is an output too, so an
element of a whole map (not only the pooled head) is checked."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import onnxcc
from onnxcc.codegen.cpu.backend import CpuBackend
from onnxcc.compiler import load_module
from onnxcc.passes import run_pipeline
from onnxcc.passes.pipelines import DEFAULT_GRAPH_PIPELINE

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compiled_model import assert_matches_onnxruntime
from quant_inputs import feeds

ROOT = Path(__file__).resolve().parents[2]
ZOO = ROOT / "tests" / "zoo" / "models"
VNNI = CpuBackend().int8_dot()


def _chain(act: str) -> onnx.ModelProto:
    """x (f32) -> Q -> conv 3x3 s2 (3 -> 16) -> depthwise 3x3 -> 1x1 -> QLinearAdd (residual)
    -> MaxPool 3x3 s2 ceil -> 1x1 (16 -> 8) -> 3x3 dilated 2 -> QLinearConcat -> QLinearGlobalAveragePool"""
    r = np.random.default_rng(11)
    at, anp = (T.UINT8, np.uint8) if act == "u8" else (T.INT8, np.int8)
    zero = (lambda v: anp(v)) if act == "u8" else (lambda v: anp(v - 128))
    inits: dict[str, np.ndarray] = {"xs": np.float32(0.02), "xz": zero(128)}
    nodes = [h.make_node("QuantizeLinear", ["x", "xs", "xz"], ["q0"])]

    def conv(name, src, cin, cout, k, group=1, per_channel=False, **attrs):
        s_in = f"{src}_s" if src != "q0" else "xs"
        z_in = f"{src}_z" if src != "q0" else "xz"
        w = r.integers(-127, 128, (cout, cin // group, k, k)).astype(np.int8)
        inits[f"{name}_w"] = w
        inits[f"{name}_ws"] = (r.uniform(2e-3, 6e-3, cout) if per_channel else np.array(4e-3)).astype(np.float32)
        inits[f"{name}_wz"] = np.zeros(cout if per_channel else (), np.int8)
        inits[f"{name}_b"] = r.integers(-2000, 2000, cout).astype(np.int32)
        inits[f"{name}_s"] = np.float32(r.uniform(0.05, 0.2))
        inits[f"{name}_z"] = zero(int(r.integers(100, 140)))
        nodes.append(h.make_node("QLinearConv", [src, s_in, z_in, f"{name}_w", f"{name}_ws", f"{name}_wz",
                                                 f"{name}_s", f"{name}_z", f"{name}_b"], [name], group=group,
                                 kernel_shape=[k, k], **attrs))

    conv("c1", "q0", 3, 16, 3, strides=[2, 2], pads=[1, 1, 1, 1])
    conv("c2", "c1", 16, 16, 3, group=16, per_channel=True, pads=[1, 1, 1, 1])
    conv("c3", "c2", 16, 16, 1, per_channel=True)
    inits.update(add_s=np.float32(0.15), add_z=zero(120))
    nodes.append(h.make_node("QLinearAdd", ["c1", "c1_s", "c1_z", "c3", "c3_s", "c3_z", "add_s", "add_z"], ["add"],
                             domain="com.microsoft"))
    nodes.append(h.make_node("MaxPool", ["add"], ["pool"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1))
    inits.update(pool_s=inits["add_s"], pool_z=inits["add_z"])
    conv("c4", "pool", 16, 8, 1)
    conv("c5", "c4", 8, 8, 3, pads=[2, 2, 2, 2], dilations=[2, 2])
    # the Concat quantized like c4 (copied, contrib_qlinear.py `_same_quant`), c5 requantized
    inits.update(cat_s=inits["c4_s"], cat_z=inits["c4_z"])
    nodes.append(h.make_node("QLinearConcat", ["cat_s", "cat_z", "c4", "c4_s", "c4_z", "c5", "c5_s", "c5_z"], ["cat"],
                             axis=1, domain="com.microsoft"))
    inits.update(gap_s=np.float32(0.03), gap_z=zero(128))
    nodes.append(h.make_node("QLinearGlobalAveragePool", ["cat", "cat_s", "cat_z", "gap_s", "gap_z"], ["gap"],
                             channels_last=0, domain="com.microsoft"))
    g = h.make_graph(nodes, "chain", [h.make_tensor_value_info("x", T.FLOAT, ["N", 3, "H", "W"])],
                     [h.make_tensor_value_info("add", at, None), h.make_tensor_value_info("gap", at, None)],
                     [onnx.numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    return model


def _graph_ops(model) -> Counter:
    m = load_module(model)
    run_pipeline(m, DEFAULT_GRAPH_PIPELINE)
    return Counter(op.name for op in m.walk())


@pytest.mark.skipif(not VNNI, reason="the dense convs join a region on the VNNI GEMM only")
@pytest.mark.parametrize("act", ["u8", "s8"])
def test_chain_channels_last_equals_onnxruntime(tmp_path, act):
    model = _chain(act)
    ops = _graph_ops(model)
    # one region: every conv, the Add, the pool, the Concat and the global pool channels-last;
    # the stem reads the 3-channel input itself (`nchw_input`), one Transpose out (the Add's
    # map), a Reshape view out of the pooled head
    assert ops["cc.qlinearconv_nhwc"] == 5 and ops["onnx.QLinearConv"] == 0
    assert ops["cc.maxpool_nhwc"] == 1 and ops["onnx.Transpose"] == 1 and ops["onnx.Reshape"] == 1
    path = tmp_path / "chain.onnx"
    onnx.save(model, path)
    onnxcc.compile(path, tmp_path / "lib")
    lib = onnxcc.load(tmp_path / "lib")
    for k, (n, hh, ww) in enumerate([(1, 16, 16), (2, 23, 17), (1, 40, 9)]):
        x = np.random.default_rng(k).standard_normal((n, 3, hh, ww)).astype(np.float32) * 2
        assert_matches_onnxruntime(path, lib, {"x": x}, where=x.shape)


def test_chain_without_vnni_keeps_dense_convs_nchw():
    """without the VNNI GEMM (dense off) only depthwise convs could join: one per chain here,
    so nothing is rewritten"""
    m = load_module(_chain("u8"))
    run_pipeline(m, DEFAULT_GRAPH_PIPELINE.replace("qnhwc-region", "qnhwc-region{dense=false}"))
    ops = Counter(op.name for op in m.walk())
    assert ops["cc.qlinearconv_nhwc"] == 0 and ops["onnx.QLinearConv"] == 5


def _qdq_twin(tmp_path: Path, name: str) -> Path:
    """models/export_quant.py's QDQ u8 / s8 twin of a zoo conv net (onnxruntime's quantizer)"""
    src = ZOO / f"{name}.onnx"
    if not src.exists():
        pytest.skip(f"{name} is not in the zoo")
    pytest.importorskip("onnxruntime.quantization")
    sys.path.insert(0, str(ROOT / "models"))
    from export_quant import quantize

    dst = tmp_path / f"{name.split('_ts')[0]}_qdq_u8_s8.onnx"
    quantize(src, "qdq_u8_s8", dst)
    return dst


@pytest.mark.slow
@pytest.mark.skipif(not VNNI, reason="the dense convs join a region on the VNNI GEMM only")
@pytest.mark.parametrize(("name", "convs"), [("squeezenet1_1_ts11", 26), ("mobilenet_v2_ts13", 52)])
def test_qdq_twins_channels_last_equal_onnxruntime(tmp_path, name, convs):
    """the whole QDQ squeezenet (26 convs, 8 concats, 3 pools) or mobilenet_v2 (52 convs, 11
    residual Adds) in one region, its stem reading the NCHW input; the class scores equal
    onnxruntime's at two shapes"""
    path = _qdq_twin(tmp_path, name)
    ops = _graph_ops(path)
    assert ops["cc.qlinearconv_nhwc"] == convs and ops["onnx.QLinearConv"] == 0 and ops["onnx.Transpose"] == 0
    onnxcc.compile(path, tmp_path / "lib")
    lib = onnxcc.load(tmp_path / "lib")
    for k, dims in enumerate([{"batch": 1, "H": 64, "W": 64}, {"batch": 2, "H": 96, "W": 80}]):
        assert_matches_onnxruntime(path, lib, feeds(path, dims, k), where=dims)
