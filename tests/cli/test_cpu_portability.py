"""CPU portability: the library records the features its kernels were compiled for and
refuses (ERR_CPU, naming the feature) on a CPU without one, never SIGILL; `--cpu` and
`--features` are checked against LLVM's names."""

from __future__ import annotations

import json
import platform

import numpy as np
import pytest
from click.testing import CliRunner

import onnxcc
from onnxcc.cli import main
from onnxcc.codegen.cpu.features import required_features
from onnxcc.errors import OnnxccError, RuntimeCallError
from onnxcc.testing import MODELS_DIR

MLP = str(MODELS_DIR / "mlp.onnx")
X86 = platform.machine() in ("x86_64", "AMD64")


def _run(*args, env=None):
    return CliRunner().invoke(main, list(args), env=env)


@pytest.fixture(scope="module")
def v3(tmp_path_factory):
    out = tmp_path_factory.mktemp("v3") / "mlp"
    r = _run("compile", MLP, "-o", str(out), "--cpu", "x86-64-v3", "--max-versions", "1")
    assert r.exit_code == 0, r.output
    return out


def test_required_features_follow_cpu_and_feature_string():
    t = "x86_64-unknown-linux-gnu"
    assert required_features(t, "x86-64-v3", "")[-5:] == ["avx", "avx2", "fma", "bmi", "bmi2"]
    assert "avx512f" in required_features(t, "znver4", "")
    assert not any(f.startswith("avx512") for f in required_features(t, "znver4", "-avx512f"))
    assert required_features(t, "x86-64", "+avx,+avx2") == ["avx", "avx2"]
    assert required_features("aarch64-unknown-linux-gnu", "neoverse-v1", "") == []


@pytest.mark.skipif(not X86, reason="the feature check is x86's")
def test_metadata_records_the_features_and_the_library_runs(v3):
    meta = json.loads((v3 / "mlp.json").read_text())
    assert meta["cpu_features"] == required_features(meta["triple"], "x86-64-v3", "")
    assert 'cpu_check()' in (v3 / "mlp_dispatch.c").read_text()
    x = np.ones((2, 64), np.float32)
    assert onnxcc.load(v3).run({"x": x})["y"].shape == (2, 10)


@pytest.mark.skipif(not X86, reason="the feature check is x86's")
def test_missing_feature_in_a_fresh_process(v3):
    import os
    import subprocess
    import sys

    code = ("import numpy as np, onnxcc, sys\n"
            "m = onnxcc.load(sys.argv[1])\n"
            "try:\n    m.run({'x': np.ones((2, 64), np.float32)})\n"
            "except Exception as e:\n    print(type(e).__name__, getattr(e, 'code', ''), e)\n")
    env = {**os.environ, "ONNXCC_CPU_DISABLE": "ssse3,avx2"}
    p = subprocess.run([sys.executable, "-c", code, str(v3)], capture_output=True, text=True, env=env,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    # the loader's class for codes that are not guard failures, with ERR_CPU's code
    assert p.stdout.startswith(f"{RuntimeCallError.__name__} 9 this CPU lacks ssse3"), p.stdout
    cli = "from onnxcc.cli import main; main()"
    p = subprocess.run([sys.executable, "-c", cli, "run", str(v3), "--random", "batch=2"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 1 and p.stderr.startswith("error: this CPU lacks ssse3"), p.stderr


def test_unknown_cpu_or_feature_is_a_usage_error_with_a_hint():
    r = _run("compile", MLP, "--cpu", "znver9", "--emit", "ir")
    assert r.exit_code == 2 and "--cpu znver9: not a CPU LLVM knows" in r.output
    assert "did you mean znver5 or znver4" in r.output
    r = _run("compile", MLP, "--features", "+avx2,+warp9", "--emit", "ir")
    assert r.exit_code == 2 and "--features: +warp9 not a feature LLVM knows" in r.output
    with pytest.raises(OnnxccError, match="not a CPU LLVM knows"):
        onnxcc.compile(MLP, "/nonexistent/never", cpu="skylakee")


def _host_has(feature: str) -> bool:
    from onnxcc.codegen.llvm.target import host_cpu

    return f"+{feature}" in host_cpu()[1].split(",")


@pytest.fixture(scope="module")
def multi(tmp_path_factory):
    out = tmp_path_factory.mktemp("multi") / "mlp"
    r = _run("compile", MLP, "-o", str(out), "--cpu-versions", "x86-64-v3,x86-64-v4", "--max-versions", "1")
    assert r.exit_code == 0, r.output
    assert "(2 versions)" in r.output
    return out


def _run_in_process(art, env: dict) -> tuple[str, np.ndarray]:
    import os
    import subprocess
    import sys

    code = ("import numpy as np, onnxcc, sys\n"
            "m = onnxcc.load(sys.argv[1])\n"
            "y = m.run({'x': np.linspace(-1, 1, 3 * 64, dtype=np.float32).reshape(3, 64)})['y']\n"
            "print(m.version_info(m.last_version)); np.save(sys.argv[2], y)\n")
    npy = art.parent / f"y{len(env)}{sorted(env.items())!s:.20}.npy".replace("/", "_").replace(" ", "")
    p = subprocess.run([sys.executable, "-c", code, str(art), str(npy)], capture_output=True, text=True,
                       env={**os.environ, **env}, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout, np.load(npy)


@pytest.mark.skipif(not X86 or not _host_has("avx512f"), reason="needs an x86-64-v4 host")
def test_multi_isa_picks_by_cpu_and_the_level_can_be_forced(multi):
    from onnxcc.testing import ort_run

    meta = json.loads((multi / "mlp.json").read_text())
    assert [v["cpu"] for v in meta["versions"]] == ["x86-64-v4", "x86-64-v3"]
    assert "avx512f" in meta["cpu_levels"]["x86-64-v4"] and "avx512f" not in meta["cpu_features"]
    x = np.linspace(-1, 1, 3 * 64, dtype=np.float32).reshape(3, 64)
    want = ort_run(MLP, {"x": x})["y"]
    info, y = _run_in_process(multi, {})
    assert "cpu x86-64-v4" in info
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)
    for env in ({"ONNXCC_CPU_LEVEL": "x86-64-v3"}, {"ONNXCC_CPU_DISABLE": "avx512bw"}):
        info, y = _run_in_process(multi, env)
        assert "cpu x86-64-v3" in info, (env, info)
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)


def test_cpu_versions_flag_errors():
    r = _run("compile", MLP, "--cpu-versions", "x86-64-v3,znver9")
    assert r.exit_code == 2 and "--cpu-versions znver9: not a CPU LLVM knows" in r.output
    r = _run("compile", MLP, "--cpu-versions", "znver1,znver2", "-o", "/nonexistent/x")
    assert r.exit_code == 1 and "would never run" in r.output
