"""codegen/llvm/object_cache.py: LLVM objects kept on disk by the key of what decides their
bytes; a build served from it makes the same library and numbers, a damaged or unsafe cache
is never used. And codegen/cpu/backend.py's weight text (`_bytes_text`): the same object as
llvmlite's own printing."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from llvmlite import ir
from onnx import TensorProto, helper, numpy_helper

import onnxcc
from onnxcc.codegen.cpu.backend import _bytes_text
from onnxcc.codegen.llvm import object_cache
from onnxcc.codegen.llvm import target as llvm_target
from onnxcc.compiler import CompileOptions, compile_model


@pytest.fixture()
def cache_dir(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("ONNXCC_CACHE_DIR", str(root))
    monkeypatch.delenv("ONNXCC_OBJECT_CACHE", raising=False)
    return root / "llvm-objects"


def test_weight_text_compiles_to_the_same_object_as_llvmlites():
    blobs = [bytes(range(256)) * 3, b"", b'"\\abc\x00\xff', np.random.default_rng(0).bytes(5000)]
    objs = []
    for fast in (False, True):
        m = ir.Module("w")
        for k, raw in enumerate(blobs):
            ty = ir.ArrayType(ir.IntType(8), len(raw))
            g = ir.GlobalVariable(m, ty, f"onnxcc.const.{k}")
            init = ir.Constant(ty, bytearray(raw))
            g.initializer = _bytes_text(init) if fast else init  # pyright: ignore[reportAttributeAccessIssue]
            g.global_constant = True
        objs.append(llvm_target.emit_object(str(m), opt=0))
    assert objs[0] == objs[1]
    other = ir.Constant(ir.ArrayType(ir.IntType(32), 2), [1, 2])
    assert _bytes_text(other) is other  # only byte arrays are printed here


def test_key_covers_text_target_and_levels():
    base = {"text": "define void @f() {\n ret void\n}\n", "triple": "x86_64-unknown-linux-gnu", "cpu": "skylake",
            "features": "+avx2", "ir_opt": 3, "cg_opt": 3}
    key = object_cache.object_key(**base)
    assert object_cache.object_key(**base) == key and len(key) == 40
    changes = {"text": "define void @g() {\n ret void\n}\n", "triple": "aarch64-unknown-linux-gnu",
               "cpu": "znver4", "features": "+avx2,+fma", "ir_opt": 2, "cg_opt": 1}
    for name, other in changes.items():
        assert object_cache.object_key(**{**base, name: other}) != key, name


def test_store_load_damage_and_disable(cache_dir, monkeypatch):
    object_cache.store("k1", b"\x7fELF-object")
    assert object_cache.load("k1") == b"\x7fELF-object"
    path = cache_dir / "k1.o"
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    assert object_cache.load("k1") is None and not path.exists()  # damaged: removed, a miss
    object_cache.store("k2", b"obj")
    monkeypatch.setenv("ONNXCC_OBJECT_CACHE", "0")
    assert object_cache.load("k2") is None
    monkeypatch.delenv("ONNXCC_OBJECT_CACHE")
    os.chmod(cache_dir, 0o777)  # another user could plant objects: not used
    try:
        assert object_cache.load("k2") is None
    finally:
        os.chmod(cache_dir, 0o700)
    assert object_cache.load("k2") == b"obj"


def test_prune_removes_least_recently_used_first(cache_dir):
    for k in range(4):
        object_cache.store(f"p{k}", bytes(1000))
        os.utime(cache_dir / f"p{k}.o", (1000 + k, 1000 + k))
    assert object_cache.load("p0") is not None  # a hit: now the most recently used
    assert object_cache.prune(max_bytes=2 * 1032) == 2
    assert sorted(p.name for p in cache_dir.iterdir()) == ["p0.o", "p3.o"]


def _model(path):
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((16, 24)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Tanh", ["h"], ["y"])],
                          "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 24])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return path, numpy_helper.to_array(w)


def test_a_rebuild_is_served_from_the_cache_with_the_same_library(cache_dir, tmp_path, monkeypatch):
    model, w = _model(tmp_path / "mm.onnx")
    opts = CompileOptions(max_versions=1)
    compile_model(model, tmp_path / "a", opts)
    stored = sorted(cache_dir.glob("*.o"))
    assert stored  # the weights' object and the version's parts

    def no_llvm(*args, **kwargs):
        raise AssertionError("compiled again although cached")

    monkeypatch.setattr(llvm_target, "emit_object", no_llvm)
    compile_model(model, tmp_path / "b", opts)
    assert sorted(cache_dir.glob("*.o")) == stored
    lib_a, lib_b = (tmp_path / d / "libmm.so" for d in "ab")
    assert lib_a.read_bytes() == lib_b.read_bytes()  # same objects: the same library
    monkeypatch.undo()
    monkeypatch.setenv("ONNXCC_CACHE_DIR", str(cache_dir.parent))
    for p in stored:  # every cached object damaged: each compiled again, the numbers right
        p.write_bytes(p.read_bytes()[:-1] + b"\0")
    compile_model(model, tmp_path / "c", opts)
    x = np.random.default_rng(2).standard_normal((5, 16)).astype(np.float32)
    y = onnxcc.load(tmp_path / "c").run({"x": x})["y"]
    np.testing.assert_allclose(y, np.tanh(x @ w), rtol=1e-5, atol=1e-5)


def test_cache_clear_empties_the_object_cache(cache_dir):
    from click.testing import CliRunner

    from onnxcc.cli import main

    object_cache.store("c1", b"obj1")
    object_cache.store("c2", b"obj2")
    r = CliRunner().invoke(main, ["cache", "clear", "--cache-dir", str(cache_dir.parent)])
    assert r.exit_code == 0 and "and 2 compiled objects" in r.output, r.output
    assert not list(cache_dir.glob("*.o"))
