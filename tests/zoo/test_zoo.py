"""The model zoo (tests/zoo/zoo.json, built by models/zoo/build_zoo.py): graphs nobody on the
team wrote, exported by both torch exporters at several opsets, and pretrained models that
PyPI packages ship. Each is run the way a user runs it, `onnxcc run MODEL --inputs in.npz
--outputs out.npz`, at three dim settings: the first call compiles (one library serves every
shape), the others are served from the cache. onnxruntime on the same inputs is the oracle
(rtol 1e-3, atol 1e-4: real models chain hundreds of ops whose rounding differs).

What is expected of each model is in tests/zoo/expected.json: "pass", or the start of the
one-line refusal it gives today. Both are checked strictly: a model that starts to pass (or
fails differently) fails its test until expected.json says so, so nothing hides there. A
model marked "unmeasured" (its compile did not finish inside the session that added it: the
big torchvision exports take minutes, see the compile-time issue) must still never crash or
give a wrong result: it passes or is refused cleanly.
The whole zoo runs under `-m slow`; the models marked default_run in the manifest run always.

An entry may name `oracle_opset`: onnxruntime refuses that file as it is (t5_encoder_ts11: the
TorchScript exporter wrote an int64 `Min` at opset 11, which only Min-12 allows), so the oracle
runs a copy whose ai.onnx opset import is raised to that version. The entry's `oracle_note`
says why the raise is exact for that graph; onnxcc always runs the file as it is.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

from onnxcc.cli import main
from onnxcc.testing import ort_run

HERE = Path(__file__).parent
MANIFEST = json.loads((HERE / "zoo.json").read_text())["models"]
EXPECTED = json.loads((HERE / "expected.json").read_text())
RTOL, ATOL = 1e-3, 1e-4


def make_inputs(entry: dict, dims: dict, seed: int) -> dict[str, np.ndarray]:
    """Inputs for one dim setting, as the manifest describes them (seeded)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, spec in entry["inputs"].items():
        shape = [dims[d] if isinstance(d, str) else d for d in spec["shape"]]
        dt = np.dtype(spec["dtype"])
        kind = spec["fill"][0]
        if kind == "int":
            feeds[name] = rng.integers(spec["fill"][1], spec["fill"][2], size=shape).astype(dt)
        elif kind == "ones":
            feeds[name] = np.ones(shape, dt)
        elif kind == "value":
            feeds[name] = np.full(shape, spec["fill"][1], dt)
        else:
            feeds[name] = rng.standard_normal(shape).astype(dt)
    return feeds


def reference(entry: dict, model: str, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """onnxruntime's outputs for the zoo entry (see `oracle_opset` above)."""
    if "oracle_opset" not in entry:
        return ort_run(model, feeds)
    m = onnx.load(model)
    for imp in m.opset_import:
        if imp.domain in ("", "ai.onnx"):
            imp.version = entry["oracle_opset"]
    return ort_run(m, feeds)


def _params():
    out = []
    for e in MANIFEST:
        marks = [] if e.get("default_run") else [pytest.mark.slow]
        out.append(pytest.param(e, id=e["name"], marks=marks))
    return out


def test_manifest_and_expectations_agree():
    names = {e["name"] for e in MANIFEST}
    assert names == set(EXPECTED), (f"missing in expected.json: {sorted(names - set(EXPECTED))}; "
                                    f"stale there: {sorted(set(EXPECTED) - names)}")
    for e in MANIFEST:
        assert (HERE / e["file"]).is_file(), e["file"]
        assert len(e["dims"]) == 3, e["name"]
    assert len(MANIFEST) >= 40


@pytest.mark.parametrize("entry", _params())
def test_zoo_model_through_onnxcc_run(entry, tmp_path):
    model = str(HERE / entry["file"])
    expected = EXPECTED[entry["name"]]
    env = {"ONNXCC_CACHE_DIR": str(tmp_path / "cache")}
    onnx_model = onnx.load(model)
    outputs = [o.name for o in onnx_model.graph.output]
    for k, dims in enumerate(entry["dims"]):
        feeds = make_inputs(entry, dims, seed=k)
        np.savez(tmp_path / "in.npz", **feeds)
        r = CliRunner().invoke(main, ["run", model, "--inputs", str(tmp_path / "in.npz"),
                                      "--outputs", str(tmp_path / "out.npz")], env=env)
        if expected == "unmeasured" and r.exit_code in (1, 3) and r.stderr.startswith("error: "):
            return  # a clean refusal; a crash or a wrong result still fails below
        if expected not in ("pass", "unmeasured"):
            assert r.exit_code in (1, 3) and r.stderr.startswith("error: "), \
                f"{entry['name']}: expected a clean refusal, got exit {r.exit_code}: {r.stderr[-500:]}"
            assert expected in r.stderr, (f"{entry['name']}: refused differently than expected.json says "
                                          f"(or now passes): {r.stderr.strip()[:400]}")
            return
        assert r.exit_code == 0, f"{entry['name']} at {dims}: {r.stderr[-800:]}"
        got = np.load(tmp_path / "out.npz")
        want = reference(entry, model, feeds)
        assert sorted(got.files) == sorted(outputs)
        for name in outputs:
            assert got[name].shape == want[name].shape, (name, dims)
            np.testing.assert_allclose(got[name], want[name], rtol=RTOL, atol=ATOL,
                                       err_msg=f"{entry['name']} output {name} at {dims}")


#: zoo models also called from C (compiled with `onnxcc compile`, run by a C program)
FROM_C = ("gpt2_ts13", "silero_vad_16k_sequence")


@pytest.mark.parametrize("name", FROM_C)
def test_zoo_model_from_c(name, tmp_path):
    import shutil

    if shutil.which("cc") is None:
        pytest.fail("the zoo's C tests need a C compiler (cc); the CI machine has one")
    from onnxcc.testing_c import build_c_runner, run_c

    entry = next(e for e in MANIFEST if e["name"] == name)
    assert EXPECTED[name] == "pass", f"{name} is a C test model: it must pass"
    model = str(HERE / entry["file"])
    r = CliRunner().invoke(main, ["compile", model, "-o", str(tmp_path / "art"), "--name", "zoo"])
    assert r.exit_code == 0, r.stderr
    exe = build_c_runner(tmp_path / "art")
    meta = json.loads((tmp_path / "art" / "zoo.json").read_text())
    for k, dims in enumerate(entry["dims"]):
        feeds = make_inputs(entry, dims, seed=k)
        line, outs = run_c(exe, meta["outputs"], list(feeds.values()), tmp_path)
        assert line.startswith("version="), line
        want = reference(entry, model, feeds)
        assert len(outs) == len(want)
        for (out_name, w), got in zip(want.items(), outs, strict=True):
            np.testing.assert_allclose(got.reshape(w.shape), w, rtol=RTOL, atol=ATOL,
                                       err_msg=f"{name} {out_name} at {dims} (from C)")
