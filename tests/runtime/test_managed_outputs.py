"""Library-allocated outputs (NAME_run_alloc, DLPack managed tensors): from C, built with
-fsanitize=address (LeakSanitizer) where the compiler has it, the deleter frees every block
(no leak), and skipping it is reported as a leak (the negative control); the values match
onnxruntime. From Python, onnxcc.load returns them without a copy."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from sanitizers import ASAN, asan_available, lsan_works

import onnxcc
from onnxcc.testing import ort_run
from onnxcc.testing_c import save_graph

HERE = Path(__file__).parent
X = np.array([0, 1, 0, 2, 0, 0, 3, 0, 0, 0, 0, 4], np.float32).reshape(3, 4)


def _model(path: Path) -> Path:
    g = oh.make_graph([oh.make_node("NonZero", ["x"], ["nz"]), oh.make_node("Neg", ["x"], ["neg"])], "nzm",
                      [oh.make_tensor_value_info("x", TP.FLOAT, ["N", "M"])],
                      [oh.make_tensor_value_info("nz", TP.INT64, None),
                       oh.make_tensor_value_info("neg", TP.FLOAT, None)])
    return save_graph(g, path)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    if shutil.which("cc") is None:
        pytest.skip("needs a C compiler")
    tmp = tmp_path_factory.mktemp("managed")
    san = asan_available()
    flags = ASAN if san else []
    art = tmp / "art"
    onnxcc.compile(_model(tmp / "nzm.onnx"), art, name="nzm", cc=" ".join(["cc", *flags]))
    exe = tmp / "managed"
    subprocess.run(["cc", "-O1", "-g", *flags, "-o", str(exe), str(HERE / "managed_outputs.c"), f"-I{art}",
                    f"-L{art}", "-lnzm", f"-Wl,-rpath,{art}"], check=True)
    return tmp, art, exe, san


def _run(exe: Path, *args: str, leaks: bool) -> subprocess.CompletedProcess:
    env = {"ASAN_OPTIONS": f"detect_leaks={int(leaks)}", "PATH": "/usr/bin:/bin", "ONNXCC_NUM_THREADS": "1"}
    return subprocess.run([str(exe), *args], capture_output=True, text=True, env=env, timeout=120)


def test_header_documents_ownership(built):
    _, art, _, _ = built
    h = (art / "nzm.h").read_text()
    assert "nzm_run_alloc(const DLTensor *inputs, int n_inputs, DLManagedTensor **outputs" in h
    assert "must call" in h and "deleter(outputs[k]) exactly once" in h
    assert "typedef struct DLManagedTensor" in h


def test_c_caller_gets_true_shapes_and_the_right_values(built):
    tmp, _, exe, _ = built
    r = _run(exe, leaks=False)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.splitlines()
    assert lines[-1] == "DONE"
    x = X.copy()
    want_rounds = []
    for k in range(3):
        want_rounds.append(ort_run(tmp / "nzm.onnx", {"x": x.copy()}))
        x.reshape(-1)[k] = 5.0
    got = [ln for ln in lines if ln.startswith("nz ")]
    assert len(got) == 3
    for ln, want in zip(got, want_rounds):
        nz = want["nz"]
        assert f"shape={nz.shape[0]}x{nz.shape[1]} " in ln
        assert "strides=null" in ln  # compact: the count was bound mid-run
        assert ln.endswith("data=" + ",".join(str(v) for v in nz.reshape(-1)))
    bad = next(ln for ln in lines if ln.startswith("bad "))
    assert "rc=3" in bad and "nulls=1" in bad and "dtype" in bad


def test_deleter_frees_everything(built):
    _, _, exe, san = built
    if not san or not lsan_works(built[0]):
        pytest.skip("LeakSanitizer is not available here")
    r = _run(exe, leaks=True)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "detected memory leaks" not in r.stderr
    # the negative control: without the deleters the blocks are reported
    r = _run(exe, "leak", leaks=True)
    assert "detected memory leaks" in r.stderr
    assert "onnxcc_managed_new" in r.stderr


def test_python_loader_returns_library_allocated_outputs_without_a_copy(tmp_path):
    # its own build: the sanitized one above cannot be loaded into an unsanitized Python
    onnxcc.compile(_model(tmp_path / "nzm.onnx"), tmp_path / "art", name="nzm")
    lib = onnxcc.load(tmp_path / "art")
    got = lib.run({"x": X})
    want = ort_run(tmp_path / "nzm.onnx", {"x": X})
    np.testing.assert_array_equal(got["nz"], want["nz"])
    np.testing.assert_array_equal(got["neg"], want["neg"])
    assert got["nz"].base is not None and not got["nz"].flags.owndata  # a view of the library's block
    assert type(got["nz"].base).__name__ == "_ManagedBlock"  # the library-allocated path
    # the block outlives the run and is freed with its last array (no crash on reuse)
    again = lib.run({"x": np.zeros((2, 2), np.float32)})
    assert again["nz"].shape == (2, 0)
    np.testing.assert_array_equal(got["nz"], want["nz"])
