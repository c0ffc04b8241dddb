"""MaxPool and AveragePool through the unrolled-tap lowering (ops/nn.py `_pool_taps`: a
padded copy, taps summed or maxed; strided along the last axis: the window at every column,
then every s-th picked, `_pool_dense_rows`) compiled once at symbolic N, H, W and compared
with onnxruntime at odd and even sizes (max: exact; average: rtol 1e-5), plus inputs
holding inf and nan, MaxPool with Indices (the reduce lowering), and 1-D and 3-D pools."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from compiled_model import assert_matches_onnxruntime, lib_fixture
from onnx import TensorProto, helper

import onnxcc

C = 5
# (name, op, attrs)
POOLS = [
    ("max_k3_s2_ceil", "MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ("max_k3_s2_p1", "MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ("max_k2_s2", "MaxPool", dict(kernel_shape=[2, 2], strides=[2, 2])),
    ("max_k3_s1_p1", "MaxPool", dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])),
    ("max_k5_s2_same", "MaxPool", dict(kernel_shape=[5, 5], strides=[2, 2], auto_pad="SAME_UPPER")),
    ("max_k3_d2", "MaxPool", dict(kernel_shape=[3, 3], strides=[1, 2], dilations=[2, 2], pads=[0, 2, 1, 0])),
    ("avg_k3_s2_p1", "AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ("avg_k3_s2_p1_incl", "AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                                             count_include_pad=1)),
    ("avg_k3_s2_ceil", "AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ("avg_k2_s2", "AveragePool", dict(kernel_shape=[2, 2], strides=[2, 2])),
]


def _model(path):
    nodes, outs = [], []
    for name, op, attrs in POOLS:
        nodes.append(helper.make_node(op, ["x"], [name], **attrs))
        outs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    nodes.append(helper.make_node("MaxPool", ["x"], ["max_idx_v", "max_idx"], kernel_shape=[3, 3], strides=[2, 2]))
    outs += [helper.make_tensor_value_info("max_idx_v", TensorProto.FLOAT, None),
             helper.make_tensor_value_info("max_idx", TensorProto.INT64, None)]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", C, "H", "W"])
    g = helper.make_graph(nodes, "pools", [x], outs)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)]), path)


built = lib_fixture("pools", _model)


def _compare(path, lib, x, where):
    assert_matches_onnxruntime(path, lib, {"x": x}, rtol=1e-5, atol=1e-6, where=where)


@pytest.mark.parametrize("n,h,w", [(1, 5, 7), (2, 9, 10), (1, 17, 33), (3, 32, 64), (1, 63, 55)])
def test_pools_match_onnxruntime(built, n, h, w):
    path, lib = built
    x = np.random.default_rng(h * w).standard_normal((n, C, h, w)).astype(np.float32)
    _compare(path, lib, x, (n, h, w))


def test_inf_reaches_only_its_own_windows(built):
    """A column of inf and one of -inf: the pairing load of each stride-2 row reads the
    next window's first column and must leave this window's maximum and average alone."""
    path, lib = built
    x = np.random.default_rng(4).standard_normal((1, C, 11, 21)).astype(np.float32)
    x[:, :, :, 5] = np.inf  # read by output column 1's pairing load, in column 2's window
    x[:, 2, :, 12] = -np.inf
    _compare(path, lib, x, "non-finite input")
    got = lib.run({"x": x})
    for name in ("max_k3_s2_ceil", "avg_k3_s2_ceil"):
        assert np.isfinite(got[name][..., :2]).all(), name  # windows over columns 0..4
        assert np.isinf(got[name][..., 2]).all(), name


@pytest.mark.parametrize("rank", [1, 3])
def test_strided_pools_of_other_ranks(tmp_path, rank):
    """The dense-rows lowering at rank 1 (no outer window dims) and 3 (two of them)."""
    nodes = [helper.make_node("MaxPool", ["x"], ["mx"], kernel_shape=[3] * rank, strides=[2] * rank,
                              pads=[1] * (2 * rank)),
             helper.make_node("AveragePool", ["x"], ["av"], kernel_shape=[2] * rank, strides=[1] * (rank - 1) + [3],
                              ceil_mode=1)]
    dims = ["N", C] + [f"D{i}" for i in range(rank)]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("mx", "av")]
    onnx.save(helper.make_model(helper.make_graph(nodes, "pools", [x], outs),
                                opset_imports=[helper.make_opsetid("", 19)]), tmp_path / "p.onnx")
    onnxcc.compile(tmp_path / "p.onnx", tmp_path / "lib")
    lib = onnxcc.load(tmp_path / "lib")
    for size in (5, 8, 19):
        x = np.random.default_rng(size).standard_normal((2, C, *[size + i for i in range(rank)])).astype(np.float32)
        _compare(tmp_path / "p.onnx", lib, x, (rank, size))
