"""Every natively compiled sample model called from C (a generic runner that links
libNAME.so), at each of its symbol settings, compared with onnxruntime."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

import onnxcc
from onnxcc.testing import MODELS_DIR, SAMPLE_MODELS, ort_run, random_inputs
from onnxcc.testing_c import build_c_runner, run_c

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")


@pytest.mark.parametrize("name", ["mlp", "gelu_layernorm", "convnet", "if_model", "scan_model"])
def test_c_runner_matches_onnxruntime(tmp_path, name):
    path = MODELS_DIR / f"{name}.onnx"
    art = onnxcc.compile(path, tmp_path / name)
    exe = build_c_runner(art.out_dir)
    meta_outputs = onnxcc.load(art.out_dir).outputs
    for k, dims in enumerate(SAMPLE_MODELS[name]):
        feeds = random_inputs(path, dims, seed=k)
        want = ort_run(path, feeds)
        line, outs = run_c(exe, meta_outputs, list(feeds.values()), tmp_path)
        assert line.startswith("version="), line
        assert len(outs) == len(want), f"{name}: the C runner wrote {len(outs)} outputs, want {len(want)}"
        for (out_name, w), got in zip(want.items(), outs, strict=True):
            np.testing.assert_allclose(got.reshape(w.shape), w, rtol=1e-4, atol=1e-5,
                                       err_msg=f"{name} {out_name} at {dims}")
