"""`compile -o DIR` swaps a finished build in whole (an interrupted compile leaves the old
artifact), and the library, NAME.h and NAME.json carry one build id the loader checks."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

import onnxcc
from onnxcc.cli import main
from onnxcc.compiler import CompileOptions, artifact_dir, compile_model
from onnxcc.runtime import ArtifactError
from onnxcc.testing_c import save_graph

X = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)


def _model(path, op="Relu"):
    g = helper.make_graph([helper.make_node(op, ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])])
    return save_graph(g, path)


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """Two builds of relu.onnx (a, b: other options), one of neg.onnx under the name relu (c), and
    a rebuild of a (a2: the same inputs)."""
    d = tmp_path_factory.mktemp("art")
    relu, neg = _model(d / "relu.onnx"), _model(d / "neg.onnx", "Neg")
    compile_model(relu, d / "a", CompileOptions(max_versions=1))
    compile_model(relu, d / "a2", CompileOptions(max_versions=1))
    compile_model(relu, d / "b", CompileOptions(max_versions=1, opt=2))
    compile_model(neg, d / "c", CompileOptions(max_versions=1, name="relu"))
    return d


@pytest.fixture()
def art(builds, tmp_path):
    for k in "abc":
        shutil.copytree(builds / k, tmp_path / k)
    shutil.copy(builds / "neg.onnx", tmp_path / "neg.onnx")
    return tmp_path


def test_library_header_and_metadata_share_one_build_id(art, builds):
    meta = json.loads((art / "a" / "relu.json").read_text())
    m = onnxcc.load(art / "a")
    assert m.build_id == meta["build_id"] and len(m.build_id) == 16
    assert f'#define RELU_BUILD_ID "{m.build_id}"' in (art / "a" / "relu.h").read_text()
    assert m.build_id != onnxcc.load(art / "b").build_id
    # the id is a digest of the library's inputs: a rebuild from the same inputs has the same one
    assert json.loads((builds / "a2" / "relu.json").read_text())["build_id"] == m.build_id


def test_a_library_from_another_build_is_refused(art):
    shutil.copy(art / "b" / "librelu.so", art / "a" / "librelu.so")
    with pytest.raises(ArtifactError, match="is not from build"):
        onnxcc.load(art / "a")
    r = CliRunner().invoke(main, ["run", str(art / "a"), "--random", "N=2"])
    assert r.exit_code == 1 and r.output.startswith("error: ") and "not from build" in r.output
    assert len(r.output.strip().splitlines()) == 1


def test_a_header_from_another_build_is_refused(art):
    shutil.copy(art / "b" / "relu.h", art / "a" / "relu.h")
    with pytest.raises(ArtifactError, match=r"header build .* library build"):
        onnxcc.load(art / "a")


def test_interrupted_compile_leaves_the_old_artifact(art, monkeypatch):
    before = json.loads((art / "a" / "relu.json").read_text())["build_id"]

    def interrupt(*_):
        raise KeyboardInterrupt

    monkeypatch.setattr(artifact_dir, "swap_into_place", interrupt)
    with pytest.raises(KeyboardInterrupt):
        compile_model(art / "neg.onnx", art / "a", CompileOptions(max_versions=1, name="relu"))
    m = onnxcc.load(art / "a")
    assert m.build_id == before
    np.testing.assert_array_equal(m.run({"x": X})["y"], np.maximum(X, 0))
    assert sorted(p.name for p in art.iterdir()) == ["a", "b", "c", "neg.onnx"]  # no temporary left


def test_killed_compile_leaves_the_old_artifact(art):
    """SIGKILL just before the swap (no clean-up runs): DIR is still the old, whole artifact."""
    script = ("import os, signal, sys\n"
              "from onnxcc.compiler import CompileOptions, artifact_dir, compile_model\n"
              "artifact_dir.swap_into_place = lambda *a: os.kill(os.getpid(), signal.SIGKILL)\n"
              "compile_model(sys.argv[1], sys.argv[2], CompileOptions(max_versions=1, name='relu'))\n")
    p = subprocess.run([sys.executable, "-c", script, str(art / "neg.onnx"), str(art / "a")],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == -9, p.stderr
    np.testing.assert_array_equal(onnxcc.load(art / "a").run({"x": X})["y"], np.maximum(X, 0))


def test_swap_replaces_an_artifact_whole_and_keeps_other_files(art):
    artifact_dir.swap_into_place(art / "c", art / "a")  # an artifact dir: exchanged whole
    np.testing.assert_array_equal(onnxcc.load(art / "a").run({"x": X})["y"], -X)
    assert not (art / "c").exists()
    (art / "b" / "notes.txt").write_text("mine")  # not only artifact files: files moved in one by one
    artifact_dir.swap_into_place(art / "a", art / "b")
    assert (art / "b" / "notes.txt").read_text() == "mine"
    np.testing.assert_array_equal(onnxcc.load(art / "b").run({"x": X})["y"], -X)


def test_a_symlinked_output_dir_stays_a_link(art, tmp_path):
    (tmp_path / "link").symlink_to(art / "a")
    artifact_dir.build_in_place(tmp_path / "link", lambda d: shutil.copytree(art / "c", d, dirs_exist_ok=True))
    assert (tmp_path / "link").is_symlink()
    np.testing.assert_array_equal(onnxcc.load(tmp_path / "link").run({"x": X})["y"], -X)


def test_an_artifact_of_a_newer_abi_is_refused(art):
    meta = json.loads((art / "a" / "relu.json").read_text())
    meta["abi_version"] = 99
    (art / "a" / "relu.json").write_text(json.dumps(meta))
    with pytest.raises(ArtifactError, match="C ABI version 99, but this loader knows up to 1"):
        onnxcc.load(art / "a")
