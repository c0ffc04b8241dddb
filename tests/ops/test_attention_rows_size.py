"""The four-row form of fused attention (codegen/cpu/flash.py: the rows left after the tile
blocks, or every row of a head the tiles do not take) emits its per-row steps once, as a
loop over the rows: the score's epilogue, the block max, the probabilities, the rescale and
the output. As a copy per row they cost the transformer's attention module about 0.2 s of
LLVM -O3, for rows that run only when the sequence is not a whole number of
tile blocks. Counted in `emit="llvm"` text (before LLVM's optimiser), built for 16-lane
vectors whatever the host."""

from __future__ import annotations

import re
from pathlib import Path

import onnx
from attention_masks import score_chains_model
from onnx import helper

import onnxcc

AVX512 = {"cpu": "x86-64-v4", "features": "+avx512f,+avx512bw,+avx512vl,+avx512dq,+avx2,+fma"}
PER_ROW = ("flash.sm", "flash.y", "flash.a.scaled", "flash.m.next")
"""instructions of the per-row steps: the exp's argument, the output's division, the
accumulator's rescale, the running max's update"""


def test_per_row_steps_are_emitted_once_per_form(tmp_path: Path):
    model = score_chains_model("t", {1: (64, 64)}, 0.125, [helper.make_node("Mul", ["s1", "scale"], ["x1"])], [])
    onnx.save(model, tmp_path / "m.onnx")
    text = onnxcc.compile(tmp_path / "m.onnx", tmp_path / "ll", emit="llvm", max_versions=1, **AVX512).text
    assert re.search(r'^  %"tiles\.', text, re.MULTILINE)  # the tile blocks first, then the rows left
    for name in PER_ROW:
        n = len(re.findall(r'^  %"' + re.escape(name) + r'[".]', text, re.MULTILINE))
        # two forms (four rows, one row), each with its steps once (a copy per row: 5)
        assert n == 2, (name, n)
