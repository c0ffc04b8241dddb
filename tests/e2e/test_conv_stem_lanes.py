"""The stem conv call (codegen/cpu/conv_stem.py: output pixels in the lanes, a register
transpose to channels-last) against onnxruntime, and its routing (ops/conv_implicit.py
`_callee`: a planar stem of at most 4 input channels, strides 1 or 2, kernels 3x3 to 7x7,
no residual or dilation).

Each model: a stem Conv (1, 3 or 4 input channels; 3x3, 5x5, 7x7; stride 1 or 2; symmetric
and one-sided pads) with a Relu, optionally a 2x2 MaxPool (the call's fused pool), then a
16-channel conv that brings the stem into the channels-last region: a 3x3 whose pads move
into the stem's stores (a padded output map, its border zeroed by the call) or a 1x1 (a flat
map). 16, 32 and 48 output channels: one to three groups of 16 (a group's second half of a
32-column packed panel). At symbolic N, H, W on planes 1x1 to 40x23, odd and even widths (a
row's last block of pixels partial: masked loads and stores), batch 1 to 3, and on 1 to 3
threads in child processes (the (batch, stored row) items split by the pool). Tolerance
rtol 1e-4, atol 1e-4: sums of up to 196 products of N(0, 1) values and weights scaled by
1/sqrt(fan-in), in another order than onnxruntime's."""

from __future__ import annotations

import re

import onnx
import pytest
from compiled_model import assert_matches_onnxruntime, assert_threads_match_onnxruntime, has_f32_conv_call, image_feeds
from conv_net import ConvNet
from onnx import TensorProto, helper

import onnxcc

pytestmark = pytest.mark.skipif(not has_f32_conv_call(), reason="the conv calls need AVX-512F")

# name: (input channels, kernel, stride, pads (top, left, bottom, right), output channels, pool, a 1x1 conv next)
CASES = {
    "plain": (3, 3, 1, (1, 1, 1, 1), 16, True, False),
    "mobile": (3, 3, 2, (1, 1, 1, 1), 16, False, False),
    "resnet": (3, 3, 2, (1, 1, 1, 1), 32, False, True),
    "gray5": (1, 5, 1, (2, 2, 2, 2), 16, False, False),
    "rgba7s2pool": (4, 7, 2, (3, 3, 3, 3), 32, True, False),
    "onesided48": (3, 3, 1, (0, 1, 2, 1), 48, False, True),
    "k5s2pool": (3, 5, 2, (2, 1, 2, 1), 16, True, True),
    # pads as wide as the kernel or wider on one side, none on another: whole kernel rows and
    # whole windows in the padding (every tap masked off), the right border inside the image
    "widepad": (3, 3, 1, (3, 4, 0, 2), 16, False, True),
    "widepad_s2": (2, 5, 2, (0, 5, 4, 0), 16, False, True),
}
SHAPES = [(1, 1, 1), (2, 3, 2), (1, 5, 7), (3, 6, 5), (1, 17, 33), (2, 40, 23), (1, 9, 50), (2, 7, 112)]
"""(N, H, W): planes smaller than a window, odd and even widths, rows of one to four blocks
of 16 pixels, a block whose windows reach both the left and the right padding; at stride 2
rows whose tails (1 to 8 pixels past whole blocks) go two to a block (56 pixels at W = 112),
an odd number of rows leaving the last item one row"""


def _out(n: int, k: int, s: int, lo: int, hi: int) -> int:
    return (n + lo + hi - k) // s + 1


def _shapes(case: str) -> list[tuple[int, int, int]]:
    """SHAPES whose stem (and pool) leave at least a 1x1 map"""
    _, k, s, p, _, pool, _ = CASES[case]
    least = 2 if pool else 1
    return [(n, h, w) for n, h, w in SHAPES
            if _out(h, k, s, p[0], p[2]) >= least and _out(w, k, s, p[1], p[3]) >= least]


def _write(path, case: str) -> None:
    cin, k, s, p, cout, pool, pointwise = CASES[case]
    net = ConvNet(cin * 1000 + k * 100 + cout)
    h = net.conv("x", "stem", cin, cout, k, act="Relu", strides=[s, s], pads=[p[0], p[1], p[2], p[3]])
    if pool:
        h = net.node("MaxPool", [h], "pool", kernel_shape=[2, 2], strides=[2, 2])
    if pointwise:  # no pads to move into the stem: it writes a flat map
        y = net.conv(h, "next", cout, 16, 1, act="Relu")
    else:
        y = net.conv(h, "next", cout, 16, 3, act="Relu", pads=[1, 1, 1, 1])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", cin, "H", "W"])
    onnx.save(net.model(f"stem_{case}", [x], [y], 13), path)


@pytest.fixture(scope="module", params=list(CASES))
def built(request, tmp_path_factory):
    case = request.param
    d = tmp_path_factory.mktemp(f"stem_{case}")
    _write(d / "m.onnx", case)
    kernel = onnxcc.compile(d / "m.onnx", d / "k", emit="kernel", max_versions=1).text
    onnxcc.compile(d / "m.onnx", d / "lib", max_versions=1)
    return case, d / "m.onnx", kernel, onnxcc.load(d / "lib")


def test_the_stem_takes_the_stem_call(built):
    """the stem conv is the one stem call, named by its channels, kernel, strides and pool, and
    reads the net's NCHW input itself (no planar padded copy); the second conv stays on the
    GEMM call (or the Winograd call, a dense 3x3 stride-1 conv of 16 or more channels)"""
    case, _, kernel, _ = built
    cin, k, s, _, _, pool, _ = CASES[case]
    assert kernel.count("call onnxcc_f32stem_") == 1
    stem = next(line for line in kernel.splitlines() if "call onnxcc_f32stem_" in line)
    assert f"call onnxcc_f32stem_c{cin}k{k}x{k}s{s}x{s}p{int(pool)}(" in stem
    assert "; in0, " in stem and "xplanar" not in kernel
    assert len(re.findall(r"call onnxcc_f32(?:conv|wino_\w+)\(", kernel)) == 1


def test_stem_matches_onnxruntime(built):
    case, path, _, lib = built
    cin = CASES[case][0]
    for n, h, w in _shapes(case):
        dims = dict(N=n, H=h, W=w)
        assert_matches_onnxruntime(path, lib, image_feeds(dims, channels=cin), rtol=1e-4, atol=1e-4,
                                   where=(case, dims))


THREADED = ("plain", "resnet", "rgba7s2pool", "widepad_s2")
"""the cases also run on 1-3 threads (the thread split is the same for every stem)"""


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("built", THREADED, indirect=True)
def test_stem_on_threads_matches_onnxruntime(built, threads, tmp_path):
    case, path, _, _ = built
    # the library beside the model, as assert_threads_match_onnxruntime reads it
    assert_threads_match_onnxruntime(path, _shapes(case), threads, tmp_path, channels=CASES[case][0])


def test_a_residual_or_dilated_stem_keeps_the_gemm_call(tmp_path):
    """the stem call has no residual and no dilation: such a stem stays on the GEMM call"""
    net = ConvNet(5)
    h = net.conv("x", "stem", 3, 16, 3, act="Relu", pads=[2, 2, 2, 2], dilations=[2, 2])
    y = net.conv(h, "next", 16, 16, 3, act="Relu", pads=[1, 1, 1, 1])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])
    onnx.save(net.model("dilated_stem", [x], [y], 13), tmp_path / "m.onnx")
    kernel = onnxcc.compile(tmp_path / "m.onnx", tmp_path / "k", emit="kernel", max_versions=1).text
    assert "onnxcc_f32stem_" not in kernel
    assert kernel.count("call onnxcc_f32conv(") == 1 and kernel.count("call onnxcc_f32wino_c16m16(") == 1


def test_a_stem_on_a_channels_last_map_reads_a_planar_copy(tmp_path):
    """a 4-channel 3x3 conv after a 1x1 one (which stays on the GEMM call and writes a
    channels-last map) takes the stem call on an unpadded planar copy of that map"""
    net = ConvNet(7)
    h = net.conv("x", "mix", 3, 4, 1, act="Relu")
    h = net.conv(h, "stem", 4, 16, 3, act="Relu", pads=[1, 2, 1, 0])
    h = net.conv(h, "mid", 16, 16, 3, act="Relu", pads=[1, 1, 1, 1])  # keeps the stem channels-last
    y = net.conv(h, "next", 16, 16, 1, act="Relu")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])
    path = tmp_path / "m.onnx"
    onnx.save(net.model("stem_after_mix", [x], [y], 13), path)
    kernel = onnxcc.compile(path, tmp_path / "k", emit="kernel", max_versions=1).text
    assert "call onnxcc_f32stem_c4k3x3s1x1p0(" in kernel and "xplanar" in kernel
    onnxcc.compile(path, tmp_path / "lib", max_versions=1)
    lib = onnxcc.load(tmp_path / "lib")
    for n, hh, ww in [(1, 1, 1), (2, 6, 5), (1, 17, 33)]:
        dims = dict(N=n, H=hh, W=ww)
        assert_matches_onnxruntime(path, lib, image_feeds(dims, channels=3), rtol=1e-4, atol=1e-4, where=dims)
