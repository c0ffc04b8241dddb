"""lit's job in pytest: run every `tests/passes/*.onnxir` case and FileCheck the printed IR.

A file holds cases separated by a line `// -----`. Directives (comment lines):

  // RUN: -p <pipeline>        the pipeline (in the file's first case it applies to every
                               case; a case may override it)
  // CHECK...                  FileCheck directives, matched against the IR after the pipeline
  // EXPECT-ERROR: <regex>     parsing, verifying or the pipeline must fail with a message
                               matching the regex (re.search)
  // REQUIRES: onnx.Shape, ... ops the case needs registered (`onnx.*` ops the case uses
                               are required implicitly); a missing one FAILS the case, so a
                               case cannot silently stop testing anything
  // INTERP: N=3, S=5          also run the interpreter before and after the pipeline on the
                               same random inputs (symbols set as given) and compare

Every pass in the pipeline is followed by the verifier, and the final IR must survive a
print -> parse -> print round trip unchanged.
"""

from __future__ import annotations

import contextlib
import io
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from filecheck.matcher import Matcher
from filecheck.options import Options

from onnxcc.errors import OnnxccError
from onnxcc.interp import run as interp_run
from onnxcc.ir import evaluate
from onnxcc.ir.parser import parse_module
from onnxcc.ir.verify import verify
from onnxcc.ops import get_opdef
from onnxcc.passes import PassContext, VerifyAfterEach, run_pipeline

HERE = Path(__file__).parent
_SEPARATOR = re.compile(r"^//\s*-----\s*$")
_DIRECTIVE = re.compile(r"^\s*//\s*(RUN|EXPECT-ERROR|REQUIRES|INTERP):\s*(.*?)\s*$")


@dataclass
class Case:
    path: Path
    index: int
    #: 0-based line of the file where the case starts (check files are padded to keep line numbers)
    start: int
    text: str
    pipeline: str | None = None
    expect_error: str | None = None
    requires: list[str] = field(default_factory=list)
    interp: dict[str, int] | None = None

    @property
    def id(self) -> str:
        return f"{self.path.stem}:{self.index}"


def split_cases(path: Path) -> list[Case]:
    lines = path.read_text().splitlines()
    chunks, start = [], 0
    for i, line in enumerate(lines):
        if _SEPARATOR.match(line):
            chunks.append((start, lines[start:i]))
            start = i + 1
    chunks.append((start, lines[start:]))
    cases, file_pipeline = [], None
    for k, (start, chunk) in enumerate(chunks):
        case = Case(path, k, start, "\n".join(chunk) + "\n")
        for line in chunk:
            m = _DIRECTIVE.match(line)
            if not m:
                continue
            kind, arg = m.groups()
            if kind == "RUN":
                if not arg.startswith("-p"):
                    raise ValueError(f"{path}:{start + 1}: RUN line must read '// RUN: -p <pipeline>'")
                case.pipeline = arg[2:].strip()
            elif kind == "EXPECT-ERROR":
                case.expect_error = arg
            elif kind == "REQUIRES":
                case.requires += [s for s in re.split(r"[,\s]+", arg) if s]
            else:
                pairs = (kv.split("=") for kv in arg.split(",") if kv.strip())
                case.interp = {k.strip(): int(v) for k, v in pairs}
        if k == 0:
            file_pipeline = case.pipeline
        case.pipeline = case.pipeline if case.pipeline is not None else file_pipeline
        if re.search(r"^\s*module\b", case.text, re.M):  # skip chunks of comments only
            cases.append(case)
    return cases


def all_cases() -> list[Case]:
    return [c for p in sorted(HERE.glob("*.onnxir")) for c in split_cases(p)]


def filecheck(check_text: str, output: str, tmp_path: Path, name: str) -> tuple[int, str]:
    """Run FileCheck in-process; returns (exit code, messages)."""
    check, inp = tmp_path / f"{name}.onnxir", tmp_path / f"{name}.out"
    check.write_text(check_text)
    inp.write_text(output)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        rc = Matcher.from_opts(Options(match_filename=str(check), input_file=str(inp))).run()
    return rc, buf.getvalue()


def random_inputs(module, env: dict[str, int], seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for a in module.main.params:
        shape = tuple(evaluate(d, env) for d in a.type.shape)
        dt = a.type.dtype
        if dt.is_float:
            out.append(rng.standard_normal(shape).astype(dt.np))
        elif dt.is_int:
            out.append(rng.integers(0, 10, size=shape).astype(dt.np))
        else:
            out.append(rng.random(shape) < 0.5)
    return out


def run_case(case: Case):
    """Parse, verify, run the pipeline with verification after each pass; return the module."""
    m = parse_module(case.text, str(case.path))
    verify(m)
    if case.pipeline:
        run_pipeline(m, case.pipeline, PassContext(instruments=[VerifyAfterEach()]))
    return m


def unregistered_onnx_ops(case: Case) -> list[str]:
    """`onnx.*` ops the case uses that no OpDef defines (the case fails: a typo or a removed op).

    Cases that expect an error are never skipped this way: the error may be the point.
    """
    if case.expect_error is not None:
        return []
    names = set(re.findall(r"\b(onnx\.[A-Za-z0-9_]+)\(", case.text))
    return sorted(n for n in names if get_opdef(n) is None)


CASES = all_cases()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_pass_case(case: Case, tmp_path: Path):
    missing = [op for op in case.requires + unregistered_onnx_ops(case) if get_opdef(op) is None]
    if missing:
        pytest.fail(f"ops not registered: {', '.join(missing)}")
    if case.expect_error is not None:
        with pytest.raises(OnnxccError) as info:
            run_case(case)
        assert re.search(case.expect_error, str(info.value)), \
            f"error {str(info.value)!r} does not match {case.expect_error!r}"
        return
    before = parse_module(case.text, str(case.path)) if case.interp is not None else None
    m = run_case(case)
    text = str(m)
    assert str(parse_module(text)) == text, "printed IR does not round-trip"
    if "CHECK" in case.text:
        rc, msg = filecheck("\n" * case.start + case.text, text, tmp_path, case.path.stem)
        assert rc == 0, f"FileCheck failed for {case.id}:\n{msg}\n--- output ---\n{text}"
    if case.interp is not None:
        inputs = random_inputs(before, case.interp)
        want = interp_run(before, inputs)
        got = interp_run(m, inputs)
        assert len(want) == len(got)
        for w, g in zip(want, got):
            assert w.shape == g.shape and w.dtype == g.dtype
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_filecheck_harness_catches_a_wrong_check(tmp_path: Path):
    """The harness must fail when a CHECK does not match (guards against vacuous passes)."""
    rc, msg = filecheck("// CHECK: onnx.Nothing\n", "module @m {\n}\n", tmp_path, "neg")
    assert rc != 0 and "onnx.Nothing" in msg


def test_split_cases_reads_directives(tmp_path: Path):
    p = tmp_path / "x.onnxir"
    p.write_text("// RUN: -p dce\n// CHECK: a\nmodule @a {\n}\n// -----\n// EXPECT-ERROR: boom\n"
                 "// REQUIRES: onnx.Foo, onnx.Bar\n// INTERP: N=3, S=4\nmodule @b {\n}\n"
                 "// -----\n// RUN: -p cse,dce\nmodule @c {\n}\n")
    a, b, c = split_cases(p)
    assert (a.pipeline, a.start, a.expect_error) == ("dce", 0, None)
    assert (b.pipeline, b.start, b.expect_error, b.requires, b.interp) == \
        ("dce", 5, "boom", ["onnx.Foo", "onnx.Bar"], {"N": 3, "S": 4})
    assert c.pipeline == "cse,dce"
