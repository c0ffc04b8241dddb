"""Naive workspace planning: aligned, disjoint slots; symbolic offsets; views take none."""

from __future__ import annotations

import sympy

from onnxcc.ir import DType, sym
from onnxcc.kernel import KernelProgram, align_up, plan


def test_static_offsets_are_aligned_and_disjoint():
    p = KernelProgram.new("k")
    p.temp("a", DType.f32, (10,))      # 40 bytes
    p.temp("b", DType.f64, (3,))       # 24 bytes
    p.temp("c", DType.bool, (65,))     # 65 bytes
    mp = plan(p)
    assert mp.offsets == {"a": 0, "b": 64, "c": 128}
    assert mp.workspace_bytes == 256
    assert mp.sizes == {"a": 40, "b": 24, "c": 65}


def test_symbolic_offsets():
    N = sym("N")
    p = KernelProgram.new("k", ["N"])
    p.temp("a", DType.f32, (N, 3))
    p.temp("b", DType.f16, (N,))
    p.view("v", "a", (3, N))
    mp = plan(p)
    assert set(mp.offsets) == {"a", "b"}
    for n in (1, 5, 16, 17, 1000):
        off_b = int(sympy.sympify(mp.offsets["b"]).subs(N, n))
        total = int(sympy.sympify(mp.workspace_bytes).subs(N, n))
        assert off_b % 64 == 0 and off_b >= 12 * n and off_b < 12 * n + 64
        assert total % 64 == 0 and total >= off_b + 2 * n


def test_align_up():
    assert align_up(0) == 0 and align_up(1) == 64 and align_up(64) == 64 and align_up(65, 16) == 80
    assert sympy.simplify(align_up(64 * sym("N")) - 64 * sym("N")) == 0


def test_empty_program_needs_no_workspace():
    assert plan(KernelProgram.new("k")).workspace_bytes == 0
