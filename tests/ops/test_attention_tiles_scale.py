"""The score's scale folded into the register tiles of wide-head attention
(codegen/cpu/flash_tiles.py `score_scale`): a score that is the dot times or over a value
free of the key and the rows is scaled as each dot vector leaves the Q @ K^T tile, with the
block max taken there, instead of a pass over the block through the expression emitter.

Chains (heads of 64 and 128, compiled once with symbolic batch and seq): `s * scale`,
`scale * s`, `s / 8` (torch's export of 1 / sqrt(64)), `s / t` with t a scalar graph input
(read at run time), and `s * w` with w a per-key weight [B, 1, 1, S], which reads the key and
must keep the emitter's pass. Run at odd and even sequence lengths 1 to 600 (no whole block
of 32 rows, one block and rows left over, key counts not a whole group of 8 or block of 64),
batches 1 to 3, on 1 to 3 threads in child processes (a parallel item's rows start inside a
head), compared with onnxruntime at fp32 rtol 1e-4 / atol 1e-5."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import onnx
import pytest
from attention_masks import build_one_version, fused_attention, score_chains_model
from onnx import TensorProto as T
from onnx import helper

H = 2
#: chain -> (Q's head, V's head)
HEADS = {1: (64, 64), 2: (64, 64), 3: (128, 128), 4: (64, 64), 5: (64, 64)}
#: the chains whose score is a scale of the dot (chain 5's weight reads the key)
FOLDED = {1: "mul", 2: "mul", 3: "div", 4: "div"}


def _model() -> onnx.ModelProto:
    n = helper.make_node
    steps = [
        n("Mul", ["s1", "scale"], ["x1"]),
        n("Mul", ["scale", "s2"], ["x2"]),
        n("Div", ["s3", "eight"], ["x3"]),
        n("Div", ["s4", "t"], ["x4"]),
        n("Mul", ["s5", "w"], ["x5"]),
    ]
    masks = [("t", T.FLOAT, []), ("w", T.FLOAT, ["B", 1, 1, "S"])]
    m = score_chains_model("tscale", HEADS, 0.125, steps, masks, H)
    m.graph.initializer.append(helper.make_tensor("eight", T.FLOAT, [], [8.0]))
    return m


_RUN = textwrap.dedent("""
    import sys
    import numpy as np
    import onnx
    import onnxcc
    from onnxcc.testing import ort_run
    heads = eval(sys.argv[3])
    model = onnx.load(sys.argv[2])
    lib = onnxcc.load(sys.argv[1])
    for s in (1, 17, 31, 32, 33, 63, 64, 65, 127, 200, 511, 600):
        for b in (1, 2, 3):
            rng = np.random.default_rng(s * 10 + b)
            feeds = {}
            for i, (d, dv) in heads.items():
                for name, width in ((f"Q{i}", d), (f"K{i}", d), (f"V{i}", dv)):
                    feeds[name] = rng.standard_normal((b, 2, s, width)).astype(np.float32)
            feeds["t"] = np.array(0.7, np.float32)  # sharper rows than 1 / 8 gives
            feeds["w"] = rng.uniform(-1, 1, (b, 1, 1, s)).astype(np.float32)
            want = ort_run(model, feeds)
            got = lib.run(feeds)
            for name, w in want.items():
                np.testing.assert_allclose(got[name], w, rtol=1e-4, atol=1e-5, err_msg=f"{name} at batch {b} seq {s}")
    print("ok")
""")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    d = tmp_path_factory.mktemp("tscale")
    return d, build_one_version(_model(), d, "tscale")


def test_scale_scores_fold_and_a_per_key_weight_does_not(built):
    """Chains 1-4 are tile-fitted fused computes whose score is a fold of the dot (the
    operator as written); chain 5's per-key weight is not one."""
    from onnxcc.codegen.cpu.flash_tiles import score_scale, tiles_fit

    _, kernels = built
    flashes = fused_attention(kernels)
    assert len(flashes) == len(HEADS)
    assert all(tiles_fit(fl, 16) for fl in flashes)
    row_vars = [{fl.key.name, fl.rows_var, fl.dot.vars[0][0].name} for fl in flashes]
    ops = [(s[0] if (s := score_scale(fl, rv)) else None) for fl, rv in zip(flashes, row_vars, strict=True)]
    assert sorted(o for o in ops if o) == sorted(FOLDED.values())
    assert ops.count(None) == 1


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_scaled_chains_match_onnxruntime(built, threads):
    d, _ = built
    # the pool's size is fixed at its first use in a process: one child per thread count
    env = {**os.environ, "ONNXCC_NUM_THREADS": str(threads)}
    r = subprocess.run([sys.executable, "-c", _RUN, str(d / "lib"), str(d / "m.onnx"), repr(HEADS)], env=env,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr
