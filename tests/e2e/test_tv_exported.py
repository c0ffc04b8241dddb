"""torchvision models nobody here wrote (tests/data/tv, written by models/export_tv.py; no
torch needed here): EfficientNet, DenseNet, RegNetY, ConvNeXt, ViT, Swin v1/v2, MaxViT and an
SSD detector whose post-processing exports NonZero / TopK / an If around NonMaxSuppression,
each built from torchvision's own classes at a small size with random weights (batch norms
calibrated so activations stay of order one), exported by the TorchScript exporter (`_ts17`)
and the dynamo exporter (`_dyn18`) with symbolic batch and H / W where the model allows. Each
file is compiled once through `onnxcc.compile` and run at the settings below against
onnxruntime. All `slow` (each compile takes tens of seconds); the patterns the detector
needed have fast tests of their own (tests/e2e/test_if_runtime_dims.py,
tests/ops/test_reduce_float_values.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import onnxcc
from onnxcc.testing import input_shapes, ort_run

DATA = Path(__file__).resolve().parents[1] / "data" / "tv"
STEMS = sorted(p.stem for p in DATA.glob("*.onnx"))

_IMG = [{"N": 1, "H": 32, "W": 32}, {"N": 2, "H": 64, "W": 48}]
_FIXED = [{"N": 1}, {"N": 3}]  # position embeddings / partitions for 32x32 only
#: symbol values per model (the stem before `_ts17` / `_dyn18`)
SETTINGS: dict[str, list[dict[str, int]]] = {
    **{m: _IMG for m in ("efficientnet_b0_small", "densenet_small", "regnet_y_small", "convnext_small",
                         "swin_small", "swin_v2_small")},
    **{m: _FIXED for m in ("vit_small", "maxvit_small")},
    # the detector resizes any image to 64x64 inside, then pads to a multiple of 32
    "ssd_small": [{"H": 48, "W": 40}, {"H": 64, "W": 64}, {"H": 30, "W": 90}],
}


def model_key(stem: str) -> str:
    return stem.rsplit("_", 1)[0]


def feeds(path: Path, dims: dict[str, int], seed: int) -> dict[str, np.ndarray]:
    """standard normal images, one per graph input, dims from `dims` by symbol name"""
    rng = np.random.default_rng(seed)
    return {name: rng.standard_normal(shape).astype(np.float32)
            for name, (shape, _) in input_shapes(path, dims).items()}


def test_the_set_is_all_there():
    assert len(STEMS) >= 8 and all(model_key(s) in SETTINGS for s in STEMS)
    assert sum(p.stat().st_size for p in DATA.glob("*.onnx")) < 10 << 20


@pytest.mark.slow
@pytest.mark.parametrize("stem", STEMS)
def test_tv_matches_onnxruntime(stem, tmp_path):
    path = DATA / f"{stem}.onnx"
    onnxcc.compile(path, tmp_path)
    model = onnxcc.load(tmp_path)
    for k, dims in enumerate(SETTINGS[model_key(stem)]):
        f = feeds(path, dims, k)
        want, got = ort_run(path, f), model.run(f)
        assert set(got) == set(want)
        for name, w in want.items():
            g = got[name]
            assert g.shape == w.shape, f"{stem} {name} at {dims}"
            scale = max(1.0, float(np.abs(w).max())) if w.size else 1.0
            np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(w, np.float64), rtol=1e-3,
                                       atol=1e-4 * scale, err_msg=f"{stem} {name} at {dims}")
