"""Exporters' attention chains (MatMul -> scale -> mask -> Softmax -> MatMul) through the user
path: the attention-chain pass makes each one cc.sdpa (checked on the build's IR), compiled
once with symbolic batch and seq, run at seq 1, 7 (shorter than a 4-key group), 100 (not a
multiple of the 64-key blocks) and 300, compared with onnxruntime at fp32 rtol 1e-4 /
atol 1e-5, NaN where onnxruntime gives NaN (a row masked with -inf everywhere)."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from attention_masks import fused_attention, torch_causal_mask
from onnx import TensorProto as T
from onnx import helper

import onnxcc
from onnxcc.testing import ort_run

RTOL, ATOL = 1e-4, 1e-5
H, D, DV = 2, 64, 64  # heads of 64: the fused form is chosen for symbolic lengths
SEQS = (1, 7, 100, 300)


def _chains_model() -> onnx.ModelProto:
    """Six chains over shared inputs, one per output (each mask kind, scale spelling, K form);
    each has its own Q, so no two score MatMuls are one value after CSE."""
    f32 = float(np.finfo(np.float32).min)
    inits = [helper.make_tensor("scale", T.FLOAT, [], [0.35]),
             helper.make_tensor("root", T.FLOAT, [], [math.sqrt(D)]),
             helper.make_tensor("one", T.FLOAT, [], [1.0]),
             helper.make_tensor("zero", T.FLOAT, [], [0.0]),
             helper.make_tensor("lowest", T.FLOAT, [], [f32]),
             helper.make_tensor("neginf", T.FLOAT, [], [-np.inf])]
    n = helper.make_node
    nodes = [
        n("Transpose", ["K"], ["Kt0"], perm=[0, 1, 3, 2]),
        # 1: scale by Mul, additive mask [B, 1, S, S] (on the left of the Add)
        n("MatMul", ["Q", "Kt0"], ["s1"]), n("Mul", ["s1", "scale"], ["x1"]), n("Add", ["amask", "x1"], ["m1"]),
        n("Softmax", ["m1"], ["p1"], axis=-1), n("MatMul", ["p1", "V"], ["Y1"]),
        # 2: a pre-transposed K, scale by Div, padding mask bool [B, 1, 1, S] through Where
        n("MatMul", ["Q", "Kt"], ["s2"]), n("Div", ["s2", "root"], ["x2"]), n("Where", ["pad", "x2", "lowest"], ["m2"]),
        n("Softmax", ["m2"], ["p2"], axis=-1), n("MatMul", ["p2", "V"], ["Y2"]),
        # 3: the causal mask torch writes (Trilu of ones, Equal 0, Where -> lowest, Add)
        *torch_causal_mask("Q"),
        n("MatMul", ["Q3", "Kt0"], ["s3"]), n("Mul", ["s3", "scale"], ["x3"]), n("Add", ["x3", "causal"], ["m3"]),
        n("Softmax", ["m3"], ["p3"], axis=-1), n("MatMul", ["p3", "V"], ["Y3"]),
        # 4: masked_fill with -inf (rows masked everywhere: NaN, as onnxruntime's Softmax gives)
        n("MatMul", ["Q4", "Kt0"], ["s4"]), n("Where", ["bmask", "s4", "neginf"], ["m4"]),
        n("Softmax", ["m4"], ["p4"], axis=-1), n("MatMul", ["p4", "V"], ["Y4"]),
        # 5: grouped-query attention: one kv head expanded to the query heads
        n("Shape", ["Q"], ["q4"]), n("Expand", ["K1", "q4"], ["Kx"]),
        n("Transpose", ["Kx"], ["Kxt"], perm=[0, 1, 3, 2]),
        n("Shape", ["V"], ["v4"]), n("Expand", ["V1", "v4"], ["Vx"]),
        n("MatMul", ["Q", "Kxt"], ["s5"]), n("Mul", ["scale", "s5"], ["x5"]),
        n("Softmax", ["x5"], ["p5"], axis=-1), n("MatMul", ["p5", "Vx"], ["Y5"]),
        # 6: an additive key mask [B, 1, 1, S] and V shared by the heads (batch broadcast)
        n("MatMul", ["Q6", "Kt0"], ["s6"]), n("Add", ["s6", "kmask"], ["m6"]),
        n("Softmax", ["m6"], ["p6"], axis=-1), n("MatMul", ["p6", "V1"], ["Y6"]),
    ]
    f = T.FLOAT
    inputs = [("Q", f, ["B", H, "S", D]), ("Q3", f, ["B", H, "S", D]), ("Q4", f, ["B", H, "S", D]),
              ("Q6", f, ["B", H, "S", D]), ("K", f, ["B", H, "S", D]), ("Kt", f, ["B", H, D, "S"]),
              ("V", f, ["B", H, "S", DV]), ("K1", f, ["B", 1, "S", D]), ("V1", f, ["B", 1, "S", DV]),
              ("amask", f, ["B", 1, "S", "S"]), ("pad", T.BOOL, ["B", 1, 1, "S"]),
              ("bmask", T.BOOL, ["B", 1, "S", "S"]), ("kmask", f, ["B", 1, 1, "S"])]
    outs = [f"Y{i}" for i in range(1, 7)]
    g = helper.make_graph(nodes, "chains", [helper.make_tensor_value_info(*i) for i in inputs],
                          [helper.make_tensor_value_info(o, f, None) for o in outs], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    return m


def _feeds(b: int, s: int, rng) -> dict:
    def normal(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    pad = rng.random((b, 1, 1, s)) < 0.8
    pad[..., 0] = True  # a padded row still sees its first key
    bmask = rng.random((b, 1, s, s)) < 0.6
    bmask[:, :, 0, :] = False  # a row with nothing to attend
    return {"Q": normal(b, H, s, D), "Q3": normal(b, H, s, D), "Q4": normal(b, H, s, D), "Q6": normal(b, H, s, D),
            "K": normal(b, H, s, D), "Kt": normal(b, H, D, s), "V": normal(b, H, s, DV),
            "K1": normal(b, 1, s, D), "V1": normal(b, 1, s, DV), "amask": normal(b, 1, s, s),
            "pad": pad, "bmask": bmask, "kmask": np.where(rng.random((b, 1, 1, s)) < 0.8, 0.0, -1e4).astype(np.float32)}


@pytest.fixture(scope="module")
def chains(tmp_path_factory):
    model = _chains_model()
    d = tmp_path_factory.mktemp("chains")
    # one version (the generic one) keeps the build short: the chains' code is what is tested
    kernels = onnxcc.compile(model, d / "kir", name="chains", emit="kernel", max_versions=1).text
    onnxcc.compile(model, d / "lib", name="chains", max_versions=1)
    return model, kernels, onnxcc.load(d / "lib")


def test_every_chain_is_one_fused_compute_and_the_causal_one_skips(chains):
    """The generic version's kernel program: six fused-attention computes (kernel/flash.py),
    no score buffer, and only the Trilu-masked chain marked causal (block skipping)."""
    from onnxcc.kernel.parser import parse_kernel_text

    _, kernels, _ = chains
    flashes = fused_attention(kernels)
    assert len(flashes) == 6
    assert sum(fl.causal is not None for fl in flashes) == 1
    generic = parse_kernel_text(kernels)[-1]
    assert not [n for n, buf in generic.buffers.items() if buf.kind == "temp" and buf.shape[-2:] == buf.shape[-1:] * 2]


@pytest.mark.parametrize("s", SEQS)
def test_chains_match_onnxruntime(chains, s):
    model, _, lib = chains
    rng = np.random.default_rng(s)
    for b in (1, 2):
        feeds = _feeds(b, s, rng)
        want = ort_run(model, feeds)
        got = lib.run(feeds)
        for name, w in want.items():
            np.testing.assert_allclose(got[name], w, rtol=RTOL, atol=ATOL, err_msg=f"{name} at batch {b} seq {s}")
        assert np.isnan(want["Y4"][:, :, 0]).all()  # the -inf row: NaN on both sides
        assert np.isfinite(want["Y4"][:, :, 1:][~np.isnan(want["Y4"][:, :, 1:])]).all()


@pytest.mark.parametrize("s", (100, 300))
def test_a_nan_score_reaches_its_rows_as_unfused(chains, s):
    """A NaN in a query row makes that row's output NaN, a NaN in a key (past the first
    64-key block) every row's of its head: the fused kernel's block max keeps NaN apart from
    its reduction (codegen/cpu/flash.py block_max), so NaN lands exactly where onnxruntime's
    unfused chain puts it, and nowhere else. (Not the causal chain's keys: unfused, a NaN
    key after a row's diagonal makes that row NaN through the mask's add; the fused kernel
    skips those keys.)"""
    model, _, lib = chains
    feeds = _feeds(2, s, np.random.default_rng(s + 1))
    for q in ("Q", "Q3", "Q4", "Q6"):
        feeds[q][0, 0, 5, 3] = np.nan
    feeds["Kt"][1, 1, 0, 70] = np.nan  # chain 2's keys (a NaN key of the causal chain: see below)
    want = ort_run(model, feeds)
    got = lib.run(feeds)
    for name, w in want.items():
        np.testing.assert_allclose(got[name], w, rtol=RTOL, atol=ATOL, err_msg=f"{name} at seq {s}")
    assert np.isnan(want["Y2"][0, 0, 5]).all() and np.isnan(want["Y2"][1, 1]).all()
    assert np.isfinite(want["Y2"][0, 1]).all() and np.isfinite(want["Y2"][0, 0, 6:]).all()
