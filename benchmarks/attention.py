"""Attention (opset 23) fused over key blocks vs materialised scores vs onnxruntime.

One Attention node `[batch, heads, seq, head]` with symbolic batch and seq (self-attention,
optionally causal) is compiled twice: as onnxcc builds it now (the fused form, kernel/flash.py)
and with the fused form switched off (the three computes over a `[batch, heads, seq, seq]`
score buffer: what onnxcc did before). Each build is timed side by side with onnxruntime's
own Attention kernel on the same inputs (`compare_ort.bench_pair`: alternating rounds,
medians; `--threads 1` times CPU seconds), outputs checked against onnxruntime (rtol 1e-4,
atol 1e-5), and the workspace (arena) bytes each build needs at that shape are read from
NAME.json's `workspace_bytes`.

    OPENBLAS_CORETYPE= OPENBLAS_L2_SIZE= python benchmarks/attention.py --threads 2
    python benchmarks/attention.py --threads 1 --seqs 128,512 --batches 1 --json out.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_ort import bench_pair


def make_model(path: Path, heads: int, head: int, causal: bool) -> None:
    import onnx
    from onnx import TensorProto, helper

    shape = ["batch", heads, "seq", head]
    node = helper.make_node("Attention", ["Q", "K", "V"], ["Y"], is_causal=int(causal))
    graph = helper.make_graph(
        [node], "attention",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in ("Q", "K", "V")],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    model.ir_version = 10
    onnx.save(model, path)


def compile_both(path: Path, out: Path):
    """(fused library, materialised library, their workspace formulas)."""
    import onnxcc
    from onnxcc.ops import attention

    libs, arenas = [], []
    for fused in (True, False):
        saved = attention.fuses
        if not fused:  # the path before: scores, softmax and P @ V as three computes
            attention.fuses = lambda *a: False  # type: ignore[assignment]
        try:
            onnxcc.compile(path, out / str(fused), name="attn")
        finally:
            attention.fuses = saved
        libs.append(onnxcc.load(out / str(fused)))
        meta = json.loads((out / str(fused) / "attn.json").read_text())
        arenas.append(meta["versions"][-1]["workspace_bytes"])
    return libs, arenas


def arena_at(formula, dims: dict[str, int]) -> int:
    import sympy

    return int(sympy.sympify(str(formula)).subs({sympy.Symbol(k): v for k, v in dims.items()}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=12)
    ap.add_argument("--seqs", default="128,512,1024,2048")
    ap.add_argument("--batches", default="1,4")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--head", type=int, default=64)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    os.environ["ONNXCC_NUM_THREADS"] = str(args.threads)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    import onnxruntime as ort

    clock = time.process_time if args.threads == 1 else time.perf_counter
    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "attention.onnx"
        make_model(path, args.heads, args.head, args.causal)
        (fused, plain), (arena_f, arena_p) = compile_both(path, Path(tmp))
        sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        print(f"heads={args.heads} head={args.head} causal={args.causal} threads={args.threads} "
              f"(clock: {clock.__name__}); arena fused {arena_f}, materialised {arena_p}")
        rng = np.random.default_rng(0)
        for b in (int(x) for x in args.batches.split(",")):
            for s in (int(x) for x in args.seqs.split(",")):
                shape = (b, args.heads, s, args.head)
                feeds = {n: rng.standard_normal(shape).astype(np.float32) for n in ("Q", "K", "V")}
                want = sess.run(None, feeds)[0]
                for lib in (fused, plain):
                    np.testing.assert_allclose(lib.run(feeds)["Y"], want, rtol=1e-4, atol=1e-5)
                t_f, t_o1 = bench_pair(lambda: fused.run(feeds), lambda: sess.run(None, feeds), args.repeats,
                                       budget_s=6.0, clock=clock)
                t_p, t_o2 = bench_pair(lambda: plain.run(feeds), lambda: sess.run(None, feeds), args.repeats,
                                       budget_s=6.0, clock=clock)
                t_o = statistics.median([t_o1, t_o2])
                dims = {"batch": b, "seq": s}
                row = {"batch": b, "seq": s, "fused_ms": t_f * 1e3, "materialised_ms": t_p * 1e3,
                       "ort_ms": t_o * 1e3, "fused_vs_ort": t_f / t_o1, "materialised_vs_ort": t_p / t_o2,
                       "arena_fused": arena_at(arena_f, dims), "arena_materialised": arena_at(arena_p, dims)}
                rows.append(row)
                print(f"  batch={b} seq={s:5d}  fused {t_f * 1e3:9.3f} ms ({row['fused_vs_ort']:.2f}x ort)  "
                      f"materialised {t_p * 1e3:9.3f} ms ({row['materialised_vs_ort']:.2f}x ort)  "
                      f"ort {t_o * 1e3:9.3f} ms  arena {row['arena_fused']:,} vs {row['arena_materialised']:,} B")
    for key in ("fused_vs_ort", "materialised_vs_ort"):
        geo = math.exp(statistics.fmean(math.log(r[key]) for r in rows))
        print(f"geomean {key}: {geo:.3f}")
    if args.json:
        args.json.write_text(json.dumps({"threads": args.threads, "heads": args.heads, "head": args.head,
                                         "causal": args.causal, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
