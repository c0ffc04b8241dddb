"""kernel/flash.py: which computes are fused-attention cores (no compile: the matcher on
programs built with the kernel API and on their text parsed back)."""

from __future__ import annotations

from onnxcc.ir import DType, sym
from onnxcc.kernel import KernelProgram, Var, rsum
from onnxcc.kernel.flash import flash_core, match_flash
from onnxcc.kernel.parser import parse_program


def _program(guarded=True, v_head=8, bad_denominator=False):
    p = KernelProgram.new("k", ["S", "L"])
    S, L = sym("S"), sym("L")
    q = p.input("q", DType.f32, (2, S, 4))
    k = p.input("k", DType.f32, (2, L, 4))
    v = p.input("v", DType.f32, (2, L, v_head))
    y = p.output("y", DType.f32, (2, S, v_head))
    e = Var("e")

    def score(h, s, t):
        return rsum([(e, 4)], q[(h, s, e)] * k[(h, t, e)]) * 0.5

    def body(h, s, w):
        core = flash_core(lambda t: score(h, s, t), lambda t: v[(h, t, w)], L, DType.f32, guarded=guarded)
        if bad_denominator:  # the divisor sums over another key count: not softmax
            return core.a / rsum([(Var("u"), 3)], score(h, s, Var("u")))
        return core

    p.compute(y, body)
    return p


def test_guarded_and_plain_cores_match_with_their_parts():
    for guarded in (True, False):
        (c,) = _program(guarded).computes()
        fl = match_flash(c)
        assert fl is not None and fl.guarded is guarded
        assert fl.row == 8 and fl.rows_var == "s" and fl.key.name == "kt"
        assert fl.dot is not None and "q" in str(fl.query) and "k" in str(fl.keyed)


def test_the_text_round_trip_keeps_the_core():
    p = _program()
    (c,) = parse_program(str(p)).computes()
    assert match_flash(c) is not None


def test_near_misses_are_not_cores():
    (c,) = _program(bad_denominator=True).computes()
    assert match_flash(c) is None
    (c,) = _program(v_head=2048).computes()  # the accumulator row would not fit the stack
    assert match_flash(c) is None
