"""The inputs tests/e2e/test_torch_exported_more.py feeds each model of tests/data/torch_more
at three settings of its dynamic dims (numpy only: models/export_torch_more.py imports it too,
to write torch's own outputs where onnxruntime cannot run a file)."""

from __future__ import annotations

import numpy as np


def _f32(*shape, shift=0.0, dtype=np.float32):
    return (np.random.default_rng(sum(shape)).standard_normal(shape) + shift).astype(dtype)


def _ids(b, t, hi):
    ids = np.random.default_rng(b * 7 + t).integers(1, hi, (b, t)).astype(np.int64)
    ids[0, -1] = 0  # one padding token (the encoder masks it)
    return ids


def _idx(b, k, n):
    return np.random.default_rng(b + k + n).integers(0, n, (b, k)).astype(np.int64)


def _grid(*shape):
    return np.clip(_f32(*shape) * 0.6, -1.2, 1.2)  # some points past the border


#: model -> its inputs at three settings
INPUTS = {
    "enc": [{"ids": _ids(1, 5, 100)}, {"ids": _ids(2, 17, 100)}, {"ids": _ids(3, 64, 100)}],
    "causal": [{"ids": _ids(1, 1, 50)}, {"ids": _ids(2, 9, 50)}, {"ids": _ids(1, 100, 50)}],
    "unet": [{"x": _f32(1, 3, 16, 16)}, {"x": _f32(2, 3, 32, 48)}, {"x": _f32(1, 3, 64, 64)}],
    "resnet": [{"x": _f32(1, 3, 32, 32)}, {"x": _f32(2, 3, 65, 47)}, {"x": _f32(3, 3, 40, 40)}],
    "convnext": [{"x": _f32(1, 3, 32, 32)}, {"x": _f32(2, 3, 64, 48)}, {"x": _f32(1, 3, 96, 128)}],
    "rnns": [{"x": _f32(1, 1, 20)}, {"x": _f32(2, 13, 20)}, {"x": _f32(3, 50, 20)}],
    "audio": [{"w": _f32(1, 400)}, {"w": _f32(2, 1601)}, {"w": _f32(1, 8000)}],
    "misc": [{"x": _f32(1, 4), "y": _f32(1, 4)}, {"x": _f32(3, 10), "y": _f32(3, 10, shift=1.0)},
             {"x": _f32(2, 33), "y": _f32(2, 33, shift=2.0)}],
    "pixelup": [{"x": _f32(1, 4, 4, 4)}, {"x": _f32(2, 4, 7, 5)}, {"x": _f32(1, 4, 16, 16)}],
    "kvcache": [{"x": _f32(1, 1, 32), "pk": _f32(1, 4, 5, 8), "pv": _f32(1, 4, 5, 8, shift=1.0)},
                {"x": _f32(2, 3, 32), "pk": _f32(2, 4, 10, 8), "pv": _f32(2, 4, 10, 8, shift=1.0)},
                {"x": _f32(1, 7, 32), "pk": _f32(1, 4, 1, 8), "pv": _f32(1, 4, 1, 8, shift=1.0)}],
    "gather": [{"x": _f32(1, 6), "idx": _idx(1, 6, 6)}, {"x": _f32(2, 10), "idx": _idx(2, 6, 10)},
               {"x": _f32(3, 17), "idx": _idx(3, 9, 17)}],
    "sample": [{"x": _f32(1, 3, 4, 4), "grid": _grid(1, 1, 1, 2)}, {"x": _f32(2, 3, 8, 9), "grid": _grid(2, 5, 4, 2)},
               {"x": _f32(1, 3, 13, 7), "grid": _grid(1, 6, 10, 2)}],
    "mask": [{"x": _f32(1, 1)}, {"x": _f32(3, 7)}, {"x": _f32(2, 50)}],
    "half": [{"x": _f32(1, 1, 16, dtype=np.float16)}, {"x": _f32(2, 5, 16, dtype=np.float16)},
             {"x": _f32(3, 33, 16, dtype=np.float16)}],
    "mha": [{"q": _f32(1, 1, 32), "kv": _f32(1, 1, 32, shift=1.0)}, {"q": _f32(2, 5, 32), "kv": _f32(2, 7, 32)},
            {"q": _f32(3, 9, 32), "kv": _f32(3, 4, 32)}],
}
