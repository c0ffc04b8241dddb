"""Guarded channels-last depthwise taps (ops/conv_nhwc.py: strided, or over more than
PAD_COPY_CHANNELS channels) read X at positions clamped into it and drop the value where the
tap is padding: the loads are then in bounds everywhere (llvm/exprs.py `_clamped_to`), so the
select is a select, not a branch around each tap's masked load. A padding tap must still
contribute 0 whatever the edge pixel it read holds, an Inf or a NaN included.

One library at symbolic N, H, W: a 1x1 3 -> 32 with Relu, a 3x3 depthwise at stride 2 pads 1
on 32 channels (mobile's second block), a 1x1 32 -> 48, a 3x3 depthwise at stride 1 pads 1 on
48 (wider than the padded copy), a 5x5 stride 2 pads (2, 1, 2, 3) on 48, and a 1x1 48 -> 8.
Batch 1 to 3, planes from 1x1 and 2x3 (every tap of a corner clamped) to 33x27, on 1, 2 and 3
threads in child processes; then an input with an Inf and a NaN on its border, in process.
rtol / atol 1e-4 (sums of at most 25 products in another order than onnxruntime's)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from compiled_model import assert_threads_match_onnxruntime, lib_fixture
from conv_net import ConvNet
from onnx import TensorProto, helper

import onnxcc
from onnxcc.testing import ort_run

SHAPES = [(1, 1, 1), (2, 2, 3), (3, 7, 9), (1, 33, 27), (2, 16, 15), (1, 5, 2)]


def _model(path) -> None:
    net = ConvNet(23)
    h = net.conv("x", "e0", 3, 32, 1, act="Relu")
    h = net.conv(h, "d0", 32, 32, 3, group=32, act="Relu", pads=[1, 1, 1, 1], strides=[2, 2])
    h = net.conv(h, "e1", 32, 48, 1)
    h = net.conv(h, "d1", 48, 48, 3, group=48, act="Relu", pads=[1, 1, 1, 1])
    h = net.conv(h, "d2", 48, 48, 5, group=48, pads=[2, 1, 2, 3], strides=[2, 2])
    h = net.conv(h, "y", 48, 8, 1)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])
    onnx.save(net.model("dwclamp", [x], [h], 14), path)


built = lib_fixture("dwclamp", _model, max_versions=1)


def test_guarded_taps_read_clamped_positions(built):
    path, _ = built
    kernel = onnxcc.compile(path, path.parent / "k", emit="kernel", max_versions=1).text
    assert "temp xpad" not in kernel  # every depthwise conv here guards its taps
    llvm = onnxcc.compile(path, path.parent / "l", emit="llvm", max_versions=1).text
    assert "sel.then" not in llvm  # no tap branches around its load


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_on_threads_matches_onnxruntime(built, threads, tmp_path):
    path, _ = built
    assert_threads_match_onnxruntime(path, SHAPES, threads, tmp_path)


@pytest.mark.parametrize("n,h,w", [(1, 40, 36), (2, 30, 33)])
def test_padding_taps_drop_what_they_read(built, n, h, w):
    """An Inf in a corner and a NaN on the right edge of image 0 reach only the outputs whose
    windows hold them (onnxruntime's NaN / Inf pattern, exactly), not their padded neighbours."""
    path, lib = built
    x = np.random.default_rng(h * w).standard_normal((n, 3, h, w)).astype(np.float32)
    x[0, :, 0, 0] = np.inf
    x[0, 1, h // 2, w - 1] = np.nan
    got, want = lib.run({"x": x})["y"], ort_run(path, {"x": x})["y"]
    assert np.isfinite(want).any() and not np.isfinite(want).all()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
