"""A residual Add folded into the dense conv that is one of its operands (passes/nhwc_region.py
`_folded_residuals`, cc.conv_nhwc's `residual`): the implicit GEMM's stores add the other
operand after the bias, then apply the Relu that alone reads the sum
(codegen/cpu/gemm_implicit.py), so neither the conv's result nor the sum is a pass of its own.

The graph, a small ResNet: a stride-2 3 -> 32 stem with Relu; a block conv -> Relu -> conv
without a bias (a zero one is made), Add(skip, conv) (the conv second) -> Relu; a conv with a
bias, Add(conv, skip) without Relu, whose sum is an output (a map) and feeds a last conv read
by an Add and a GlobalAveragePool (read twice: not folded). Compared with onnxruntime through
the user path at symbolic N, H, W, on planes from 1x1 to 40x33 (row tails of every height).
Tolerance rtol 1e-4, atol 1e-4: sums of up to 288 products of N(0, 1)-scale values and
weights scaled by 1/sqrt(fan-in), in another order than onnxruntime's. Without the call (the
compute path) the same results."""

from __future__ import annotations

import onnx
import pytest
from compiled_model import assert_matches_onnxruntime, f32conv_sizes, has_f32_conv_call, image_feeds, lib_fixture
from conv_net import ConvNet
from onnx import TensorProto, helper

import onnxcc
from onnxcc.testing import check_lowering

SHAPES = [dict(N=1, H=1, W=1), dict(N=2, H=13, W=11), dict(N=1, H=40, W=33), dict(N=3, H=9, W=16)]


def _model(path) -> None:
    net = ConvNet(21)

    def node(op, *ins):
        return net.node(op, list(ins))

    def conv(x, cin, cout, stride=1, bias=True):
        return net.conv(x, net.fresh("Conv"), cin, cout, 3, bias=bias, kernel_shape=[3, 3], pads=[1] * 4,
                        strides=[stride, stride])

    h1 = node("Relu", conv("x", 3, 32, stride=2))
    b = conv(node("Relu", conv(h1, 32, 32)), 32, 32, bias=False)
    h2 = node("Relu", node("Add", h1, b))
    s2 = node("Add", conv(h2, 32, 32), h2)
    e = conv(s2, 32, 32)
    outs = [s2, node("GlobalAveragePool", node("Add", e, s2)), node("GlobalAveragePool", e)]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])
    onnx.save(net.model("residual", [x], outs, 13), path)


built = lib_fixture("residual_stores", _model, max_versions=1)


def test_residual_adds_fold_into_their_convs(tmp_path):
    _model(tmp_path / "m.onnx")
    text = onnxcc.compile(tmp_path / "m.onnx", tmp_path / "ir", emit="ir", max_versions=1).text
    assert text.count("cc.conv_nhwc(") == 5
    assert text.count("residual = 1") == 2  # the block's second conv, the conv after it
    assert text.count("onnx.Add(") == 1  # the last conv's: its result is read twice
    assert text.count("onnx.Relu(") == 0
    if has_f32_conv_call():
        kir = onnxcc.compile(tmp_path / "m.onnx", tmp_path / "k", emit="kernel", max_versions=1).text
        res = [sizes["res"] for sizes in f32conv_sizes(kir)]
        assert sorted(res) == ["0", "0", "0", "1", "1"], res


@pytest.mark.parametrize("dims", SHAPES, ids=lambda d: "x".join(str(v) for v in d.values()))
def test_residual_convs_match_onnxruntime(built, dims):
    path, lib = built
    assert_matches_onnxruntime(path, lib, image_feeds(dims), rtol=1e-4, atol=1e-4, where=dims)


def test_without_the_call_the_compute_path_matches(tmp_path):
    """Lowered without the call (lower_function's default), the residual is read in the conv's
    compute body: same results."""
    _model(tmp_path / "m.onnx")
    check_lowering(tmp_path / "m.onnx", SHAPES[:2], rtol=1e-4, atol=1e-4,
                   pipeline="shape-inference,canonicalize,nhwc-region")
