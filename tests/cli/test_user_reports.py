"""Problems a new user reported (issue 18): `onnxcc ir -o FILE.onnxir` writes a file that compiles
on its own; IR text without its weights, trace values outside a dim's range and versions dropped
by --max-versions are each said in one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
from click.testing import CliRunner

import onnxcc
from onnxcc.cli import main

MODELS = Path(__file__).resolve().parents[2] / "models"


def test_ir_written_to_a_file_compiles_and_matches(tmp_path):
    ir_file = tmp_path / "mlp.onnxir"
    r = CliRunner().invoke(main, ["ir", str(MODELS / "mlp.onnx"), "-o", str(ir_file)])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "mlp.weights.npz").is_file()
    assert 'weights_file = "mlp.weights.npz"' in ir_file.read_text().splitlines()[0]
    r = CliRunner().invoke(main, ["compile", str(ir_file), "-o", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    x = np.random.default_rng(0).standard_normal((3, 64)).astype(np.float32)
    got = onnxcc.load(tmp_path / "out").run({"x": x})["y"]
    want = ort.InferenceSession(str(MODELS / "mlp.onnx")).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_ir_text_without_its_weights_is_a_user_error(tmp_path):
    r = CliRunner().invoke(main, ["ir", str(MODELS / "mlp.onnx")])
    assert r.exit_code == 0
    ir_file = tmp_path / "mlp.onnxir"
    ir_file.write_text(r.output)  # stdout: the text alone
    r = CliRunner().invoke(main, ["compile", str(ir_file), "-o", str(tmp_path / "out")])
    assert r.exit_code == 1, r.output
    assert "weight @fc1.weight has no data" in r.output and "onnxcc ir MODEL -o FILE.onnxir" in r.output
    assert "internal error" not in r.output and "Traceback" not in r.output


def test_changed_weights_change_the_cache_key(tmp_path):
    from onnxcc.compiler.cache_key import model_digest

    ir_file = tmp_path / "mlp.onnxir"
    assert CliRunner().invoke(main, ["ir", str(MODELS / "mlp.onnx"), "-o", str(ir_file)]).exit_code == 0
    before = model_digest(ir_file)
    w = dict(np.load(tmp_path / "mlp.weights.npz"))
    w["fc1.weight"] = w["fc1.weight"] + 1
    np.savez(tmp_path / "mlp.weights.npz", **w)
    assert model_digest(ir_file) != before


def test_trace_values_outside_a_dims_range_are_refused(tmp_path):
    trace = tmp_path / "trace.txt"
    trace.write_text("17\n5000000000\n")
    r = CliRunner().invoke(main, ["simulate", str(MODELS / "transformer.onnx"), "--trace", str(trace),
                                  "--bucket", "seq=auto"])
    assert r.exit_code == 1, r.output
    assert "--trace seq=5000000000: outside the range of a dim, [1, 2147483647]" in r.output
    assert "internal error" not in r.output


def test_versions_dropped_by_max_versions_are_named(tmp_path):
    r = CliRunner().invoke(main, ["compile", str(MODELS / "mlp.onnx"), "-o", str(tmp_path / "o"),
                                  "--specialize", "batch=1,2,3", "--max-versions", "2"])
    assert r.exit_code == 0, r.output
    assert "warning: version batch2: over max-versions=2" in r.output
    assert "warning: version batch3: over max-versions=2" in r.output


def test_a_bare_array_is_the_one_input_and_inspect_of_a_model_says_what_to_do(tmp_path):
    out = tmp_path / "o"
    assert CliRunner().invoke(main, ["compile", str(MODELS / "mlp.onnx"), "-o", str(out)]).exit_code == 0
    m = onnxcc.load(out)
    x = np.ones((2, 64), np.float32)
    np.testing.assert_array_equal(m.run(x)["y"], m.run({"x": x})["y"])
    r = CliRunner().invoke(main, ["inspect", str(MODELS / "mlp.onnx")])
    assert r.exit_code == 1
    assert "inspect reads a compiled artifact" in r.output and "utf-8" not in r.output
