"""`onnxcc compile`, `inspect` and `run`: artifacts, stop points, the cache and exit codes."""

from __future__ import annotations

import numpy as np
import onnx
from click.testing import CliRunner
from onnx import TensorProto, helper

from onnxcc.cli import main
from onnxcc.testing import MODELS_DIR, ort_run

MLP = str(MODELS_DIR / "mlp.onnx")


def _run(*args, env=None):
    return CliRunner().invoke(main, list(args), env=env)


def test_compile_writes_library_header_metadata_and_inspect_reads_them(tmp_path):
    r = _run("compile", MLP, "-o", str(tmp_path / "a"), "--specialize", "batch=1,4", "--dim", "batch=1:512")
    assert r.exit_code == 0, r.output
    for f in ("libmlp.so", "mlp.h", "mlp.json"):
        assert (tmp_path / "a" / f).is_file()
    r = _run("inspect", str(tmp_path / "a"))
    assert r.exit_code == 0, r.output
    assert "input  x: f32[batch, 64]" in r.output
    assert "sym batch in [1, 512]" in r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip().startswith("version")]
    assert len(lines) == 3
    assert "guard batch == 1" in lines[0] and "guard batch == 4" in lines[1] and "[generic]" in lines[2]
    assert "workspace" in r.output and "arena" in r.output and "peak live" in r.output


def test_emit_stops_early_and_prints_the_stage(tmp_path):
    r = _run("compile", MLP, "--emit", "ir")
    assert r.exit_code == 0 and "func @main.generic(%x: f32[batch, 64])" in r.output
    r = _run("compile", MLP, "--emit", "kernel")
    assert r.exit_code == 0 and "sum(" in r.output
    r = _run("compile", MLP, "--emit", "llvm")
    assert r.exit_code == 0 and "define i32 @\"mlp_v0\"" in r.output


def test_run_with_npz_matches_onnxruntime_and_reuses_the_cache(tmp_path):
    x = np.random.default_rng(0).standard_normal((5, 64)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    env = {"ONNXCC_CACHE_DIR": str(tmp_path / "cache")}
    args = ("run", MLP, "--inputs", str(tmp_path / "in.npz"), "--outputs", str(tmp_path / "out.npz"))
    r = _run(*args, env=env)
    assert r.exit_code == 0, r.output
    assert "compiled" in r.stderr
    got = np.load(tmp_path / "out.npz")["y"]
    np.testing.assert_allclose(got, ort_run(MLP, {"x": x})["y"], rtol=1e-4, atol=1e-5)
    r = _run(*args, env=env)
    assert r.exit_code == 0 and "cached" in r.stderr


def test_run_unsupported_op_exits_3_naming_op_and_node(tmp_path):
    g = helper.make_graph([helper.make_node("FancyOp", ["x"], ["y"], name="my_node", domain="com.example")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N"])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    onnx.save(m, str(tmp_path / "m.onnx"))
    np.savez(tmp_path / "in.npz", x=np.ones(3, np.float32))
    r = _run("run", str(tmp_path / "m.onnx"), "--inputs", str(tmp_path / "in.npz"),
             env={"ONNXCC_CACHE_DIR": str(tmp_path / "c")})
    assert r.exit_code == 3
    assert "FancyOp" in r.stderr and "com.example" in r.stderr and "my_node" in r.stderr
    assert "Traceback" not in r.stderr


def test_run_user_errors_exit_1_with_one_line(tmp_path):
    env = {"ONNXCC_CACHE_DIR": str(tmp_path / "c")}
    (tmp_path / "bad.npz").write_bytes(b"not an npz")
    r = _run("run", MLP, "--inputs", str(tmp_path / "bad.npz"), env=env)
    assert r.exit_code == 1 and r.stderr.startswith("error: ") and len(r.stderr.strip().splitlines()) == 1
    np.savez(tmp_path / "wrong.npz", x=np.ones((2, 63), np.float32))
    r = _run("run", MLP, "--inputs", str(tmp_path / "wrong.npz"), env=env)
    assert r.exit_code == 1 and 'input "x" dim 1: expected 64' in r.stderr
    r = _run("run", str(tmp_path / "missing.onnx"), "--random", "batch=2", env=env)
    assert r.exit_code == 1 and "no such file" in r.stderr
    r = _run("compile", MLP, "--dim", "nosuch=1:4", "-o", str(tmp_path / "x"))
    assert r.exit_code == 1 and "no symbol 'nosuch'" in r.stderr


def test_run_dir_runs_the_built_artifact_without_compiling(tmp_path):
    out = tmp_path / "mlp"
    assert _run("compile", MLP, "-o", str(out)).exit_code == 0
    x = np.random.default_rng(1).standard_normal((3, 64)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)  # one input: an .npy is enough
    env = {"ONNXCC_CACHE_DIR": str(tmp_path / "cache")}
    r = _run("run", str(out), "--inputs", str(tmp_path / "x.npy"), "--outputs", str(tmp_path / "y.npz"), env=env)
    assert r.exit_code == 0, r.output
    assert f"artifact {out}" in r.stderr
    assert not (tmp_path / "cache").exists()  # nothing was compiled
    np.testing.assert_allclose(np.load(tmp_path / "y.npz")["y"], ort_run(MLP, {"x": x})["y"], rtol=1e-4, atol=1e-5)
    r = _run("run", str(tmp_path), "--random", "batch=2")
    assert r.exit_code == 1 and "expected one artifact" in r.stderr


def test_run_model_prints_the_cached_build_directory(tmp_path):
    env = {"ONNXCC_CACHE_DIR": str(tmp_path / "cache")}
    r = _run("run", MLP, "--random", "batch=2", env=env)
    assert r.exit_code == 0, r.output
    where = r.stderr.split("compiled build ", 1)[1].split(";", 1)[0]
    assert where.startswith(str(tmp_path / "cache"))
    assert _run("inspect", where).exit_code == 0


def test_run_check_exits_4_on_a_mismatch_beyond_the_tolerance(tmp_path):
    env = {"ONNXCC_CACHE_DIR": str(tmp_path / "cache")}
    r = _run("run", MLP, "--random", "batch=3", "--check", env=env)
    assert r.exit_code == 0 and "(ok: rtol" in r.output
    # a tolerance no float computation meets: an honest check must fail
    r = _run("run", MLP, "--random", "batch=3", "--check", "--rtol", "0", "--atol", "0", env=env)
    diffs = [line for line in r.output.splitlines() if "max abs diff" in line]
    if all(" 0 (" in line for line in diffs):  # bit-identical to onnxruntime: nothing to detect
        assert r.exit_code == 0
    else:
        assert r.exit_code == 4 and "MISMATCH" in r.output


def test_run_check_when_onnxruntime_cannot_run_the_model_is_a_user_error(tmp_path, monkeypatch):
    # onnxruntime refusing a model onnxcc runs (its opset-23 Attention rejects masks torch
    # exports) leaves nothing to compare with: a clear message and exit 1, not an internal error
    import onnxcc.testing

    def refuse(*args, **kwargs):
        raise RuntimeError("[ONNXRuntimeError] : 1 : FAIL : Attention node: mask shape\nstack...")

    monkeypatch.setattr(onnxcc.testing, "ort_run", refuse)
    r = _run("run", MLP, "--random", "batch=3", "--check", env={"ONNXCC_CACHE_DIR": str(tmp_path / "cache")})
    assert r.exit_code == 1, r.output
    assert "onnxruntime could not run mlp.onnx" in r.output and "mask shape" in r.output
    assert "stack" not in r.output and "mean" in r.output  # onnxcc's own outputs were printed


def test_run_random_refuses_an_unknown_symbol_and_a_bad_npy(tmp_path):
    env = {"ONNXCC_CACHE_DIR": str(tmp_path / "cache")}
    r = _run("run", MLP, "--random", "batch=2,foo=3", env=env)
    assert r.exit_code == 1 and "no symbol foo" in r.stderr and "batch" in r.stderr
    r = _run("run", MLP, "--random", "seqq=2", env=env)
    assert r.exit_code == 1 and "no symbol seqq" in r.stderr


def test_flag_values_are_validated(tmp_path):
    o = str(tmp_path / "x")
    for flags in (["--max-versions", "0"], ["--divisible", "-4"], ["--max-buckets", "0"]):
        r = _run("compile", MLP, "-o", o, *flags)
        assert r.exit_code == 2 and "Invalid value" in r.output, flags
    r = _run("compile", MLP, "-o", o, "--dim", "batch=1:64", "--bucket", "batch=32,3000")
    assert r.exit_code == 1 and "--bucket batch=3000: outside --dim batch=1:64" in r.stderr
    r = _run("compile", MLP, "-o", o, "--dim", "batch=8:4")
    assert r.exit_code == 1 and "LO <= HI" in r.stderr


def test_duplicate_specialize_values_build_one_version(tmp_path):
    from onnxcc.cli.options import parse_specs

    assert parse_specs(["batch=1,1", "batch=4,1"]) == {"batch": [1, 4]}
    o = tmp_path / "x"
    assert _run("compile", MLP, "-o", str(o), "--specialize", "batch=1,1", "--no-specialize-one").exit_code == 0
    r = _run("inspect", str(o))
    assert r.output.count("batch == 1") == 1, r.output
