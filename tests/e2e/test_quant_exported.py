"""Models as users make them, not written here (tests/data/quant, made by models/quant_torch.py
(torch exports) and models/export_quant.py (onnxruntime's quantizer, its float16 converter, the
merged decoder); no torch needed here): quantize_dynamic and quantize_static (QDQ and QOperator,
per-tensor and per-channel, u8 / s8) on a BERT-style encoder, a conv net, an LSTM and the zoo's
MobileNetV2; float16 with and without keep_io_types; torch exports at opsets 9-11 (Upsample,
old Slice / Pad / Split / Squeeze, Dropout's ratio attribute); encoder-decoder steps over a KV
cache (Whisper, T5, Marian, BART) and a merged decoder whose If on `use_cache_branch` picks the
with-past or the first step. Each file is compiled once through `onnxcc.compile` and run at the
settings of tests/e2e/quant_inputs.py against onnxruntime.

Tolerances: a quantized model that ends in a DequantizeLinear may be one output quantum off
(its scale: a value onnxruntime's float requantization rounds the other way); the dynamically
quantized MatMul / Conv models 1e-4; DynamicQuantizeLSTM runs in f32 with dequantized weights
where onnxruntime also quantizes the activations: 2e-2; float16 2e-2; float 1e-3 / 1e-4."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

import onnxcc
from onnxcc.testing import ort_run

sys.path.insert(0, str(Path(__file__).resolve().parent))
from quant_inputs import DATA, feeds, settings

STEMS = sorted(p.stem for p in DATA.glob("*.onnx"))
#: the default run: fast to compile, covering the float-GEMM quantized conv, an unsorted graph
#: (keep_io_types), the old Dropout form
FAST = {"convnet_qop_u8_s8_pc", "convnet_f16_io32", "oldops_ts10_dropout"}


def _output_quantum(path: Path) -> float:
    """the largest scale of a DequantizeLinear that produces a graph output (0: none does)"""
    g = onnx.load(str(path)).graph
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in g.initializer}
    outs = {o.name for o in g.output}
    scales = [float(np.max(inits[n.input[1]])) for n in g.node
              if n.op_type == "DequantizeLinear" and n.output[0] in outs and n.input[1] in inits]
    return max(scales, default=0.0)


def _tol(stem: str, path: Path) -> tuple[float, float]:
    if "lstm_dynq" in stem:
        return 0.0, 2e-2
    if "_f16" in stem:
        return 2e-2, 2e-2
    if "_dynq" in stem:
        return 1e-4, 1e-4
    q = _output_quantum(path)
    return (0.0, q * 1.001) if q else (1e-3, 1e-4)


def test_the_set_is_all_there():
    assert len(STEMS) >= 15 and FAST <= set(STEMS)
    kinds = ("_dynq", "_qdq_", "_qop_", "_f16", "_ts9", "_ts10", "_ts11", "_dec_past", "_dec_first", "_dec_merged")
    assert all(any(k in s for s in STEMS) for k in kinds)


def test_quantized_outputs_get_a_quantum():
    """the static QDQ files and the conv nets' QOperator ones end in a DequantizeLinear, so
    their tolerance is one step (bert_qop ends in a float LayerNormalization)"""
    for stem in STEMS:
        if "_qdq_" in stem or ("_qop_" in stem and "bert" not in stem):
            assert 0 < _output_quantum(DATA / f"{stem}.onnx") < 0.1, stem


@pytest.mark.parametrize("stem", [s if s in FAST else pytest.param(s, marks=pytest.mark.slow) for s in STEMS])
def test_quant_exported_matches_onnxruntime(stem, tmp_path):
    path = DATA / f"{stem}.onnx"
    onnxcc.compile(path, tmp_path)
    model = onnxcc.load(tmp_path)
    rtol, atol = _tol(stem, path)
    for k, dims in enumerate(settings(stem)):
        f = feeds(path, dims, k)
        want, got = ort_run(path, f), model.run(f)
        assert sorted(got) == sorted(want)
        for name, w in want.items():
            g = got[name]
            assert g.shape == w.shape and g.dtype == w.dtype, f"{stem} {name} at {dims}"
            np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(w, np.float64), rtol=rtol, atol=atol,
                                       err_msg=f"{stem} {name} at {dims}")
