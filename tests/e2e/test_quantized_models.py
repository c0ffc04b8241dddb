"""int8 models quantized by onnxruntime's own tools (tests/data/quantized, written by
models/quantize_torch_more.py from tests/data/torch_more), through the public Python API as a
user calls it: `onnxcc.compile` once, `onnxcc.load`, then calls at the three input settings of
tests/e2e/torch_more_inputs.py compared with onnxruntime.

Tolerances: QOperator models end in a DequantizeLinear, so a result one quantization step off
(onnxruntime's Sigmoid / Softmax tables round a value the other way) moves an output by one
output scale (about 4e-3 here): atol 1e-2. rnns_dynq's DynamicQuantizeLSTM runs in f32 with its
weights dequantized, where onnxruntime also quantizes the activations: atol 2e-2.

`test_quantizer_qoperator_ops` quantizes a small conv net built here (in a second) so that the
QOperator ops those files lack (QLinearLeakyRelu, AveragePool, Sigmoid, GlobalAveragePool, QGemm)
come from the quantizer itself too.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from torch_more_inputs import INPUTS

import onnxcc
from onnxcc.testing import ort_run

DATA = Path(__file__).resolve().parents[1] / "data" / "quantized"
ATOL = {"rnns_dynq": 2e-2}
DEFAULT_RUN = {"kvcache_QOperator", "unet_QOperator"}
STEMS = sorted(p.stem for p in DATA.glob("*.onnx"))


def test_the_quantized_files_are_there():
    assert set(STEMS) == {"audio_QOperator", "kvcache_QOperator", "unet_QOperator", "rnns_QOperator", "rnns_dynq"}


@pytest.mark.parametrize("stem", [s if s in DEFAULT_RUN else pytest.param(s, marks=pytest.mark.slow)
                                  for s in STEMS])
def test_quantized_model_matches_onnxruntime(stem, tmp_path):
    path = DATA / f"{stem}.onnx"
    onnxcc.compile(path, tmp_path)
    model = onnxcc.load(tmp_path)
    names = [o.name for o in onnx.load(str(path)).graph.output]
    atol = ATOL.get(stem, 1e-2)
    for k, feeds in enumerate(INPUTS[stem.split("_")[0]]):
        got = model.run(feeds)
        assert sorted(got) == sorted(names)
        for out, w in ort_run(path, feeds).items():
            assert got[out].shape == w.shape, f"{stem} {out} at setting {k}: {got[out].shape} != {w.shape}"
            np.testing.assert_allclose(got[out].astype(np.float64), w.astype(np.float64), rtol=0, atol=atol,
                                       err_msg=f"{stem} {out} at setting {k}")


def _small_convnet(path: Path) -> None:
    """A float conv net whose ops onnxruntime's QOperator quantizer turns into the com.microsoft
    QLinear ops (LeakyRelu, AveragePool, Sigmoid, Concat, GlobalAveragePool, Softmax) and QGemm."""
    from onnx import TensorProto as T
    from onnx import helper as h

    r = np.random.default_rng(0)
    inits = {"w1": r.standard_normal((6, 3, 3, 3)) * 0.3, "b1": r.standard_normal(6) * 0.1,
             "w2": r.standard_normal((4, 3, 1, 1)) * 0.3, "g": r.standard_normal((10, 5)) * 0.3,
             "gb": r.standard_normal(5) * 0.1}
    nodes = [h.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             h.make_node("LeakyRelu", ["c1"], ["l"], alpha=0.1),
             h.make_node("AveragePool", ["l"], ["p"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             h.make_node("Sigmoid", ["p"], ["s"]),
             h.make_node("Conv", ["x", "w2"], ["c2"]),
             h.make_node("Concat", ["s", "c2"], ["cat"], axis=1),
             h.make_node("GlobalAveragePool", ["cat"], ["gap"]),
             h.make_node("Flatten", ["gap"], ["f"]),
             h.make_node("Gemm", ["f", "g", "gb"], ["gm"]),
             h.make_node("Softmax", ["gm"], ["y"], axis=-1)]
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, ["N", 3, 8, 8])],
                         [h.make_tensor_value_info("y", T.FLOAT, ["N", 5])],
                         [onnx.numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()])
    m = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)


def test_quantizer_qoperator_ops(tmp_path):
    """The model quantized here, by onnxruntime's quantize_static (QOperator), holds each op this
    test is about; compiled and compared with onnxruntime within two steps of the output's scale."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    src, dst = tmp_path / "f.onnx", tmp_path / "q.onnx"
    _small_convnet(src)
    calib = [{"x": np.random.default_rng(s).standard_normal((2, 3, 8, 8)).astype(np.float32)} for s in range(4)]

    class Feeds(CalibrationDataReader):
        def __init__(self):
            self.it = iter(calib)

        def get_next(self):
            return next(self.it, None)

    quantize_static(src, dst, Feeds(), quant_format=QuantFormat.QOperator, activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8)
    q = onnx.load(dst)
    ops = {n.op_type for n in q.graph.node}
    assert {"QLinearLeakyRelu", "QLinearAveragePool", "QLinearSigmoid", "QLinearConcat",
            "QLinearGlobalAveragePool", "QGemm", "QLinearSoftmax"} <= ops, ops
    onnxcc.compile(dst, tmp_path / "out")
    model = onnxcc.load(tmp_path / "out")
    # the scale of the DequantizeLinear that writes y: one step of the quantized output
    deq = next(n for n in q.graph.node if n.op_type == "DequantizeLinear" and n.output[0] == "y")
    out_scale = next(float(onnx.numpy_helper.to_array(i).reshape(-1)[0]) for i in q.graph.initializer
                     if i.name == deq.input[1])
    for n in (1, 3):
        feeds = {"x": np.random.default_rng(10 + n).standard_normal((n, 3, 8, 8)).astype(np.float32)}
        got, want = model.run(feeds)["y"], ort_run(dst, feeds)["y"]
        np.testing.assert_allclose(got, want, rtol=0, atol=2 * out_scale + 1e-6)
