"""The row tiles of a GEMM panel (codegen/cpu/gemm_rows.py): with M static only the
micro-kernel heights a panel can run are emitted, and the results stay right."""

from __future__ import annotations

import re

import numpy as np
import pytest

from onnxcc.codegen.cpu.gemm_rows import row_variants, tile_heights
from onnxcc.codegen.cpu.jit import JitKernel
from onnxcc.ir import DType, sym
from onnxcc.kernel import KernelProgram, Var, rsum
from onnxcc.kernel.schedule import TargetInfo, schedule_program

F32 = DType.f32
rng = np.random.default_rng(3)


def test_heights():
    assert row_variants(12) == [8, 4, 2, 1]
    assert tile_heights(12, None) == ([12, 8, 4, 2, 1], [8, 4, 2, 1])
    assert tile_heights(12, 48) == ([12], [])      # every panel full
    assert tile_heights(12, 27) == ([12, 3], [3])  # full panels, then one of 3 rows
    assert tile_heights(12, 5) == ([5], [5])       # one partial panel only


def _kernel(m) -> tuple[JitKernel, int, np.ndarray]:
    w = rng.standard_normal((64, 40)).astype(np.float32)
    p = KernelProgram.new("rows", [] if isinstance(m, int) else ["M"])
    a = p.input("A", F32, (m, 64))
    wc = p.const("W", w)
    out = p.output("C", F32, (m, 40))
    k = Var("k")
    p.compute(out, lambda i, j: rsum([(k, 64)], a[i, k] * wc[k, j]))
    schedule_program(p, TargetInfo(parallel=False, gemm_min_work=1))
    g = p.body[0].schedule.gemm
    assert g is not None
    return JitKernel(p, parallel=False), g.mr, w


@pytest.mark.parametrize("mult", [1, 2])
def test_static_m_multiple_of_mr_has_no_row_variants(mult):
    probe, mr, _ = _kernel(sym("M"))
    assert {int(h) for h in re.findall(r"ukr\.(\d+)x", probe.optimized_ir)} == {mr, *row_variants(mr)}
    m = mr * mult
    kern, mr2, w = _kernel(m)
    assert mr2 == mr
    assert {int(h) for h in re.findall(r"ukr\.(\d+)x", kern.optimized_ir)} == {mr}
    a = rng.standard_normal((m, 64)).astype(np.float32)
    np.testing.assert_allclose(kern(a)[0], a @ w, rtol=1e-4, atol=1e-4)


def test_static_m_below_mr_only_its_height():
    kern, mr, w = _kernel(3)
    assert mr > 3
    assert {int(h) for h in re.findall(r"ukr\.(\d+)x", kern.optimized_ir)} == {3}
    a = rng.standard_normal((3, 64)).astype(np.float32)
    np.testing.assert_allclose(kern(a)[0], a @ w, rtol=1e-4, atol=1e-4)
