"""Wide-head attention chains (heads a multiple of 16 up to 128) fused with register tiles of
32 query rows in vector lanes (codegen/cpu/flash_tiles.py) through the user path: compiled
once with symbolic batch and seq; chains with a scale (head 64), an additive [B, 1, S, S]
mask (head 64), a boolean key mask through Where (head 128),
torch's causal mask (head 64) and masked_fill with -inf on a boolean [B, 1, S, S] mask (head
64: a row with every key masked is NaN on both sides). Run at seq 1 (no whole block: all
rows through flash.py), 31, 32, 33 (one block and a row left over), 63 (one block and 31
rows, keys not a whole group of 8), 200, batches 1 to 3, on 1 and 2 threads in child
processes (a parallel item's rows start inside a head), compared with onnxruntime at fp32
rtol 1e-4 / atol 1e-5."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import onnx
import pytest
from attention_masks import build_one_version, fused_attention, score_chains_model, torch_causal_mask
from onnx import TensorProto as T
from onnx import helper

H = 2
#: chain -> (Q's head, V's head)
HEADS = {1: (64, 64), 2: (64, 64), 3: (128, 128), 4: (64, 64), 5: (64, 64)}


def _model() -> onnx.ModelProto:
    n = helper.make_node
    steps = [
        n("Mul", ["s1", "scale"], ["x1"]),
        n("Add", ["s2", "amask"], ["x2"]),
        n("Mul", ["s3", "scale"], ["y3"]), n("Where", ["pad", "y3", "lowest"], ["x3"]),
        *torch_causal_mask("Q4"),
        n("Mul", ["s4", "scale"], ["y4"]), n("Add", ["y4", "causal"], ["x4"]),
        n("Where", ["bmask", "s5", "neginf"], ["x5"]),
    ]
    masks = [("pad", T.BOOL, ["B", 1, 1, "S"]),
             ("amask", T.FLOAT, ["B", 1, "S", "S"]),
             ("bmask", T.BOOL, ["B", 1, "S", "S"])]
    return score_chains_model("tiles", HEADS, 0.125, steps, masks, H)


_RUN = textwrap.dedent("""
    import sys
    import numpy as np
    import onnx
    import onnxcc
    from onnxcc.testing import ort_run
    heads = eval(sys.argv[3])
    model = onnx.load(sys.argv[2])
    lib = onnxcc.load(sys.argv[1])
    for s in (1, 31, 32, 33, 63, 200):
        for b in (1, 2, 3):
            rng = np.random.default_rng(s * 10 + b)
            feeds = {}
            for i, (d, dv) in heads.items():
                for name, width in ((f"Q{i}", d), (f"K{i}", d), (f"V{i}", dv)):
                    feeds[name] = rng.standard_normal((b, 2, s, width)).astype(np.float32)
            pad = rng.random((b, 1, 1, s)) < 0.7
            pad[..., 0] = True
            bmask = rng.random((b, 1, s, s)) < 0.6
            bmask[:, :, 0, :] = False  # row 0 attends nothing: NaN
            feeds.update(pad=pad, bmask=bmask, amask=rng.standard_normal((b, 1, s, s)).astype(np.float32))
            want = ort_run(model, feeds)
            got = lib.run(feeds)
            for name, w in want.items():
                np.testing.assert_allclose(got[name], w, rtol=1e-4, atol=1e-5, err_msg=f"{name} at batch {b} seq {s}")
            assert np.isnan(want["Y5"][:, :, 0]).all() and np.isnan(got["Y5"][:, :, 0]).all()
    print("ok")
""")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiles")
    return d, build_one_version(_model(), d, "tiles")


def test_every_wide_chain_is_fused_and_fits_the_tiles(built):
    """All five chains are fused computes the tile emitter takes at 16 lanes (not the
    narrow-head lanes form), and the causal one is marked so."""
    from onnxcc.codegen.cpu.flash_tiles import tiles_fit
    from onnxcc.kernel.flash import lanes_fit

    _, kernels = built
    flashes = fused_attention(kernels)
    assert len(flashes) == len(HEADS)
    assert all(tiles_fit(fl, 16) and not lanes_fit(fl) for fl in flashes)
    assert not any(tiles_fit(fl, 8) for fl in flashes)
    assert sum(fl.causal is not None for fl in flashes) == 1


@pytest.mark.parametrize("threads", [1, 2])
def test_wide_chains_match_onnxruntime(built, threads):
    d, _ = built
    # the pool's size is fixed at its first use in a process: one child per thread count
    env = {**os.environ, "ONNXCC_NUM_THREADS": str(threads)}
    r = subprocess.run([sys.executable, "-c", _RUN, str(d / "lib"), str(d / "m.onnx"), repr(HEADS)], env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr
