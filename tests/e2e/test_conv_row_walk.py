"""The f32 conv call's window offsets and stored rows stepped from pixel to pixel
(codegen/cpu/gemm_implicit.py `_window_rows`, conv_out_rows.py `row_pointers`: one division
per tile, then a step per pixel and a wrap at each row's end; no per-call offset tables),
compared with onnxruntime on 1, 2 and 3 threads (each in a child process).

One library at symbolic N, H, W: a planar 3x3 stem 3 -> 32 with Relu and a 2x2 MaxPool (the
call's pooled rows: 4 windows a pixel, pixels 2 tb apart), a 3x3 32 -> 32 with Relu whose
input the stem wrote zero-padded (out pads: stored rows wrap past a padded row's border), a
3x3 stride-2 32 -> 48 (ta, tb of two rows and two pixels) and a 1x1 48 -> 32 with Relu. Maps
from 1 pixel wide (a wrap at every pixel, several per 12-row tile) to 31, odd and even,
batch 1 to 3: tiles that straddle rows, blocks that end mid-row, a last tile past the map's
end."""

from __future__ import annotations

import onnx
import pytest
from compiled_model import assert_threads_match_onnxruntime, f32conv_sizes, has_f32_conv_call, lib_fixture
from conv_net import ConvNet
from onnx import TensorProto, helper

import onnxcc

SHAPES = [(1, 2, 2), (2, 2, 12), (3, 13, 3), (1, 10, 14), (2, 52, 6), (1, 60, 63), (3, 22, 18)]


def _model(path):
    net = ConvNet(23)
    s = net.conv("x", "stem", 3, 32, (3, 3), act="Relu", pads=[1, 1, 1, 1])
    p = net.node("MaxPool", [s], "p1", kernel_shape=[2, 2], strides=[2, 2])
    a = net.conv(p, "a", 32, 32, (3, 3), act="Relu", pads=[1, 1, 1, 1])
    b = net.conv(a, "b", 32, 48, (3, 3), strides=[2, 2], pads=[1, 1, 1, 1])
    c = net.conv(b, "c", 48, 32, (1, 1), act="Relu")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])
    onnx.save(net.model("conv_row_walk", [x], [c], 13), path)


built = lib_fixture("conv_row_walk", _model, max_versions=1)


@pytest.mark.skipif(not has_f32_conv_call(), reason="the conv call needs AVX-512F")
def test_calls_step_their_rows(built, tmp_path):
    """the four convs are calls of the kinds above (the stem pooled, the stem and the next
    writing padded maps, the stride-2 conv stepping two pixels) and the kernel makes no
    offset table for them"""
    path, _ = built
    kir = onnxcc.compile(path, tmp_path / "k", emit="kernel", max_versions=1).text
    sizes = f32conv_sizes(kir)
    # the stem call's tb is the input's height (kernel/conv_stem_call.py), the others' a row step
    assert [(s["pool"], s["opt"], s["tb"]) for s in sizes] == [("4", "1", "H"), ("1", "1", "32"), ("1", "0", "64"),
                                                                ("1", "0", "48")]
    assert "rowoff" not in kir and "outoff" not in kir


@pytest.mark.skipif(not has_f32_conv_call(), reason="the conv call needs AVX-512F")
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_row_walk_on_threads_matches_onnxruntime(built, threads, tmp_path):
    path, _ = built
    assert_threads_match_onnxruntime(path, SHAPES, threads, tmp_path)