"""Grouped 1-D convolutions (ops/nn.py `_grouped_conv1d_lower`: a GEMM per batch and group into
[n, g, j, o], then an injective copy), through the user path (onnxcc.compile + load, so the
GEMM schedule runs) against onnxruntime: wav2vec2's positional conv (kernel 128 in the
model, 'same' padding over an even kernel), strides, a stride past the kernel, dilations,
padding, a bias or none, batch 1 and 3, odd and symbolic lengths; and the schedule really
is a GEMM."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from conv_models import one_conv_model

import onnxcc
from onnxcc.testing import compile_lib, ort_run

CASES = {
    # name: (channels in, out, groups, kernel, attrs, bias)
    "pos_conv": (32, 32, 4, 16, {"pads": [8, 8]}, True),
    "strided": (12, 18, 3, 5, {"strides": [2], "pads": [1, 2]}, True),
    "stride_past_kernel": (8, 8, 2, 2, {"strides": [3]}, False),
    "dilated": (6, 4, 2, 3, {"dilations": [2], "pads": [2, 2]}, True),
}


def _model(cin: int, cout: int, groups: int, k: int, attrs: dict, bias: bool, seed: int) -> onnx.ModelProto:
    return one_conv_model("Conv", ["N", cin, "L"], (cout, cin // groups, k), cout if bias else None, seed, "gconv",
                          group=groups, kernel_shape=[k], **attrs)


@pytest.mark.parametrize("name", sorted(CASES))
def test_grouped_conv1d_matches_onnxruntime(name, tmp_path):
    cin, cout, groups, k, attrs, bias = CASES[name]
    model = _model(cin, cout, groups, k, attrs, bias, seed=len(name))
    lib = compile_lib(model, tmp_path)
    rng = np.random.default_rng(1)
    for n, length in ((1, 37), (3, 64), (1, 201)):
        x = rng.standard_normal((n, cin, length)).astype(np.float32)
        want = ort_run(model, {"x": x})["y"]
        got = lib.run({"x": x})["y"]
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.sqrt(cin // groups * k))


def test_grouped_conv1d_is_a_gemm(tmp_path):
    path = tmp_path / "pos.onnx"
    onnx.save(_model(*CASES["pos_conv"], seed=0), path)
    text = onnxcc.compile(path, tmp_path / "k", emit="kernel").text
    gemm_lines = [ln for ln in text.splitlines() if "gconv" in ln and "sum(" in ln]
    assert gemm_lines, text
    # the group index g is an output var of the GEMM compute, never `m // 8` inside the sum
    assert all("// 8" not in ln.split("sum(")[1] for ln in gemm_lines)
