"""The JIT session: serve from the generic version, specialise hot shape classes once."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnxcc.runtime.cache import ArtifactCache
from onnxcc.session import Session


@pytest.fixture()
def model_path(tmp_path):
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "b"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
                          [helper.make_tensor("b", TensorProto.FLOAT, [4], [1, 2, 3, 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    p = tmp_path / "relu_add.onnx"
    onnx.save(m, str(p))
    return p


def reference(x):
    return np.maximum(x, 0) + np.array([1, 2, 3, 4], np.float32)


def test_stream_compiles_each_version_once(tmp_path, model_path):
    rng = np.random.default_rng(0)
    # skewed: N=2 and N=7 are hot, the rest appear a few times
    values = rng.choice([2, 7, 1, 3, 5, 11, 13], size=1000, p=[0.45, 0.35, 0.05, 0.05, 0.05, 0.03, 0.02])
    s = Session(model_path, cache=ArtifactCache(tmp_path / "c"), threshold=20, background=False, divisible=0)
    for n in values:
        x = rng.standard_normal((int(n), 4)).astype(np.float32)
        np.testing.assert_allclose(s.run({"x": x})["y"], reference(x), rtol=1e-6)
    counts = {int(v): int((values == v).sum()) for v in set(values.tolist())}
    hot = sorted(v for v, c in counts.items() if c >= 20)
    assert sorted(d["N"] for d in s.stats.specialized) == hot
    assert s.stats.compiles == 1 + len(hot)          # the base artifact, then each hot class once
    assert s.stats.calls == 1000
    assert len(s._class_of) == len(counts)  # the classes came through the per-shapes memo
    # once specialised, a hot class is served by its exact version: misses = calls before the switch
    assert s.stats.misses == sum(min(c, 20) for v, c in counts.items() if v in hot) + \
        sum(c for v, c in counts.items() if v not in hot)
    s.close()


def test_new_session_reuses_cache_with_zero_compiles(tmp_path, model_path):
    cache = tmp_path / "c"
    with Session(model_path, cache=str(cache), threshold=2, background=False) as s:
        for _ in range(3):
            s.run({"x": np.ones((3, 4), np.float32)})
        assert s.stats.compiles == 2
    with Session(model_path, cache=str(cache), threshold=2, background=False) as s2:
        for _ in range(3):
            s2.run({"x": np.ones((3, 4), np.float32)})
        assert s2.stats.compiles == 0 and s2.stats.cache_hits == 2


def test_background_compile_keeps_serving(tmp_path, model_path):
    with Session(model_path, cache=ArtifactCache(tmp_path / "c"), threshold=1, background=True) as s:
        x = np.full((6, 4), -1.0, np.float32)
        np.testing.assert_allclose(s.run({"x": x})["y"], reference(x))
        s.wait()
        np.testing.assert_allclose(s.run({"x": x})["y"], reference(x))
        assert s.stats.specialized == [{"N": 6}] and s.stats.hits == 1


def test_recompile_log_names_shape_and_failed_guards(tmp_path, model_path, monkeypatch, capsys):
    monkeypatch.setenv("ONNXCC_LOG", "recompiles")
    with Session(model_path, cache=ArtifactCache(tmp_path / "c"), threshold=100, background=False,
                 specialize={"N": [1]}) as s:
        for _ in range(3):
            s.run({"x": np.ones((5, 4), np.float32)})
        s.run({"x": np.ones((7, 4), np.float32)})
    err = capsys.readouterr().err
    assert "miss: x[5, 4] (N=5) served by the generic version" in err
    assert "N == 1" in err
    # once per shape class, not on every call (a log line per call drowned the output)
    assert err.count("miss: x[5, 4]") == 1 and err.count("miss: x[7, 4]") == 1


def test_a_failed_background_build_is_reported_and_not_left_pending(tmp_path, model_path, capsys):
    with Session(model_path, cache=ArtifactCache(tmp_path / "c"), threshold=1, background=True) as s:
        real_build = s._build

        def failing(opts, guard):
            if guard:  # the specialised build only; the generic one was built at start
                raise RuntimeError("disk full")
            return real_build(opts, guard)

        s._build = failing
        x = np.full((6, 4), -1.0, np.float32)
        np.testing.assert_allclose(s.run({"x": x})["y"], reference(x))
        s.wait()
        assert s.failed == {(("N", 6),): "RuntimeError: disk full"} and not s._pending
        np.testing.assert_allclose(s.run({"x": x})["y"], reference(x))  # still served, not retried
        s.wait()
        assert s.stats.specialized == []
    assert capsys.readouterr().err.count("specialising N == 6 failed") == 1
