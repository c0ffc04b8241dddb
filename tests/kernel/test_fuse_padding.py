"""Fusion keeps a zero-padding remap as a buffer when a consumer reads it with a stride
along its innermost var (a stride-2 conv): inlined, its bounds selects would sit on strided
loads, which LLVM does not vectorise; and when one consumer reads it at 3 or more taps
(a window: the selects would run per tap). Read at stride 1 by fewer taps it is inlined. Numerics are
checked before and after fusion through the JIT."""

from __future__ import annotations

import copy

import numpy as np

from onnxcc.codegen.cpu.jit import JitKernel
from onnxcc.ir import DType
from onnxcc.kernel import KernelProgram, Select, select, walk
from onnxcc.kernel.fuse import fuse

F32 = DType.f32


def _padded_program(stride: int) -> KernelProgram:
    p = KernelProgram.new("pad", [])
    x = p.input("x", F32, (2, 9))
    t = p.temp("t", F32, (2, 11))
    y = p.output("y", F32, (2, 5 if stride == 2 else 9))
    p.compute(t, lambda r, j: select((j >= 1) & (j - 1 < 9), x[r, j - 1], 0.0))
    p.compute(y, lambda r, i: t[r, i * stride] * 0.5 + t[r, i * stride + 1] - t[r, i * stride + 2])
    return p


def _same(before: KernelProgram, after: KernelProgram) -> None:
    x = np.random.default_rng(1).standard_normal((2, 9)).astype(np.float32)
    (want,) = JitKernel(before)(x)
    (got,) = JitKernel(after)(x)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_padding_read_with_a_stride_is_kept():
    p = _padded_program(2)
    before = copy.deepcopy(p)
    rep = fuse(p)
    assert "t" in p.buffers and any(t == "t" and "stride" in why for t, why in rep.kept)
    (y,) = [c for c in p.computes() if c.out == "y"]
    assert not any(isinstance(n, Select) for n in walk(y.body))  # the strided loads are plain
    _same(before, p)


def test_padding_read_at_stride_one_by_a_window_is_kept():
    """Three taps of the padded copy in one consumer: the selects would run per tap."""
    p = _padded_program(1)
    before = copy.deepcopy(p)
    rep = fuse(p)
    assert "t" in p.buffers and any(t == "t" and "window" in why for t, why in rep.kept)
    _same(before, p)


def test_padding_read_at_stride_one_twice_is_inlined():
    p = KernelProgram.new("pad", [])
    x = p.input("x", F32, (2, 9))
    t = p.temp("t", F32, (2, 11))
    y = p.output("y", F32, (2, 9))
    p.compute(t, lambda r, j: select((j >= 1) & (j - 1 < 9), x[r, j - 1], 0.0))
    p.compute(y, lambda r, i: t[r, i] * 0.5 + t[r, i + 2])
    before = copy.deepcopy(p)
    fuse(p)
    assert "t" not in p.buffers and [c.out for c in p.computes()] == ["y"]
    _same(before, p)
