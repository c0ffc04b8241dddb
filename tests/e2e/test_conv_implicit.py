"""Dense convs run channels-last as implicit GEMM calls (ops/conv_implicit.py,
codegen/cpu/gemm_implicit.py) inside an nhwc-region (Concat and MaxPool with them), compared
with onnxruntime through the user path (compile, load, run), one library at symbolic N, H, W.

The graph: a 3-channel stem 3x3 (pads 1) -> Relu, a 3x3 stride 2 with asymmetric pads ->
Relu, a 3x3 stride-2 ceil-mode MaxPool with pads, then a Fire-like block (a 1x1 squeeze ->
Relu, then a 3x3 dilation 2 expand and a 1x1 expand, each -> Relu, Concat on channels), an
inception branch pool (AveragePool 3x3, stride 1, pads 1, count_include_pad), a
(2, 3) kernel dilated along W only (taps of C elements), and a 1x1 at stride 2 (a GEMM
read through the offset table). Channel counts 3, 72, 36, 21, 33, 17, 50, 34, 35: no output
count a multiple of 16, so every conv's last panel has masked columns (a 3-channel stem
joins the region from 64 outputs). Planes from 1x1 (every
tap but the centre reads padding) to 64x48 (several row blocks per image). Tolerance rtol
1e-4, atol 1e-4: sums of up to 450 products of N(0, 1) values and weights scaled by
1/sqrt(fan-in), summed in another order than onnxruntime's."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from compiled_model import assert_matches_onnxruntime, image_feeds, lib_fixture
from conv_net import ConvNet
from onnx import TensorProto, helper, numpy_helper

import onnxcc
from onnxcc.testing import check_lowering, ort_run

SHAPES = [dict(N=1, H=1, W=1), dict(N=3, H=23, W=30), dict(N=1, H=9, W=4), dict(N=2, H=16, W=16),
          dict(N=1, H=64, W=48)]


def _model(path):
    net = ConvNet(5)
    s = net.conv("x", "stem", 3, 72, (3, 3), act="Relu", pads=[1, 1, 1, 1])
    s = net.conv(s, "down", 72, 36, (3, 3), act="Relu", strides=[2, 2], pads=[0, 1, 2, 1])
    net.node("MaxPool", [s], "pool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)
    q = net.conv("pool", "squeeze", 36, 21, (1, 1), act="Relu")
    e3 = net.conv(q, "e3", 21, 33, (3, 3), act="Relu", pads=[2, 2, 2, 2], dilations=[2, 2])
    e1 = net.conv(q, "e1", 21, 17, (1, 1), act="Relu")
    net.node("Concat", [e1, e3], "cat", axis=1)
    net.node("AveragePool", ["cat"], "avg", kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1)
    d = net.conv("avg", "wide", 50, 34, (2, 3), pads=[1, 2, 0, 2], dilations=[1, 2])
    o = net.conv(d, "pw2", 34, 35, (1, 1), strides=[2, 2])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])
    onnx.save(net.model("dense_convs", [x], [o], 13), path)


built = lib_fixture("conv_implicit", _model, max_versions=1)


def _has_avx512f() -> bool:
    from onnxcc.codegen.cpu.backend import CpuBackend
    from onnxcc.compiler import CompileOptions

    return CpuBackend.from_options(CompileOptions()).f32_conv_call()


def test_dense_convs_are_one_region(tmp_path):
    """Every conv, the pools and the Concat run channels-last: one layout change in, one out;
    every Relu is folded into its conv (a region without depthwise convs: 1x1 ones too)."""
    _model(tmp_path / "m.onnx")
    text = onnxcc.compile(tmp_path / "m.onnx", tmp_path / "ir", emit="ir", max_versions=1).text
    assert text.count("cc.conv_nhwc(") == 7
    assert text.count("onnx.Conv(") == 0
    assert text.count("cc.maxpool_nhwc(") == 1
    assert text.count("cc.avgpool_nhwc(") == 1
    assert text.count("perm = [0, 2, 3, 1]") == 1
    assert text.count("perm = [0, 3, 1, 2]") == 1
    assert text.count("relu = 1") == 5  # stem, down, squeeze, e3, e1
    assert text.count("onnx.Relu(") == 0


@pytest.mark.skipif(not _has_avx512f(), reason="the implicit-GEMM call needs AVX-512F")
def test_dense_convs_call_the_implicit_gemm(tmp_path):
    _model(tmp_path / "m.onnx")
    text = onnxcc.compile(tmp_path / "m.onnx", tmp_path / "k", emit="kernel", max_versions=1).text
    # the kxk convs, the strided 1x1, the 1x1s with a Relu; the 3-channel stem takes the stem call
    assert text.count("call onnxcc_f32conv(") == 6
    assert text.count("call onnxcc_f32stem_c3k3x3s1x1p0(") == 1


@pytest.mark.parametrize("dims", SHAPES, ids=lambda d: "x".join(str(v) for v in d.values()))
def test_dense_convs_match_onnxruntime(built, dims):
    path, lib = built
    assert_matches_onnxruntime(path, lib, image_feeds(dims), rtol=1e-4, atol=1e-4, where=dims)


def test_without_the_call_the_compute_path_matches(tmp_path):
    """Lowered without the call (what a backend without it gets; lower_function's default),
    the channels-last dense convs take the compute path, ReLU applied in its body: same
    results. A build for such a CPU (x86-64-v3) keeps them NCHW instead (the recipe turns
    nhwc-region's dense option off there)."""
    _model(tmp_path / "m.onnx")
    check_lowering(tmp_path / "m.onnx", [dict(N=1, H=1, W=1), dict(N=2, H=11, W=13)], rtol=1e-4, atol=1e-4,
                   pipeline="shape-inference,canonicalize,nhwc-region")
    text = onnxcc.compile(tmp_path / "m.onnx", tmp_path / "ir", emit="ir", max_versions=1, cpu="x86-64-v3").text
    assert text.count("onnx.Conv(") == 7 and text.count("cc.conv_nhwc(") == 0


def test_a_call_reads_the_entry_transpose_in_place(tmp_path):
    """A 1x1 conv + Relu first in the region (no padding: the call reads the entry
    Transpose's buffer itself), then 3x3 / 1x1 convs, the last with pads only on one side of
    each axis; 2x2 to 30x17 planes."""
    net = ConvNet(2)
    rng = net.rng

    def conv(x, y, cin, cout, k, relu=True, **attrs):
        return net.conv(x, y, cin, cout, k, bias=False, act="Relu" if relu else None, **attrs)

    h = conv("x", "a", 3, 32, 1)
    h = conv(h, "b", 32, 32, 3, pads=[1, 1, 1, 1])
    h = conv(h, "c", 32, 40, 1)
    h = conv(h, "d", 40, 32, 3, pads=[1, 1, 1, 1])
    h = conv(h, "e", 32, 48, 1)
    h = conv(h, "f", 48, 33, 3, relu=False, pads=[0, 1, 1, 0])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])
    path = tmp_path / "m.onnx"
    onnx.save(net.model("entry", [x], [h], 13), path)
    if _has_avx512f():
        text = onnxcc.compile(path, tmp_path / "k", emit="kernel", max_versions=1).text
        assert text.count("call onnxcc_f32conv(") == 3  # the 1x1 convs
        assert text.count("call onnxcc_f32wino_") == 3  # the 3x3 ones (kernel/conv_wino_call.py)
    onnxcc.compile(path, tmp_path / "lib", max_versions=1)
    lib = onnxcc.load(tmp_path / "lib")
    for shape in [(1, 3, 2, 2), (2, 3, 7, 5), (1, 3, 30, 17)]:
        feeds = {"x": rng.standard_normal(shape).astype(np.float32)}
        want = ort_run(path, feeds)[h]
        np.testing.assert_allclose(lib.run(feeds)[h], want, rtol=1e-4, atol=1e-4, err_msg=str(shape))


def test_widely_dilated_dense_conv_stays_nchw(tmp_path):
    """A dense conv dilated by 12 (an ASPP branch) stays out of the region, where the NCHW
    lowering drops the taps that read only padding on small planes (ops/conv_deadtaps.py);
    the six convs before it (one dilated by 2) form one. Both match onnxruntime below and above the dilation."""
    rng = np.random.default_rng(3)
    names = ("w1", "w2", "w3", "w4", "w5", "w6", "w12")
    inits = [numpy_helper.from_array((rng.standard_normal((40, 40, 3, 3)) / 60).astype(np.float32), n)
             for n in names]
    nodes, x = [], "x"
    for n in names[:-1]:  # six convs, the first dilated by 2, that do form a region
        d = 2 if n == "w1" else 1
        nodes += [helper.make_node("Conv", [x, n], [f"c{n}"], pads=[d] * 4, dilations=[d, d]),
                  helper.make_node("Relu", [f"c{n}"], [f"r{n}"])]
        x = f"r{n}"
    nodes.append(helper.make_node("Conv", [x, "w12"], ["y"], pads=[12, 12, 12, 12], dilations=[12, 12]))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 40, "H", "W"])
    g = helper.make_graph(nodes, "aspp", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    path = tmp_path / "aspp.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    text = onnxcc.compile(path, tmp_path / "ir", emit="ir", max_versions=1).text
    assert text.count("cc.conv_nhwc(") == 6
    assert text.count("onnx.Conv(") == 1 and "dilations = [12, 12]" in text
    lib_dir = tmp_path / "lib"
    onnxcc.compile(path, lib_dir, max_versions=1)
    lib = onnxcc.load(lib_dir)
    for h, w in ((6, 7), (30, 17)):
        feeds = {"x": rng.standard_normal((1, 40, h, w)).astype(np.float32)}
        np.testing.assert_allclose(lib.run(feeds)["y"], ort_run(path, feeds)["y"], rtol=1e-4, atol=1e-4)
