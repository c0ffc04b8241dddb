"""Hostile C calls (issue 17): tests/reliability/hostile.c calls an artifact whose dispatcher
and runtime are built with -fsanitize=address,undefined (where the compiler has them) with
NULL data, wrong ndim, negative and huge dims, wrong dtypes, overlapping outputs, NULL shape
pointers and byte_offset games. Zero crashes (the sanitizers abort on any bad access), zero
silent successes (every hostile call returns nonzero with a one-line message and leaves the
outputs untouched), zero wrong results (the honest calls give the right numbers)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from onnx import TensorProto, helper

import onnxcc
from onnxcc.testing_c import SANITIZE, sanitizers_available, save_graph

HERE = Path(__file__).parent


def _model(path: Path) -> Path:
    vi = helper.make_tensor_value_info
    g = helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"]), helper.make_node("Mul", ["a", "b"], ["z"])],
                          "g", [vi("a", TensorProto.FLOAT, ["N", 4]), vi("b", TensorProto.FLOAT, ["N", 4])],
                          [vi("y", TensorProto.FLOAT, ["N", 4]), vi("z", TensorProto.FLOAT, ["N", 4])])
    return save_graph(g, path)


def run_harness(tmp: Path) -> tuple[list[str], bool]:
    """Build the artifact and the harness (sanitized where possible); its output lines."""
    san = sanitizers_available()
    flags = SANITIZE if san else []
    art = tmp / "art"
    onnxcc.compile(_model(tmp / "m.onnx"), art, name="alias", cc=" ".join(["cc", *flags]))
    exe = tmp / "hostile"
    subprocess.run(["cc", "-O1", "-g", *flags, "-o", str(exe), str(HERE / "hostile.c"), f"-I{art}", f"-L{art}",
                    "-lalias", f"-Wl,-rpath,{art}"], check=True)
    env = {"ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0", "UBSAN_OPTIONS": "print_stacktrace=1",
           "PATH": "/usr/bin:/bin", "ONNXCC_NUM_THREADS": "1"}
    r = subprocess.run([str(exe)], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, f"harness crashed (rc {r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    assert "runtime error" not in r.stderr and "AddressSanitizer" not in r.stderr, r.stderr[-4000:]
    return r.stdout.splitlines(), san


def tally(lines: list[str]) -> dict:
    """Counts: hostile calls refused properly, silent successes, bad messages, good calls right/wrong."""
    out = {"hostile": 0, "refused": 0, "silent_success": [], "touched_outputs": [], "bad_message": [],
           "good": 0, "wrong": []}
    for ln in lines:
        if ln.startswith("CASE "):
            name, rest = ln[5:].split(" ", 1)
            rc = int(rest.split("rc=", 1)[1].split()[0])
            msg = rest.split("msg=", 1)[1]
            out["hostile"] += 1
            if name == "version-info-bad":
                (out["silent_success"] if rc != 1 else [None]).append(name)
                out["refused"] += rc == 1
                continue
            if rc == 0:
                out["silent_success"].append(name)
            elif "untouched=1" not in rest:
                out["touched_outputs"].append(name)
            elif not msg.strip() or msg == "(null)":
                out["bad_message"].append(name)
            else:
                out["refused"] += 1
        elif ln.startswith("GOOD "):
            out["good"] += 1
            if "rc=0 right=1" not in ln:
                out["wrong"].append(ln)
    return out


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_hostile_c_calls(tmp_path):
    lines, _ = run_harness(tmp_path)
    assert lines and lines[-1] == "DONE", lines[-5:]
    t = tally(lines)
    assert t["hostile"] >= 35
    assert t["silent_success"] == [] and t["touched_outputs"] == [] and t["bad_message"] == [], t
    assert t["good"] >= 4 and t["wrong"] == [], t
    assert t["refused"] == t["hostile"]
