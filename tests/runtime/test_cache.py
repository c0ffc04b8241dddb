"""The artifact cache: keyed by everything that changes a build, never loads a damaged entry."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnxcc
import onnxcc.version
from onnxcc.compiler import CompileOptions, cache_document, compile_cached
from onnxcc.runtime.cache import MANIFEST, ArtifactCache, make_key


def test_second_lookup_hits_and_loads(tmp_path, model_path):
    cache = ArtifactCache(tmp_path / "c")
    p1, hit1 = compile_cached(model_path, CompileOptions(), cache)
    p2, hit2 = compile_cached(model_path, CompileOptions(), cache)
    assert (hit1, hit2) == (False, True) and p1 == p2
    out = onnxcc.load(p2).run({"x": np.array([[-1, 2, -3]], np.float32)})["y"]
    np.testing.assert_array_equal(out, [[0, 2, 0]])


def test_changed_flag_or_version_misses(tmp_path, model_path, monkeypatch):
    base = make_key(cache_document(model_path, CompileOptions()))
    assert make_key(cache_document(model_path, CompileOptions(opt=2))) != base
    assert make_key(cache_document(model_path, CompileOptions(specialize={"N": [1]}))) != base
    assert make_key(cache_document(model_path, CompileOptions(), extra={"guard": "N == 4"})) != base
    monkeypatch.setattr(onnxcc.version, "__version__", "9.9.9")
    assert make_key(cache_document(model_path, CompileOptions())) != base


def test_a_profiling_build_is_not_served_to_a_normal_one(tmp_path, model_path, monkeypatch):
    """ONNXCC_PROFILE_SERIAL builds run their serial computes as pool regions (for
    benchmarks/region_profile.py): another library, so another cache entry."""
    base = make_key(cache_document(model_path, CompileOptions()))
    monkeypatch.setenv("ONNXCC_PROFILE_SERIAL", "1")
    assert make_key(cache_document(model_path, CompileOptions())) != base


@pytest.mark.parametrize("damage", ["truncate", "flip", "delete", "manifest", "foreign"])
def test_damaged_entry_is_rebuilt_not_loaded(tmp_path, model_path, damage):
    cache = ArtifactCache(tmp_path / "c")
    path, _ = compile_cached(model_path, CompileOptions(), cache)
    lib = next(path.glob("lib*.so"))
    if damage == "truncate":
        lib.write_bytes(lib.read_bytes()[:100])
    elif damage == "flip":
        data = bytearray(lib.read_bytes())
        data[len(data) // 2] ^= 0xFF
        lib.write_bytes(bytes(data))
    elif damage == "delete":
        lib.unlink()
    elif damage == "manifest":
        (path / MANIFEST).write_text("{not json")
    else:  # an entry whose manifest belongs to another key
        mf = json.loads((path / MANIFEST).read_text())
        mf["key"] = "0" * 64
        (path / MANIFEST).write_text(json.dumps(mf))
    path2, hit = compile_cached(model_path, CompileOptions(), cache)
    assert not hit and path2 == path
    assert any(e[0] == "corrupt" for e in cache.events)
    assert cache.validate(path2, path2.name, None) == ""
    out = onnxcc.load(path2).run({"x": np.ones((2, 3), np.float32)})["y"]
    np.testing.assert_array_equal(out, np.ones((2, 3)))


def test_second_process_reuses_the_cache_with_zero_compiles(tmp_path, model_path):
    cache_dir = tmp_path / "c"
    compile_cached(model_path, CompileOptions(), ArtifactCache(cache_dir))
    code = ("import sys; from onnxcc.compiler import compile_cached; from onnxcc.runtime.cache import ArtifactCache;"
            "p, hit = compile_cached(sys.argv[1], cache=ArtifactCache(sys.argv[2])); print('HIT' if hit else 'MISS')")
    r = subprocess.run([sys.executable, "-c", code, str(model_path), str(cache_dir)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "HIT"


def _external_model(tmp_path, bias: np.ndarray):
    """y = x + bias with bias stored in weights.bin next to the .onnx."""
    from onnx.external_data_helper import convert_model_to_external_data

    g = helper.make_graph([helper.make_node("Add", ["x", "b"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 64])],
                          [onnx.numpy_helper.from_array(bias, "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    convert_model_to_external_data(m, location="weights.bin", size_threshold=0)
    p = tmp_path / "ext.onnx"
    onnx.save(m, str(p))
    assert (tmp_path / "weights.bin").is_file()
    return p


def test_rewritten_external_data_misses(tmp_path):
    """Only weights.bin changes (same size, same .onnx bytes): the cache must not serve the
    artifact built from the old weights."""
    cache = ArtifactCache(tmp_path / "c")
    p = _external_model(tmp_path, np.ones(64, np.float32))
    onnx_bytes = p.read_bytes()
    path1, _ = compile_cached(p, CompileOptions(), cache)
    x = np.zeros((2, 64), np.float32)
    np.testing.assert_array_equal(onnxcc.load(path1).run({"x": x})["y"], np.ones((2, 64)))
    (tmp_path / "weights.bin").write_bytes(np.full(64, 5.0, np.float32).tobytes())
    assert p.read_bytes() == onnx_bytes
    path2, hit = compile_cached(p, CompileOptions(), cache)
    assert not hit and path2 != path1
    np.testing.assert_array_equal(onnxcc.load(path2).run({"x": x})["y"], np.full((2, 64), 5.0))


def test_external_data_of_a_proto_is_read_relative_to_the_cwd(tmp_path, monkeypatch):
    p = _external_model(tmp_path, np.ones(64, np.float32))
    proto = onnx.load(str(p), load_external_data=False)
    monkeypatch.chdir(tmp_path)
    k1 = make_key(cache_document(proto, CompileOptions()))
    (tmp_path / "weights.bin").write_bytes(np.zeros(64, np.float32).tobytes())
    assert make_key(cache_document(proto, CompileOptions())) != k1


def test_key_hashes_onnxcc_sources_not_just_the_version(tmp_path, model_path):
    """A copy of the package with one source edited gets another key (same __version__)."""
    import shutil

    from onnxcc.compiler.cache_key import source_digest

    doc = cache_document(model_path, CompileOptions())
    assert doc["source"] == source_digest()
    pkg = tmp_path / "pkg"
    shutil.copytree(Path(onnxcc.__file__).parent, pkg / "onnxcc",
                    ignore=shutil.ignore_patterns("__pycache__"))
    code = "from onnxcc.compiler.cache_key import source_digest; print(source_digest())"

    def digest() -> str:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": str(pkg)})
        assert r.returncode == 0, r.stderr
        return r.stdout.strip()

    assert digest() == source_digest()
    rt = pkg / "onnxcc" / "codegen" / "c" / "runtime" / "onnxcc_rt.c"
    rt.write_text(rt.read_text() + "\n/* edited */\n")
    assert digest() != source_digest()
