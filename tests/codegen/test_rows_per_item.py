"""A schedule's `rows_per_item` (kernel/schedule.py) on a compute that is not attention: the
parallel items are (outer vars, a chunk of the second-innermost var), codegen/cpu/emit.py
runs each item's chunk [lo, hi) and steps the chunk as the innermost item counter. An
elementwise [R, M, N] compute with chunks of 5 rows, at M around the chunk (1, 4, 5, 6, 13)
and R 1 to 3, against numpy; the item body's loop over the var starts at the chunk's first
value."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from onnxcc.codegen.cpu import jit as cpu_jit
from onnxcc.codegen.cpu.jit import JitKernel
from onnxcc.ir import DType, sym
from onnxcc.kernel import KernelProgram, exp, maximum
from onnxcc.kernel.schedule import TargetInfo, schedule_program

R, M, N = sym("R"), sym("M"), sym("N")


def _program() -> KernelProgram:
    p = KernelProgram.new("chunked", ["R", "M", "N"])
    X, B = p.input("X", DType.f32, (R, M, N)), p.input("B", DType.f32, (N,))
    Y = p.output("Y", DType.f32, (R, M, N))
    p.compute(Y, lambda r, m, i: maximum(X[r, m, i] * 2.0 + B[i], 0.0) - exp(-X[r, m, i]))
    return p


@pytest.mark.parametrize("per", [None, 5])
def test_rows_per_item_chunks_the_second_innermost_var(per):
    p = _program()
    schedule_program(p, TargetInfo(parallel=True, min_parallel_work=1))
    c = p.body[0]
    p.body[0] = dataclasses.replace(c, schedule=dataclasses.replace(c.schedule, rows_per_item=per))
    kern = JitKernel(p, parallel=True, parallel_min_work=1)
    # the item's loop over m starts at its chunk's first row (else every item ran all rows)
    assert bool(re.search(r'%"m" = phi\s+i64 \[%"chunk.lo"', kern.llvm_ir)) == (per is not None)
    rng = np.random.default_rng(0)
    before = cpu_jit.PARALLEL_CALLS[0]
    for r in (1, 3):
        for m in (1, 4, 5, 6, 13):
            x = rng.standard_normal((r, m, 19)).astype(np.float32)
            b = rng.standard_normal(19).astype(np.float32)
            want = np.maximum(x * 2 + b, 0) - np.exp(-x)
            np.testing.assert_allclose(kern(x, b, syms={"R": r, "M": m})[0], want, rtol=1e-5, atol=1e-6)
    assert cpu_jit.PARALLEL_CALLS[0] > before
