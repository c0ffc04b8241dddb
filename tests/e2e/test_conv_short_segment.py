"""Window segments of 3, 5 or 7 steps (codegen/cpu/gemm_implicit.py `UNROLLED_SEGMENTS`): a
planar stem's KW taps, or a channels-last window row of one input channel, run as a straight
run of steps whose addresses are immediate offsets from the segment's start.

Stems of 1 and 3 input channels with kernel widths 3, 5 and 7 (square and not), strides 1 and
2, symmetric, asymmetric and no padding, 16, 32 and 48 output channels (the 16-column micro-
kernel, the 32-column one, and both in one call), each followed by a dense conv so that it
joins a channels-last region (passes/nhwc_region.py). Compared with onnxruntime through the
user path at symbolic N, H, W, planes from 3x3 (a 7x7 window over mostly padding) to 33x40
(several row blocks, row tails of many heights). Tolerance rtol 1e-4, atol 1e-4: sums of up
to 147 products of N(0, 1) values and weights scaled by 1/sqrt(fan-in), in another order than
onnxruntime's.

The emitted code is checked too: the calls get the short segment lengths, and both
micro-kernels hold a loop body of exactly 12 rows x 3, 5 and 7 broadcast loads at as many
immediate offsets, with no vector register spilled in it."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from compiled_model import assert_matches_onnxruntime, f32conv_sizes, has_f32_conv_call
from onnx import TensorProto, helper, numpy_helper

import onnxcc

SHAPES = [dict(N=1, H=3, W=3), dict(N=2, H=16, W=13), dict(N=1, H=33, W=40), dict(N=3, H=9, W=30)]

STEMS = [  # (input, cin, cout, kernel, strides, pads): the segment is the kernel's width
    ("x", 3, 32, (7, 7), (2, 2), (3, 3, 3, 3)),
    ("x", 3, 16, (3, 5), (1, 1), (1, 2, 1, 2)),
    ("x", 3, 48, (3, 3), (2, 2), (0, 1, 1, 0)),
    ("g", 1, 16, (5, 7), (1, 2), (2, 3, 2, 3)),
    ("g", 1, 16, (3, 3), (1, 1), (0, 0, 0, 0)),  # unpadded: channels-last, a row of 3 x 1 channel
]


def _model(path) -> None:
    rng = np.random.default_rng(7)
    inits, nodes, outs = [], [], []

    def conv(x, y, cin, cout, k, strides=(1, 1), pads=(1, 1, 1, 1)):
        w = (rng.standard_normal((cout, cin, *k)) / np.sqrt(cin * k[0] * k[1])).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w_{y}"))
        inits.append(numpy_helper.from_array((0.1 * rng.standard_normal(cout)).astype(np.float32), f"b_{y}"))
        nodes.append(helper.make_node("Conv", [x, f"w_{y}", f"b_{y}"], [y], kernel_shape=list(k),
                                      strides=list(strides), pads=list(pads)))
        nodes.append(helper.make_node("Relu", [y], [f"{y}_r"]))
        return f"{y}_r"

    for i, (x, cin, cout, k, strides, pads) in enumerate(STEMS):
        h = conv(x, f"stem{i}", cin, cout, k, strides, pads)
        outs.append(conv(h, f"next{i}", cout, 24, (3, 3)))
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"]),
              helper.make_tensor_value_info("g", TensorProto.FLOAT, ["N", 1, "H", "W"])]
    g = helper.make_graph(nodes, "short_segments", inputs,
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("short_segment") / "m.onnx"
    _model(path)
    return path


def test_short_segments_match_onnxruntime(model_path, tmp_path):
    onnxcc.compile(model_path, tmp_path / "lib", max_versions=1)
    lib = onnxcc.load(tmp_path / "lib")
    rng = np.random.default_rng(3)
    for s in SHAPES:
        feeds = {"x": rng.standard_normal((s["N"], 3, s["H"], s["W"])).astype(np.float32),
                 "g": rng.standard_normal((s["N"], 1, s["H"], s["W"])).astype(np.float32)}
        assert_matches_onnxruntime(model_path, lib, feeds, rtol=1e-4, atol=1e-4, where=s)


def test_stems_call_the_conv_with_short_segments(model_path, tmp_path):
    """Every stem is one conv call of KW taps a segment: an implicit-GEMM call whose segment
    length L (the 8th size) is its KW, or a stem call whose name says KW (its L is the
    input's width, kernel/conv_stem_call.py)"""
    if not has_f32_conv_call():
        pytest.skip("no f32 conv call on this target")
    from onnxcc.compiler import CompileOptions
    from onnxcc.compiler.compile import compile_model

    text = compile_model(str(model_path), str(tmp_path / "k"), CompileOptions(max_versions=1), emit="kernel").text
    seg = [sizes["l"] for sizes in f32conv_sizes(text) if sizes["l"] != "W"]
    seg += re.findall(r"call onnxcc_f32stem_c\d+k\d+x(\d+)s", text)
    assert sorted(s for s in seg if s in ("3", "5", "7")) == ["3", "3", "5", "7", "7"], seg


_BCAST = re.compile(r"(?:vbroadcastss\s+(-?\d*)\(%\w+(?:,%\w+(?:,\d)?)?\)|(-?\d*)\(%\w+(?:,%\w+(?:,\d)?)?\)\{1to16\})")


def _unrolled_blocks(body: str) -> dict[int, list[str]]:
    """{steps: the blocks of `body` whose broadcast loads are 12 rows x `steps` immediate offsets
    4 bytes apart}"""
    found: dict[int, list[str]] = {}
    for block in re.split(r"\n\.LBB\w+:", body):
        disps = [int(a or b or 0) for a, b in _BCAST.findall(block)]
        offs = sorted(set(disps))
        steps = len(offs)
        if steps and len(disps) == 12 * steps and offs == list(range(offs[0], offs[0] + 4 * steps, 4)):
            found.setdefault(steps, []).append(block)
    return found


def test_micro_kernels_unroll_short_segments_without_spills(model_path, tmp_path, monkeypatch):
    if not has_f32_conv_call():
        pytest.skip("no f32 conv call on this target")
    from onnxcc.compiler import CompileOptions
    from onnxcc.compiler.compile import compile_model
    from onnxcc.ops import conv_implicit

    monkeypatch.setattr(conv_implicit, "WINOGRAD", False)  # the 3x3 convs on the GEMM call's micro-kernels

    asm = compile_model(str(model_path), str(tmp_path / "asm"), CompileOptions(max_versions=1), emit="asm").text
    kernels = dict(re.findall(r"\n(onnxcc\.f32conv\.ukr\.12x(?:16|32)):(.*?)\.Lfunc_end", asm, re.S))
    assert set(kernels) == {"onnxcc.f32conv.ukr.12x16", "onnxcc.f32conv.ukr.12x32"}, sorted(kernels)
    for name, body in kernels.items():
        blocks = _unrolled_blocks(body)
        for steps in (3, 5, 7):
            assert blocks.get(steps), f"{name}: no straight run of {steps} steps"
            for block in blocks[steps]:
                assert not re.search(r"%zmm\d+, -?\d*\(%rsp\)|\(%rsp\), %zmm", block), f"{name}: spill ({steps})"
