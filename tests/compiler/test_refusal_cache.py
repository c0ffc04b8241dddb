"""A build refused because shapes depend on input values is remembered in the cache with
its key (issue 15, item 6 of the strided brief): `onnxcc run`'s path (build_for_inputs over
compile_cached) does not compile the refused generic build again on a later call; it goes
straight to the value build, which is a cache hit."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnxcc.compiler.cache as cache_mod
from onnxcc.compiler import CompileOptions, compile_cached
from onnxcc.compiler.value_versions import ValueDependentError, build_for_inputs
from onnxcc.runtime.cache import ArtifactCache


def _model(path):
    vi = helper.make_tensor_value_info
    g = helper.make_graph([helper.make_node("Reshape", ["x", "shape"], ["y"])], "rs",
                          [vi("x", TensorProto.FLOAT, [2, 6]), vi("shape", TensorProto.INT64, [2])],
                          [vi("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return path


def test_refusal_is_recorded_and_reused(tmp_path, monkeypatch):
    model = _model(tmp_path / "rs.onnx")
    cache = ArtifactCache(tmp_path / "cache")
    builds = []
    real = cache_mod.compile_model

    def counting(model_, out, options):
        builds.append(dict(options.specialize_value))
        return real(model_, out, options)

    monkeypatch.setattr(cache_mod, "compile_model", counting)
    feeds = {"x": np.arange(12, dtype=np.float32).reshape(2, 6), "shape": np.array([3, 4], np.int64)}

    def run_path():
        return build_for_inputs(lambda o: compile_cached(model, o, cache), CompileOptions(),
                                lambda names: {n: feeds[n] for n in names})

    path, hit = run_path()
    assert not hit and len(builds) == 2 and builds[0] == {}  # the generic build, refused, then the value build
    assert any(e[0] == "record-refusal" for e in cache.events)
    path2, hit2 = run_path()
    assert hit2 and path2 == path
    assert len(builds) == 2  # neither build ran again: the refusal came from the record
    assert any(e[0] == "refused" for e in cache.events)
    with pytest.raises(ValueDependentError) as err:
        compile_cached(model, CompileOptions(), cache)
    assert err.value.inputs == ["shape"] and "shape" in str(err.value)
    assert len(builds) == 2
