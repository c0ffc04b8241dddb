"""Grouped 2-D convs as a GEMM per (batch, group) (ops/conv_grouped.py): the window GEMM
with weights prepacked per group, compared with onnxruntime through the user path. Groups
2, 4, 8 and 32 with group widths 3, 4, 8 and 64 (and output groups of 2 to 24 rows: whole
and partial row panels), odd H and W, stride 2, asymmetric padding, dilation, a stride of
5 (past the window's phase planes: the packed GEMM instead), weights given as an input
(packed per call), a bias-free conv and fused epilogues; symbolic N, H, W at batch 1 and
3 (rtol 1e-4, atol 1e-4: sums of at most 576 products of N(0, 1) inputs and 0.1-scaled
weights)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from compiled_model import assert_matches_onnxruntime, lib_fixture
from onnx import TensorProto, helper, numpy_helper

import onnxcc

# (name, in channels, out channels, group, kernel, attrs, epilogue)
CONVS = [
    ("g4w8", 32, 32, 4, 3, dict(pads=[1, 1, 1, 1]), "relu"),
    ("g2w8s2", 16, 16, 2, 3, dict(pads=[1, 1, 1, 1], strides=[2, 2]), None),
    ("g32w4", 128, 64, 32, 3, dict(pads=[1, 1, 1, 1]), None),
    ("g2w64", 128, 48, 2, 3, dict(pads=[0, 1, 2, 1], dilations=[2, 1]), "relu"),
    ("g8w3", 24, 40, 8, 3, dict(pads=[1, 1, 1, 1], strides=[2, 1]), None),
    ("g4w3_1x1", 12, 8, 4, 1, {}, "relu"),
    ("g2w4_s5", 8, 6, 2, 3, dict(strides=[5, 5], pads=[1, 1, 1, 1]), None),
]


def _model(path, weights_as_input=False):
    rng = np.random.default_rng(3)
    nodes, inits, ins, outs = [], [], [], []
    ins.append(helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 128, "H", "W"]))
    for name, c, m, group, k, attrs, epi in CONVS:
        w = (rng.standard_normal((m, c // group, k, k)) * 0.1).astype(np.float32)
        if weights_as_input:
            ins.append(helper.make_tensor_value_info(f"w_{name}", TensorProto.FLOAT, list(w.shape)))
        else:
            inits.append(numpy_helper.from_array(w, f"w_{name}"))
        conv_in = [f"x_{name}", f"w_{name}"]
        if name != "g32w4":  # one conv without a bias
            inits.append(numpy_helper.from_array(rng.standard_normal(m).astype(np.float32), f"b_{name}"))
            conv_in.append(f"b_{name}")
        inits.append(numpy_helper.from_array(np.array([0, 0, 0, 0], np.int64), f"s0_{name}"))
        inits.append(numpy_helper.from_array(np.array([1 << 30, c, 1 << 30, 1 << 30], np.int64), f"s1_{name}"))
        nodes.append(helper.make_node("Slice", ["x", f"s0_{name}", f"s1_{name}"], [f"x_{name}"]))
        conv_out = name if epi is None else f"c_{name}"
        nodes.append(helper.make_node("Conv", conv_in, [conv_out], group=group, **attrs))
        if epi == "relu":
            nodes.append(helper.make_node("Relu", [conv_out], [name]))
        outs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    g = helper.make_graph(nodes, "grouped_convs", ins, outs, inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    return {f"w_{n}": numpy_helper.to_array(i) for i in inits for n, *_ in CONVS if i.name == f"w_{n}"}


built = lib_fixture("grouped_convs", _model)


@pytest.mark.parametrize("n,h,w", [(1, 9, 13), (3, 16, 11), (1, 28, 28)])
def test_grouped_convs_match_onnxruntime(built, n, h, w):
    path, lib = built
    x = np.random.default_rng(h * w).standard_normal((n, 128, h, w)).astype(np.float32)
    assert_matches_onnxruntime(path, lib, {"x": x}, rtol=1e-4, atol=1e-4, where=(n, h, w))


def test_grouped_convs_with_weights_as_inputs(tmp_path):
    """Weights the compile cannot see: A is packed per call, per group."""
    _model(tmp_path / "m.onnx", weights_as_input=True)
    onnxcc.compile(tmp_path / "m.onnx", tmp_path / "lib")
    lib = onnxcc.load(tmp_path / "lib")
    rng = np.random.default_rng(9)
    feeds = {"x": rng.standard_normal((2, 128, 10, 7)).astype(np.float32)}
    for name, c, m, group, k, *_ in CONVS:
        feeds[f"w_{name}"] = (rng.standard_normal((m, c // group, k, k)) * 0.1).astype(np.float32)
    assert_matches_onnxruntime(tmp_path / "m.onnx", lib, feeds, rtol=1e-4, atol=1e-4)


def test_grouped_conv_lowers_to_a_gemm_per_group(tmp_path):
    """The lowering's GEMM: the group a batch var of both operands, the group's output channels
    the rows, (oh, ow) the columns, B through the window's padded copy, A prepacked per group."""
    from onnxcc.frontend import load_onnx
    from onnxcc.kernel.schedule import TargetInfo, schedule_program
    from onnxcc.passes import run_pipeline
    from onnxcc.passes.lower import lower_function

    w = numpy_helper.from_array((np.arange(32 * 8 * 9, dtype=np.float32) % 7).reshape(32, 8, 3, 3), "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], group=4, pads=[1, 1, 1, 1])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 9, 9])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), tmp_path / "g.onnx")
    mod = load_onnx(tmp_path / "g.onnx")
    run_pipeline(mod, "shape-inference,canonicalize")
    prog = lower_function(mod, mod.main, "g")
    schedule_program(prog, TargetInfo(gemm_min_work=1))
    gemms = [c.schedule.gemm for c in prog.computes() if c.schedule.gemm is not None]
    assert len(gemms) == 1
    g = gemms[0]
    assert len(g.batch) == 2 and g.a_batch_vars == g.batch[1:] and len(g.m) == 1 and len(g.n) == 2
    assert g.window is not None and g.a_packed is not None
    # one block of panels per group: [groups * panels, K, mr], group 1's rows are W[8:16]
    assert g.a_packed.shape[0] % 4 == 0 and g.a_packed.shape[1] == 72
    per = g.a_packed.shape[0] // 4
    np.testing.assert_array_equal(g.a_packed[per, :, :8].T, numpy_helper.to_array(w)[8:16].reshape(8, 72))
