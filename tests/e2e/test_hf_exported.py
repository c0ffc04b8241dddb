"""Small Hugging Face transformers models (random weights) exported by torch's legacy
exporter (tests/data/hf, written by models/export_hf.py; no torch needed here): architectures
the zoo does not hold, each compiled once through `onnxcc.compile` and run at three settings
of its dynamic dims against onnxruntime (rtol 1e-3 / atol 1e-4). All `slow` but one: DINOv2,
whose interpolated position embeddings take `int(num_positions ** 0.5)` through float Pow."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

import onnxcc
from onnxcc.errors import GuardError
from onnxcc.testing import ort_run

DATA = Path(__file__).resolve().parents[1] / "data" / "hf"
RTOL, ATOL = 1e-3, 1e-4

TEXT = [{"B": 1, "T": 1, "D": 1}, {"B": 2, "T": 9, "D": 5}, {"B": 3, "T": 33, "D": 7}]
IMAGE = [{"N": 1, "H": 32, "W": 32}, {"N": 2, "H": 64, "W": 48}, {"N": 1, "H": 96, "W": 64}]
#: MobileViT pads a feature map to a multiple of its patch size with a Python `if` the
#: exporter traced at 64x64, so the file only runs where that branch is not taken
#: (onnxruntime fails the same calls at the Reshape); onnxcc refuses them with a GuardError
MOBILEVIT = [{"N": 1, "H": 64, "W": 64}, {"N": 2, "H": 128, "W": 64}, {"N": 1, "H": 32, "W": 32}]
BAKED = {("mobilevit_ts17", 2)}

STEMS = sorted(p.stem for p in DATA.glob("*.onnx"))


def _feeds(path: Path, dims: dict, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    feeds = {}
    for vi in onnx.load(str(path), load_external_data=False).graph.input:
        t = vi.type.tensor_type
        shape = [d.dim_value or dims[d.dim_param] for d in t.shape.dim]
        dt = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)
        feeds[vi.name] = (rng.integers(1, 100, shape) if np.issubdtype(dt, np.integer)
                          else rng.standard_normal(shape)).astype(dt)
    return feeds


def test_the_set_is_all_there():
    assert len(STEMS) == 15 and "dinov2_ts17" in STEMS


@pytest.mark.parametrize("stem", [s if s == "dinov2_ts17" else pytest.param(s, marks=pytest.mark.slow)
                                  for s in STEMS])
def test_hf_export_matches_onnxruntime(stem, tmp_path):
    path = DATA / f"{stem}.onnx"
    onnxcc.compile(path, tmp_path)
    model = onnxcc.load(tmp_path)
    image = onnx.load(str(path), load_external_data=False).graph.input[0].name == "x"
    settings = MOBILEVIT if stem == "mobilevit_ts17" else IMAGE if image else TEXT
    for k, dims in enumerate(settings):
        feeds = _feeds(path, dims, k)
        if (stem, k) in BAKED:
            with pytest.raises(GuardError, match="Reshape"):
                model.run(feeds)
            continue
        want, got = ort_run(path, feeds), model.run(feeds)
        for name, w in want.items():
            assert got[name].shape == w.shape, f"{stem} {name} at {dims}"
            np.testing.assert_allclose(got[name], w, rtol=RTOL, atol=ATOL, err_msg=f"{stem} {name} at {dims}")
