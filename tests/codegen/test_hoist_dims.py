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


def _two_versions(shared: bool) -> tuple[int, list[str]]:
    """Two versions of one conv stack, the second with one more conv in front: its memory plan
    puts T1..T3 and the GEMM scratch at other offsets, and its owner asks for more slots before
    theirs. Emitted as the backend does (one slot numbering for both when `shared`), then
    dedup.py: how many functions became stubs, and the second version's stubs."""
    from llvmlite import ir

    from onnxcc.codegen.cpu.dedup import forward_duplicates
    from onnxcc.codegen.cpu.emit import emit_llvm
    from onnxcc.kernel.plan_memory import plan as plan_memory
    from onnxcc.kernel.plan_memory import reserve_scratch

    slots: dict | None = {} if shared else None
    mods = []
    for k in range(2):
        p = KernelProgram.new(f"m_v{k}", ["Bt", "H", "W"])
        x = p.input("X", F32, (Bt, 3, H, W))
        if k:
            x, _, _ = _conv(p, x, 3, H, W, "T0", 3, 1, True)
        h, w = H, W
        for out, cin in (("T1", 3), ("T2", 8), ("T3", 8)):
            x, h, w = _conv(p, x, cin, h, w, out, 8, 2, True)
        _conv(p, x, 8, h, w, "Y", 8, 1, False)
        schedule_program(p, TargetInfo(parallel=True, gemm_min_work=1))
        m = ir.Module(name=p.name)
        emit_llvm(p, reserve_scratch(plan_memory(p), p), p.name, m, parallel=True, hoist_slots=slots)
        mods.append((m, p.name))
    n = forward_duplicates(mods)
    stubs = [f.name for f in mods[1][0].functions if f.blocks and len(f.blocks) == 1
             and 'tail call void @"m_v0.' in str(f)]
    return n, stubs


def test_versions_share_slot_numbers_so_their_equal_bodies_compile_once(monkeypatch):
    """Every symbolic dim hoisted (threshold 1): the later layers' bodies of the two versions
    differ only in where their dims come from. With one slot numbering for the build, a temp's
    offset and the GEMM scratch's numbered by their role (not by their values, which the
    versions' plans make differ), they print alike and the second version's become stubs;
    numbered per version (the old way), the extra layer shifts every slot and none does."""
    monkeypatch.setattr(hoist_dims, "HOIST_MIN_NODES", 1)
    monkeypatch.setattr(hoist_dims, "_SIZES", {})
    n_shared, stubs = _two_versions(shared=True)
    n_apart, _ = _two_versions(shared=False)
    assert n_shared >= 2 and n_shared > n_apart, (n_shared, n_apart)
    assert any(".T3" in s or ".Y" in s for s in stubs), stubs


def test_an_owners_array_reaches_its_highest_shared_slot():
    """A shared numbering may give an owner slots that do not start at 0: its array is sized
    to the highest one (`finish` indexes it by slot number)."""
    shared: dict = {"other": 0, "another": 1}
    owner = hoist_dims.HoistedDims(shared)
    assert owner.slot(H * W, ("offset", "T")) == 2
    assert owner.slot(H * W) == 3  # by value: another key, another slot
    assert hoist_dims.HoistedDims().slot(H * W, ("offset", "T")) == 0  # unshared: from 0
