"""Narrow-head attention chains (heads of 4 to 16) fused with the query rows in vector lanes
(codegen/cpu/flash_lanes.py) through the user path: compiled once with symbolic batch and
seq, run at seq 1 and 7 (no whole block of rows: all row by row), 15, 16, 17 (one lane
block and a row left over), 63, 64, 65 (one key block and one key past it) and 200, at
batch 1 and 3, compared with onnxruntime at fp32 rtol 1e-4 / atol 1e-5; a row masked with
-inf everywhere is NaN on both sides. The audio encoders' length (1599 frames) runs once."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from attention_masks import fused_attention, score_chains_model, torch_causal_mask
from onnx import TensorProto as T
from onnx import helper

import onnxcc
from onnxcc.testing import ort_run

RTOL, ATOL = 1e-4, 1e-5
H = 2
#: chain -> (Q's head, V's head)
HEADS = {1: (8, 8), 2: (16, 8), 3: (8, 16), 4: (4, 4), 5: (16, 16), 6: (8, 8)}


def _model() -> onnx.ModelProto:
    """Six chains: plain with a scale (1), a padding mask through Where (2), an additive key
    mask (3), a head of 4 and an additive [S, S] mask (4), the causal mask torch writes (5),
    masked_fill with -inf (6, a fully masked row is NaN)."""
    n = helper.make_node
    steps = [
        n("Mul", ["s1", "scale"], ["x1"]),
        n("Mul", ["s2", "scale"], ["y2"]), n("Where", ["pad", "y2", "lowest"], ["x2"]),
        n("Add", ["s3", "kmask"], ["x3"]),
        n("Add", ["amask", "s4"], ["x4"]),
        *torch_causal_mask("Q5"),
        n("Mul", ["s5", "scale"], ["y5"]), n("Add", ["y5", "causal"], ["x5"]),
        n("Where", ["bmask", "s6", "neginf"], ["x6"]),
    ]
    masks = [("pad", T.BOOL, ["B", 1, 1, "S"]),
             ("kmask", T.FLOAT, ["B", 1, 1, "S"]), ("amask", T.FLOAT, ["B", 1, "S", "S"]),
             ("bmask", T.BOOL, ["B", 1, "S", "S"])]
    return score_chains_model("lanes", HEADS, 0.35, steps, masks, H)


def _feeds(b: int, s: int, rng) -> dict:
    feeds = {}
    for i, (d, dv) in HEADS.items():
        for name, width in ((f"Q{i}", d), (f"K{i}", d), (f"V{i}", dv)):
            feeds[name] = rng.standard_normal((b, H, s, width)).astype(np.float32) * 2
    pad = rng.random((b, 1, 1, s)) < 0.7
    pad[..., 0] = True
    bmask = rng.random((b, 1, s, s)) < 0.6
    bmask[:, :, 0, :] = False  # row 0 attends nothing: NaN
    feeds.update(pad=pad, bmask=bmask, amask=rng.standard_normal((b, 1, s, s)).astype(np.float32),
                 kmask=np.where(rng.random((b, 1, 1, s)) < 0.8, 0.0, -1e4).astype(np.float32))
    return feeds


@pytest.fixture(scope="module")
def lanes(tmp_path_factory):
    model = _model()
    d = tmp_path_factory.mktemp("lanes")
    kernels = onnxcc.compile(model, d / "kir", name="lanes", emit="kernel", max_versions=1).text
    onnxcc.compile(model, d / "lib", name="lanes", max_versions=1)
    return model, kernels, onnxcc.load(d / "lib")


def test_every_narrow_chain_runs_in_lanes(lanes):
    """Symbolic seq, heads of at most 16: all six chains are fused computes the lanes
    emitter takes, and the causal one is marked so (its blocks past the diagonal skipped)."""
    from onnxcc.kernel.flash import lanes_fit

    _, kernels, _ = lanes
    flashes = fused_attention(kernels)
    assert len(flashes) == len(HEADS)
    assert all(lanes_fit(fl) for fl in flashes)
    assert sum(fl.causal is not None for fl in flashes) == 1


def _check(lib, model, b: int, s: int, atol: float = ATOL) -> None:
    feeds = _feeds(b, s, np.random.default_rng(s * 10 + b))
    want = ort_run(model, feeds)
    got = lib.run(feeds)
    for name, w in want.items():
        np.testing.assert_allclose(got[name], w, rtol=RTOL, atol=atol, err_msg=f"{name} at batch {b} seq {s}")
    assert np.isnan(want["Y6"][:, :, 0]).all() and np.isnan(got["Y6"][:, :, 0]).all()


@pytest.mark.parametrize("s", (1, 7, 15, 16, 17, 63, 64, 65, 200))
def test_narrow_chains_match_onnxruntime(lanes, s):
    model, _, lib = lanes
    for b in (1, 3):
        _check(lib, model, b, s)


def test_the_audio_encoders_length(lanes):
    """atol 5e-5: each output sums 1599 products with values up to ~8 in f32, in another
    order than onnxruntime's (about sqrt(1599) * 2**-24 * 8 = 2e-5 apart where the weighted
    average cancels to near 0)."""
    model, _, lib = lanes
    _check(lib, model, 1, 1599, atol=5e-5)


def _fused_count(tmp_path, seq, head: int) -> int:
    """How many fused cores the one-chain model's generic version gets with `seq` keys and
    heads of `head`."""
    n = helper.make_node
    shape = [1, H, seq, head]
    g = helper.make_graph(
        [n("Transpose", ["K"], ["Kt"], perm=[0, 1, 3, 2]), n("MatMul", ["Q", "Kt"], ["s"]),
         n("Softmax", ["s"], ["p"], axis=-1), n("MatMul", ["p", "V"], ["Y"])], "one",
        [helper.make_tensor_value_info(x, T.FLOAT, shape) for x in "QKV"],
        [helper.make_tensor_value_info("Y", T.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    text = onnxcc.compile(m, tmp_path / f"k{seq}_{head}", name="one", emit="kernel").text
    return len(fused_attention(text))


def test_the_crossover(tmp_path):
    """Heads of at most 16 fuse from 64 keys (LANES_MIN_KV) and with a symbolic count; a
    static 63 keys keep the GEMM chain, and so do heads of 32 at 1599 keys (their lanes
    form spills; below NARROW_FACTOR * min_kv they stay on the chain)."""
    assert _fused_count(tmp_path, 63, 8) == 0
    assert _fused_count(tmp_path, 64, 8) == 1
    assert _fused_count(tmp_path, "S", 16) == 1
    assert _fused_count(tmp_path, 1599, 32) == 0
