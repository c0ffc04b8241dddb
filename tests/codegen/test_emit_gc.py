"""codegen/gc_quiet.py `gc_frozen` (codegen/cpu/backend.py): a library's LLVM emission runs with the objects alive
when it starts (the graph and kernel modules) frozen out of Python's cyclic collector, and
hands them back afterwards, so a process that compiles many models frees them as before."""

from __future__ import annotations

import gc

import onnxcc
import onnxcc.codegen.cpu.emit as cpu_emit
from onnxcc.testing import MODELS_DIR


def test_emission_runs_frozen_and_unfreezes(tmp_path, monkeypatch):
    seen = []
    emit = cpu_emit.emit_llvm

    def spy(*args, **kwargs):
        seen.append(gc.get_freeze_count())
        return emit(*args, **kwargs)

    monkeypatch.setattr(cpu_emit, "emit_llvm", spy)
    before = gc.get_freeze_count()
    onnxcc.compile(MODELS_DIR / "mlp.onnx", tmp_path)
    assert seen and all(n > before for n in seen)  # the build's objects were frozen
    assert gc.get_freeze_count() == before  # and handed back
