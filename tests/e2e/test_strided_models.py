"""The sample models with strided inputs (issue 15, item 5): a channels-last view of the
convnet's NCHW input and a transposed view of the transformer's, through onnxcc.load().run,
against onnxruntime on the compact array (float32; rtol 1e-4, atol 1e-4, the tolerances of
the other sample-model tests), and the same numbers as the compact call (exactly: the
dispatcher compacts the view, then the same version runs)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

import onnxcc

MODELS = Path(__file__).parents[2] / "models"


@pytest.mark.parametrize("name, make", [
    # NHWC memory seen as NCHW: what a channels-last producer hands over (1.5 MiB: the
    # dispatcher compacts it on the thread pool)
    ("convnet", lambda rng: np.moveaxis(rng.standard_normal((2, 256, 256, 3)).astype(np.float32), 3, 1)),
    # [seq, batch, 256] memory seen as [batch, seq, 256] (a longer compile: slow)
    pytest.param("transformer", lambda rng: rng.standard_normal((7, 2, 256)).astype(np.float32).transpose(1, 0, 2),
                 marks=pytest.mark.slow),
])
def test_strided_view_matches_compact_and_onnxruntime(tmp_path, name, make):
    x = make(np.random.default_rng(1))
    assert not x.flags.c_contiguous
    onnxcc.compile(MODELS / f"{name}.onnx", tmp_path / name, name=name)
    m = onnxcc.load(tmp_path / name)
    assert m.meta["strided_inputs"] == ["x"]
    got = m.run({"x": x})
    compact = m.run({"x": np.ascontiguousarray(x)})
    sess = ort.InferenceSession(str(MODELS / f"{name}.onnx"), providers=["CPUExecutionProvider"])
    want = sess.run(None, {"x": np.ascontiguousarray(x)})
    for k, (key, a) in enumerate(got.items()):
        np.testing.assert_array_equal(a, compact[key])
        np.testing.assert_allclose(a, want[k], rtol=1e-4, atol=1e-4)
