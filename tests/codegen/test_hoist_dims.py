"""Big dims computed once per kernel function (codegen/cpu/hoist_dims.py): a parallel body
function (a GEMM task, a conv's padding copy, a parallel loop nest) reads the workspace
offsets of the GEMM scratch and of temps from its owner's `hoisted` array instead of
computing each again. Checked on the LLVM IR (the owner computes, the bodies load) and
on the numbers: the same bits as with nothing hoisted, and numpy's conv."""

from __future__ import annotations

import re

import numpy as np
import pytest

from onnxcc.codegen.cpu import hoist_dims
from onnxcc.codegen.cpu.jit import JitKernel
from onnxcc.ir import DType, sym
from onnxcc.kernel import KernelProgram, Var, relu, rsum, select
from onnxcc.kernel.schedule import TargetInfo, schedule_program

F32 = DType.f32
Bt, H, W = sym("Bt"), sym("H"), sym("W")
rng = np.random.default_rng(5)


def _conv(p, x, cin, h, w, out, m, stride, temp):
    """out = relu(conv3x3(x) padded 1, stride `stride`): output sizes are floors of H, W."""
    wt = p.const(f"W{out}", rng.standard_normal((m, cin, 3, 3)).astype(np.float32))
    oh, ow = (h + 2 - 3) // stride + 1, (w + 2 - 3) // stride + 1
    y = (p.temp if temp else p.output)(out, F32, (Bt, m, oh, ow))
    c, ky, kx = Var(f"c{out}"), Var(f"ky{out}"), Var(f"kx{out}")

    def body(n, f, oy, ox):
        iy, ix = oy * stride + ky - 1, ox * stride + kx - 1
        v = select((iy >= 0) & (iy < h) & (ix >= 0) & (ix < w), x[n, c, iy, ix], 0.0)
        return relu(rsum([(c, cin), (ky, 3), (kx, 3)], v * wt[f, c, ky, kx]))

    p.compute(y, body)
    return y, oh, ow


def _build() -> tuple[KernelProgram, JitKernel]:
    """Stride-2 convs through temps: the temps' offsets and the GEMM scratch's offset are
    sums of nested floors of H and W."""
    p = KernelProgram.new("hoist", ["Bt", "H", "W"])
    x = p.input("X", F32, (Bt, 3, H, W))
    t1, h1, w1 = _conv(p, x, 3, H, W, "T1", 8, 2, True)
    t2, h2, w2 = _conv(p, t1, 8, h1, w1, "T2", 8, 2, True)
    t3, h3, w3 = _conv(p, t2, 8, h2, w2, "T3", 8, 2, True)
    _conv(p, t3, 8, h3, w3, "Y", 8, 1, False)
    schedule_program(p, TargetInfo(parallel=True, gemm_min_work=1))
    return p, JitKernel(p, parallel=True)


def _functions(text: str) -> dict[str, str]:
    return {m.split("(")[0].split("@")[-1].strip('"'): m for m in re.split(r"\ndefine ", text)[1:]}


def _conv_ref(x, w, stride):
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    oh, ow = (x.shape[2] - 1) // stride + 1, (x.shape[3] - 1) // stride + 1
    y = np.zeros((x.shape[0], w.shape[0], oh, ow), np.float32)
    for i in range(3):
        for j in range(3):
            win = xp[:, :, i:i + stride * (oh - 1) + 1:stride, j:j + stride * (ow - 1) + 1:stride]
            y += np.einsum("nchw,mc->nmhw", win, w[:, :, i, j])
    return np.maximum(y, 0)


@pytest.fixture(scope="module")
def default_build():
    return _build()


def test_big_offsets_are_computed_once_by_the_owner(default_build):
    _p, kern = default_build
    big = [d for d in [kern.plan.scratch_offset, *kern.plan.offsets.values()]
           if not isinstance(d, int) and hoist_dims.is_big(d)]
    assert big, "the test program should have a big workspace offset"
    fns = _functions(kern.llvm_ir)
    owner = fns["hoist"]
    assert "%\"hoisted\" = alloca [" in owner or "%hoisted = alloca [" in owner, "the kernel owns no hoisted array"
    bodies = [t for name, t in fns.items() if name.startswith("hoist.") and "hoisted." in t]
    assert len(bodies) >= 4, f"only {len(bodies)} body functions read hoisted dims"
    # the owner stores each slot once; bodies only load them
    n_slots = len(set(re.findall(r"hoisted\.(\d+)\.ptr", owner)))
    assert n_slots >= 1 and all("store i64" not in line for t in bodies for line in t.splitlines()
                                if "hoisted." in line)


def test_hoisting_everything_symbolic_keeps_the_bits(default_build, monkeypatch):
    """Threshold 1: every symbolic dim of every body function comes from the owner (the
    path at its widest); the results equal the default build's bit for bit and numpy's."""
    p, kern = default_build
    monkeypatch.setattr(hoist_dims, "HOIST_MIN_NODES", 1)
    monkeypatch.setattr(hoist_dims, "_SIZES", {})
    wide = JitKernel(p, parallel=True)
    n_wide = sum(t.count("hoisted.") for t in _functions(wide.llvm_ir).values())
    n_default = sum(t.count("hoisted.") for t in _functions(kern.llvm_ir).values())
    assert n_wide > n_default
    ws = [p.buffers[f"W{n}"].data for n in ("T1", "T2", "T3", "Y")]
    for n, h, w in [(1, 9, 13), (2, 32, 30), (1, 5, 70)]:
        x = rng.standard_normal((n, 3, h, w)).astype(np.float32)
        syms = {"Bt": n, "H": h, "W": w}
        (a,), (b,) = kern(x, syms=syms), wide(x, syms=syms)
        assert np.array_equal(a, b), (n, h, w)
        want = x
        for wt, s in zip(ws, (2, 2, 2, 1), strict=True):
            want = _conv_ref(want, wt, s)
        np.testing.assert_allclose(a, want, rtol=1e-4, atol=1e-4, err_msg=str((n, h, w)))
