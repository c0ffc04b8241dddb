"""The loader runs exactly the library NAME.json describes (issue 17): a library rebuilt in
place is loaded anew in the same process (not the object dlopen already has for that
path), NAME.json's `library` cannot point outside the artifact directory, and a truncated
or replaced library is refused with a clear error before dlopen instead of faulting."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnxcc
from onnxcc.runtime import ArtifactError
from onnxcc.testing_c import save_graph


def _model(path, op: str, k: float):
    """y = x op k, saved to path."""
    g = helper.make_graph([helper.make_node(op, ["x", "k"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
                          [onnx.numpy_helper.from_array(np.array(k, np.float32), "k")])
    return save_graph(g, path)


X = np.arange(8, dtype=np.float32).reshape(2, 4)


def test_rebuilt_artifact_loads_the_new_code_in_the_same_process(tmp_path):
    out = tmp_path / "art"
    onnxcc.compile(_model(tmp_path / "m.onnx", "Add", 1.0), out, name="m")
    first = onnxcc.load(out)
    np.testing.assert_array_equal(first.run({"x": X})["y"], X + 1)
    onnxcc.compile(_model(tmp_path / "m.onnx", "Mul", 3.0), out, name="m")  # same dir, same name
    second = onnxcc.load(out)
    np.testing.assert_array_equal(second.run({"x": X})["y"], X * 3)
    np.testing.assert_array_equal(first.run({"x": X})["y"], X + 1)  # the old object keeps its code
    assert first.loaded_path != second.loaded_path
    assert onnxcc.load(out).loaded_path == second.loaded_path  # the same content loads once


@pytest.fixture()
def artifact(tmp_path):
    out = tmp_path / "art"
    onnxcc.compile(_model(tmp_path / "m.onnx", "Add", 1.0), out, name="m")
    return out


def _set_library(artifact, value):
    meta_path = artifact / "m.json"
    meta = json.loads(meta_path.read_text())
    meta["library"] = value
    meta_path.write_text(json.dumps(meta))


@pytest.mark.parametrize("where", ["parent", "absolute", "symlink", "empty"])
def test_library_field_must_stay_inside_the_artifact(artifact, tmp_path, where):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "libm.so").write_bytes((artifact / "libm.so").read_bytes())
    if where == "parent":
        _set_library(artifact, "../elsewhere/libm.so")
    elif where == "absolute":
        _set_library(artifact, str(outside / "libm.so"))
    elif where == "symlink":
        (artifact / "libm.so").unlink()
        (artifact / "libm.so").symlink_to(outside / "libm.so")
    else:
        _set_library(artifact, "")
    with pytest.raises(ArtifactError, match="artifact directory"):
        onnxcc.load(artifact / "m.json")


def test_metadata_records_the_library_size_and_sha256(artifact):
    import hashlib

    meta = json.loads((artifact / "m.json").read_text())
    data = (artifact / "libm.so").read_bytes()
    assert meta["library_size"] == len(data)
    assert meta["library_sha256"] == hashlib.sha256(data).hexdigest()


def _child(code: str) -> str:
    """Run `code` in a fresh interpreter (a fault fails the test instead of killing pytest)."""
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    return r.stdout


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_damaged_library_is_refused_before_dlopen(artifact, damage):
    lib = artifact / "libm.so"
    data = bytearray(lib.read_bytes())
    if damage == "truncate":
        lib.write_bytes(bytes(data[: len(data) // 2]))
    else:
        data[len(data) // 2] ^= 0xFF
        lib.write_bytes(bytes(data))
    out = _child(f"""
        import onnxcc
        from onnxcc.runtime import ArtifactError
        try:
            onnxcc.load({str(artifact)!r})
        except ArtifactError as e:
            print("REFUSED", e)
    """)
    assert "REFUSED" in out and ("truncated" if damage == "truncate" else "sha256") in out, out


def test_library_truncated_in_place_after_load_does_not_fault(artifact):
    """A loaded model keeps running when its file is cut short under it (a mapping of the
    file itself would take SIGBUS on the lost pages); reloading it is refused. In a child
    process, so a fault shows as a failure here rather than killing pytest."""
    out = _child(f"""
        import numpy as np, onnxcc
        from onnxcc.runtime import ArtifactError
        art = {str(artifact)!r}
        m = onnxcc.load(art)
        x = np.ones((3, 4), np.float32)
        assert (m.run({{"x": x}})["y"] == 2).all()
        with open(art + "/libm.so", "r+b") as f:
            f.truncate(4096)
        assert (m.run({{"x": x * 5}})["y"] == 6).all()
        try:
            onnxcc.load(art)
        except ArtifactError as e:
            print("REFUSED", e)
    """)
    assert "REFUSED" in out and "truncated" in out, out
