"""The specialize pass on small textual IR: which versions, in what order, with what guards."""

from __future__ import annotations

import pytest

from onnxcc import parse_ir, print_ir
from onnxcc.errors import OnnxccError, PassError
from onnxcc.ir import Divisible
from onnxcc.passes import run_pipeline
from onnxcc.passes.base import get_pass
from onnxcc.passes.specialize import SpecializePass

BCAST = """module @m {
  sym n in [1, 100]
  sym k in [1, 64]
  func @main(%x: f32[n, k], %b: f32[k]) -> (f32[n, k]) {
    %0 = onnx.Add(%x, %b) : (f32[n, k])
    return %0
  }
}
"""

MATMUL = """module @m {
  sym n in [1, 100]
  func @main(%x: f32[n, 8], %w: f32[8, 4]) -> (f32[n, 4]) {
    %0 = onnx.MatMul(%x, %w) : (f32[n, 4])
    return %0
  }
}
"""


def versions(text, spec):
    m = parse_ir(text)
    run_pipeline(m, f"shape-inference,{spec}")
    return m, m.dispatch["main"]


def test_exact_versions_come_first_then_generic():
    m, vs = versions(MATMUL, "specialize{exact=n:1:4,one=false}")
    assert vs == ["main.n1", "main.n4", "main.generic"]
    assert "guard n == 1" in print_ir(m)
    assert "func @main.n4(%x: f32[4, 8], %w: f32[8, 4]) -> (f32[4, 4]) guard n == 4 subs {n = 4}" in print_ir(m)


def test_generic_version_has_no_guard_and_is_last():
    m, vs = versions(MATMUL, "specialize{one=false}")
    assert vs == ["main.generic"]
    assert m.functions["main.generic"].guard is True or str(m.functions["main.generic"].guard) == "True"


def test_one_rule_on_and_off():
    # x[n, k] + b[k]: k meets k, n meets nothing: no dim would broadcast, no 1-version
    _, vs = versions(BCAST, "specialize")
    assert vs == ["main.generic"]
    # x[n, k] + b[n, 1]: k sits opposite the literal 1, so k == 1 changes the broadcast
    text = BCAST.replace("%b: f32[k]", "%b: f32[n, 1]")
    m, vs = versions(text, "specialize")
    assert vs == ["main.k1", "main.generic"]
    assert "func @main.k1(%x: f32[n, 1], %b: f32[n, 1]) -> (f32[n, 1]) guard k == 1" in print_ir(m)
    _, vs = versions(text, "specialize{one=false}")
    assert vs == ["main.generic"]


def test_divisibility_version_records_the_fact():
    m, vs = versions(BCAST, "specialize{one=false,divisible=16}")
    assert vs == ["main.k_mod16", "main.generic"]
    f = m.functions["main.k_mod16"]
    assert "guard k % 16 == 0" in print_ir(m)
    assert f.attrs["multiple_of"] == [Divisible("k", 16)]  # a typed fact, printed as a guard term
    assert "multiple_of = [#divisible<k % 16 == 0>]" in print_ir(m)
    assert parse_ir(print_ir(m)).functions["main.k_mod16"].attrs["multiple_of"] == [Divisible("k", 16)]


def test_exact_values_are_a_typed_option():
    assert get_pass("specialize{exact=n:1:4|k:2,one=false}") == SpecializePass(
        exact=(("n", (1, 4)), ("k", (2,))), one=False)
    with pytest.raises(OnnxccError, match="expected SYM:VALUE"):
        get_pass("specialize{exact=n}")


def test_max_versions_bounds_and_says_what_was_dropped():
    m, vs = versions(MATMUL, "specialize{exact=n:1:2:3:4,one=false,max-versions=3}")
    assert vs == ["main.n1", "main.n2", "main.generic"]
    assert m.attrs["dropped_versions"] == ["n3: over max-versions=3", "n4: over max-versions=3"]


def test_specialize_value_outside_range_is_an_error():
    with pytest.raises((OnnxccError, PassError), match=r"n = 500 is outside its range \[1, 100\]"):
        versions(MATMUL, "specialize{exact=n:500}")


def test_specialize_unknown_symbol_is_an_error():
    with pytest.raises((OnnxccError, PassError), match=r"unknown symbol 'q'"):
        versions(MATMUL, "specialize{exact=q:1}")


def test_versions_round_trip_as_text():
    m, _ = versions(BCAST, "specialize{exact=n:7,divisible=8}")
    text = print_ir(m)
    assert print_ir(parse_ir(text)) == text


def test_no_one_version_for_a_symbol_that_meets_a_1_only_at_the_outermost_axis():
    # x[n, k] + p[1, k] (a positional table's leading 1): n == 1 would only drop the stride-0
    # step of the outermost loop, the inner loops are the same: no n1 version
    text = BCAST.replace("%b: f32[k]", "%b: f32[1, k]")
    _, vs = versions(text, "specialize")
    assert vs == ["main.generic"]
    # the same n opposite the 1 at an inner axis (x[k, n] + b[k, 1]) still gets its version
    text = BCAST.replace("%x: f32[n, k], %b: f32[k]) -> (f32[n, k])", "%x: f32[k, n], %b: f32[k, 1]) -> (f32[k, n])")
    text = text.replace(": (f32[n, k])", ": (f32[k, n])")
    _, vs = versions(text, "specialize")
    assert vs == ["main.n1", "main.generic"]
    # and opposite another symbol at the outermost axis too (n == 1 | n == m changes which side broadcasts)
    text = BCAST.replace("%b: f32[k]", "%b: f32[m, k]").replace("sym k in", "sym m in [1, 100]\n  sym k in")
    _, vs = versions(text, "specialize")
    assert "main.n1" in vs or "main.m1" in vs
