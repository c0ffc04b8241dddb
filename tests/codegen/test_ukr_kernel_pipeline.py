"""The GEMM micro-kernels (codegen/cpu/gemm_ukr.py) get only the short IR pipeline
(llvm/target.py `KERNEL`), not -O3: their loops must come out of the code generator with the
instructions -O3 gave them (the same count of each mnemonic, loop control included), for the
tile shapes whose -O3 code differs in kind: A read in place (one k step per iteration and a
barrier), packed A with few rows (for znver4 LLVM unrolls their short k loop: the short
pipeline keeps the unroller for them), a column epilogue (HardSwish's chain) and both vector
widths, for two CPUs whose unrolling preferences differ."""

from __future__ import annotations

import dataclasses
import re
from collections import Counter

import pytest
from llvmlite import ir

from onnxcc.codegen.cpu.gemm_ukr import ukr_function
from onnxcc.codegen.llvm.target import KERNEL, optimized, target_machine
from onnxcc.ir import DType, sym
from onnxcc.kernel import KernelProgram, Var, rsum
from onnxcc.kernel.row_epilogue import RowOp
from onnxcc.kernel.schedule import TargetInfo, schedule_program

F32 = DType.f32
M, K = sym("M"), sym("K")

# HardSwish's x * min(max(x / 6 + 0.5, 0), 1), as kernel/row_epilogue.py writes it
_HARDSWISH = (RowOp("mulself", sub=(RowOp("mul", 1 / 6), RowOp("add", 0.5), RowOp("max", 0.0), RowOp("min", 1.0))),)


def _plan():
    """The GemmPlan of C[M, 32] = A[M, K] @ W[K, 32], A read in place."""
    p = KernelProgram.new("ukr", ["M", "K"])
    a = p.input("A", F32, (M, K))
    w = p.input("W", F32, (K, 32))
    c = p.output("C", F32, (M, 32))
    k = Var("k")
    p.compute(c, lambda i, j: rsum([(k, K)], a[i, k] * w[k, j]))
    schedule_program(p, TargetInfo(parallel=False, gemm_min_work=1))
    g = p.body[0].schedule.gemm
    assert g is not None and g.a_direct
    return g


def _loops(asm: str, fn: str) -> list[Counter]:
    """Each loop of function `fn`'s assembly (a label up to the last branch back to it) as the
    count of each mnemonic."""
    body = asm.split(f"{fn}:", 1)[1].split(".Lfunc_end", 1)[0]
    lines = [x.strip() for x in body.splitlines() if x.strip() and not x.strip().startswith(("#", ".p2align"))]
    at = {x[:-1]: i for i, x in enumerate(lines) if re.fullmatch(r"\.LBB\w+:", x)}
    out = []
    for i, x in enumerate(lines):
        m = re.fullmatch(r"j\w+\s+(\.LBB\w+)", x)
        if m and m.group(1) in at and at[m.group(1)] < i:
            out.append(Counter(y.split()[0] for y in lines[at[m.group(1)] + 1:i + 1] if not y.startswith(".")))
    return out


@pytest.mark.parametrize("cpu", ["znver4", "skylake-avx512"])
@pytest.mark.parametrize("vl", [16, 8])
def test_kernel_pipeline_keeps_o3s_loops(vl, cpu):
    g = _plan()
    cases = [  # (rows, plan)
        (12, dataclasses.replace(g, mr=12, nr=2 * vl, vl=vl)),
        (2, dataclasses.replace(g, mr=12, nr=2 * vl, vl=vl)),
        (8, dataclasses.replace(g, mr=8, nr=vl, vl=vl, col_ops=_HARDSWISH)),
        (12, dataclasses.replace(g, a_direct=False, mr=12, nr=2 * vl, vl=vl)),
        (1, dataclasses.replace(g, a_direct=False, mr=12, nr=2 * vl, vl=vl)),
        (2, dataclasses.replace(g, a_direct=False, mr=12, nr=2 * vl, vl=vl)),
    ]
    module = ir.Module(name="ukr")
    names = []
    for rows, plan in cases:
        fn = ukr_function(module, rows, plan)
        fn.linkage = "external"  # (internal and unused, LLVM would drop it)
        names.append(fn.name)
    text = str(module)
    tm = target_machine(cpu=cpu, features="", triple="x86_64-unknown-linux-gnu")
    o3 = tm.emit_assembly(optimized(text, tm, 3))
    short = tm.emit_assembly(optimized(text, tm, KERNEL))
    unrolled = False
    for name in names:
        want, got = _loops(o3, name), _loops(short, name)
        assert want and got == want, name
        unrolled |= max(c["vfmadd231ps"] for c in want) > 4 * 2 and ".a12." in name and ".1x" in name
    # on znver4 LLVM unrolls the 1-row packed tile's k loop once more: the case that needs the unroller
    assert unrolled == (cpu == "znver4")
