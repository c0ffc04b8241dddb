"""One transformer library with an exact `batch == 1` version, a `seq % 16 == 0` version and
the generic one: calls that hit each version match onnxruntime from Python and from C, and
`last_version` says which ran."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

import onnxcc
from onnxcc.testing import MODELS_DIR, ort_run, random_inputs
from onnxcc.testing_c import build_c_runner, run_c

MODEL = MODELS_DIR / "transformer.onnx"
# (batch, seq) -> the version that must serve it
CALLS = [((1, 7), 0), ((1, 32), 0), ((2, 32), 1), ((3, 48), 1), ((2, 7), 2), ((3, 1), 2)]


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    out = tmp_path_factory.mktemp("versions")
    onnxcc.compile(MODEL, out, specialize={"batch": [1]}, divisible=16)
    return out


def test_versions_are_ordered_most_specialised_first(artifact):
    m = onnxcc.load(artifact)
    assert m.num_versions == 3
    infos = [m.version_info(i) for i in range(3)]
    assert "batch == 1" in infos[0] and "seq % 16 == 0" in infos[1] and "guard true" in infos[2]


@pytest.mark.parametrize("shape,version", CALLS)
def test_each_version_from_python(artifact, shape, version):
    m = onnxcc.load(artifact)
    feeds = random_inputs(MODEL, {"batch": shape[0], "seq": shape[1]}, seed=shape[1])
    got = m.run(feeds)["y"]
    assert m.last_version == version
    np.testing.assert_allclose(got, ort_run(MODEL, feeds)["y"], rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_each_version_from_c(artifact, tmp_path):
    exe = build_c_runner(artifact)
    outputs = onnxcc.load(artifact).outputs
    for shape, version in CALLS:
        feeds = random_inputs(MODEL, {"batch": shape[0], "seq": shape[1]}, seed=shape[1])
        line, outs = run_c(exe, outputs, [feeds["x"]], tmp_path)
        assert line == f"version={version}", (shape, line)
        want = ort_run(MODEL, feeds)["y"]
        np.testing.assert_allclose(outs[0].reshape(want.shape), want, rtol=1e-4, atol=1e-5)


def test_guard_failure_from_c_names_input_dim_and_values(artifact, tmp_path):
    exe = build_c_runner(artifact)
    bad = np.zeros((2, 5, 255), np.float32)
    line, outs = run_c(exe, onnxcc.load(artifact).outputs, [bad], tmp_path)
    assert outs == [] and line.startswith("error rc=")
    assert 'input "x" dim 2: expected 256' in line and "got 255" in line
