"""The channels-last global pools (onnxcc_f32chanpool, codegen/cpu/chan_pool.py) split into
(image, group of channel vectors) tasks over 1, 2 and 3 threads, compared with onnxruntime.

A net's head at batch 1 was one serial pass over the last feature map. The call now cuts the
channels into groups of 4, 2 or 1 vectors (at least 4 tasks where the shape allows; the
choice depends on the shape only) and sums each vector on 4 / G accumulators, pixel p on
p % (4 / G), merged pairwise; from 64K elements the tasks run through the pool. One library
at symbolic N, H, W per channel count: 3 -> 16 -> C dense 3x3 convs with Relu (a channels-
last region from the input), then GlobalAveragePool and GlobalMaxPool of the map, both
flattened; the map is an output too (it leaves through a Transpose, the pools stay in).
C = 72 (5 vectors, the last masked: G = 4 from batch 2, 1 at batch 1), C = 24
(2 vectors, the second masked: G = 2 from batch 2, else 1). Planes from 1x1 to 64x61, odd
pixel counts (the p % U tail): serial and pooled calls both. Tolerance as
test_nhwc_global_pool.py's (rtol 1e-4, atol 1e-5): means of up to 64 * 61 f32 values."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from compiled_model import assert_threads_match_onnxruntime, lib_fixture
from conv_net import ConvNet
from onnx import TensorProto, helper

import onnxcc

SHAPES = [(1, 64, 61), (2, 37, 29), (3, 40, 33), (1, 1, 1), (2, 3, 5), (1, 45, 23)]


def _model(path, cout: int) -> None:
    net = ConvNet(cout)
    a = net.conv("x", "a", 3, 16, 3, act="Relu", pads=[1, 1, 1, 1])
    m = net.conv(a, "m", 16, cout, 3, act="Relu", pads=[1, 1, 1, 1])
    net.node("Flatten", [net.node("GlobalAveragePool", [m])], "avg")
    net.node("Flatten", [net.node("GlobalMaxPool", [m])], "max")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("avg", "max", m)]
    onnx.save(net.model(f"pool_split{cout}", [x], outs, 17), path)


built72 = lib_fixture("pool_split72", lambda p: _model(p, 72), max_versions=1)
built24 = lib_fixture("pool_split24", lambda p: _model(p, 24), max_versions=1)


def test_both_pools_are_calls(built72):
    path, _ = built72
    text = onnxcc.compile(path, path.parent / "k", emit="kernel", max_versions=1).text
    assert text.count("call onnxcc_f32chanpool(") == 2


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_pools_on_threads_match_onnxruntime(built72, built24, threads, tmp_path):
    for k, (path, _) in enumerate((built72, built24)):
        (tmp_path / str(k)).mkdir()
        assert_threads_match_onnxruntime(path, SHAPES, threads, tmp_path / str(k), rtol=1e-4, atol=1e-5)


def test_split_max_lets_nan_win(built24):
    """A NaN in the map of a pooled call (the NaN on one of a vector's 4
    accumulators, which the pairwise merge must keep) is its channels' max, the map's max as
    np.max takes it (the map the library returns), the other image unaffected."""
    _, lib = built24
    x = np.random.default_rng(9).standard_normal((2, 3, 64, 61)).astype(np.float32)
    x[1, 0, 31, 20] = np.nan  # image 1's channels through the 3x3 windows (24 channels, batch 2: G = 1)
    got = lib.run({"x": x})
    fmap = next(v for k, v in got.items() if k not in ("avg", "max"))
    want = np.max(fmap, axis=(2, 3))
    assert np.isnan(want).any() and not np.isnan(want).all()
    np.testing.assert_array_equal(np.isnan(got["max"]), np.isnan(want))
    np.testing.assert_allclose(got["max"], want, rtol=0, atol=0)
