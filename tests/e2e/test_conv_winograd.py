"""Dense 3x3 stride-1 convs of 16 to 128 channels in a channels-last region run on the
Winograd call (ops/conv_implicit.py `_callee`, codegen/cpu/conv_wino.py): F(2x2, 3x3) on
blocks of 12 output tiles, bias / residual / Relu in the stores, half tiles at odd H and W.

The graph: a 3 -> 8 stem (the stem call), 8 -> 24 (8 input channels: the GEMM call), then
24 -> 32 + Relu (input channels off the vector width; its map an output), 32 -> 32 whose Add
with that map and the Relu after it fold into its stores (a flat residual), again 32 -> 32
with a residual (a padded map's, read through the call's offset table), 32 -> 17
with asymmetric pads (0, 1, 2, 1) and no bias (output channels off the width; P taller than
the plane by 2 all below), 17 -> 40 + Relu; two maps are outputs. Symbolic N, H, W, planes
from 1x1 to 40x23 (half tiles on both axes, blocks spanning tile rows, a block of one tile),
1 to 3 threads in child processes. Tolerance rtol 1e-4, atol 1e-4 as the other conv tests:
Winograd's error is the direct sum's times a small constant (tests/kernel/
test_conv_wino_call.py measures both against float64).

Inf and NaN: a block whose transformed input is not finite is computed by the direct conv,
so an Inf input gives onnxruntime's +-Inf (Winograd alone would mix it into NaN over its
tile's pixels, and the Relu after would not clear them)."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from compiled_model import (
    assert_matches_onnxruntime,
    assert_threads_match_onnxruntime,
    f32conv_sizes,
    has_f32_conv_call,
    lib_fixture,
)
from conv_net import ConvNet
from onnx import TensorProto, helper

import onnxcc

SHAPES = [(1, 1, 1), (2, 2, 3), (1, 5, 7), (3, 9, 16), (1, 40, 23), (2, 17, 12)]
WINO = ["onnxcc_f32wino_c24m32", "onnxcc_f32wino_c32m32", "onnxcc_f32wino_c32m32", "onnxcc_f32wino_c32m17",
        "onnxcc_f32wino_c17m40"]


def _model(path) -> None:
    net = ConvNet(5)

    def node(op, *ins):
        return net.node(op, list(ins))

    def conv(x, cin, cout, pads=(1, 1, 1, 1), bias=True):
        return net.conv(x, net.fresh("Conv"), cin, cout, 3, bias=bias, kernel_shape=[3, 3], pads=list(pads))

    h = node("Relu", conv("x", 3, 8))
    h = node("Relu", conv(h, 8, 24))
    s = node("Relu", conv(h, 24, 32))
    h = node("Relu", node("Add", conv(s, 32, 32), s))
    r = node("Relu", node("Add", h, conv(h, 32, 32)))
    y = node("Relu", conv(conv(r, 32, 17, pads=(0, 1, 2, 1), bias=False), 17, 40))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])
    onnx.save(net.model("winograd", [x], [s, r, y], 13), path)


built = lib_fixture("winograd", _model, max_versions=1)


def _feeds(n, h, w, seed):
    return {"x": np.random.default_rng(seed).standard_normal((n, 3, h, w)).astype(np.float32)}


def test_dense_3x3_convs_route_to_winograd(tmp_path):
    if not has_f32_conv_call():
        pytest.skip("the conv calls need AVX-512")
    _model(tmp_path / "m.onnx")
    kir = onnxcc.compile(tmp_path / "m.onnx", tmp_path / "k", emit="kernel", max_versions=1).text
    calls = re.findall(r"call (onnxcc_f32\w+)\(", kir)
    assert [c for c in calls if "wino" in c] == WINO, calls
    assert calls.count("onnxcc_f32conv") == 1, calls  # 8 input channels: the GEMM call
    # out pads, a flat residual (its map an output: unpadded), a padded one (read through V)
    sizes = [s for c, s in zip(calls, f32conv_sizes(kir), strict=True) if "wino" in c]
    assert [(s["res"], s["rpad"]) for s in sizes[1:3]] == [("1", "0"), ("1", "1")]
    assert any(s["opt"] == "1" for s in sizes)


@pytest.mark.parametrize("dims", SHAPES, ids=lambda d: "x".join(map(str, d)))
def test_winograd_convs_match_onnxruntime(built, dims):
    path, lib = built
    n, h, w = dims
    assert_matches_onnxruntime(path, lib, _feeds(n, h, w, h * 100 + w), rtol=1e-4, atol=1e-4, where=dims)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_threads_match_onnxruntime(built, threads, tmp_path):
    path, _ = built
    assert_threads_match_onnxruntime(path, [(2, 40, 23), (1, 23, 40), (3, 6, 5)], threads, tmp_path)


def _inf_model(path) -> None:
    """x [N, 16, H, W] -> 16 -> 16 conv, Relu, 16 -> 16 conv, every weight and bias positive: an
    Inf input is an Inf output over its windows (no Inf - Inf in the direct sums)"""
    net = ConvNet(9)
    h = net.node("Relu", [net.conv("x", "c0", 16, 16, 3, kernel_shape=[3, 3], pads=[1] * 4)])
    h = net.conv(h, "c1", 16, 16, 3, kernel_shape=[3, 3], pads=[1] * 4)
    for t in net.inits:
        t.CopyFrom(onnx.numpy_helper.from_array(np.abs(onnx.numpy_helper.to_array(t)), t.name))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16, "H", "W"])
    onnx.save(net.model("winograd_inf", [x], [h], 13), path)


built_inf = lib_fixture("winograd_inf", _inf_model, max_versions=1)


def test_inf_and_nan_inputs_give_the_direct_convs_answer(built_inf, tmp_path):
    """+Inf, -Inf (0 after the first conv's Relu) and NaN pixels: every element as
    onnxruntime's, +Inf over an Inf pixel's 5x5 neighbourhood, NaN over a NaN's, finite
    elsewhere"""
    path, lib = built_inf
    if has_f32_conv_call():
        kir = onnxcc.compile(path, tmp_path / "k", emit="kernel", max_versions=1).text
        assert re.findall(r"call (onnxcc_f32\w+)\(", kir) == ["onnxcc_f32wino_c16m16"] * 2
    x = np.random.default_rng(3).standard_normal((2, 16, 19, 14)).astype(np.float32)
    x[0, 0, 3, 4] = np.inf
    x[0, 1, 12, 9] = -np.inf
    x[1, 2, 7, 7] = np.nan
    x[1, 5, 15, 2] = np.inf
    assert_matches_onnxruntime(path, lib, {"x": x}, rtol=1e-4, atol=1e-4, where="inf")
    (y,) = lib.run({"x": x}).values()
    assert np.isposinf(y[0, :, 1:6, 2:7]).all() and np.isnan(y[1, :, 5:10, 5:10]).all()
    assert np.isfinite(y[0, :, 8:, :]).all()
