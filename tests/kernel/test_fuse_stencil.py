"""Fusion keeps a window (a producer reading one buffer at 3 or more positions: a pool's
window reduced at every column, ops/nn.py `_pool_dense_rows`) as a buffer when a consumer
picks from it with a stride along its innermost var: inlined, every tap would be a strided
load (a gather). Picked at stride 1 it is still inlined. Numerics are checked before and
after fusion through the JIT (exact: max only)."""

from __future__ import annotations

import copy

import numpy as np

from onnxcc.codegen.cpu.jit import JitKernel
from onnxcc.ir import DType
from onnxcc.kernel import KernelProgram, maximum
from onnxcc.kernel.fuse import fuse

F32 = DType.f32


def _window_program(stride: int, taps: int = 3) -> KernelProgram:
    p = KernelProgram.new("win", [])
    x = p.input("x", F32, (2, 13))
    t = p.temp("t", F32, (2, 11))
    y = p.output("y", F32, (2, 6 if stride == 2 else 11))

    def window(r, j):
        acc = x[r, j]
        for k in range(1, taps):
            acc = maximum(acc, x[r, j + k])
        return acc

    p.compute(t, window)
    p.compute(y, lambda r, i: t[r, i * stride])
    return p


def _same(before: KernelProgram, after: KernelProgram) -> None:
    x = np.random.default_rng(1).standard_normal((2, 13)).astype(np.float32)
    (want,) = JitKernel(before)(x)
    (got,) = JitKernel(after)(x)
    np.testing.assert_array_equal(got, want)


def test_window_picked_with_a_stride_is_kept():
    p = _window_program(2)
    before = copy.deepcopy(p)
    rep = fuse(p)
    assert "t" in p.buffers and any(t == "t" and "stencil" in why for t, why in rep.kept)
    assert [c.out for c in p.computes()] == ["t", "y"]
    _same(before, p)


def test_window_picked_at_stride_one_is_inlined():
    p = _window_program(1)
    before = copy.deepcopy(p)
    fuse(p)
    assert "t" not in p.buffers and [c.out for c in p.computes()] == ["y"]
    _same(before, p)


def test_two_taps_are_no_window():
    """Two loads of one buffer (x[j] + x[j + 1], a residual pair) still inline under a stride."""
    p = _window_program(2, taps=2)
    before = copy.deepcopy(p)
    fuse(p)
    assert "t" not in p.buffers
    _same(before, p)
