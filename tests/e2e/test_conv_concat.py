"""Convs that write their slices of a channel Concat in place (ops/conv_concat.py: the conv
call's `c0`, its row stride the Concat's channels), compared with onnxruntime on 1, 2 and 3
threads (each in a child process: the pool's size is fixed when a library first runs a loop).

One library at symbolic N, H, W: a 3x3 stem 3 -> 16 with Relu, then two Fire modules
(squeeze 1x1 with Relu, then expand 1x1 and expand 3x3 with Relu, concatenated along
channels): an unpadded stride-2 3x3 stem 3 -> 64 with Relu (squeezenet's: its windows read from a planar
copy of the NCHW input, ops/conv_implicit.py `PLANAR_MAX_CIN`), then two Fire modules
(squeeze 1x1 with Relu, then expand 1x1 and expand 3x3 with Relu, concatenated along
channels): the first 64 -> 16 -> 64 | 48 (the 3x3's slice starts at channel 64 and ends in a
masked half panel), the second, behind a 2x2 stride-2 MaxPool of the first's Concat, 112 ->
16 -> 64 | 64. Then a Concat that must stay a copy: the second squeeze's output (which the
expands read too) beside the second Fire's Concat, also an output. Planes odd and even from
5x5, batch 1 to 3."""

from __future__ import annotations

import onnx
import pytest
from compiled_model import assert_threads_match_onnxruntime, f32conv_sizes, has_f32_conv_call, lib_fixture
from conv_net import ConvNet
from onnx import TensorProto, helper

import onnxcc

SHAPES = [(1, 5, 5), (1, 32, 32), (2, 33, 29), (3, 17, 40), (1, 63, 70)]


def _fire(net: ConvNet, x: str, name: str, cin: int, sq: int, e1: int, e3: int) -> tuple[str, str, str]:
    """(the Concat of the expands, the squeeze's output, the expand 1x1's output)"""
    s = net.conv(x, f"{name}_s", cin, sq, (1, 1), act="Relu")
    a = net.conv(s, f"{name}_e1", sq, e1, (1, 1), act="Relu")
    b = net.conv(s, f"{name}_e3", sq, e3, (3, 3), act="Relu", pads=[1, 1, 1, 1])
    return net.node("Concat", [a, b], f"{name}_cat", axis=1), s, a


def _model(path):
    net = ConvNet(17)
    stem = net.conv("x", "stem", 3, 64, (3, 3), act="Relu", strides=[2, 2])
    f1, _, _ = _fire(net, stem, "f1", 64, 16, 64, 48)
    pooled = net.node("MaxPool", [f1], "pool", kernel_shape=[2, 2], strides=[2, 2])
    f2, s2, _ = _fire(net, pooled, "f2", 112, 16, 64, 64)
    net.node("Concat", [s2, f2], "kept", axis=1)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])
    onnx.save(net.model("conv_concat", [x], [f2, "kept"], 13), path)


built = lib_fixture("conv_concat", _model, max_versions=1)


@pytest.mark.skipif(not has_f32_conv_call(), reason="the conv call needs AVX-512F")
def test_fire_expands_write_the_concat(built, tmp_path):
    """the two Fire Concats are no computes: their expand calls write at c0 = 0 (the 1x1) and
    64 (the 3x3) with the Concat's channels (112, 128) as row stride; `kept` stays a copy"""
    path, _ = built
    kir = onnxcc.compile(path, tmp_path / "k", emit="kernel", max_versions=1).text
    wide = sorted((s["c0"], s["ldc"]) for s in f32conv_sizes(kir) if s["ldc"] in ("112", "128"))
    assert wide == [("0", "112"), ("0", "128"), ("64", "112"), ("64", "128")]
    computed = [ln.split("[")[0].strip() for ln in kir.splitlines() if "] = " in ln]
    assert not [c for c in computed if c.startswith("Concat_")]
    assert any(" = select(i1 < 16, " in ln for ln in kir.splitlines())  # kept: the squeeze beside the Concat


@pytest.mark.skipif(not has_f32_conv_call(), reason="the conv call needs AVX-512F")
def test_unpadded_stem_reads_the_nchw_input(built, tmp_path):
    """the stem's call (the stem call, kernel/conv_stem_call.py) reads the NCHW input itself,
    no copy: its window sizes carry the input's pads (0, 0) and extents (W, H)"""
    path, _ = built
    kir = onnxcc.compile(path, tmp_path / "k", emit="kernel", max_versions=1).text
    stem = f32conv_sizes(kir)[0]
    assert (stem["s0"], stem["s1"], stem["l"], stem["tb"]) == ("0", "0", "W", "H")
    assert "xplanar" not in kir and any("call onnxcc_f32stem_" in ln and "; in0, " in ln for ln in kir.splitlines())


@pytest.mark.skipif(not has_f32_conv_call(), reason="the conv call needs AVX-512F")
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_concat_slices_on_threads_match_onnxruntime(built, threads, tmp_path):
    path, _ = built
    assert_threads_match_onnxruntime(path, SHAPES, threads, tmp_path)