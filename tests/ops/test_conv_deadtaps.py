"""Convs whose outer taps read only padding (ops/conv_deadtaps.py: DeepLabV3's ASPP, 3x3 at
dilation 12 over planes smaller than the dilation) through the user path against
onnxruntime: dilation 2 and 12 with pad = dilation, strides 1 and 2, odd planes smaller
than the dilation (outer taps wholly in the padding), planes where every tap is live,
symbolic H/W (the trimmed convs behind ifs on the extents, the full conv last; both sides
of each threshold in tests/e2e/test_conv_tap_regimes.py), batch 1 and 3, a bias or none."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from conv_models import one_conv_model

import onnxcc
from onnxcc.ops.conv_deadtaps import live_taps
from onnxcc.testing import compile_lib, ort_run

CASES = {
    # name: (cin, cout, dilation, stride, (H, W) or None for symbolic, bias)
    "aspp_d12_7x5": (16, 24, 12, 1, (7, 5), True),
    "aspp_d12_s2_9x11": (8, 16, 12, 2, (9, 11), False),
    "d2_3x3_all_dead_outer": (8, 12, 2, 1, (1, 2), True),
    "d2_13x9_live": (8, 12, 2, 1, (13, 9), True),
    "d12_mixed_14x6": (8, 16, 12, 1, (14, 6), True),
    "d12_symbolic": (8, 16, 12, 1, None, True),
    "d12_static_h_symbolic_w": (8, 16, 12, 1, (7, "W"), True),  # rows trimmed, columns not
}


def _model(cin, cout, dil, stride, hw, bias, seed):
    return one_conv_model("Conv", ["N", cin, *(hw if hw else ("H", "W"))], (cout, cin, 3, 3), cout if bias else None,
                          seed, "dconv", kernel_shape=[3, 3], dilations=[dil, dil], pads=[dil] * 4,
                          strides=[stride, stride])


@pytest.mark.parametrize("name", sorted(CASES))
def test_dilated_conv_matches_onnxruntime(name, tmp_path):
    cin, cout, dil, stride, hw, bias = CASES[name]
    model = _model(cin, cout, dil, stride, hw, bias, seed=len(name))
    lib = compile_lib(model, tmp_path)
    rng = np.random.default_rng(2)
    shapes = ((7, 5), (13, 16)) if hw is None else (hw, hw)
    for n, (h, w) in zip((1, 3), shapes):
        h, w = (13 if isinstance(h, str) else h), (5 + 11 * n if isinstance(w, str) else w)
        x = rng.standard_normal((n, cin, h, w)).astype(np.float32)
        want = ort_run(model, {"x": x})["y"]
        got = lib.run({"x": x})["y"]
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.sqrt(cin * 9))


def test_live_taps():
    # 6x6 plane, dilation 12, pad 12: only the centre tap reads the input
    assert live_taps(6, 6, 3, 1, 12, 12) == (1, 1)
    # 14 rows: the last tap reads rows 12, 13 for outputs 0, 1; the first reads for outputs 12, 13
    assert live_taps(14, 14, 3, 1, 12, 12) == (0, 2)
    # a 1-row plane under dilation 2, pad 2: centre only
    assert live_taps(1, 1, 3, 1, 2, 2) == (1, 1)
    # no tap reads the input: 1 row, kernel 2 at dilation 5, pad 3 (positions -3..-2 and 2..3)
    assert live_taps(1, 2, 2, 1, 5, 3) is None


def test_aspp_conv_becomes_1x1(tmp_path):
    """The ASPP case really drops its outer taps: the sum runs over channels only, on the
    sliced [M, C, 1, 1] weight, with no padding guard; the symbolic model keeps the full
    conv for planes past the dilation and runs the 1x1 one on planes up to it."""
    path = tmp_path / "aspp.onnx"
    onnx.save(_model(*CASES["aspp_d12_7x5"], seed=0), path)
    text = onnxcc.compile(path, tmp_path / "k", emit="kernel").text
    assert "f32[24, 16, 1, 1]" in text, text
    sums = [ln for ln in text.splitlines() if "sum(" in ln]
    assert len(sums) == 1 and "sum(c < 16:" in sums[0] and "select(" not in sums[0], text
    path = tmp_path / "sym.onnx"
    onnx.save(_model(*CASES["d12_symbolic"], seed=0), path)
    text = onnxcc.compile(path, tmp_path / "s", emit="kernel").text
    assert "k0 < 3, k1 < 3" in text and "f32[16, 8, 1, 1]" in text, text
    assert "if ((H <= 12) & (W <= 12))" in text, text
