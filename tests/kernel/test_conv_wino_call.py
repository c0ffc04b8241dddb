"""kernel/conv_wino_call.py: F(2x2, 3x3)'s transforms (the numpy `reference` of the callee's
algorithm) against the direct conv in float64, its error against the direct f32 sum's, and the
packing of U the callee reads."""

from __future__ import annotations

import numpy as np
import pytest

from onnxcc.kernel.conv_call import NR
from onnxcc.kernel.conv_wino_call import WinoSpec, pack_q, pack_u, parse, reference, transform_w


def _direct(x: np.ndarray, w: np.ndarray, dtype) -> np.ndarray:
    """y [N, OH, OW, M] of a padded channels-last x [N, OH + 2, OW + 2, C], summed in `dtype`"""
    n, hp, wp, _ = x.shape
    y = np.zeros((n, hp - 2, wp - 2, w.shape[0]), dtype)
    for kh in range(3):
        for kw in range(3):
            y += np.einsum("nhwc,mc->nhwm", x[:, kh:kh + hp - 2, kw:kw + wp - 2].astype(dtype),
                           w[:, :, kh, kw].astype(dtype))
    return y


@pytest.mark.parametrize("cin, cout, h, w", [(32, 32, 9, 12), (17, 40, 5, 7), (128, 16, 4, 3), (16, 16, 1, 1)])
def test_winograd_is_the_conv_within_a_few_ulp_of_its_sum(cin, cout, h, w):
    """exact in float64; in f32 within 2 ulp of sum(|x| |w|) per element (the direct f32 sum
    within 1 on the same data: measured 0.6-0.9 and 0.5-0.6 ulp at these shapes)"""
    rng = np.random.default_rng(cin * 1000 + cout)
    x = rng.standard_normal((2, h + 2, w + 2, cin)).astype(np.float32)
    wt = (rng.standard_normal((cout, cin, 3, 3)) / np.sqrt(9 * cin)).astype(np.float32)
    exact = _direct(x, wt, np.float64)
    np.testing.assert_allclose(reference(x, wt, np.float64), exact, rtol=1e-12, atol=1e-12)
    mag = _direct(np.abs(x), np.abs(wt), np.float64)
    ulp = np.abs(reference(x, wt) - exact) / mag / np.finfo(np.float32).eps
    assert ulp.max() < 2.0, ulp.max()
    assert (np.abs(_direct(x, wt, np.float32) - exact) / mag / np.finfo(np.float32).eps).max() < 1.0


def test_u_is_packed_per_position_and_panel():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((40, 17, 3, 3)).astype(np.float32)
    u = transform_w(w)  # [4, 4, C, M]
    packed = pack_u(w)
    assert packed.shape == (16, 2, 17, NR)
    np.testing.assert_array_equal(packed[5, 1, 3, :8], u[1, 1, 3, 32:40].astype(np.float32))
    assert not packed[:, 1, :, 8:].any()  # zero past M
    q = pack_q(w)
    assert q.shape == (packed.size + 2 * 9 * 17 * NR,)  # then the direct weights, conv_call.pack_w's


def test_names_round_trip_and_the_channel_range():
    spec = WinoSpec(24, 40)
    assert parse(spec.callee) == spec and spec.supported()
    assert parse("onnxcc_f32conv") is None
    assert not WinoSpec(8, 32).supported() and not WinoSpec(32, 256).supported()
