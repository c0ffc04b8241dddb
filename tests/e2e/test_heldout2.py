"""A second held-out set (tests/data/heldout2, written by models/export_heldout2.py; no torch
needed here): Hugging Face decoders stepping over a past KV cache with a padded attention
mask, encoders, vision and speech towers, and hand-written torch layers, exported by the
TorchScript exporter (`_ts17`) and the dynamo exporter (`_dyn18`) with symbolic dims. Each
file is compiled once through `onnxcc.compile` and run at the settings of
tests/e2e/heldout2_inputs.py against onnxruntime (rtol 1e-3 / atol 1e-4; float16 2e-2).
bfloat16 models, which onnxruntime's CPU kernels do not run, are checked against the numpy
interpreter (onnxcc.interp) at 5e-2. Models that onnxcc refuses are checked for the refusal
naming the node. A few run by default, the rest are `slow`."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

import onnxcc
from onnxcc.errors import CompileError, UnsupportedOp
from onnxcc.interp import run as interp_run
from onnxcc.testing import ort_run

sys.path.insert(0, str(Path(__file__).resolve().parent))
from heldout2_inputs import DATA, SETTINGS, feeds, model_key

STEMS = sorted(p.stem for p in DATA.glob("*.onnx"))
#: run in the default test run (fast to compile, each covering a fix or a new layer)
FAST = {"fold_dyn18", "bag_ts17", "bag_dyn18"}
#: stem -> (error type, text the refusal must contain): what onnxcc does not compile yet.
#: (EmbeddingBag's TorchScript export, a Loop over the bags whose body slices a run-time
#: length offsets[i]:offsets[i+1], compiles: the length is a run-time symbol bound per
#: iteration)
REFUSED: dict[str, tuple[type, str]] = {}
#: (stem, setting index) onnxruntime itself fails on
ORT_FAILS: set[tuple[str, int]] = set()
#: stems onnxruntime cannot run at all (bfloat16 MatMul on the CPU): the interpreter is the oracle
INTERP_ORACLE = {s for s in STEMS if s.startswith("bf16")}


def _tol(stem: str) -> tuple[float, float]:
    return (5e-2, 5e-2) if stem.startswith("bf16") else (2e-2, 2e-2) if "half" in stem else (1e-3, 1e-4)


def _want(path: Path, stem: str, f: dict) -> dict[str, np.ndarray]:
    if stem not in INTERP_ORACLE:
        return ort_run(path, f)
    mod = onnxcc.load_onnx(str(path))
    outs = interp_run(mod, [f[p.name] for p in mod.main.params])
    names = [o.name for o in onnx.load(str(path), load_external_data=False).graph.output]
    return {n: np.asarray(o).astype(np.float32) for n, o in zip(names, outs, strict=True)}


def test_the_set_is_all_there():
    assert len(STEMS) >= 20 and FAST <= set(STEMS) and set(REFUSED) <= set(STEMS)
    assert all(model_key(s) in SETTINGS for s in STEMS)


@pytest.mark.parametrize("stem", [s if s in FAST else pytest.param(s, marks=pytest.mark.slow) for s in STEMS])
def test_heldout2_matches_onnxruntime(stem, tmp_path):
    path = DATA / f"{stem}.onnx"
    if stem in REFUSED:
        kind, text = REFUSED[stem]
        with pytest.raises(kind, match=text):
            onnxcc.compile(path, tmp_path)
        return
    onnxcc.compile(path, tmp_path)
    model = onnxcc.load(tmp_path)
    rtol, atol = _tol(stem)
    for k, dims in enumerate(SETTINGS[model_key(stem)]):
        if (stem, k) in ORT_FAILS:
            continue
        f = feeds(path, dims, k)
        want, got = _want(path, stem, f), model.run(f)
        for name, w in want.items():
            g = got[name]
            if g.dtype == np.uint16 and stem in INTERP_ORACLE:  # bfloat16 comes back as its bits
                g = g.view(w.dtype if w.dtype.itemsize == 2 else np.uint16)
                g = g.astype(np.float32) if g.dtype != np.uint16 else (g.astype(np.uint32) << 16).view(np.float32)
            assert g.shape == w.shape, f"{stem} {name} at {dims}"
            np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(w, np.float64), rtol=rtol, atol=atol,
                                       err_msg=f"{stem} {name} at {dims}")


def test_refusals_name_the_node():
    """every refusal above is an onnxcc error that names its node, never a crash"""
    assert all(issubclass(k, (CompileError, UnsupportedOp)) for k, _ in REFUSED.values())
