"""Causal attention chains with a NaN, +inf or -inf in K or V, fused and compared with
onnxruntime NaN for NaN (and the Attention op with is_causal, last test): the fused kernel
skips the keys after each row's diagonal (kernel/flash.py `Flash.causal`), but onnxruntime
adds the mask to every score, so a masked
key's non-finite score (an additive mask: NaN + mask, inf + mask) makes the whole row NaN
and a masked key's non-finite value (P = 0 times inf or NaN) makes its column NaN. A row
whose kept scores are all -inf under a finfo.min mask is the softmax of the masked scores.

Mask forms: the additive torch mask (finfo.min above the diagonal) and an additive -inf
mask, Where(above, -inf / finfo.min, x), at rank 4 and rank 3, heads of 64 (codegen/cpu/
flash.py's rows) and of 16 (flash_lanes.py's row blocks in lanes). Each non-finite value at
key 0, the middle key and the last one (masked for the rows before it, kept by the rows
after it), at seq 1 / 63 / 64 / 65 / 200 and batch 1 to 3, on 1 and 2 threads (a child
process each: the pool's size is fixed at its first use), with the guard's vector scan and its
row-norm scan (codegen/cpu/flash_guard.py). Finite outputs to rtol 1e-4 / atol 1e-5."""

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

#: chain -> (rank, head, mask form); the form names how the masked scores are written
CHAINS = {
    1: (4, 64, "add_min"), 2: (4, 64, "add_ninf"), 3: (4, 64, "where_ninf"), 4: (4, 64, "where_min"),
    5: (3, 64, "add_min"), 6: (3, 64, "where_ninf"),
    7: (4, 16, "add_min"), 8: (4, 16, "add_ninf"), 9: (4, 16, "where_min"), 10: (4, 16, "where_ninf"),
}
#: the K and V of each (rank, head), shared by its chains (each chain has its own Q: equal
#: score MatMuls would be merged, and a shared score is no chain)
TENSORS = {(4, 64): ("K", "V"), (3, 64): ("K3", "V3"), (4, 16): ("Kn", "Vn")}


def _model() -> onnx.ModelProto:
    f32min = float(np.finfo(np.float32).min)
    inits = [helper.make_tensor("one", T.FLOAT, [], [1.0]), helper.make_tensor("zero", T.FLOAT, [], [0.0]),
             helper.make_tensor("lowest", T.FLOAT, [], [f32min]),
             helper.make_tensor("neginf", T.FLOAT, [], [-math.inf]),
             *[helper.make_tensor(f"scale{d}", T.FLOAT, [], [1 / math.sqrt(d)]) for d in (16, 64)]]
    n = helper.make_node
    # `causal`: finfo.min above the diagonal, 0 elsewhere (torch's); `above`: the bool mask
    nodes = [*torch_causal_mask("Q1"), n("Where", ["above", "neginf", "zero"], ["causal_ninf"])]
    for (rank, _), (k, _) in TENSORS.items():
        nodes.append(n("Transpose", [k], [f"{k}t"], perm=[0, 1, 3, 2] if rank == 4 else [0, 2, 1]))
    for i, (rank, d, form) in CHAINS.items():
        q, (k, v) = f"Q{i}", TENSORS[(rank, d)]
        nodes += [n("MatMul", [q, f"{k}t"], [f"s{i}"]), n("Mul", [f"s{i}", f"scale{d}"], [f"x{i}"])]
        if form == "add_min":
            nodes.append(n("Add", [f"x{i}", "causal"], [f"m{i}"]))
        elif form == "add_ninf":
            nodes.append(n("Add", [f"x{i}", "causal_ninf"], [f"m{i}"]))
        else:
            nodes.append(n("Where", ["above", "neginf" if form == "where_ninf" else "lowest", f"x{i}"], [f"m{i}"]))
        nodes += [n("Softmax", [f"m{i}"], [f"p{i}"], axis=-1), n("MatMul", [f"p{i}", v], [f"Y{i}"])]
    f = T.FLOAT
    inputs = []
    for (rank, d), names in TENSORS.items():
        inputs += [(name, f, _shape(rank, d)) for name in names]
    inputs += [(f"Q{i}", f, _shape(rank, d)) for i, (rank, d, _) in CHAINS.items()]
    g = helper.make_graph(nodes, "nonfinite", [helper.make_tensor_value_info(*i) for i in inputs],
                          [helper.make_tensor_value_info(f"Y{i}", f, None) for i in CHAINS], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    return m


def _shape(rank: int, d: int) -> list:
    return ["B", 2, "S", d] if rank == 4 else ["B", "S", d]


_RUN = textwrap.dedent("""
    import sys
    import numpy as np
    import onnx
    import onnxcc
    from onnxcc.testing import ort_run
    model = onnx.load(sys.argv[2])
    lib = onnxcc.load(sys.argv[1])
    inputs = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input}
    rng = np.random.default_rng(0)
    failures = []
    for b, s in [(1, 1), (2, 63), (1, 64), (3, 65), (1, 200)]:
        base = {}
        for name, dims in inputs.items():
            shape = (b, 2, s, dims[-1]) if len(dims) == 4 else (b, s, dims[-1])
            base[name] = rng.standard_normal(shape).astype(np.float32)
        for which in "KV":
            for val in (np.nan, np.inf, -np.inf):
                for key in sorted({0, s // 2, s - 1}):
                    feeds = {k: a.copy() for k, a in base.items()}
                    for name, a in feeds.items():
                        if name[0] == which:  # the last batch's last head, key `key`, element 3
                            a[(b - 1, 1, key, 3) if a.ndim == 4 else (b - 1, key, 3)] = val
                    want = ort_run(model, feeds)
                    got = lib.run(feeds)
                    for name, w in want.items():
                        g = got[name]
                        where = f"{name} b={b} s={s} {which}[key {key}]={val}"
                        if not np.array_equal(np.isnan(g), np.isnan(w)):
                            rows = sorted(set(np.argwhere(np.isnan(g) != np.isnan(w))[:, -2].tolist()))
                            failures.append(f"{where}: NaN positions differ in rows {rows[:8]}")
                            continue
                        ok = ~np.isnan(w)
                        if not np.allclose(g[ok], w[ok], rtol=1e-4, atol=1e-5):
                            failures.append(f"{where}: values differ")
    print("\\n".join(failures[:40]) if failures else "ok")
""")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    import onnxcc
    from onnxcc.codegen.cpu import flash as cpu_flash

    d = tmp_path_factory.mktemp("nonfinite")
    fused = fused_attention(build_one_version(_model(), d, "nonfinite"))
    # every chain fused and proved causal: the kernel skips the keys after the diagonal
    assert len(fused) == len(CHAINS) and all(fl.causal is not None for fl in fused)
    # the guard's scan through the expression emitter (K or V rows not contiguous vectors)
    saved = cpu_flash._scan_lanes
    cpu_flash._scan_lanes = lambda *a: (0, 0)
    try:
        onnxcc.compile(d / "m.onnx", d / "lib_rows", name="nonfinite", max_versions=1)
    finally:
        cpu_flash._scan_lanes = saved
    return d


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("scan", ["lib", "lib_rows"])
def test_nonfinite_kv_match_onnxruntime(built, threads, scan):
    env = {**os.environ, "ONNXCC_NUM_THREADS": str(threads)}
    r = subprocess.run([sys.executable, "-c", _RUN, str(built / scan), str(built / "m.onnx")], env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout[-6000:] + r.stderr[-3000:]


def test_attention_op_causal_nonfinite_match_onnxruntime(tmp_path):
    """The Attention op (opset 23) with is_causal, fused the same way: its masked keys' score
    is the score + -inf as onnxruntime computes it (NaN rows for a NaN or inf in K there)."""
    import onnxcc
    from onnxcc.testing import ort_run

    d = 64
    node = helper.make_node("Attention", ["Q", "K", "V"], ["Y"], is_causal=1)
    g = helper.make_graph([node], "att", [helper.make_tensor_value_info(x, T.FLOAT, [1, 2, "S", d]) for x in "QKV"],
                          [helper.make_tensor_value_info("Y", T.FLOAT, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)])
    model.ir_version = 10
    onnx.save(model, tmp_path / "a.onnx")
    text = onnxcc.compile(tmp_path / "a.onnx", tmp_path / "kir", name="att", emit="kernel", max_versions=1).text
    fused = fused_attention(text)
    assert len(fused) == 1 and fused[0].causal is not None
    onnxcc.compile(tmp_path / "a.onnx", tmp_path / "lib", name="att")
    lib = onnxcc.load(tmp_path / "lib")
    rng = np.random.default_rng(1)
    for s in (63, 65, 200):
        for which in "QKV":
            for val in (np.nan, np.inf, -np.inf):
                feeds = {x: rng.standard_normal((1, 2, s, d)).astype(np.float32) for x in "QKV"}
                feeds[which][0, 1, s - 2, 3] = val
                want, got = ort_run(model, feeds)["Y"], lib.run(feeds)["Y"]
                where = f"s={s} {which}[key {s - 2}]={val}"
                assert np.array_equal(np.isnan(got), np.isnan(want)), where
                ok = ~np.isnan(want)
                np.testing.assert_allclose(got[ok], want[ok], rtol=1e-4, atol=1e-5, err_msg=where)


def test_softcapped_causal_attention_op_nonfinite_match_onnxruntime(tmp_path):
    """Attention with is_causal and a softcap: a masked key's score is c tanh(x / c) + -inf,
    NaN where the dot is NaN, as onnxruntime computes it, not the constant -inf the causal
    fast path would skip."""
    import onnxcc
    from onnxcc.testing import ort_run

    d = 64
    node = helper.make_node("Attention", ["Q", "K", "V"], ["Y"], is_causal=1, softcap=30.0)
    g = helper.make_graph([node], "att", [helper.make_tensor_value_info(x, T.FLOAT, [1, 2, "S", d]) for x in "QKV"],
                          [helper.make_tensor_value_info("Y", T.FLOAT, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)])
    model.ir_version = 10
    onnx.save(model, tmp_path / "a.onnx")
    onnxcc.compile(tmp_path / "a.onnx", tmp_path / "lib", name="att")
    lib = onnxcc.load(tmp_path / "lib")
    rng = np.random.default_rng(2)
    for s in (1, 63, 65, 200):
        for which in "QKV":
            for val in (None, np.nan, np.inf, -np.inf):
                feeds = {x: rng.standard_normal((1, 2, s, d)).astype(np.float32) for x in "QKV"}
                if val is not None:
                    feeds[which][0, 1, s - 1 if s == 1 else s - 2, 3] = val
                want, got = ort_run(model, feeds)["Y"], lib.run(feeds)["Y"]
                where = f"s={s} {which}={val}"
                assert np.array_equal(np.isnan(got), np.isnan(want)), where
                ok = ~np.isnan(want)
                np.testing.assert_allclose(got[ok], want[ok], rtol=1e-4, atol=1e-5, err_msg=where)
