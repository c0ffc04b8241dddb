"""What the tests of parallel computes' splits share (test_parallel_counters.py,
test_parallel_rows.py): their model compiled once per module (`lib_fixture`), and a check
script run on the library in a child process per thread count (`assert_child_ok`): the
runtime pool's size is fixed at its first use in a process."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest


def lib_fixture(name: str, write_model: Callable[[Path], object]):
    """A module-scoped fixture `built` -> the library directory of the model `write_model(path)`
    saves, compiled with the compiler's defaults."""

    @pytest.fixture(scope="module")
    def built(tmp_path_factory):
        import onnxcc

        d = tmp_path_factory.mktemp(name)
        write_model(d / "m.onnx")
        onnxcc.compile(d / "m.onnx", d / "lib")
        return d / "lib"

    return built


def assert_child_ok(script: str, lib: Path, threads: int) -> None:
    """`script` (the library's directory its sys.argv[1]) run in a child with
    ONNXCC_NUM_THREADS=threads exits 0 having printed just "ok"."""
    env = {**os.environ, "ONNXCC_NUM_THREADS": str(threads)}
    r = subprocess.run([sys.executable, "-c", script, str(lib)], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr
