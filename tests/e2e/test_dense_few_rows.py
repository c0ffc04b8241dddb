"""A channels-last net's last stage, whose 1x1 convs are dense layers (kernel/schedule.py
`GemmPlan.dense`) over a few pixels: on several threads their tasks are cut to as little as
one B panel where the row panels alone would leave the pool's chunks short (codegen/cpu/
gemm_dense.py `dense_blocks`), mnasnet0_5's tail at batch 2, 96x80 (M = 18: row panels of 12
and 6). Compared with onnxruntime on 1, 2 and 3 threads (each in a child process).

One library at symbolic N, H, W: a 1x1 96 -> 576 with Relu, a depthwise 3x3 with Relu (what
makes the chain a channels-last region), a 1x1 576 -> 96 with the block's residual, a 1x1
96 -> 160 (5 panels of 32), a 1x1 160 -> 1280 with Relu and mnasnet's head, the mean over
H, W without its dims (the region's only exit a Reshape, so it pays for its entry). Planes from 1x1 to 5x7, batch 1
to 3: M from 1 to 105 pixels, one partial row panel or several, odd panel counts. rtol 1e-4,
atol 1e-4: f32 sums of up to 576 terms in another order."""

from __future__ import annotations

import onnx
import pytest
from compiled_model import assert_threads_match_onnxruntime, lib_fixture
from conv_net import ConvNet
from onnx import TensorProto, helper

import onnxcc

SHAPES = [(1, 1, 1), (2, 3, 3), (1, 4, 4), (3, 2, 3), (2, 5, 7), (3, 3, 3)]


def _model(path):
    net = ConvNet(41)
    e = net.conv("x", "expand", 96, 576, 1, act="Relu")
    d = net.conv(e, "dw", 576, 576, 3, group=576, act="Relu", pads=[1, 1, 1, 1])
    p = net.conv(d, "project", 576, 96, 1)
    r = net.node("Add", [p, "x"], "res")
    w = net.conv(r, "wide", 96, 160, 1)
    h = net.conv(w, "head", 160, 1280, 1, act="Relu")
    m = net.node("ReduceMean", [h], "mean", axes=[2, 3], keepdims=0)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 96, "H", "W"])
    onnx.save(net.model("dense_few_rows", [x], [m], 13), path)


built = lib_fixture("dense_few_rows", _model, max_versions=1)


def test_tail_convs_are_dense_layers(built, tmp_path):
    """the 1x1 convs run as dense GEMMs on a channels-last map (else the test misses its path)"""
    path, _ = built
    import onnxcc.compiler.compile as cc
    from onnxcc.kernel.program import Compute

    got = {}
    run = cc.run_pipeline

    def keep(module, pipeline, ctx):
        got["k"] = run(module, pipeline, ctx)
        return got["k"]

    cc.run_pipeline = keep
    try:
        onnxcc.compile(path, tmp_path / "k", emit="kernel", max_versions=1)
    finally:
        cc.run_pipeline = run
    plans = [s.schedule.gemm for s in got["k"].versions[0].program.body
             if isinstance(s, Compute) and s.schedule is not None and s.schedule.gemm is not None]
    assert sum(g.dense for g in plans) >= 3, [g.describe() for g in plans]


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_few_row_panels_on_threads_match_onnxruntime(built, threads, tmp_path):
    path, _ = built
    assert_threads_match_onnxruntime(path, SHAPES, threads, tmp_path, channels=96)
