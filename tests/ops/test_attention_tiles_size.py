"""The tile attention's emitted IR (codegen/cpu/flash_tiles.py) grows with the head only in
its loop counts: its steps over the head and the value columns are loops, not a copy per
element (as copies, a head of 64 cost the transformer about a second of LLVM -O3, and the
code doubled again at 128). Counted in `emit="llvm"` text (before LLVM's optimiser), built
for 16-lane vectors whatever the host."""

from __future__ import annotations

import re
from pathlib import Path

import onnx
from attention_masks import score_chains_model
from onnx import helper

import onnxcc

AVX512 = {"cpu": "x86-64-v4", "features": "+avx512f,+avx512bw,+avx512vl,+avx512dq,+avx2,+fma"}


def _tile_instructions(tmp: Path, head: int) -> int:
    """The instructions flash_tiles.py and flash_lanes.py name in a scaled chain's module."""
    model = score_chains_model("t", {1: (head, head)}, 0.125, [helper.make_node("Mul", ["s1", "scale"], ["x1"])], [])
    onnx.save(model, tmp / f"h{head}.onnx")
    text = onnxcc.compile(tmp / f"h{head}.onnx", tmp / f"ll{head}", emit="llvm", max_versions=1, **AVX512).text
    return len(re.findall(r'^  %"(?:tiles|lanes)\.', text, re.MULTILINE))


def test_tile_ir_does_not_grow_with_the_head(tmp_path):
    n64, n128 = _tile_instructions(tmp_path, 64), _tile_instructions(tmp_path, 128)
    assert n64 > 0  # the chains took the tile path
    assert n128 < 1.2 * n64, (n64, n128)
