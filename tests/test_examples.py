"""Every example under examples/ runs as its README says (a tool it needs that is absent: skip).

The numpy example builds the mlp artifact the C examples then link against (one compile); the
JIT session and the bucketed build compile their own."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EX = ROOT / "examples"


def _py(script: str, *args, env=None) -> str:
    p = subprocess.run([sys.executable, str(EX / "python" / script), *map(str, args)], capture_output=True,
                       text=True, timeout=600, env={**os.environ, **(env or {})})
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    out = tmp_path_factory.mktemp("ex") / "mlp"
    text = _py("run_numpy.py", out)
    return out, text


def test_run_numpy(mlp):
    _, text = mlp
    assert "batch 4: (4, 10) rows sum to [1. 1. 1. 1.]" in text
    assert "batch 1 into a preallocated buffer: version 0 (exact" in text
    assert 'float64: input "x": expected dtype f32' in text and "cast=True: float32" in text


def _check_demo(exe: Path, cwd: Path) -> None:
    p = subprocess.run([str(exe), "3"], capture_output=True, text=True, timeout=60, cwd=cwd)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "input x: rank 2, dims batch 64" in p.stdout
    assert "y: [3, 10], row 0 sums to 1.0000" in p.stdout
    assert "a wrong dim: code 4 (MLP_ERR_SHAPE is 4): input \"x\" dim 1: expected 64, got 63" in p.stdout


@pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake")
def test_c_with_cmake(mlp, tmp_path):
    art, _ = mlp
    build = tmp_path / "build"
    for cmd in (["cmake", "-S", str(EX / "c"), "-B", str(build), f"-Dmlp_DIR={art}"],
                ["cmake", "--build", str(build)]):
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stdout + p.stderr
    _check_demo(build / "mlp_demo", tmp_path)


@pytest.mark.skipif(shutil.which("make") is None or shutil.which("pkg-config") is None,
                    reason="needs make and pkg-config")
def test_c_with_make(mlp, tmp_path):
    art, _ = mlp
    src = tmp_path / "c"
    shutil.copytree(EX / "c", src)
    p = subprocess.run(["make", "-C", str(src), f"ARTIFACT={art}"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    _check_demo(src / "mlp_demo", tmp_path)


def test_jit_session(tmp_path):
    text = _py("jit_session.py", tmp_path / "cache")
    assert text.startswith("6 calls: ") and "specialised [" in text and "on a specialised version" in text
    assert "1 on a specialised" in text or "2 on a specialised" in text


def test_bucketed_from_trace(tmp_path):
    text = _py("bucketed_from_trace.py", tmp_path / "b")
    assert "auto buckets batch = " in text
    assert "batch 3: (3, 10) by version 0 (bucket" in text
    assert "batch 100: (100, 10) by version 2 (generic" in text
