"""Channels-last stride-1 depthwise convs over at most `PAD_COPY_CHANNELS` channels read a
zero-padded copy of their input instead of guarding every tap (ops/conv_nhwc.py `_padded`);
wider or strided ones keep the guarded taps. One chain of mobile-net blocks with both kinds, at symbolic N, H, W
(odd planes, the smallest the last stride-2 conv takes: 3 x 3), compared with onnxruntime through
the user path (rtol / atol 1e-4: sums of at most 48 products of N(0, 1) values and weights
scaled by 1/sqrt(fan-in), in another order than onnxruntime's):

- 3x3 pads 1 on 16 channels (copied), 5x5 stride 2 pads (2, 1, 2, 3) on 16 (guarded),
  3x3 dilation 2 pads (2, 1, 2, 3) on 16 (copied), 3x3 dilation 2 pads 2 on 48 (guarded),
  3x3 stride 2 pads (0, 1, 1, 0) on 32 (guarded)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from compiled_model import built_fixture
from conv_net import ConvNet
from onnx import TensorProto, helper

from onnxcc.ops.conv_nhwc import PAD_COPY_CHANNELS
from onnxcc.testing import ort_run


def _model() -> onnx.ModelProto:
    net = ConvNet(3)

    def conv(x, y, cin, cout, k, group=1, **attrs):
        return net.conv(x, y, cin, cout, k, group, act="HardSwish", **attrs)

    h = conv("x", "e0", 8, 16, 1)
    h = conv(h, "d0", 16, 16, 3, group=16, pads=[1, 1, 1, 1])
    h = conv(h, "p0", 16, 16, 1)
    h = conv(h, "d1", 16, 16, 5, group=16, pads=[2, 1, 2, 3], strides=[2, 2])
    h = conv(h, "da", 16, 16, 3, group=16, pads=[2, 1, 2, 3], dilations=[2, 2])
    h = conv(h, "e1", 16, 48, 1)
    h = conv(h, "d2", 48, 48, 3, group=48, pads=[2, 2, 2, 2], dilations=[2, 2])
    h = conv(h, "p2", 48, 32, 1)
    h = conv(h, "d3", 32, 32, 3, group=32, pads=[0, 1, 1, 0], strides=[2, 2])
    h = conv(h, "p3", 32, 8, 1)
    return net.model("dwpad", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8, "H", "W"])], [h], 14)


OUT = "p3_hardswish"
built = built_fixture("dwpad", _model)


def test_narrow_depthwise_convs_read_a_padded_copy(built):
    _, kernel, _ = built
    assert PAD_COPY_CHANNELS == 32
    temps = [ln for ln in kernel.splitlines() if ln.strip().startswith("temp xpad")]
    # the two stride-1 16-channel convs; the 48-channel one and the strided ones keep guards
    assert len(temps) == 2, temps
    assert [ln.rstrip("]").rsplit(", ", 1)[1] for ln in temps] == ["16", "16"]


@pytest.mark.parametrize("n,h,w", [(1, 3, 3), (2, 3, 4), (1, 5, 4), (3, 9, 13), (1, 24, 17)])
def test_matches_onnxruntime(built, n, h, w):
    path, _, lib = built
    x = np.random.default_rng(n * 100 + h * 10 + w).standard_normal((n, 8, h, w)).astype(np.float32)
    np.testing.assert_allclose(lib.run({"x": x})[OUT], ort_run(path, {"x": x})[OUT], rtol=1e-4, atol=1e-4)
