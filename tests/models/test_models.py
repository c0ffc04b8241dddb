"""The sample models in models/: valid ONNX, and onnxruntime runs them at several settings of
their symbolic dims with finite outputs of the declared (symbolic) shape."""

import subprocess
import sys

import numpy as np
import onnx
import pytest

from onnxcc.testing import MODELS_DIR, SAMPLE_MODELS, ort_run, random_inputs

CASES = [(name, dims) for name, settings in SAMPLE_MODELS.items() for dims in settings]


def _case_id(case):
    name, dims = case
    return name + "-" + "-".join(f"{k}{v}" for k, v in dims.items())


@pytest.mark.parametrize("name", sorted(SAMPLE_MODELS))
def test_checker(name):
    onnx.checker.check_model(onnx.load(str(MODELS_DIR / f"{name}.onnx")), full_check=True)


@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
def test_runs_with_declared_shapes(case):
    name, dims = case
    path = MODELS_DIR / f"{name}.onnx"
    model = onnx.load(str(path))
    outs = ort_run(path, random_inputs(model, dims, seed=1))
    # Output dims named by an input symbol must match it; a symbol only outputs use (the loop's
    # "iters") is bound on first sight and must then be consistent.
    bound = dict(dims)
    for vi in model.graph.output:
        got = outs[vi.name]
        assert np.all(np.isfinite(got)), f"{name}.{vi.name}: non-finite values"
        declared = vi.type.tensor_type.shape.dim
        assert got.ndim == len(declared), f"{name}.{vi.name}: rank {got.ndim} != {len(declared)}"
        for axis, (n, d) in enumerate(zip(got.shape, declared)):
            want = d.dim_value if d.HasField("dim_value") else bound.setdefault(d.dim_param, n)
            assert n == want, f"{name}.{vi.name} axis {axis}: {n} != {d.dim_param or d.dim_value} ({want})"
    if name == "loop_model":
        assert 1 <= bound["iters"] <= 10


def test_build_reproduces_checked_in_files(tmp_path):
    # The .onnx files are generated: rebuilding must give byte-identical files.
    cmd = [sys.executable, str(MODELS_DIR / "build.py"), str(tmp_path)]
    subprocess.run(cmd, check=True, capture_output=True)
    for name in SAMPLE_MODELS:
        assert (tmp_path / f"{name}.onnx").read_bytes() == (MODELS_DIR / f"{name}.onnx").read_bytes(), name
