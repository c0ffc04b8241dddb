"""canonicalize on the sample models: same results as before (interpreter), shape chains gone."""

from __future__ import annotations

import numpy as np
import pytest

from onnxcc.frontend.onnx_import import load_onnx
from onnxcc.interp import run as interp_run
from onnxcc.ir.parser import parse_module
from onnxcc.passes import PassContext, VerifyAfterEach, run_pipeline
from onnxcc.testing import MODELS_DIR, SAMPLE_MODELS, random_inputs


@pytest.mark.parametrize("name", sorted(SAMPLE_MODELS))
def test_canonicalize_sample_model_keeps_results(name: str):
    path = MODELS_DIR / f"{name}.onnx"
    m = load_onnx(path)
    ctx = PassContext(instruments=[VerifyAfterEach()])
    run_pipeline(m, "shape-inference", ctx)
    before = [o.name for o in m.walk()]
    dims = SAMPLE_MODELS[name][1]
    feeds = random_inputs(path, dims)
    want = interp_run(m, feeds)
    run_pipeline(m, "canonicalize", ctx)
    after = [o.name for o in m.walk()]
    assert len(after) <= len(before)
    got = interp_run(m, feeds)
    for w, g in zip(want, got, strict=True):
        assert w.shape == g.shape and w.dtype == g.dtype
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    text = str(m)
    assert str(parse_module(text)) == text
    run_pipeline(m, "canonicalize", ctx)
    assert str(m) == text, "canonicalize is not idempotent"


def test_canonicalize_folds_transformer_shape_chains():
    m = load_onnx(MODELS_DIR / "transformer.onnx")
    run_pipeline(m, "shape-inference,canonicalize", PassContext(instruments=[VerifyAfterEach()]))
    names = {o.name for o in m.walk()}
    assert not names & {"onnx.Shape", "onnx.Gather", "onnx.Unsqueeze", "onnx.Concat", "onnx.Slice"}
    dims = [o for o in m.walk() if o.name == "cc.dims"]
    # CSE leaves one cc.dims per distinct target shape
    assert len({str(o.attrs["dims"]) for o in dims}) == len(dims) >= 2
