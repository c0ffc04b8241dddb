"""`onnxcc cache list | inspect | prune | clear` over a cache holding two small builds."""

from __future__ import annotations

import os
import time

import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from onnxcc.cli import main
from onnxcc.cli.cache_cmd import parse_size
from onnxcc.compiler import CompileOptions, compile_cached
from onnxcc.runtime.cache import MANIFEST, ArtifactCache, list_entries


def _run(*args):
    return CliRunner().invoke(main, list(args))


@pytest.fixture(scope="module")
def relu(tmp_path_factory):
    d = tmp_path_factory.mktemp("m")
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(d / "relu.onnx"))
    return d / "relu.onnx"


@pytest.fixture(scope="module")
def built(relu, tmp_path_factory):
    """A pristine cache with two entries (the second with one more version), copied per test."""
    root = tmp_path_factory.mktemp("cache")
    cache = ArtifactCache(root)
    old, _ = compile_cached(relu, CompileOptions(), cache)
    new, _ = compile_cached(relu, CompileOptions(specialize={"N": [4]}), cache)
    t = time.time()
    os.utime(old / MANIFEST, (t - 7200, t - 7200))  # used two hours ago
    return root, old, new


@pytest.fixture()
def cache(built, tmp_path):
    import shutil

    root, old, new = built
    dst = tmp_path / "c"
    shutil.copytree(root, dst)
    os.utime(dst / old.parent.name / old.name / MANIFEST, (time.time() - 7200,) * 2)
    return dst, old.name, new.name


def test_list_shows_model_target_versions_size_and_age(cache):
    root, old, new = cache
    r = _run("cache", "list", "--cache-dir", str(root))
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0].split() == ["KEY", "MODEL", "TARGET", "VERSIONS", "SIZE", "USED"]
    assert lines[1].startswith(old[:12]) and "relu.onnx" in lines[1] and "2h ago" in lines[1]
    assert lines[2].startswith(new[:12]) and " 2 " in lines[2] and "cpu/" in lines[2]
    assert lines[-1].startswith("2 entries")


def test_inspect_by_key_prefix_and_bad_refs(cache):
    root, _, new = cache
    r = _run("cache", "inspect", new[:8], "--cache-dir", str(root))
    assert r.exit_code == 0, r.output
    assert f"entry {new}" in r.output and "state intact" in r.output and "guard N == 4" in r.output
    r = _run("cache", "inspect", "zzzz", "--cache-dir", str(root))
    assert r.exit_code == 1 and r.output.startswith("error: cache entry 'zzzz': no entry")
    r = _run("cache", "inspect", "ab", "--cache-dir", str(root))
    assert r.exit_code == 1 and "at least 4 characters" in r.output
    lib = next((root / new[:2] / new).glob("*.so"))
    lib.write_bytes(b"garbage")
    r = _run("cache", "inspect", new[:8], "--cache-dir", str(root))
    assert "state damaged:" in r.output


def test_prune_removes_least_recently_used_first(cache):
    root, _, new = cache
    sizes = {e.key: e.size for e in list_entries(root)}
    (root / ".build-dead").mkdir()  # a build killed before its rename: reclaimed first
    (root / ".build-dead" / "x.o").write_bytes(b"0" * 100)
    r = _run("cache", "prune", "--max-size", str(sizes[new] + 1), "--cache-dir", str(root))
    assert r.exit_code == 0, r.output
    assert r.output.startswith("removed 2 entries")
    assert [e.key for e in list_entries(root)] == [new]
    r = _run("cache", "prune", "--max-size", "lots", "--cache-dir", str(root))
    assert r.exit_code == 2 and "expected a size like 500M" in r.output


def test_a_hit_counts_as_a_use(cache, relu):
    root, old, new = cache
    compile_cached(relu, CompileOptions(), ArtifactCache(root))  # hit on the old entry
    assert [e.key for e in list_entries(root)] == [new, old]


def test_clear_removes_everything(cache):
    root, _, _ = cache
    r = _run("cache", "clear", "--cache-dir", str(root))
    assert r.exit_code == 0 and r.output.startswith("removed 2 entries")
    r = _run("cache", "list", "--cache-dir", str(root))
    assert r.exit_code == 0 and "empty" in r.output


def test_parse_size():
    assert parse_size("500M") == 500 << 20 and parse_size("1.5G") == 3 << 29
    assert parse_size("64k") == 64 << 10 and parse_size("10MiB") == 10 << 20 and parse_size("7") == 7
