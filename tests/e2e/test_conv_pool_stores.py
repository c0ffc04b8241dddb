"""A 2x2 stride-2 MaxPool folded into the dense conv before it (passes/nhwc_region.py
`_folded_pools`, cc.conv_nhwc's `pool`): the implicit GEMM's rows are each pooled pixel's 4
conv pixels and its stores keep their maximum (codegen/cpu/gemm_implicit.py), so the full-size
map is never written.

The graph: a planar 3 -> 16 stem (Relu, pool: the 16-column micro-kernel), a channels-last
16 -> 40 conv (Relu, pool: a 32-column panel and a masked 8-column one), a 40 -> 24 conv
without Relu (pool), and a branch whose Relu'd map two pools read (one in ceil mode, each
then globally averaged), which stays unfolded. Compared with onnxruntime through the user path at symbolic N, H, W, on
planes from 8x8 (a 1x1 map at the end) to 37x29 (odd extents at every level: the floor
mode's dropped row and column). Tolerance rtol 1e-4, atol 1e-4: sums of up to 360 products
of N(0, 1) values and weights scaled by 1/sqrt(fan-in), in another order than onnxruntime's.
NaN inputs: the pooled maps are NaN exactly where numpy's max over onnxruntime's unpooled maps
is (the stores' maximum propagates NaN, as the MaxPool lowering does). Without the call (the
compute path) the same results."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from compiled_model import assert_matches_onnxruntime, f32conv_sizes, has_f32_conv_call, image_feeds, lib_fixture
from conv_net import ConvNet
from onnx import TensorProto, helper, numpy_helper

import onnxcc
from onnxcc.testing import check_lowering, ort_run

SHAPES = [dict(N=1, H=8, W=8), dict(N=2, H=13, W=11), dict(N=1, H=37, W=29), dict(N=3, H=16, W=20)]


def _model(path, pooled: bool = True) -> list[str]:
    """The graph above; with `pooled` False the folded pools are left out (the maps they read
    are the outputs): the oracle of the NaN test. Returns the output names."""
    net = ConvNet(12)

    def conv(x, y, cin, cout, relu=True):
        return net.conv(x, y, cin, cout, 3, act="Relu" if relu else None, kernel_shape=[3, 3], pads=[1] * 4)

    def pool(x, y, **attrs):
        return net.node("MaxPool", [x], y, kernel_shape=[2, 2], strides=[2, 2], **attrs)

    outs = []
    h = conv("x", "stem", 3, 16)
    if pooled:
        h = pool(h, "p1")
        h = pool(conv(h, "mid", 16, 40), "p2")
        outs.append(pool(conv(h, "last", 40, 24, relu=False), "p3"))
        b = conv("p1", "side", 16, 32)  # read by two pools: not folded
        for q in (pool(b, "q_ceil", ceil_mode=1), pool(b, "q_floor")):  # pooled to [N, 32, 1, 1]: no conversion
            outs.append(net.node("GlobalAveragePool", [q], f"{q}_avg"))
    else:
        outs.append(h)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])
    onnx.save(net.model("pooled_convs", [x], outs, 13), path)
    return outs


built = lib_fixture("pool_stores", _model, max_versions=1)


def test_pools_fold_into_their_convs(tmp_path):
    _model(tmp_path / "m.onnx")
    text = onnxcc.compile(tmp_path / "m.onnx", tmp_path / "ir", emit="ir", max_versions=1).text
    assert text.count("cc.conv_nhwc(") == 4
    assert text.count("pool = 2") == 3  # stem, mid, last
    assert text.count("cc.maxpool_nhwc(") == 2  # the side branch's two
    if has_f32_conv_call():
        kir = onnxcc.compile(tmp_path / "m.onnx", tmp_path / "k", emit="kernel", max_versions=1).text
        pools = [sizes["pool"] for sizes in f32conv_sizes(kir)]
        assert sorted(pools) == ["1", "4", "4", "4"], pools


@pytest.mark.parametrize("dims", SHAPES, ids=lambda d: "x".join(str(v) for v in d.values()))
def test_pooled_convs_match_onnxruntime(built, dims):
    path, lib = built
    assert_matches_onnxruntime(path, lib, image_feeds(dims), rtol=1e-4, atol=1e-4, where=dims)


def test_nan_propagates_through_the_pooled_stores(tmp_path):
    plain = tmp_path / "plain.onnx"
    (full,) = _model(plain, pooled=False)
    x = np.random.default_rng(4).standard_normal((2, 3, 13, 11)).astype(np.float32)
    x[0, 1, 5, 6] = np.nan
    x[1, 0, 0, 0] = np.nan
    z = ort_run(str(plain), {"x": x})[full]
    want = z[:, :, :12, :10].reshape(2, 16, 6, 2, 5, 2).max(axis=(3, 5))
    assert np.isnan(want).any() and not np.isnan(want).all()
    got = _stem_only(tmp_path).run({"x": x})["p1"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)  # NaN where, and only where, numpy's is


def _stem_only(tmp_path):
    """the stem, its pool and a 3x3 conv reading it, globally averaged (so that they form a
    region), the pooled map an output"""
    rng = np.random.default_rng(12)
    w = (rng.standard_normal((16, 3, 3, 3)) / np.sqrt(27)).astype(np.float32)
    b = (0.1 * rng.standard_normal(16)).astype(np.float32)
    w2 = (rng.standard_normal((32, 16, 3, 3)) / 12).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1] * 4),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p1", "w2"], ["c2"], kernel_shape=[3, 3], pads=[1] * 4),
             helper.make_node("GlobalAveragePool", ["c2"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])
    g = helper.make_graph(nodes, "stem", [x], [helper.make_tensor_value_info(o, TensorProto.FLOAT, None)
                                               for o in ("p1", "y")],
                          [numpy_helper.from_array(a, n) for n, a in (("w", w), ("b", b), ("w2", w2))])
    path = tmp_path / "stem.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    assert onnxcc.compile(path, tmp_path / "ir", emit="ir", max_versions=1).text.count("pool = 2") == 1
    onnxcc.compile(path, tmp_path / "stem", max_versions=1)
    return onnxcc.load(tmp_path / "stem")


def test_without_the_call_the_compute_path_matches(tmp_path):
    """Lowered without the call (lower_function's default), a pooled conv is the conv into a
    temp, then the pool: same results."""
    _model(tmp_path / "m.onnx")
    check_lowering(tmp_path / "m.onnx", SHAPES[:2], rtol=1e-4, atol=1e-4,
                   pipeline="shape-inference,canonicalize,nhwc-region")
