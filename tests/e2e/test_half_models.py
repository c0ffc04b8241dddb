"""The sample models in float16 and bfloat16 (testing.to_half_model: weights rounded, float
inputs / outputs / Casts retyped), compiled to libNAME.so and run through the loader.

Oracles and tolerances, as a fraction of the output's largest magnitude (`scale`):
- f16: onnxruntime running the f16 model, and onnxruntime running the f32 model with the
  same rounded weights and inputs: max |error| <= 2**-8 * scale (4 f16 ulps at the scale;
  onnxcc computes in f32 and rounds where tensors are stored, so both differ by roundings).
- bf16 (onnxruntime has no bf16 MatMul / Relu on CPU): the f32 model with the same rounded
  weights and inputs, run by onnxruntime: max |error| <= 2**-6 * scale (4 bf16 ulps).
The numpy interpreter runs the half models too and must meet the same bounds."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto as T

import onnxcc
from onnxcc.frontend import load_onnx
from onnxcc.interp import run as interp_run
from onnxcc.testing import MODELS_DIR, SAMPLE_MODELS, ort_run, random_inputs, to_half_model

HALF = {"f16": (T.FLOAT16, np.dtype(np.float16), 2.0 ** -8),
        "bf16": (T.BFLOAT16, np.dtype(ml_dtypes.bfloat16), 2.0 ** -6)}


def _err(got, want) -> float:
    return float(np.abs(np.asarray(got, np.float32) - np.asarray(want, np.float32)).max())


@pytest.mark.parametrize("which", ["f16", "bf16"])
@pytest.mark.parametrize("name", ["mlp", "transformer", "convnet"])
def test_half_model_matches_its_f32_oracle(tmp_path, name, which):
    elem, npdt, tol = HALF[which]
    src = MODELS_DIR / f"{name}.onnx"
    half = to_half_model(src, elem)
    oracle = to_half_model(half, T.FLOAT, frm=elem)  # f32, the rounded weights
    onnxcc.compile(half, tmp_path, name=f"{name}_{which}")
    lib = onnxcc.load(tmp_path)
    assert [t["dtype"] for t in lib.inputs] == [which] and [t["dtype"] for t in lib.outputs] == [which]
    for k, dims in enumerate(SAMPLE_MODELS[name][:2]):
        feeds = {n: a.astype(npdt) for n, a in random_inputs(src, dims, seed=k).items()}
        want = ort_run(oracle, {n: a.astype(np.float32) for n, a in feeds.items()})
        got = lib.run(feeds)  # bf16 goes in as ml_dtypes.bfloat16, comes back as its uint16 bits
        mine = interp_run(load_onnx(half), list(feeds.values()))
        for (out, w), ref in zip(want.items(), mine, strict=True):
            g = got[out].view(npdt) if which == "bf16" else got[out]
            assert g.dtype == npdt and ref.dtype == npdt
            scale = float(np.abs(w).max())
            assert _err(g, w) <= tol * scale, f"{name} {which} native {out} at {dims}: {_err(g, w) / scale:.2g}"
            assert _err(ref, w) <= tol * scale, f"{name} {which} interp {out} at {dims}: {_err(ref, w) / scale:.2g}"
            if which == "f16":
                o = ort_run(half, feeds)[out]
                assert _err(g, o) <= tol * scale, f"{name} native vs onnxruntime f16 at {dims}"
