"""The kernel IR's text parses back (kernel/parser.py), and kernel passes tested on text.

The round trip runs on every sample model's kernel module after each kernel pass
(lower-to-kernel, fold-consts, fuse, schedule, plan-memory, reserve-scratch): print -> parse -> print
gives the same text, and what parses verifies.
"""

from __future__ import annotations

import pytest

from onnxcc.compiler import CompileOptions, load_module
from onnxcc.compiler.pipeline import build_pipeline
from onnxcc.errors import ParseError
from onnxcc.ir import Divisible, SymbolTable
from onnxcc.kernel.fuse import fuse
from onnxcc.kernel.module import KernelModule
from onnxcc.kernel.parser import parse_expr, parse_kernel_text, parse_program
from onnxcc.kernel.plan_memory import plan
from onnxcc.kernel.schedule import TargetInfo, describe_schedules, facts_from_attrs, schedule_program
from onnxcc.passes import PassContext, run_pipeline
from onnxcc.passes.base import Instrument
from onnxcc.testing import MODELS_DIR, SAMPLE_MODELS


class _KernelTexts(Instrument):
    def __init__(self):
        self.texts: list[tuple[str, str]] = []

    def after(self, pass_, module, index, changed):
        if isinstance(module, KernelModule):
            self.texts.append((pass_.name, str(module)))


def _blocks(text: str) -> list[str]:
    out, cur = [], None
    for line in text.splitlines():
        if line.startswith("kernel "):
            cur = [line]
        elif cur is not None:
            cur.append(line)
            if line == "}":
                out.append("\n".join(cur))
                cur = None
    return out


@pytest.mark.parametrize("name, options", [(m, CompileOptions()) for m in SAMPLE_MODELS]
                         + [("transformer", CompileOptions(buckets={"seq": [16, 64]}))],
                         ids=[*SAMPLE_MODELS, "transformer-buckets"])
def test_every_kernel_pass_output_round_trips(name, options):
    from onnxcc.codegen.backend import make_backend

    grab = _KernelTexts()
    module = load_module(MODELS_DIR / f"{name}.onnx")
    run_pipeline(module, build_pipeline(options, make_backend(options), name, "kernel"), PassContext([grab]))
    assert [p for p, _ in grab.texts] == ["lower-to-kernel", "fold-consts", "fuse", "schedule", "plan-memory",
                                         "reserve-scratch"]
    for pass_name, text in grab.texts:
        programs = parse_kernel_text(text)
        blocks = _blocks(text)
        assert len(programs) == len(blocks) >= 1
        for p, block in zip(programs, blocks, strict=True):
            assert str(p) == block, f"after {pass_name}"
            p.verify()


# ---- kernel passes on text ----------------------------------------------------------------------

CHAIN = """kernel k(N) {
  input in0: f32[N, 8]
  output out0: f32[N, 8]
  temp t: f32[N, 8]
  temp u: f32[N]
  t[i0, i1] = in0[i0, i1] + 1.0
  u[i0] = sum(r < 8: t[i0, r])
  out0[i0, i1] = relu(t[i0, i1]) / u[i0]
}"""


def test_fuse_inlines_the_elementwise_producer_and_the_row_reduction():
    p = parse_program(CHAIN)
    fuse(p, SymbolTable())
    assert str(p).splitlines()[3:] == [
        "  out0[i0, i1] = relu(in0[i0, i1] + 1.0) / sum(r.f1 < 8: in0[i0, r.f1] + 1.0)  // fused: t, u, out0",
        "}"]


def test_plan_memory_stacks_the_temps_that_live_together():
    mp = plan(parse_program(CHAIN))
    assert mp.offsets["t"] == 0 and str(mp.offsets["u"]) == "64*ceiling(N/2)"  # t's aligned bytes
    assert mp.workspace_bytes == mp.peak_live_bytes


def test_plan_memory_writes_in_place_over_a_dying_input():
    p = parse_program("""kernel k() {
  input in0: f32[16]
  output out0: f32[16]
  temp a: f32[16]
  temp b: f32[16]
  temp c: f32[16]
  a[i] = exp(in0[i])
  b[i] = a[i] * 2.0
  c[j] = sum(r < 16: b[r]) + b[j]
  out0[i] = c[i] - 1.0
}""")
    mp = plan(p)
    # b reads a element by element and a dies there: b takes a's slot; c reduces over b
    assert mp.offsets == {"a": 0, "b": 0, "c": 64} and mp.workspace_bytes == 128


@pytest.mark.parametrize("facts, tail", [([Divisible("N", 16)], "none"), ([], "scalar")])
def test_schedule_drops_the_vector_tail_on_a_divisibility_fact(facts, tail):
    p = parse_program("""kernel k(N) {
  input in0: f32[8, N]
  output out0: f32[8, N]
  out0[i0, i1] = exp(in0[i0, i1])
}""")
    schedule_program(p, TargetInfo(parallel=False), facts_from_attrs(facts))
    assert describe_schedules(p) == f"out0: vector=16 tail={tail} parallel=False"


# ---- the parser's own checks ----------------------------------------------------------------------


def test_control_statements_and_every_expression_form_round_trip():
    src = """kernel k(N, M) {
  input x: f32[N]
  input c: bool[]
  output y: f32[N]
  output n: i64[]
  temp t: i64[]
  if (c[]) {
    y[i] = select(x[i] > 0.0, -x[i], max(x[i], 2.5) ** 1.0 + f32(3:i32))  for (i < N)
  } else {
    loop t < N while (~c[]) at most 8 count -> n {
      y[i] = f32(check(i < M, i // 2 % 3, code=4)) + sum(r < i + 1, init=1.0: x[r])  for (i < N)
    }
  }
  symbol M := max(N - 1, 1)
}"""
    with pytest.raises(ParseError):  # `**` is not kernel IR
        parse_program(src)
    src = src.replace(" ** 1.0", "")
    assert str(parse_program(src)) == src


def test_parse_errors_name_the_line():
    with pytest.raises(ParseError, match="unknown buffer nope") as e:
        parse_program("kernel k() {\n  output y: f32[4]\n  y[i] = nope[i]\n}")
    assert e.value.line == 3
    with pytest.raises(ParseError, match=r"\$1 is not defined"):
        parse_program("kernel k() {\n  output y: f32[4]\n  y[i] = $1\n}")
    with pytest.raises(ParseError, match="expected a statement"):
        parse_program("kernel k() {\n  output y: f32[4]\n  what is this\n}")
    with pytest.raises(ParseError, match="<5 values> for 4 elements"):
        parse_program("kernel k() {\n  const w: f32[4] = <5 values>\n}")
    p = parse_program("kernel k(N) {\n  output y: i64[N]\n}")
    assert str(parse_expr("N * 2 + i", p, {"i"})) == "N * 2 + i"
