"""plan-memory and reserve-scratch say they keep the IR (`keeps_ir`: the verifier is not
run after them): the programs print the same after them as before."""

from __future__ import annotations

from pathlib import Path

from onnxcc.compiler import compile_model
from onnxcc.passes import Instrument, PassContext, get_pass

ROOT = Path(__file__).resolve().parents[2]


class _ProgramText(Instrument):
    def __init__(self):
        self.after_pass: dict[str, list[str]] = {}

    def after(self, pass_, module, index, changed):
        if hasattr(module, "versions"):
            self.after_pass[pass_.name] = [str(v.program) for v in module.versions]


def test_plan_passes_leave_the_programs_as_they_were(tmp_path):
    seen = _ProgramText()
    compile_model(ROOT / "models" / "convnet.onnx", tmp_path, emit="kernel", pass_ctx=PassContext(instruments=[seen]))
    assert get_pass("plan-memory").keeps_ir and get_pass("reserve-scratch").keeps_ir
    before = seen.after_pass["schedule"]
    assert seen.after_pass["plan-memory"] == before
    assert seen.after_pass["reserve-scratch"] == before
