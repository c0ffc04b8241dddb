"""A while loop whose state outgrows its capacity, from C (tests/runtime/loop_capacity.c),
library and caller built with -fsanitize=address where the compiler has it:

- NAME_run_alloc re-runs with the capacity doubled until the run fits (4 -> 8 -> 16 -> 32,
  limit 64) and returns the true shapes, the values onnxruntime gives (exact: small integers
  in f32); the failed attempts' outputs and the results are freed by the deleters, no leak
  (LeakSanitizer; skipping the deleters is reported: the negative control);
- past the limit it fails naming the loop node, the value and the capacity reached, and
  allocates nothing;
- the caller-allocated NAME_run runs while the state fits the outputs it was given and
  otherwise says to use NAME_run_alloc, and canaries after its outputs prove that a state
  outgrowing them is never written past their end (the kernel checks the new extent before
  the write; the library's kernels are not instrumented by ASan, the canaries are the check).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

import onnxcc
from onnxcc.testing import ort_run

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "e2e"))
from sanitizers import ASAN, asan_available, lsan_works  # noqa: E402
from test_loop_capacity import appended_feeds, appended_while  # noqa: E402


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    if shutil.which("cc") is None:
        pytest.skip("needs a C compiler")
    tmp = tmp_path_factory.mktemp("loopcap_c")
    san = asan_available()
    flags = ASAN if san else []
    onnx.save(appended_while(), tmp / "a.onnx")
    art = tmp / "art"
    onnxcc.compile(tmp / "a.onnx", art, name="appended", loop_capacity=(4, 64), cc=" ".join(["cc", *flags]))
    exe = tmp / "loopcap"
    subprocess.run(["cc", "-O1", "-g", *flags, "-o", str(exe), str(HERE / "loop_capacity.c"), f"-I{art}",
                    f"-L{art}", "-lappended", f"-Wl,-rpath,{art}"], check=True)
    return tmp, exe, san


def _run(exe: Path, *args: str, leaks: bool = False) -> subprocess.CompletedProcess:
    env = {"ASAN_OPTIONS": f"detect_leaks={int(leaks)}", "PATH": "/usr/bin:/bin", "ONNXCC_NUM_THREADS": "1"}
    return subprocess.run([str(exe), *args], capture_output=True, text=True, env=env, timeout=120)


def _values(line: str) -> np.ndarray:
    return np.array([float(v) for v in line.split("data=")[1].split(",") if v], np.float32)


COUNTS = [0, 1, 3, 4, 5, 20, 64]  # capacity 4: every edge, 5 x, and the limit exactly


def test_run_alloc_grows_the_capacity_until_the_run_fits(built):
    tmp, exe, _ = built
    r = _run(exe, *map(str, COUNTS))
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.splitlines()
    assert lines[-1] == "DONE"
    for k in COUNTS:
        at = lines.index(f"alloc lim={k} rc=0")
        want = ort_run(tmp / "a.onnx", appended_feeds(k))
        assert lines[at + 1] == f"v2 shape={1 + k} data=" + ",".join(f"{v:g}" for v in want["v2"])
        np.testing.assert_array_equal(_values(lines[at + 1]), want["v2"])
        np.testing.assert_array_equal(_values(lines[at + 2]), want["n"].reshape(-1))


def test_past_the_limit_a_clear_error_and_nothing_allocated(built):
    _, exe, _ = built
    r = _run(exe, "65")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "alloc lim=65 rc=8" in r.stdout  # ERR_KERNEL
    assert ('msg=node "grow" loop-carried value 0 dim 0 (carried0_d0): the run needs more than the capacity '
            "limit of this build, 64 rows" in r.stdout)
    assert "nulls=1" in r.stdout


def test_caller_allocated_run_never_writes_past_its_outputs(built):
    _, exe, _ = built
    r = _run(exe, "caller", "2", "caller", "4", "caller", "5", "caller", "40")
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("caller lim=")]
    assert len(lines) == 4 and all("canaries=intact" in ln for ln in lines), lines
    # outputs allocated for the initial capacity (1 + 4 rows): 2 and 4 iterations fit
    assert lines[0].startswith("caller lim=2 bound=5 rc=0") and lines[1].startswith("caller lim=4 bound=5 rc=0")
    assert "caller true=3" in r.stdout and "caller true=5" in r.stdout
    for ln in lines[2:]:  # 5 and 40 do not: no write past the end, the error names run_alloc
        assert " rc=8 " in ln and "output size known only after the run: use appended_run_alloc" in ln


def test_deleters_free_every_attempt(built):
    tmp, exe, san = built
    if not san or not lsan_works(tmp):
        pytest.skip("LeakSanitizer is not available here")
    r = _run(exe, "0", "5", "20", "65", leaks=True)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "detected memory leaks" not in r.stderr
    r = _run(exe, "leak", "20", leaks=True)  # the negative control: the result not freed
    assert "detected memory leaks" in r.stderr
    assert "onnxcc_managed_new" in r.stderr


def test_header_and_metadata_document_the_capacity(built):
    tmp, _, _ = built
    h = (tmp / "art" / "appended.h").read_text()
    assert 'carried0_d0__cap: node "grow" loop-carried value 0 dim 0 (carried0_d0)' in h
    assert "start at 4 rows" in h and "up to\n * 64 rows" in h
    assert "output size known only after the run: use\n * appended_run_alloc" in h
    meta = json.loads((tmp / "art" / "appended.json").read_text())["loop_capacity"]
    assert meta["initial"] == 4 and meta["limit"] == 64 and meta["run_grows_outputs"] is True
    assert meta["symbols"]["carried0_d0__cap"]["node"] == "grow"
