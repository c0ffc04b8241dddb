"""Convs whose window GEMM has a static grid of at most four columns take the column
micro-kernel (codegen/cpu/gemm_gemv.py: output channels in the lanes, one pass over the
weights): 1x1 convs on 1x1, 1x2 and 2x2 planes (squeeze-excitation convs after a global
pool), a padded 3x3 on a 1x1 plane (grid of 3: the padded copy's columns) and a stride-2
3x3 down to 1x1. Output channels 24, 40, 72, 96 and 100 leave whole and partial 24-row panels
and partial vectors; epilogues relu, hard-sigmoid (mul, add, max, min in registers) and a
residual Add (a tile operand: the tile micro-kernel keeps it). Symbolic batch at 1 and 3,
compared with onnxruntime (rtol 1e-4, atol 1e-4: sums of at most 1152 products of N(0, 1)
inputs and 0.1-scaled weights)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from compiled_model import assert_matches_onnxruntime, lib_fixture
from onnx import TensorProto, helper, numpy_helper

from onnxcc.codegen.cpu.jit import JitKernel
from onnxcc.ir import DType, sym
from onnxcc.kernel import KernelProgram, Var, rsum
from onnxcc.kernel.schedule import TargetInfo, schedule_program

# (name, in channels, out channels, kernel, attrs, plane (H, W), epilogue)
CONVS = [
    ("se_relu", 128, 96, 1, {}, (1, 1), "relu"),
    ("se_hsig", 64, 100, 1, {}, (1, 1), "hardsigmoid"),
    ("cls", 128, 40, 1, {}, (1, 1), None),
    ("res", 72, 72, 1, {}, (1, 1), "residual"),
    ("p12", 96, 24, 1, {}, (1, 2), "relu"),
    ("p22", 32, 40, 1, {}, (2, 2), None),
    ("k3", 32, 24, 3, dict(pads=[1, 1, 1, 1]), (1, 1), "relu"),
    ("k3s2", 32, 24, 3, dict(pads=[1, 1, 1, 1], strides=[2, 2]), (2, 2), None),
]


def _model(path):
    rng = np.random.default_rng(5)
    nodes, inits, ins, outs = [], [], [], []
    for name, c, m, k, attrs, (h, w), epi in CONVS:
        ins.append(helper.make_tensor_value_info(f"x_{name}", TensorProto.FLOAT, ["N", c, h, w]))
        inits += [numpy_helper.from_array((rng.standard_normal((m, c, k, k)) * 0.1).astype(np.float32), f"w_{name}"),
                  numpy_helper.from_array(rng.standard_normal(m).astype(np.float32), f"b_{name}")]
        conv_out = name if epi is None else f"c_{name}"
        nodes.append(helper.make_node("Conv", [f"x_{name}", f"w_{name}", f"b_{name}"], [conv_out], **attrs))
        if epi == "relu":
            nodes.append(helper.make_node("Relu", [conv_out], [name]))
        elif epi == "hardsigmoid":
            nodes.append(helper.make_node("HardSigmoid", [conv_out], [name], alpha=0.2, beta=0.5))
        elif epi == "residual":  # the input has the output's shape (c == m, 1x1 plane)
            nodes.append(helper.make_node("Add", [conv_out, f"x_{name}"], [name]))
        outs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    g = helper.make_graph(nodes, "gemv_convs", ins, outs, inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


built = lib_fixture("gemv_convs", _model)


@pytest.mark.parametrize("n", [1, 3])
def test_convs_on_tiny_planes_match_onnxruntime(built, n):
    path, lib = built
    rng = np.random.default_rng(n)
    feeds = {f"x_{name}": rng.standard_normal((n, c, h, w)).astype(np.float32)
             for name, c, _, _, _, (h, w), _ in CONVS}
    assert_matches_onnxruntime(path, lib, feeds, rtol=1e-4, atol=1e-4, where=n)


def test_the_column_kernel_runs_for_a_few_columns_only():
    """A 1x1 conv on a static 1x1 plane emits the column micro-kernel and matches numpy;
    the same conv on a 3x2 plane (6 columns) keeps the tile micro-kernel."""
    F32 = DType.f32
    bt = sym("Bt")
    rng = np.random.default_rng(2)
    for (h, w), want in (((1, 1), True), ((3, 2), False)):
        p = KernelProgram.new("gv", ["Bt"])
        x = p.input("X", F32, (bt, 48, h, w))
        wt = p.const("Wt", (rng.standard_normal((52, 48)) * 0.1).astype(np.float32))
        y = p.output("Y", F32, (bt, 52, h, w))
        c = Var("c")
        p.compute(y, lambda n, f, oy, ox: rsum([(c, 48)], x[n, c, oy, ox] * wt[f, c]))
        schedule_program(p, TargetInfo(gemm_min_work=1))
        kern = JitKernel(p)
        assert ("onnxcc.gemm.gemv." in kern.llvm_ir) is want
        xs = rng.standard_normal((2, 48, h, w)).astype(np.float32)
        (got,) = kern(xs, syms={"Bt": 2})
        want_y = np.einsum("nchw,fc->nfhw", xs, p.buffers["Wt"].data)
        np.testing.assert_allclose(got, want_y, rtol=1e-4, atol=1e-4, err_msg=f"{h}x{w}")
