"""codegen/gc_quiet.py `gc_frozen` around a whole compile (compiler/compile.py): the passes run
with the objects alive before them frozen out of the cyclic collector, and the collector's
state (freeze count, thresholds, enabled flag) comes back exactly, also when the build fails,
and a caller's own frozen objects are never thawed."""

from __future__ import annotations

import gc

import pytest

import onnxcc
import onnxcc.compiler.compile as compile_mod
from onnxcc.codegen.gc_quiet import gc_frozen
from onnxcc.testing import MODELS_DIR


def _state():
    return gc.get_freeze_count(), gc.get_threshold(), gc.isenabled()


@pytest.fixture
def nothing_frozen():
    if gc.get_freeze_count():
        pytest.skip("something in this process froze objects already")


def _spy_pipeline(monkeypatch, seen, fail=False):
    run = compile_mod.run_pipeline

    def spy(*args, **kwargs):
        seen.append(gc.get_freeze_count())
        if fail:
            raise RuntimeError("a pass failed")
        return run(*args, **kwargs)

    monkeypatch.setattr(compile_mod, "run_pipeline", spy)


def test_passes_run_frozen_and_state_is_restored(tmp_path, monkeypatch, nothing_frozen):
    seen = []
    _spy_pipeline(monkeypatch, seen)
    before = _state()
    onnxcc.compile(MODELS_DIR / "mlp.onnx", tmp_path)
    assert seen and seen[0] > 0  # the passes ran with the imports' objects frozen
    assert _state() == before  # and everything was handed back


def test_state_is_restored_when_the_build_fails(tmp_path, monkeypatch, nothing_frozen):
    seen = []
    _spy_pipeline(monkeypatch, seen, fail=True)
    before = _state()
    with pytest.raises(RuntimeError, match="a pass failed"):
        onnxcc.compile(MODELS_DIR / "mlp.onnx", tmp_path)
    assert seen and seen[0] > 0
    assert _state() == before


def _frozen(obj) -> bool:
    return not any(o is obj for o in gc.get_objects())  # the permanent generation is not listed


def test_a_callers_frozen_objects_stay_frozen(tmp_path, monkeypatch, nothing_frozen):
    seen = []
    _spy_pipeline(monkeypatch, seen)
    mine = [[]]
    gc.freeze()  # a pre-fork server's own frozen set
    try:
        count = gc.get_freeze_count()
        onnxcc.compile(MODELS_DIR / "mlp.onnx", tmp_path)
        assert seen and seen[0] <= count  # left alone: nothing of the build added
        assert _frozen(mine)  # and nothing thawed
    finally:
        gc.unfreeze()
    assert not _frozen(mine)


def test_nested_blocks_thaw_only_at_the_outermost_exit(nothing_frozen):
    with gc_frozen():
        outer = gc.get_freeze_count()
        assert outer > 0
        keep = [[] for _ in range(1000)]  # made inside: the nested block freezes them too
        with gc_frozen():
            assert gc.get_freeze_count() >= outer + len(keep)
        assert gc.get_freeze_count() >= outer + len(keep)  # the inner exit thawed nothing
    assert gc.get_freeze_count() == 0
