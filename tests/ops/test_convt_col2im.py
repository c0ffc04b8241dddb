"""Strided ConvTranspose (ops/convt_col2im.py: a GEMM over the input, then each output sums
its valid taps) and the gather form it leaves to (stride 1, groups), through the user path
against onnxruntime: 1-D and 2-D, strides 1..4, pads, output_padding, dilations, groups,
kernels shorter and longer than the stride, bias or none, symbolic lengths."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from conv_models import one_conv_model

from onnxcc.ir import DType
from onnxcc.ops.convt_col2im import col2im_applies
from onnxcc.testing import compile_lib, ort_run

CASES = {
    # name: (cin, cout, group, kernel, attrs, bias, spatial run shapes)
    "1d_s2_convs1d": (8, 6, 1, [4], {"strides": [2], "pads": [1, 1], "output_padding": [1]}, True, [[5], [37]]),
    "1d_s3_short_kernel": (5, 4, 1, [2], {"strides": [3]}, False, [[1], [9]]),
    "1d_s4_dilated": (3, 7, 1, [3], {"strides": [4], "dilations": [2], "pads": [2, 0]}, True, [[6], [13]]),
    "1d_s1_gather_form": (4, 3, 1, [5], {"pads": [2, 2]}, True, [[8], [21]]),
    "1d_s2_groups": (6, 4, 2, [3], {"strides": [2], "pads": [1, 0]}, True, [[7], [16]]),
    "2d_s2_s3_padded": (3, 5, 1, [3, 4], {"strides": [2, 3], "pads": [1, 0, 0, 2], "output_padding": [1, 2]},
                        True, [[4, 5], [7, 3]]),
    "2d_s1_s2_mixed": (2, 3, 1, [2, 3], {"strides": [1, 2], "dilations": [2, 1]}, False, [[3, 6], [5, 2]]),
}


def _model(cin, cout, group, kernel, attrs, bias, seed) -> onnx.ModelProto:
    spatial = [f"S{i}" for i in range(len(kernel))]
    return one_conv_model("ConvTranspose", ["N", cin, *spatial], (cin, cout // group, *kernel), cout if bias else None,
                          seed, "convt", group=group, kernel_shape=kernel, **attrs)


@pytest.mark.parametrize("name", sorted(CASES))
def test_conv_transpose_matches_onnxruntime(name, tmp_path):
    cin, cout, group, kernel, attrs, bias, runs = CASES[name]
    model = _model(cin, cout, group, kernel, attrs, bias, seed=len(name))
    lib = compile_lib(model, tmp_path)
    rng = np.random.default_rng(2)
    for k, spatial in enumerate(runs):
        x = rng.standard_normal((1 + k, cin, *spatial)).astype(np.float32)
        want = ort_run(model, {"x": x})["y"]
        got = lib.run({"x": x})["y"]
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * cin * int(np.prod(kernel)))


class _W:
    def __init__(self, *shape, dtype=DType.f32):
        self.shape, self.dtype = shape, dtype


def test_col2im_only_for_a_stride_and_one_group():
    x = _W(1, 8, 10)
    assert col2im_applies(x, _W(8, 6, 4), [2], 1)
    assert col2im_applies(_W(1, 8, 10, 10), _W(8, 6, 3, 3), [1, 2], 1)
    assert not col2im_applies(x, _W(8, 6, 4), [1], 1)  # no zeros to skip
    assert not col2im_applies(x, _W(8, 3, 4), [2], 2)  # groups keep the gather form
    assert not col2im_applies(_W(1, 8, 10, dtype=DType.f16), _W(8, 6, 4), [2], 1)  # one rounding
