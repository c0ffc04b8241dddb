"""The implicit-GEMM conv call's task grid on 1, 2 and 3 threads (codegen/cpu/gemm_call.py
`row_blocks`: more row blocks than the fewest where few tasks would leave a thread idle;
`Task.rows`: blocks of whole tiles differing by at most one, the longer first) and the pool's
chunks (runtime/onnxcc_rt.c: differing by at most one item, the longer first), compared with
onnxruntime.

One library at symbolic N, H, W: a stride-2 3x3 stem 3 -> 32 with Relu, a 3x3 32 -> 32 with
Relu, a 3x3 32 -> 40 with a residual Add of a 1x1 32 -> 40 and Relu, and a 3x3 40 -> 24 with
Relu and a 2x2 MaxPool (the call's pooled stores: a block's rows a multiple of 4). Each thread
count runs in a child process, as the pool's size is fixed when a library first runs a
parallel loop. Planes from 8x8 (a 4x4 map after the stem: 2 tiles, run serially) to 63x70,
odd and even, batch 1 to 3: task counts 1 to dozens, blocks of unequal tiles. Tolerances as
test_conv_implicit.py's (rtol 1e-4, atol 1e-4)."""

from __future__ import annotations

import onnx
import pytest
from compiled_model import assert_threads_match_onnxruntime, has_f32_conv_call, lib_fixture
from conv_net import ConvNet
from onnx import TensorProto, helper

SHAPES = [(1, 8, 8), (1, 32, 32), (2, 33, 29), (3, 45, 17), (1, 63, 70), (2, 24, 24), (3, 16, 40)]


def _model(path):
    net = ConvNet(11)
    s = net.conv("x", "stem", 3, 32, (3, 3), act="Relu", strides=[2, 2], pads=[1, 1, 1, 1])
    a = net.conv(s, "a", 32, 32, (3, 3), act="Relu", pads=[1, 1, 1, 1])
    b = net.conv(a, "b", 32, 40, (3, 3), pads=[1, 1, 1, 1])
    r = net.conv(a, "r", 32, 40, (1, 1))
    net.node("Add", [b, r], "sum")
    net.node("Relu", ["sum"], "sum_relu")
    c = net.conv("sum_relu", "c", 40, 24, (3, 3), act="Relu", pads=[1, 1, 1, 1])
    net.node("MaxPool", [c], "y", kernel_shape=[2, 2], strides=[2, 2])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    onnx.save(net.model("thread_split", [x], [y], 13), path)


built = lib_fixture("conv_thread_split", _model, max_versions=1)


@pytest.mark.skipif(not has_f32_conv_call(), reason="the conv call needs AVX-512F")
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_conv_call_on_threads_matches_onnxruntime(built, threads, tmp_path):
    path, _ = built
    assert_threads_match_onnxruntime(path, SHAPES, threads, tmp_path)