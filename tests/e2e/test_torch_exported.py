"""Models exported by PyTorch (tests/data/torch, written by models/export_torch.py; the
test itself needs no torch): each imports and runs the default graph pipeline with every
value fully symbolic (no `?` dim) and a print -> parse -> print fixed point, then compiles
to a native library and runs at three settings of its dynamic dims (including 1 and a non
power of two) against onnxruntime.

Files named `*_dynamo.onnx` come from `torch.onnx.export(dynamo=True)`, the others from the
legacy TorchScript exporter (`dynamo=False`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

import onnxcc
from onnxcc.errors import GuardError
from onnxcc.ir.parser import parse_module
from onnxcc.ir.verify import verify
from onnxcc.passes import PassContext, parse_pipeline, run_pipeline
from onnxcc.passes.pipelines import DEFAULT_GRAPH_PIPELINE
from onnxcc.testing import ort_run, random_inputs

DATA = Path(__file__).resolve().parents[1] / "data" / "torch"
RTOL, ATOL = 1e-4, 1e-5

_SEQ = [{"batch": 1, "seq": 1}, {"batch": 3, "seq": 7}, {"batch": 2, "seq": 13}]
_BATCH = [{"batch": 1}, {"batch": 3}, {"batch": 6}]
_IMG = [{"batch": 1, "H": 8, "W": 8}, {"batch": 3, "H": 11, "W": 7}, {"batch": 2, "H": 16, "W": 13}]

#: file stem -> the three dim settings it runs at
MODELS = {
    "transformer": _SEQ,
    "transformer_dynamo": _SEQ,
    "lstm": _SEQ,
    "bigru": _SEQ,
    "cond_dynamo": _BATCH,
    "while_loop": _BATCH,
    "cnn": _IMG,
    "cnn_dynamo": _IMG,
    "cnn_nofold": _IMG,  # legacy export with do_constant_folding=False: keeps BatchNormalization
    "mlp_gelu": _SEQ,
    "mlp_gelu_dynamo": _SEQ,
    # positions from torch.arange over seq, int and float (Range(0.0, Cast(seq), 1.0)) and over a
    # computed length ((seq + 1) // 2): each Range's length is symbolic (models/export_posenc.py)
    "posenc_dynamo": _SEQ,
}

#: the dynamo exporter declares the RNN outputs as `[batch, 5, ...]` (the example's seq):
#: onnxruntime only warns when they differ, and onnxcc infers `[batch, seq, ...]` from the
#: LSTM / GRU op instead of trusting the declared type, so any seq is fine
MODELS["lstm_dynamo"] = _SEQ
MODELS["bigru_dynamo"] = _SEQ
#: the legacy exporter bakes the traced key length into nn.MultiheadAttention's
#: `k.view(...)` reshape targets ([5, 4*batch, 16] from f32[seq, batch, 64]): onnxruntime
#: fails for any seq but 5; onnxcc records `seq == 5` as a constraint and checks it at run time
MODELS["transformer"] = [{"batch": 1, "seq": 5}, {"batch": 3, "seq": 5}, {"batch": 6, "seq": 5}]
#: the same without constant folding (raw Shape / Gather / Div / Cast shape arithmetic)
MODELS["transformer_nofold"] = MODELS["transformer"]


def test_every_exported_file_is_listed():
    assert {p.stem for p in DATA.glob("*.onnx")} == set(MODELS)


@pytest.mark.parametrize("stem", sorted(MODELS))
def test_torch_export_imports_fully_symbolic(stem):
    module = onnxcc.load_onnx(DATA / f"{stem}.onnx")
    verify(module)  # what `onnxcc ir` does: verify the import, run the default pipeline, verify
    run_pipeline(module, parse_pipeline(DEFAULT_GRAPH_PIPELINE), PassContext())
    verify(module)
    text = onnxcc.print_ir(module)
    unknown = [line.strip() for line in text.splitlines() if "?" in line]
    assert not unknown, f"{stem}: unknown dims in\n" + "\n".join(unknown[:5])
    assert onnxcc.print_ir(parse_module(text)) == text


@pytest.mark.parametrize("stem", sorted(MODELS))
def test_torch_export_native_matches_onnxruntime(stem, tmp_path):
    path = DATA / f"{stem}.onnx"
    onnxcc.compile(path, tmp_path)
    model = onnxcc.load(tmp_path)
    names = [o.name for o in onnx.load(str(path)).graph.output]
    for k, dims in enumerate(MODELS[stem]):
        feeds = random_inputs(path, dims, seed=k)
        if k == 1:  # flip the signs once so that data-dependent branches (cond: sum(x) > 0) go both ways
            feeds = {n: -a for n, a in feeds.items()}
        want = ort_run(path, feeds)
        got = model.run(feeds)
        assert sorted(got) == sorted(names)
        for name, w in want.items():
            assert got[name].shape == w.shape, f"{stem} {name} at {dims}: {got[name].shape} != {w.shape}"
            np.testing.assert_allclose(got[name], w, rtol=RTOL, atol=ATOL, err_msg=f"{stem} {name} at {dims}")


def test_legacy_transformer_baked_seq_is_a_guard_error(tmp_path):
    path = DATA / "transformer.onnx"
    onnxcc.compile(path, tmp_path)
    model = onnxcc.load(tmp_path)
    with pytest.raises(GuardError, match="Reshape_4"):
        model.run(random_inputs(path, {"batch": 2, "seq": 7}))
