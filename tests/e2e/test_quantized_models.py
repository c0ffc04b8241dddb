"""int8 models quantized by onnxruntime's own tools (tests/data/quantized, written by
models/quantize_torch_more.py from tests/data/torch_more), through the public Python API as a
user calls it: `onnxcc.compile` once, `onnxcc.load`, then calls at the three input settings of
tests/e2e/torch_more_inputs.py compared with onnxruntime.

Tolerances: QOperator models end in a DequantizeLinear, so a result one quantization step off
(onnxruntime's Sigmoid / Softmax tables round a value the other way) moves an output by one
output scale (about 4e-3 here): atol 1e-2. rnns_dynq's DynamicQuantizeLSTM runs in f32 with its
weights dequantized, where onnxruntime also quantizes the activations: atol 2e-2.
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
