"""The pass manager: pipeline strings with options, errors naming passes, instruments."""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import ClassVar

import pytest

from onnxcc.errors import OnnxccError, PassError, UnsupportedOp
from onnxcc.ir import Module
from onnxcc.ir.parser import parse_module
from onnxcc.passes import (
    PASSES,
    DumpDir,
    Instrument,
    ModulePass,
    PassContext,
    PrintAfter,
    TimePasses,
    VerifyAfterEach,
    get_pass,
    parse_pipeline,
    run_pipeline,
)
from onnxcc.passes.base import dump_header

TEXT = """
module @m {
  func @f(%x: f32[4]) -> (f32[4]) {
    %0 = test.a(%x) : (f32[4])
    %1 = test.a(%x) : (f32[4])
    %2 = test.b(%0, %1) : (f32[4])
    %3 = test.dead(%2) : (f32[4])
    return %2
  }
}
"""


def _module() -> Module:
    return parse_module(TEXT)


# ---- passes defined for these tests (not registered: run_pipeline takes instances too) ------

@dataclass(frozen=True)
class NoopPass(ModulePass):
    name: ClassVar[str] = "test-noop"

    def run(self, module, ctx):
        return False


@dataclass(frozen=True)
class BoomPass(ModulePass):
    name: ClassVar[str] = "test-boom"

    def run(self, module, ctx):
        raise RuntimeError("something broke")


@dataclass(frozen=True)
class BreakIRPass(ModulePass):
    """Drops the return op: the verifier must catch it."""

    name: ClassVar[str] = "test-break-ir"

    def run(self, module, ctx):
        module.main.body.ops[-1].drop_operands()
        module.main.body.ops.pop()
        return True


@dataclass(frozen=True)
class UnsupportedPass(ModulePass):
    name: ClassVar[str] = "test-unsupported"

    def run(self, module, ctx):
        raise UnsupportedOp("Foo", "com.x", "n1")


# ---- pipeline strings ---------------------------------------------------------------------

def test_parse_pipeline_with_options():
    ps = parse_pipeline("shape-inference, canonicalize{fold-limit=8, cse=false},dce,cse")
    assert [p.name for p in ps] == ["shape-inference", "canonicalize", "dce", "cse"]
    canon = ps[1]
    assert canon.fold_limit == 8 and canon.cse is False and canon.max_iterations == 10
    assert parse_pipeline("canonicalize{cse=true}")[0].cse is True
    assert parse_pipeline("") == [] and parse_pipeline(" , ") == []


def test_get_pass_defaults_and_empty_braces():
    p = get_pass("canonicalize{}")
    assert p.fold_limit == 64 and p.cse is True
    assert get_pass("  dce  ").name == "dce"


def test_registered_graph_passes():
    parse_pipeline("dce")  # loads every pass module
    for name in ("shape-inference", "canonicalize", "dce", "cse"):
        assert name in PASSES and PASSES[name].name == name


def test_unknown_pass():
    with pytest.raises(OnnxccError, match=r"unknown pass 'nope' \(known: .*canonicalize.*\)"):
        parse_pipeline("dce,nope")


def test_unknown_option():
    with pytest.raises(OnnxccError, match=r"pass 'canonicalize' has no option 'colour'"):
        parse_pipeline("canonicalize{colour=red}")


def test_bad_option_value():
    msg = r"pass 'canonicalize' option 'fold-limit': expected int, got 'many'"
    with pytest.raises(OnnxccError, match=msg):
        parse_pipeline("canonicalize{fold-limit=many}")


def test_malformed_pass_spec():
    with pytest.raises(OnnxccError, match=r"malformed pass spec"):
        parse_pipeline("canonicalize{fold-limit=8")


# ---- errors -------------------------------------------------------------------------------

def test_pass_error_names_failing_pass_and_prior_ones():
    with pytest.raises(PassError) as info:
        run_pipeline(_module(), [NoopPass(), get_pass("cse"), BoomPass(), NoopPass()])
    e = info.value
    assert e.pass_name == "test-boom" and e.prior == ["test-noop", "cse"]
    assert "pass 'test-boom' failed (after: test-noop, cse): something broke" in str(e)
    assert isinstance(e.cause, RuntimeError)


def test_pass_error_for_first_pass_says_none_before():
    with pytest.raises(PassError, match=r"pass 'test-boom' failed \(after: none\)"):
        run_pipeline(_module(), [BoomPass()])


def test_verify_after_each_catches_broken_ir():
    ctx = PassContext(instruments=[VerifyAfterEach()])
    with pytest.raises(PassError) as info:
        run_pipeline(_module(), [NoopPass(), BreakIRPass()], ctx)
    e = info.value
    assert e.pass_name == "test-break-ir" and e.prior == ["test-noop"]
    assert "IR invalid after pass" in str(e) and "must end with 'return'" in str(e)


@dataclass(frozen=True)
class AnalysisPass(ModulePass):
    """Claims to leave the IR as it was (`keeps_ir`): the verifier is not asked again."""

    name: ClassVar[str] = "test-analysis"
    keeps_ir: ClassVar[bool] = True

    def run(self, module, ctx):
        return True


def test_verify_after_each_skips_passes_that_keep_the_ir(monkeypatch):
    import onnxcc.ir.verify as v

    calls = []
    real = v.verify
    monkeypatch.setattr(v, "verify", lambda m: calls.append(1) or real(m))
    run_pipeline(_module(), [NoopPass(), AnalysisPass(), NoopPass()], PassContext(instruments=[VerifyAfterEach()]))
    assert len(calls) == 2


def test_unsupported_op_keeps_its_own_error():
    with pytest.raises(UnsupportedOp, match=r"unsupported op Foo \(domain com.x\) at node 'n1'"):
        run_pipeline(_module(), [UnsupportedPass()])


def test_failed_hook_sees_the_error():
    seen = []

    class Spy(Instrument):
        def before(self, pass_, module, index):
            seen.append(("before", pass_.name, index))

        def after(self, pass_, module, index, changed):
            seen.append(("after", pass_.name, changed))

        def failed(self, pass_, module, index, error):
            seen.append(("failed", pass_.name, type(error).__name__))

    with pytest.raises(PassError):
        run_pipeline(_module(), [NoopPass(), BoomPass()], PassContext(instruments=[Spy()]))
    assert seen == [("before", "test-noop", 0), ("after", "test-noop", False), ("before", "test-boom", 1),
                    ("failed", "test-boom", "RuntimeError")]


# ---- instruments --------------------------------------------------------------------------

def test_print_after_named_passes():
    out = io.StringIO()
    ctx = PassContext(instruments=[PrintAfter({"cse"}, stream=out)])
    run_pipeline(_module(), "cse,dce", ctx)
    text = out.getvalue()
    assert text.startswith(dump_header("cse") + "\n") and dump_header("dce") not in text
    dumped = text.split("\n", 1)[1]
    assert "test.b(%0, %0)" in dumped and "test.dead" in dumped  # after cse, before dce
    parse_module(text)  # the header is a comment: a dump parses


def test_print_after_all_and_only_changed():
    out = io.StringIO()
    run_pipeline(_module(), [NoopPass(), get_pass("dce")],
                 PassContext(instruments=[PrintAfter(None, stream=out, only_changed=True)]))
    text = out.getvalue()
    assert dump_header("test-noop") not in text and text.count("IR Dump After") == 1
    assert dump_header("dce") in text and "test.dead" not in text


def test_dump_dir_writes_numbered_files(tmp_path):
    d = tmp_path / "dumps"
    run_pipeline(_module(), "cse,dce", PassContext(instruments=[DumpDir(d)]))
    files = sorted(p.name for p in d.iterdir())
    assert files == ["000_cse.onnxir", "001_dce.onnxir"]
    last = (d / "001_dce.onnxir").read_text()
    assert last.startswith(dump_header("dce"))
    m = parse_module(last)
    assert [o.name for o in m.main.body.ops] == ["test.a", "test.b", "return"]


def test_time_passes_records_each_pass():
    t = TimePasses()
    run_pipeline(_module(), "cse,dce,cse", PassContext(instruments=[t]))
    assert [n for n, _ in t.times] == ["cse", "dce", "cse"]
    assert all(s >= 0 for _, s in t.times)
    report = t.report()
    assert "pass execution timing" in report and report.count(" cse") == 2 and "dce" in report


def test_run_pipeline_returns_module_and_reports_change():
    m = _module()
    changes = []

    class Changed(Instrument):
        def after(self, pass_, module, index, changed):
            changes.append((pass_.name, changed))

    assert run_pipeline(m, "cse,cse,dce,dce", PassContext(instruments=[Changed()])) is m
    assert changes == [("cse", True), ("cse", False), ("dce", True), ("dce", False)]


def test_dump_dir_numbers_on_across_pipelines(tmp_path):
    """One DumpDir numbers every pass it sees: a build that runs more than one pipeline
    (or a graph and a kernel part) gets one sequence, not files overwritten at 000."""
    ctx = PassContext(instruments=[DumpDir(tmp_path)])
    run_pipeline(_module(), "cse,dce", ctx)
    run_pipeline(_module(), "cse", ctx)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["000_cse.onnxir", "001_dce.onnxir", "002_cse.onnxir"]
