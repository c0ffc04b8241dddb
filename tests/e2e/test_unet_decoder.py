"""A U-Net decoder channels-last (passes/nhwc_region.py): upsampling by a 2x2 stride-2
ConvTranspose (cc.convt_nhwc, ops/convt_nhwc.py) or by a x2 Resize (nearest and linear with
the coordinate modes torch exports), a Concat with the encoder's skip, convs; compared with
onnxruntime through the user path (compile, load, run) at symbolic N, H, W, batch 1 to 3.

Two graphs: `unet` (two pooled levels and their skips, so H and W are multiples of 4) and
`chain` (upsampling without skips, so any plane, odd ones and 1x1 included). ConvTransposes
that are no pixel shuffle (overlapping taps, pads, output_padding, groups) stay NCHW beside
the region and are checked too. Tolerance rtol 1e-4, atol 1e-4: sums of up to 288 products
of N(0, 1) values and weights scaled by 1/sqrt(fan-in), in another order than onnxruntime's."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxcc
from onnxcc.ops.convt_nhwc import pixel_shuffle_convt
from onnxcc.testing import ort_run

RESIZES = {
    "nearest_floor": dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
    "nearest_exact": dict(mode="nearest", coordinate_transformation_mode="half_pixel",
                          nearest_mode="round_prefer_floor"),
    "bilinear": dict(mode="linear", coordinate_transformation_mode="pytorch_half_pixel"),
    "bilinear_half": dict(mode="linear", coordinate_transformation_mode="half_pixel"),
    "bilinear_corners": dict(mode="linear", coordinate_transformation_mode="align_corners"),
}


class _G:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.inits: list = []

    def const(self, arr) -> str:
        name = f"c{len(self.inits)}"
        self.inits.append(numpy_helper.from_array(np.asarray(arr, np.float32), name))
        return name

    def node(self, op: str, *ins: str, **attrs) -> str:
        y = f"t{len(self.nodes)}"
        self.nodes.append(helper.make_node(op, list(ins), [y], **attrs))
        return y

    def conv(self, x: str, cin: int, cout: int, k: int = 3) -> str:
        w = self.const(self.rng.standard_normal((cout, cin, k, k)) / np.sqrt(cin * k * k))
        b = self.const(0.1 * self.rng.standard_normal(cout))
        return self.node("Relu", self.node("Conv", x, w, b, kernel_shape=[k, k], pads=[k // 2] * 4))

    def convt(self, x: str, cin: int, cout: int, k: int = 2, s: int = 2, bias: bool = True, **attrs) -> str:
        group = attrs.get("group", 1)
        w = self.const(self.rng.standard_normal((cin, cout // group, k, k)) / np.sqrt(cin))
        ins = [x, w] + ([self.const(0.1 * self.rng.standard_normal(cout))] if bias else [])
        return self.node("ConvTranspose", *ins, kernel_shape=[k, k], strides=[s, s], **attrs)

    def resize(self, x: str, kind: str, empty_roi: bool = False, like: str | None = None) -> str:
        """x2 on H and W; roi absent (as torch exports) or an empty constant. With `like`, to
        that tensor's H and W by sizes computed from the shapes, as torch exports
        interpolate(x, size=like.shape[2:]): Concat(Shape(x)[:2], Shape(like)[2:])."""
        if like is not None:
            i64 = {}
            for k, v in (("zero", 0), ("two", 2), ("four", 4)):
                i64[k] = f"i64_{k}"
                if not any(t.name == i64[k] for t in self.inits):
                    self.inits.append(numpy_helper.from_array(np.array([v], np.int64), i64[k]))
            nc = self.node("Slice", self.node("Shape", x), i64["zero"], i64["two"])
            hw = self.node("Slice", self.node("Shape", like), i64["two"], i64["four"])
            return self.node("Resize", x, "", "", self.node("Concat", nc, hw, axis=0), **RESIZES[kind])
        scales = self.const([1, 1, 2, 2])
        return self.node("Resize", x, self.const(np.zeros(0)) if empty_roi else "", scales, **RESIZES[kind])

    def save(self, path, outs: list[str], opset: int = 17) -> None:
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])
        ys = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs]
        g = helper.make_graph(self.nodes, "unet_decoder", [x], ys, self.inits)
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]), path)


def _unet(path, ups: tuple[str, str]) -> None:
    """Encoder 3 -> 16 -> 32 -> bottleneck 64 over two 2x2 max pools; decoder levels upsampled
    by `ups` ('convt' or a RESIZES key, then a 3x3 conv halving the channels), Concat, conv pair."""
    g = _G(3)
    s1 = g.conv(g.conv("x", 3, 16), 16, 16)
    s2 = g.conv(g.conv(g.node("MaxPool", s1, kernel_shape=[2, 2], strides=[2, 2]), 16, 32), 32, 32)
    h = g.conv(g.conv(g.node("MaxPool", s2, kernel_shape=[2, 2], strides=[2, 2]), 32, 64), 64, 64)
    for up, skip, c in zip(ups, (s2, s1), (32, 16), strict=True):
        if up == "convt":
            h = g.convt(h, 2 * c, c)
        else:  # "sized_...": to the skip's size (any H and W)
            sized = up.startswith("sized_")
            h = g.conv(g.resize(h, up.removeprefix("sized_"), like=skip if sized else None), 2 * c, c)
        h = g.conv(g.conv(g.node("Concat", h, skip, axis=1), 2 * c, c), c, c)
    out = g.node("Conv", h, g.const(g.rng.standard_normal((3, 16, 1, 1)) / 4), kernel_shape=[1, 1])
    g.save(path, [out])


def _chain(path) -> None:
    """Upsamplings without skips (any H, W): ConvTranspose 2x2/s2 without bias, a bilinear
    Resize (align_corners) and a nearest one (half_pixel, with an empty roi constant), a
    3x3/s3 ConvTranspose (kernel == stride); beside them NCHW ConvTransposes: 3x3/s2 pads 1
    output_padding 1, 2x2/s2 output_padding 1, 4x4/s2 pads 1, grouped 2x2/s2."""
    g = _G(5)
    h = g.conv(g.conv("x", 3, 16), 16, 32)
    h = g.conv(g.convt(h, 32, 16, bias=False), 16, 32)
    h = g.conv(g.resize(h, "bilinear_corners"), 32, 16)
    h = g.conv(g.resize(h, "nearest_exact", empty_roi=True), 16, 16)
    big = g.conv(g.convt(h, 16, 16, k=3, s=3), 16, 16)
    o1 = g.convt(h, 16, 8, k=3, s=2, pads=[1, 1, 1, 1], output_padding=[1, 1])
    o2 = g.convt(h, 16, 8, output_padding=[1, 1])
    o3 = g.convt(h, 16, 8, k=4, s=2, pads=[1, 1, 1, 1])
    o4 = g.convt(h, 16, 8, group=2)
    g.save(path, [big, o1, o2, o3, o4])


UNETS = {"convt": ("convt", "convt"), "torch_resize": ("nearest_floor", "bilinear"),
         "sized": ("sized_nearest_floor", "sized_nearest_floor"),
         "other_resize": ("nearest_exact", "bilinear_half")}


@pytest.fixture(scope="module", params=[  # the second linear resize's build takes ~15 s: slow
    "convt", "torch_resize", "sized", pytest.param("other_resize", marks=pytest.mark.slow)])
def unet(request, tmp_path_factory):
    d = tmp_path_factory.mktemp(f"unet_{request.param}")
    _unet(d / "m.onnx", UNETS[request.param])
    onnxcc.compile(d / "m.onnx", d / "lib", max_versions=1)
    return d / "m.onnx", onnxcc.load(d / "lib")


def _check(path, lib, shape, seed: int) -> None:
    feeds = {"x": np.random.default_rng(seed).standard_normal(shape).astype(np.float32)}
    want = ort_run(path, feeds)
    got = lib.run(feeds)
    assert set(got) == set(want)
    for name, w in want.items():
        assert got[name].shape == w.shape, name
        np.testing.assert_allclose(got[name], w, rtol=1e-4, atol=1e-4, err_msg=name)


@pytest.mark.parametrize("shape", [(1, 3, 4, 4), (3, 3, 12, 20), (2, 3, 8, 36)], ids=str)
def test_unet_matches_onnxruntime(unet, shape):
    path, lib = unet
    _check(path, lib, shape, shape[2] * 100 + shape[3])


@pytest.fixture(scope="module")
def sized_unet(tmp_path_factory):
    d = tmp_path_factory.mktemp("unet_sized")
    _unet(d / "m.onnx", UNETS["sized"])
    onnxcc.compile(d / "m.onnx", d / "lib", max_versions=1)
    return d / "m.onnx", onnxcc.load(d / "lib")


@pytest.mark.parametrize("shape", [(1, 3, 4, 4), (2, 3, 5, 7), (1, 3, 13, 6), (3, 3, 7, 9)], ids=str)
def test_sized_unet_any_plane(sized_unet, shape):
    """Resized to the skip's size, the decoder takes planes the pools floor (odd ones)."""
    path, lib = sized_unet
    _check(path, lib, shape, shape[2] * 100 + shape[3])


@pytest.mark.parametrize("up", ["convt", *RESIZES, "sized_bilinear"])
def test_decoder_is_channels_last(tmp_path, up):
    """The whole net is one region: every conv, pool, upsampling and Concat channels-last,
    one layout change in (the input) and one out (the result)."""
    _unet(tmp_path / "m.onnx", (up, up))
    text = onnxcc.compile(tmp_path / "m.onnx", tmp_path / "ir", emit="ir", max_versions=1).text
    assert text.count("onnx.Transpose(") == 2
    assert "onnx.Conv(" not in text and "onnx.ConvTranspose(" not in text
    assert text.count("cc.convt_nhwc(") == (2 if up == "convt" else 0)
    assert text.count("axis = 3") == 2  # both Concats along the channels-last channel axis
    if up.startswith("sized_"):  # the sizes, folded to a cc.dims, permuted
        assert "cc.dims() {dims = [#dim<N>, #dim<H>, #dim<W>, 32]}" in text
    elif up != "convt":
        assert text.count("dense<f32[4]: [1.0, 2.0, 2.0, 1.0]>") >= 1  # the permuted scales


def test_chain_any_plane(tmp_path):
    _chain(tmp_path / "m.onnx")
    onnxcc.compile(tmp_path / "m.onnx", tmp_path / "lib", max_versions=1)
    lib = onnxcc.load(tmp_path / "lib")
    for k, shape in enumerate([(1, 3, 1, 1), (3, 3, 5, 7), (2, 3, 9, 4), (1, 3, 6, 6)]):
        _check(tmp_path / "m.onnx", lib, shape, k)
    text = onnxcc.compile(tmp_path / "m.onnx", tmp_path / "ir", emit="ir", max_versions=1).text
    assert text.count("cc.convt_nhwc(") == 2  # the 2x2/s2 and the 3x3/s3
    assert text.count("onnx.ConvTranspose(") == 4


def test_pixel_shuffle_convt_rule():
    w = (16, 8, 2, 2)
    assert pixel_shuffle_convt({"kernel_shape": [2, 2], "strides": [2, 2]}, w)
    assert pixel_shuffle_convt({"strides": [2, 2], "pads": [0, 0, 0, 0], "output_padding": [0, 0]}, w)
    assert not pixel_shuffle_convt({"kernel_shape": [2, 2]}, w)  # stride 1: taps overlap
    assert not pixel_shuffle_convt({"strides": [2, 2], "output_padding": [1, 1]}, w)
    assert not pixel_shuffle_convt({"strides": [2, 2], "pads": [1, 0, 0, 0]}, w)
    assert not pixel_shuffle_convt({"strides": [2, 2], "group": 2}, w)
    assert not pixel_shuffle_convt({"strides": [2, 2], "dilations": [2, 2]}, w)
    assert not pixel_shuffle_convt({"strides": [2, 2], "auto_pad": "SAME_UPPER"}, w)
    assert not pixel_shuffle_convt({"strides": [2, 2], "output_shape": [9, 9]}, w)
    assert not pixel_shuffle_convt({"strides": [3, 3]}, (16, 8, 3, 2))
