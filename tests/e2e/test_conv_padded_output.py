"""A conv's zero padding written by the conv that produces its input (passes/nhwc_padfuse.py,
cc.conv_nhwc's `out_pads`): the producer's implicit-GEMM call stores its rows into the
interior of the padded map and zeros its border (codegen/cpu/conv_out_rows.py), the reader's
pads become 0 and it reads its windows in place, so no padded copy of the map is made.

The graph (symbolic N, H, W): a planar stem 3 -> 16 with Relu, whose result a stride-2 conv
with asymmetric pads [1, 0, 2, 1] reads (out pads asymmetric too); a conv + Relu + 2x2
MaxPool (pooled rows, padded) read by a depthwise conv; a 1x1 conv (a GEMM: keeps its
reader's pads) read by a dilated conv (pads 2); a conv + Relu whose result two convs read
with different pads (not moved: each reader keeps its own padding), the 5x5 one's result
padded for a conv with a residual Add (flat) and the Relu after it, whose result a ResNet
block reads: padded for its first conv, its interior the residual of its second
(`residual_pads`). Compared with
onnxruntime at odd, even and tiny planes, batch 1 to 3, each shape run twice after a larger
one (the workspace then holds the larger run's data where the border goes: a border the
call did not zero would show). Tolerance rtol 1e-4, atol 1e-4: sums of up to 288 products
of N(0, 1)-scale values and weights scaled by 1/sqrt(fan-in), in another order than
onnxruntime's. Without the call (lower_function's default) the producer computes into a
temp and copies it padded: the same results."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from compiled_model import assert_matches_onnxruntime, f32conv_sizes, has_f32_conv_call, image_feeds, lib_fixture
from conv_net import ConvNet
from onnx import TensorProto, helper

import onnxcc
from onnxcc.testing import check_lowering

SHAPES = [dict(N=1, H=8, W=8), dict(N=2, H=13, W=11), dict(N=3, H=17, W=30), dict(N=1, H=6, W=7)]


def _model(path) -> None:
    net = ConvNet(5)

    def node(op, *ins, **attrs):
        return net.node(op, list(ins), **attrs)

    def conv(x, cin, cout, k=3, pads=(1, 1, 1, 1), stride=1, group=1, dilation=1):
        return net.conv(x, net.fresh("Conv"), cin, cout, k, group=group, kernel_shape=[k, k], pads=list(pads),
                        strides=[stride, stride], dilations=[dilation, dilation])

    stem = node("Relu", conv("x", 3, 16))
    s2 = node("Relu", conv(stem, 16, 32, pads=(1, 0, 2, 1), stride=2))
    pooled = node("MaxPool", node("Relu", conv(s2, 32, 32)), kernel_shape=[2, 2], strides=[2, 2])
    dw = node("Relu", conv(pooled, 32, 32, group=32))
    pw = node("Relu", conv(dw, 32, 16, k=1, pads=(0, 0, 0, 0)))
    dil = node("Relu", conv(pw, 16, 32, pads=(2, 2, 2, 2), dilation=2))
    shared = node("Relu", conv(dil, 32, 32))
    a = conv(shared, 32, 32)
    b = conv(shared, 32, 32, k=5, pads=(2, 2, 2, 2))
    res = node("Relu", node("Add", conv(node("Relu", b), 32, 32), a))
    block = node("Relu", node("Add", conv(node("Relu", conv(res, 32, 32)), 32, 32), res))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])
    onnx.save(net.model("padded_output", [x], [node("GlobalAveragePool", block), shared], 13), path)


built = lib_fixture("padded_output", _model, max_versions=1)


def test_pads_move_into_the_producers(tmp_path):
    """Seven producers write padded maps (the stem, the stride-2 conv, the pooled conv, the
    dilated conv, the 5x5 conv read by the residual conv, that conv (read by the block) and the
    block's first conv); the shared map (two readers), the bare 1x1 conv's (a GEMM, not the
    call) and the graph's output keep their readers' pads."""
    _model(tmp_path / "m.onnx")
    text = onnxcc.compile(tmp_path / "m.onnx", tmp_path / "ir", emit="ir", max_versions=1).text
    moved = [line for line in text.splitlines() if "out_pads" in line]
    assert len(moved) == 7, moved
    assert "out_pads = [1, 0, 2, 1]" in moved[0] and "relu = 1" in moved[0]  # the stem, its reader's pads
    assert sum("pool = 2" in line for line in moved) == 1  # the pooled rows, read by the depthwise conv
    pads = re.findall(r"(?<![a-z_])pads = (\[[0-9, ]*\])", text)
    assert pads.count("[0, 0, 0, 0]") == 8  # the seven readers and the 1x1 conv
    assert text.count("residual_pads = [1, 1, 1, 1]") == 1  # the block's second conv
    assert pads.count("[2, 2, 2, 2]") == 2  # the dilated conv (after the GEMM) and the 5x5 reader
    assert pads.count("[1, 1, 1, 1]") == 2  # the stem (its input is the graph's) and the shared map's 3x3 reader
    if has_f32_conv_call():
        kir = onnxcc.compile(tmp_path / "m.onnx", tmp_path / "k", emit="kernel", max_versions=1).text
        padded = [s for s in f32conv_sizes(kir) if any(s[p] != "0" for p in ("opt", "opl", "opb", "opr"))]
        assert len(padded) == 7, padded
        assert sum(s["rpad"] == "1" for s in f32conv_sizes(kir)) == 1


@pytest.mark.parametrize("dims", SHAPES, ids=lambda d: "x".join(str(v) for v in d.values()))
def test_padded_maps_match_onnxruntime(built, dims):
    path, lib = built
    big = np.random.default_rng(0).standard_normal((3, 3, 24, 32)).astype(np.float32) * 50
    lib.run({"x": big})  # large values where the border's zeros go
    feeds = image_feeds(dims)
    for _ in range(2):
        assert_matches_onnxruntime(path, lib, feeds, rtol=1e-4, atol=1e-4, where=dims)


def test_without_the_call_the_compute_path_matches(tmp_path):
    """Lowered without the call (lower_function's default): the producer's temp copied padded."""
    _model(tmp_path / "m.onnx")
    check_lowering(tmp_path / "m.onnx", SHAPES[:2], rtol=1e-4, atol=1e-4,
                   pipeline="shape-inference,canonicalize,nhwc-region")


def test_the_reference_reads_padded_maps(tmp_path):
    """The interpreter (cc.conv_nhwc's numpy reference: `out_pads` pads the result, a
    `residual_pads` residual is read at its interior) after nhwc-region gives onnxruntime's
    results."""
    from onnxcc.frontend import load_onnx
    from onnxcc.interp import run as interp_run
    from onnxcc.passes import run_pipeline
    from onnxcc.testing import ort_run

    _model(tmp_path / "m.onnx")
    m = load_onnx(str(tmp_path / "m.onnx"))
    run_pipeline(m, "shape-inference,canonicalize,nhwc-region")
    text = str(m)
    assert "out_pads" in text and "residual_pads" in text
    x = np.random.default_rng(3).standard_normal((2, 3, 13, 11)).astype(np.float32)
    want = ort_run(str(tmp_path / "m.onnx"), {"x": x})
    for got, ref in zip(interp_run(m, [x]), want.values(), strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
