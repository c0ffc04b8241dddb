"""Every sample model compiled once to libNAME.so and run through the Python loader at each
of its symbol settings, compared with onnxruntime (rtol 1e-4, atol 1e-5)."""

from __future__ import annotations

import numpy as np
import pytest

import onnxcc
from onnxcc.errors import GuardError
from onnxcc.testing import MODELS_DIR, SAMPLE_MODELS, ort_run, random_inputs

NATIVE = ["mlp", "gelu_layernorm", "transformer", "convnet"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    cache = {}

    def get(name):
        if name not in cache:
            out = tmp_path_factory.mktemp(name)
            onnxcc.compile(MODELS_DIR / f"{name}.onnx", out)
            cache[name] = onnxcc.load(out)
        return cache[name]

    return get


@pytest.mark.parametrize("name", NATIVE)
def test_matches_onnxruntime_at_every_setting(built, name):
    model = built(name)
    for k, dims in enumerate(SAMPLE_MODELS[name]):
        feeds = random_inputs(MODELS_DIR / f"{name}.onnx", dims, seed=k)
        want = ort_run(MODELS_DIR / f"{name}.onnx", feeds)
        got = model.run(feeds)
        assert set(got) == set(want)
        for out, w in want.items():
            np.testing.assert_allclose(got[out], w, rtol=1e-4, atol=1e-5, err_msg=f"{name} {out} at {dims}")
        assert 0 <= model.last_version < model.num_versions


def test_one_library_serves_many_shapes_without_recompiling(built, tmp_path):
    """The same loaded library runs seq values it has never seen: no compile in between."""
    model = built("transformer")
    lib_mtime = model.path.stat().st_mtime_ns
    for seq in (5, 33, 100):
        feeds = random_inputs(MODELS_DIR / "transformer.onnx", {"batch": 2, "seq": seq}, seed=seq)
        got = model.run(feeds)["y"]
        want = ort_run(MODELS_DIR / "transformer.onnx", feeds)["y"]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert model.path.stat().st_mtime_ns == lib_mtime


def test_wrong_rank_is_a_guard_error_naming_the_input(built):
    model = built("mlp")
    with pytest.raises(GuardError, match=r'input "x"'):
        model.run({"x": np.zeros((2, 64, 1), np.float32)})


def test_wrong_static_dim_names_input_dim_and_values(built):
    model = built("mlp")
    with pytest.raises(GuardError, match=r'input "x" dim 1: expected 64.*got 63'):
        model.run({"x": np.zeros((2, 63), np.float32)})


def test_stacked_plan_when_the_proof_budget_is_spent(tmp_path, monkeypatch):
    # a plan that runs out of proof time falls back to one region per temp: same results,
    # and NAME.json says the arena was not searched
    import json

    from onnxcc.kernel import plan_memory

    monkeypatch.setattr(plan_memory, "PROOF_SECONDS", -1.0)
    onnxcc.compile(MODELS_DIR / "convnet.onnx", tmp_path / "art", name="convnet")
    model = onnxcc.load(tmp_path / "art")
    for k, dims in enumerate(SAMPLE_MODELS["convnet"]):
        feeds = random_inputs(MODELS_DIR / "convnet.onnx", dims, seed=k)
        want = ort_run(MODELS_DIR / "convnet.onnx", feeds)
        for out, got in model.run(feeds).items():
            np.testing.assert_allclose(got, want[out], rtol=1e-4, atol=1e-5, err_msg=f"convnet {out} at {dims}")
    meta = json.loads((tmp_path / "art" / "convnet.json").read_text())
    assert all(v["info"].get("plan_proofs_cut") for v in meta["versions"]), meta["versions"][0]
