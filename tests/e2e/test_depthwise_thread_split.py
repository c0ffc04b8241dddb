"""Depthwise convs on small planes split over 1, 2 and 3 threads, compared with onnxruntime.

`kernel/schedule.compute_work` counts a window's unrolled taps (a 5x5 depthwise conv: 25 loads
per output), so a depthwise conv on a plane of a few dozen pixels now runs through the pool
(before, under PAR_MIN_WORK element-operations, it ran on the caller). One library at symbolic
N, H, W with odd channel counts: a 1x1 3 -> 37 with Relu, a 5x5 depthwise on 37 channels
(stride 1, pads 2) with Relu, a 1x1 37 -> 72, a 3x3 depthwise on 72 at stride 2 with HardSwish,
and a 1x1 72 -> 24. Planes from 3x5 to 24x20, batch 1 to 3: parallel items (batch x rows,
or pixels) from a handful to a few hundred, chunks of unequal size. Each thread count runs in a
child process, as the pool's size is fixed when a library first runs a parallel loop.
Tolerances as test_conv_thread_split.py's (rtol 1e-4, atol 1e-4)."""

from __future__ import annotations

import onnx
import pytest
from compiled_model import assert_threads_match_onnxruntime, lib_fixture
from conv_net import ConvNet
from onnx import TensorProto, helper

SHAPES = [(1, 8, 8), (2, 12, 10), (3, 7, 9), (1, 24, 20), (2, 3, 5), (3, 16, 11)]


def _model(path):
    net = ConvNet(17)
    a = net.conv("x", "a", 3, 37, (1, 1), act="Relu")
    d5 = net.conv(a, "d5", 37, 37, (5, 5), group=37, act="Relu", pads=[2, 2, 2, 2])
    e = net.conv(d5, "e", 37, 72, (1, 1))
    d3 = net.conv(e, "d3", 72, 72, (3, 3), group=72, act="HardSwish", strides=[2, 2], pads=[1, 1, 1, 1])
    net.conv(d3, "y", 72, 24, (1, 1))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    onnx.save(net.model("depthwise_split", [x], [y], 14), path)


built = lib_fixture("depthwise_thread_split", _model, max_versions=1)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_depthwise_on_threads_matches_onnxruntime(built, threads, tmp_path):
    path, _ = built
    assert_threads_match_onnxruntime(path, SHAPES, threads, tmp_path)