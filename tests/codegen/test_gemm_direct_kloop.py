"""The k loop of the micro-kernel that reads A in place (codegen/cpu/gemm_ukr.py, A direct):
one k step per iteration for a full tile, `sets` steps (rounded up to a power of two) for
short tiles, and a remainder loop. Every K from 1 past a multiple of 4, every tile height
(M of odd sizes, so row tails of 1 to 11 rows) and N with masked column tails, against
numpy (rtol 1e-4, atol scaled with sqrt(K): f32 sums in another order). Also checks the
loop holds no spill: that is what the barrier between iterations is for."""

from __future__ import annotations

import re

import numpy as np
import pytest

from onnxcc.codegen.cpu.jit import JitKernel
from onnxcc.ir import DType, sym
from onnxcc.kernel import KernelProgram, Var, rsum
from onnxcc.kernel.schedule import TargetInfo, schedule_program

F32 = DType.f32
M, K = sym("M"), sym("K")
rng = np.random.default_rng(11)


def _kernel(n: int) -> tuple[JitKernel, None]:
    """C[M, n] = A[M, K] @ W[K, n] with A a plain input (read in place) and W a runtime
    input of symbolic K (packed per call)."""
    p = KernelProgram.new(f"direct{n}", ["M", "K"])
    a = p.input("A", F32, (M, K))
    w = p.input("W", F32, (K, n))
    c = p.output("C", F32, (M, n))
    k = Var("k")
    p.compute(c, lambda i, j: rsum([(k, K)], a[i, k] * w[k, j]))
    schedule_program(p, TargetInfo(parallel=False, gemm_min_work=1))
    g = p.body[0].schedule.gemm
    assert g is not None and g.a_direct, p.body[0].schedule.describe()
    return JitKernel(p, parallel=False), None


@pytest.mark.parametrize("n", [8, 16, 40])
def test_direct_a_every_k_and_row_tail(n):
    kern, _ = _kernel(n)
    for m in (1, 2, 3, 5, 7, 13, 29):
        for kk in (1, 2, 3, 5, 6, 7, 9, 33, 130):
            a = rng.standard_normal((m, kk)).astype(np.float32)
            w = rng.standard_normal((kk, n)).astype(np.float32)
            (got,) = kern(a, w, syms={"M": m, "K": kk})
            np.testing.assert_allclose(got, a @ w, rtol=1e-4, atol=4e-5 * max(1, kk) ** 0.5,
                                       err_msg=f"M={m} K={kk} N={n}")


def _chain(path) -> None:
    """Four mobile-net blocks (3x3 depthwise -> 1x1 -> HardSwish) of 16 -> 32 -> 64 -> 128 ->
    128 channels: channels-last (passes/nhwc_region.py), 1x1 convs with A read in place at
    lda 16 to 128 (various leading dims: no constant for LLVM to fold into the addresses)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    inits, nodes, cur = [], [], "x"
    for i, (ci, co) in enumerate([(16, 32), (32, 64), (64, 128), (128, 128)]):
        inits += [numpy_helper.from_array((rng.standard_normal((ci, 1, 3, 3)) / 3).astype(np.float32), f"wd{i}"),
                  numpy_helper.from_array((rng.standard_normal((co, ci, 1, 1)) / np.sqrt(ci)).astype(np.float32),
                                          f"w{i}")]
        nodes += [helper.make_node("Conv", [cur, f"wd{i}"], [f"a{i}"], group=ci, pads=[1, 1, 1, 1]),
                  helper.make_node("Conv", [f"a{i}", f"w{i}"], [f"b{i}"]),
                  helper.make_node("HardSwish", [f"b{i}"], [f"c{i}"])]
        cur = f"c{i}"
    nodes.append(helper.make_node("Identity", [cur], ["y"]))
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16, 19, 19])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def _loop_bodies(asm: str) -> list[str]:
    """The text of each loop of one function's assembly: from a label to the last branch
    back to it. The epilogue after the k loop (a HardSwish column epilogue's few spills, once
    per tile) is not what the barrier is for."""
    lines = asm.splitlines()
    loops = []
    for i, line in enumerate(lines):
        label = re.match(r"(\.LBB\d+_\d+):", line)
        if label:
            jump_back = re.compile(rf"\bj\w+\s+{re.escape(label.group(1))}$")
            back = [j for j in range(i + 1, len(lines)) if jump_back.search(lines[j])]
            if back:
                loops.append("\n".join(lines[i:back[-1] + 1]))
    return loops


def test_direct_a_loop_has_no_spill(tmp_path):
    """No direct micro-kernel's k loop stores more than two vectors to the stack (the barrier keeps
    the scheduler from hoisting later steps' broadcasts above this step's FMAs; without it
    this chain's 12 x 32 tile spilled 34 times), and the chain agrees with onnxruntime
    (rtol / atol 1e-4) at batch 1 and 3 over a 19 x 19 plane (row tails of every height)."""
    import onnxcc
    from onnxcc.compiler.compile import compile_model
    from onnxcc.testing import ort_run

    path = str(tmp_path / "chain.onnx")
    _chain(path)
    asm = compile_model(path, str(tmp_path / "asm"), emit="asm").text
    bodies = re.findall(r"onnxcc\.gemm\.ukr\.\d+x\d+\.direct[.\w]*:(.*?)\.Lfunc_end", asm, re.S)
    if not bodies:
        pytest.skip("no x86 micro-kernel with A read in place on this target")
    for body in bodies:
        loops = _loop_bodies(body)
        assert loops, body
        for loop in loops:
            assert len(re.findall(r"vmov\w+\s+%[xyz]mm\d+, -?\d*\(%rsp\)", loop)) <= 2, loop
    onnxcc.compile(path, str(tmp_path / "lib"))
    lib = onnxcc.load(str(tmp_path / "lib"))
    for n in (1, 3):
        x = rng.standard_normal((n, 16, 19, 19)).astype(np.float32)
        got = lib.run({"x": x})["y"]
        np.testing.assert_allclose(got, ort_run(path, {"x": x})["y"], rtol=1e-4, atol=1e-4)
