"""More models exported by PyTorch 2.13 (tests/data/torch_more, written by
models/export_torch_more.py; no torch needed here), through the public Python API as a user
calls it: `onnxcc.compile` once, `onnxcc.load`, then calls at three settings of the dynamic dims
(1 included) compared with onnxruntime at rtol 1e-3 / atol 1e-4 (float32 models of a few
layers; the reductions' order differs from onnxruntime's).

A few files run in the default suite (one per kind of model: decoder attention, KV cache,
conv net, RNN stack, data-dependent sizes); the rest are `slow`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from torch_more_inputs import INPUTS

import onnxcc
from onnxcc.errors import GuardError
from onnxcc.testing import ort_run

DATA = Path(__file__).resolve().parents[1] / "data" / "torch_more"
RTOL, ATOL = 1e-3, 1e-4


#: the dynamo exporter bakes the traced length (13) into the stacked GRU's reshape of its
#: output to [13, -1, 64]: onnxruntime fails at any other length; onnxcc keeps the model
#: symbolic and refuses such a call with a GuardError naming the node
BAKED = {("rnns_dyn18", 0): "node_Reshape_259", ("rnns_dyn18", 2): "node_Reshape_259"}
#: the legacy exporter bakes nn.MultiheadAttention's traced key length (7) the same way
BAKED.update({("mha_ts17", 0): "/mha/Reshape_4", ("mha_ts17", 2): "/mha/Reshape_4"})

#: onnxruntime 1.32 rejects the padding mask torch gives the opset-23 Attention op, so this
#: file is compared with torch's own outputs (NAME_torch.npz, written by the export script)
TORCH_ORACLE = {"enc_dyn23": "enc_torch.npz"}

#: float16 models: onnxruntime computes in other orders and precisions
TOLERANCE = {"half": (1e-2, 1e-2)}

#: TorchScript cannot export these two in torch 2.13 (the encoder's fast path, RMSNorm)
NOT_EXPORTED = {"enc_ts17", "causal_ts17"}

DEFAULT_RUN = {"causal_dyn18", "kvcache_dyn18", "convnext_dyn18", "rnns_dyn18", "misc_ts17", "mask_dyn18"}

STEMS = sorted([f"{name}_{kind}" for name in INPUTS for kind in ("ts17", "dyn18")
                if f"{name}_{kind}" not in NOT_EXPORTED] + ["enc_dyn23", "causal_dyn23"])


def test_every_exported_file_is_listed():
    assert {p.stem for p in DATA.glob("*.onnx")} == set(STEMS)


@pytest.mark.parametrize("stem", [s if s in DEFAULT_RUN else pytest.param(s, marks=pytest.mark.slow)
                                  for s in STEMS])
def test_torch_export_matches_onnxruntime(stem, tmp_path):
    path = DATA / f"{stem}.onnx"
    onnxcc.compile(path, tmp_path)
    model = onnxcc.load(tmp_path)
    names = [o.name for o in onnx.load(str(path), load_external_data=False).graph.output]
    name = stem.rsplit("_", 1)[0]
    rtol, atol = TOLERANCE.get(name, (RTOL, ATOL))
    oracle = np.load(DATA / TORCH_ORACLE[stem]) if stem in TORCH_ORACLE else None
    for k, feeds in enumerate(INPUTS[name]):
        if (stem, k) in BAKED:
            with pytest.raises(GuardError, match=BAKED[stem, k]):
                model.run(feeds)
            continue
        got = model.run(feeds)
        assert sorted(got) == sorted(names)
        if oracle is not None:
            want = {n: oracle[f"{k}.{j}"] for j, n in enumerate(names)}
        else:
            want = ort_run(path, feeds)
        for out, w in want.items():
            assert got[out].shape == w.shape, f"{stem} {out} at setting {k}: {got[out].shape} != {w.shape}"
            np.testing.assert_allclose(got[out].astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol,
                                       err_msg=f"{stem} {out} at setting {k}")
