"""Inputs of tests/data/heldout2's models (written by models/export_heldout2.py): the symbol
values each model is run at, and feeds made from a model's inputs by name and dtype, so the
test and the side-by-side scripts need no torch."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np

from onnxcc.testing import input_shapes

DATA = Path(__file__).resolve().parents[1] / "data" / "heldout2"

DECODERS = ("gptj", "gptneo", "falcon", "mistral", "qwen2", "gemma", "starcoder2")
_DEC = [{"B": 1, "T": 1, "P": 1}, {"B": 2, "T": 1, "P": 7}, {"B": 3, "T": 4, "P": 9}]
_TEXT = [{"B": 1, "T": 1, "D": 1}, {"B": 2, "T": 9, "D": 5}, {"B": 3, "T": 17, "D": 7}]
_IMG = [{"N": 1, "H": 32, "W": 32}, {"N": 2, "H": 64, "W": 48}, {"N": 1, "H": 96, "W": 64}]
_SMALL_IMG = [{"N": 1, "H": 4, "W": 6}, {"N": 2, "H": 12, "W": 10}, {"N": 3, "H": 21, "W": 16}]
_EVEN_IMG = [{"N": 1, "H": 4, "W": 6}, {"N": 2, "H": 12, "W": 10}, {"N": 3, "H": 20, "W": 16}]
_AUDIO = [{"B": 1, "L": 400}, {"B": 2, "L": 1600}, {"B": 3, "L": 2001}]
_BN = [{"B": 1, "N": 1, "T": 1, "D": 3}, {"B": 2, "N": 6, "T": 5, "D": 4}, {"B": 4, "N": 33, "T": 20, "D": 7}]

#: symbol values per model (the part of the stem before `_ts17` / `_dyn18`)
SETTINGS: dict[str, list[dict[str, int]]] = {
    **{d: _DEC for d in DECODERS},
    **{t: _TEXT for t in ("t5", "xlmr", "funnel", "squeezebert", "mobilebert", "convbert", "layoutlm")},
    **{v: _IMG for v in ("beit", "poolformer", "mobilenetv1", "mobilenetv2", "yolos")},
    "levit": [{"N": 1}, {"N": 3}],
    "videomae": [{"N": 1}, {"N": 2}],
    **{a: _AUDIO for a in ("hubert", "sew", "w2v2conformer", "data2vec_audio")},
    "speech2text": [{"B": 1, "T": 8}, {"B": 2, "T": 40}, {"B": 3, "T": 101}],
    "spectro": [{"B": 1, "L": 16}, {"B": 2, "L": 200}, {"B": 3, "L": 1001}],
    "einsums": _BN, "cumulative": _BN, "trimasks": _BN, "intmath": _BN,
    # index_select picks columns 0 and 2: T >= 3 (at T < 3 both runtimes fail the call)
    "indexput": [{"B": 1, "T": 3}, {"B": 2, "T": 6}, {"B": 4, "T": 20}],
    "activations": _BN, "bag": _BN, "bf16mlp": _BN,
    "convs1d": [{"N": 1, "L": 5}, {"N": 2, "L": 20}, {"N": 3, "L": 77}],
    "convs3d": [{"N": 1, "D": 2, "H": 4, "W": 4}, {"N": 2, "D": 4, "H": 8, "W": 6}, {"N": 1, "D": 6, "H": 12, "W": 10}],
    **{i: _SMALL_IMG for i in ("resizes", "norms", "pads", "halfconv")},
    **{i: _EVEN_IMG for i in ("fold", "unpool")},
}


def model_key(stem: str) -> str:
    return stem.rsplit("_", 1)[0]


def feeds(path: Path, dims: dict[str, int], seed: int) -> dict[str, np.ndarray]:
    """one array per graph input: its symbols from `dims` (M = P + T for the decoders' mask),
    values by name: ids in [1, 100), a mask of ones with a left-padded row, lengths in [1, T]"""
    rng = np.random.default_rng(seed)
    dims = {**dims, "M": dims.get("P", 0) + dims.get("T", 0)}
    out: dict[str, np.ndarray] = {}
    for name, (shape, dt) in input_shapes(path, dims).items():
        if name == "mask":
            a = np.ones(shape, dt)
            if shape[0] > 1 and shape[1] > 1:
                a[1, : shape[1] // 2] = 0
        elif name == "lengths":
            a = rng.integers(1, dims["T"] + 1, shape)
        elif name == "bbox":  # x0 <= y0 <= x1 <= y1: widths and heights are not negative
            a = np.sort(rng.integers(0, 100, shape), -1)
        elif name == "idx":
            a = rng.integers(0, 8, shape)
        elif name in ("a", "b") and np.issubdtype(dt, np.integer):
            a = rng.integers(-50, 50, shape)
        elif np.issubdtype(dt, np.integer):
            a = rng.integers(1, 50, shape)
        else:
            a = rng.standard_normal(shape)
        out[name] = a.astype(dt) if dt != np.dtype(ml_dtypes.bfloat16) else a.astype(np.float32).astype(dt)
    return out
