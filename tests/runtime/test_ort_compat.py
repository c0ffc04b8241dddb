"""`onnxcc.InferenceSession`: the onnxruntime calling convention over a compiled model."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import onnxcc
from onnxcc.errors import OnnxccError
from onnxcc.testing import MODELS_DIR

TRANSFORMER = str(MODELS_DIR / "transformer.onnx")


def test_switching_from_onnxruntime_is_one_line(tmp_path):
    ref = ort.InferenceSession(TRANSFORMER, providers=["CPUExecutionProvider"])
    sess = onnxcc.InferenceSession(TRANSFORMER, providers=["CPUExecutionProvider"], cache_dir=tmp_path)
    assert [i.name for i in sess.get_inputs()] == [i.name for i in ref.get_inputs()]
    assert [o.name for o in sess.get_outputs()] == [o.name for o in ref.get_outputs()]
    assert [i.type for i in sess.get_inputs()] == [i.type for i in ref.get_inputs()]
    assert sess.get_inputs()[0].shape == ref.get_inputs()[0].shape  # ['batch', 'seq', 256]-style
    rng = np.random.default_rng(0)
    name = ref.get_inputs()[0].name
    for batch, seq in ((1, 5), (2, 33)):
        feeds = {name: rng.standard_normal((batch, seq, ref.get_inputs()[0].shape[2])).astype(np.float32)}
        got, want = sess.run(None, feeds), ref.run(None, feeds)
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    out = ref.get_outputs()[0].name
    assert len(sess.run([out], feeds)) == 1
    with pytest.raises(OnnxccError, match="no output 'nope'"):
        sess.run(["nope"], feeds)


def test_second_session_is_served_from_the_cache(tmp_path):
    a = onnxcc.InferenceSession(TRANSFORMER, cache_dir=tmp_path)
    b = onnxcc.InferenceSession(TRANSFORMER, cache_dir=tmp_path)
    assert not a.cached and b.cached and a.artifact_dir == b.artifact_dir


def test_bad_arguments_are_one_line_errors(tmp_path):
    with pytest.raises(OnnxccError, match="no such file"):
        onnxcc.InferenceSession(tmp_path / "missing.onnx")
    with pytest.raises(OnnxccError, match="unexpected keyword"):
        onnxcc.InferenceSession(TRANSFORMER, cache_dir=tmp_path, not_an_option=1)
