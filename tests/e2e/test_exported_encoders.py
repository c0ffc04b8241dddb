"""Encoders exported from PyTorch with symbolic batch and seq (tests/data/encoders, written
by models/export_encoders.py; the test needs no torch): a transformers BertModel (hidden 48,
2 layers, random weights) and a byte CNN (Embedding -> Conv1d -> max over seq -> Linear),
each from the legacy and the dynamo exporter.

Issue 13: the BERT encoder failed with `cannot turn condition (seq <= 4) | (seq <= 8) | ...
into a kernel expression`: its memory plan is split into per-range layouts of seq, and
sympy merged equal neighbouring parts of a Piecewise offset into an `Or`. Each model is
compiled through the public path and compared with onnxruntime on both sides of every
range boundary its plan has (read back from NAME.json), plus seq = 1 and 300.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import onnx
import pytest

import onnxcc
from onnxcc.testing import ort_run

DATA = Path(__file__).resolve().parents[1] / "data" / "encoders"
RTOL, ATOL = 1e-4, 1e-5
MAX_SEQ = 512  # BERT's position embeddings

MODELS = ["bert", "bert_dynamo", "bytecnn", "bytecnn_dynamo"]


def test_every_exported_file_is_listed():
    assert {p.stem for p in DATA.glob("*.onnx")} == set(MODELS)


def _feeds(path: Path, batch: int, seq: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for inp in onnx.load(str(path), load_external_data=False).graph.input:
        if inp.name == "attention_mask":  # the last row padded after its first half
            a = np.ones((batch, seq), np.int64)
            a[-1, seq // 2 + 1:] = 0
        else:
            a = rng.integers(0, 120 if inp.name == "input_ids" else 256, (batch, seq), dtype=np.int64)
        feeds[inp.name] = a
    return feeds


def _range_bounds(out_dir: Path) -> set[int]:
    """The `seq <= N` boundaries of the per-range memory plans of every version."""
    (meta,) = out_dir.glob("*.json")
    doc = json.loads(meta.read_text())
    return {int(n) for v in doc["versions"] for n in re.findall(r"seq <= (\d+)", v["workspace_bytes"])}


@pytest.mark.parametrize("stem", MODELS)
def test_encoder_matches_onnxruntime_across_plan_ranges(stem, tmp_path):
    path = DATA / f"{stem}.onnx"
    onnxcc.compile(path, tmp_path)
    model = onnxcc.load(tmp_path)
    bounds = _range_bounds(tmp_path)
    if stem.startswith("bert"):  # the case that failed: a plan split by seq
        assert bounds, "expected per-range memory plans"
    seqs = sorted({1, 300} | {s for b in bounds for s in (b, b + 1) if s <= MAX_SEQ})
    names = [o.name for o in onnx.load(str(path), load_external_data=False).graph.output]
    for k, seq in enumerate(seqs):
        batch = (1, 2, 3)[k % 3]
        feeds = _feeds(path, batch, seq, seed=k)
        want = ort_run(path, feeds)
        got = model.run(feeds)
        assert sorted(got) == sorted(names)
        for name, w in want.items():
            assert got[name].shape == w.shape, f"{stem} {name} at {batch}x{seq}"
            np.testing.assert_allclose(got[name], w, rtol=RTOL, atol=ATOL,
                                       err_msg=f"{stem} {name} at {batch}x{seq}")
