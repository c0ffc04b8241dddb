"""Fused attention with heads of 64 (codegen/cpu/flash.py) runs its parallel items as (outer
vars, a chunk of ROWS_PER_ITEM query rows) (the schedule's `rows_per_item`; codegen/cpu/emit.py
steps the chunk as the innermost item counter): chains of rank 4 ([B, H, S, 64]) and rank 3 ([B, S, 64]), with an
additive mask, a boolean mask and the causal mask, and rank 3 with heads of 128 (P @ V chunk by
chunk, flash.py `PV_REGS`), at lengths around the 64-row chunks (1, 63,
64, 65, 129, 200) and batches 1 to 3, on 1 to 3 threads (the splits of the items then land
inside a head's chunks), compared with onnxruntime at fp32 rtol 1e-4 / atol 1e-5."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest
from attention_masks import build_one_version, fused_attention, torch_causal_mask
from onnx import TensorProto as T
from onnx import helper

from onnxcc.kernel.flash import ROWS_PER_ITEM as PAR_ROWS

D = 64


def _model() -> onnx.ModelProto:
    f32min = float(np.finfo(np.float32).min)
    inits = [helper.make_tensor("scale", T.FLOAT, [], [1.0 / math.sqrt(D)]),
             helper.make_tensor("one", T.FLOAT, [], [1.0]),
             helper.make_tensor("zero", T.FLOAT, [], [0.0]),
             helper.make_tensor("lowest", T.FLOAT, [], [f32min])]
    n = helper.make_node
    nodes = [
        # rank 4, an additive mask [B, 1, S, S]
        n("Transpose", ["K"], ["Kt"], perm=[0, 1, 3, 2]),
        n("MatMul", ["Q", "Kt"], ["s1"]), n("Mul", ["s1", "scale"], ["x1"]), n("Add", ["x1", "amask"], ["m1"]),
        n("Softmax", ["m1"], ["p1"], axis=-1), n("MatMul", ["p1", "V"], ["Y1"]),
        # rank 4, causal (Trilu of ones, Equal 0, Where -> lowest, Add)
        *torch_causal_mask("Q"),
        n("MatMul", ["Q2", "Kt"], ["s2"]), n("Mul", ["s2", "scale"], ["x2"]), n("Add", ["x2", "causal"], ["m2"]),
        n("Softmax", ["m2"], ["p2"], axis=-1), n("MatMul", ["p2", "V"], ["Y2"]),
        # rank 3, a boolean key mask [B, 1, S] through Where
        n("Transpose", ["K3"], ["K3t"], perm=[0, 2, 1]),
        n("MatMul", ["Q3", "K3t"], ["s3"]), n("Mul", ["s3", "scale"], ["x3"]),
        n("Where", ["pad", "x3", "lowest"], ["m3"]),
        n("Softmax", ["m3"], ["p3"], axis=-1), n("MatMul", ["p3", "V3"], ["Y3"]),
        # rank 3, heads of 128: 4 rows' accumulators are 32 vectors, P @ V goes chunk by chunk
        n("Transpose", ["K4"], ["K4t"], perm=[0, 2, 1]),
        n("MatMul", ["Q4", "K4t"], ["s4"]), n("Mul", ["s4", "scale"], ["x4"]),
        n("Softmax", ["x4"], ["p4"], axis=-1), n("MatMul", ["p4", "V4"], ["Y4"]),
    ]
    f = T.FLOAT
    inputs = [("Q", f, ["B", 2, "S", D]), ("Q2", f, ["B", 2, "S", D]), ("K", f, ["B", 2, "S", D]),
              ("V", f, ["B", 2, "S", D]), ("amask", f, ["B", 1, "S", "S"]),
              ("Q3", f, ["B", "S", D]), ("K3", f, ["B", "S", D]), ("V3", f, ["B", "S", D]),
              ("pad", T.BOOL, ["B", 1, "S"]), ("Q4", f, ["B", "S", 2 * D]), ("K4", f, ["B", "S", 2 * D]),
              ("V4", f, ["B", "S", 2 * D])]
    outs = ["Y1", "Y2", "Y3", "Y4"]
    g = helper.make_graph(nodes, "chunks", [helper.make_tensor_value_info(*i) for i in inputs],
                          [helper.make_tensor_value_info(o, f, None) for o in outs], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    return m


_RUN = textwrap.dedent("""
    import sys
    import numpy as np
    import onnx
    import onnxcc
    from onnxcc.testing import ort_run
    model = onnx.load(sys.argv[2])
    lib = onnxcc.load(sys.argv[1])
    rng = np.random.default_rng(0)
    for b, s in [(1, 1), (3, 63), (1, 64), (2, 65), (1, 129), (3, 200)]:
        def normal(*shape):
            return rng.standard_normal(shape).astype(np.float32)
        pad = rng.random((b, 1, s)) < 0.8
        pad[..., 0] = True
        feeds = {"Q": normal(b, 2, s, 64), "Q2": normal(b, 2, s, 64), "K": normal(b, 2, s, 64),
                 "V": normal(b, 2, s, 64), "amask": normal(b, 1, s, s), "Q3": normal(b, s, 64),
                 "K3": normal(b, s, 64), "V3": normal(b, s, 64), "pad": pad, "Q4": normal(b, s, 128),
                 "K4": normal(b, s, 128), "V4": normal(b, s, 128)}
        want = ort_run(model, feeds)
        got = lib.run(feeds)
        for name, w in want.items():
            np.testing.assert_allclose(got[name], w, rtol=1e-4, atol=1e-5, err_msg=f"{name} at batch {b} seq {s}")
    print("ok")
""")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    d = tmp_path_factory.mktemp("chunks")
    fused = fused_attention(build_one_version(_model(), d, "chunks"))
    assert len(fused) == 4 and all(fl.rows_var is not None for fl in fused)
    return d


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_row_chunks_match_onnxruntime(built, threads):
    assert PAR_ROWS % 4 == 0  # whole blocks of the kernel's 4 rows inside a chunk
    # the pool's size is fixed at its first use in a process: one child per thread count
    env = {**os.environ, "ONNXCC_NUM_THREADS": str(threads)}
    r = subprocess.run([sys.executable, "-c", _RUN, str(built / "lib"), str(built / "m.onnx")], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr
