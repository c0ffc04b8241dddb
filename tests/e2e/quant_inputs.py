"""Inputs of tests/data/quant's models (written by models/export_quant.py): the symbol values
each model runs at and feeds made from a model's inputs by name and dtype, so the test and the
side-by-side scripts need no torch."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from onnxcc.testing import input_shapes

DATA = Path(__file__).resolve().parents[1] / "data" / "quant"

_TEXT = [{"B": 1, "T": 1}, {"B": 2, "T": 9}, {"B": 3, "T": 17}]
_IMG = [{"N": 1, "H": 32, "W": 32}, {"N": 2, "H": 48, "W": 40}, {"N": 1, "H": 64, "W": 64}]
_ZOO = [{"batch": 1, "H": 64, "W": 64}, {"batch": 2, "H": 96, "W": 80}]
#: decoder steps: past length P, encoder length S, new tokens T (1 with a past)
_PAST = [{"B": 1, "T": 1, "P": 1, "S": 4}, {"B": 2, "T": 1, "P": 5, "S": 7}, {"B": 3, "T": 1, "P": 9, "S": 3}]
_FIRST = [{"B": 1, "T": 1, "S": 4}, {"B": 2, "T": 3, "S": 7}, {"B": 3, "T": 5, "S": 3}]

#: symbol values per model family (the stem up to its first `_`, or `ARCH_dec_past` ...)
SETTINGS: dict[str, list[dict[str, int]]] = {
    "bert": _TEXT, "lstm": [{"B": 1, "T": 1}, {"B": 2, "T": 7}, {"B": 3, "T": 20}],
    "convnet": _IMG, "mobilenet": _ZOO, "squeezenet": _ZOO,
    "oldops": [{"N": 1, "H": 4, "W": 6}, {"N": 2, "H": 9, "W": 8}, {"N": 3, "H": 16, "W": 12}],
    "dec_past": _PAST, "dec_first": _FIRST,
    # a merged decoder: the with-past steps, then first steps (`first`: use_cache_branch false,
    # a past of length 1 fed but not read)
    "dec_merged": _PAST + [{**d, "P": 1, "first": 1} for d in _FIRST],
}


def model_key(stem: str) -> str:
    for k in ("dec_past", "dec_first", "dec_merged"):
        if k in stem:
            return k
    return next(k for k in SETTINGS if stem.startswith(k))


def feeds(path: Path, dims: dict[str, int], seed: int) -> dict[str, np.ndarray]:
    """one array per graph input: its symbols from `dims`, values by name: ids in [1, 100), a
    mask of ones with a right-padded row, `use_cache_branch` true unless the setting says `first`"""
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for name, (shape, dt) in input_shapes(path, dims).items():
        if name == "mask":
            a = np.ones(shape, dt)
            if shape[0] > 1 and shape[1] > 1:
                a[1, shape[1] // 2:] = 0
        elif name == "use_cache_branch":
            a = np.array([not dims.get("first", False)])
        elif np.issubdtype(dt, np.integer):
            a = rng.integers(1, 100, shape)
        else:
            a = rng.standard_normal(shape)
        out[name] = a.astype(dt)
    return out


def settings(stem: str) -> list[dict[str, int]]:
    return SETTINGS[model_key(stem)]
