"""Exporters' attention chain fused (attention-chain pass) vs the GEMM chain vs onnxruntime.

The chain torch writes, `[batch, heads, seq, head]` with symbolic batch and seq:
MatMul(Q, Transpose(K)) * scale [+ causal mask from Trilu] -> Softmax -> MatMul(., V),
compiled twice: as onnxcc builds it now (the attention-chain pass: one cc.sdpa fused over
key blocks, kernel/flash.py) and with the pass switched off (GEMM, softmax, GEMM over a
`[batch, heads, seq, seq]` score buffer). Each is timed side by side with onnxruntime on the
same inputs (`compare_ort.bench_pair`: alternating rounds, medians), outputs checked against
onnxruntime (rtol 1e-4, atol 1e-5). The row where fused first beats the GEMM chain at each
batch is the threshold the pass's `min_kv` encodes for static key counts.

    OPENBLAS_CORETYPE= OPENBLAS_L2_SIZE= python benchmarks/attention_chain.py --threads 2
    python benchmarks/attention_chain.py --seqs 64,128,256 --batches 1 --causal --json out.json

With `--model PATH --dims k=v,...` (repeatable) it times a whole model instead (a zoo model,
models/transformer.onnx), built with and without the pass, on random inputs
(`onnxcc.testing.random_inputs`), both compared with onnxruntime.
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
    """The chain as a torch export writes it (the causal mask: Trilu of ones, Equal 0,
    Where -> finfo.min, added to the scores)."""
    import onnx
    from onnx import TensorProto, helper

    shape = ["batch", heads, "seq", head]
    f = np.float32
    nodes = [helper.make_node("Transpose", ["K"], ["Kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["Q", "Kt"], ["qk"]),
             helper.make_node("Mul", ["qk", "scale"], ["scores"])]
    inits = [helper.make_tensor("scale", TensorProto.FLOAT, [], [1.0 / math.sqrt(head)])]
    x = "scores"
    if causal:
        inits += [helper.make_tensor("one", TensorProto.FLOAT, [], [1.0]),
                  helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0]),
                  helper.make_tensor("lowest", TensorProto.FLOAT, [], [float(np.finfo(f).min)])]
        nodes += [helper.make_node("Shape", ["Q"], ["qs"], start=2, end=3),
                  helper.make_node("Concat", ["qs", "qs"], ["tt"], axis=0),
                  helper.make_node("Expand", ["one", "tt"], ["ones"]),
                  helper.make_node("Trilu", ["ones"], ["tril"], upper=0),
                  helper.make_node("Equal", ["tril", "zero"], ["above"]),
                  helper.make_node("Where", ["above", "lowest", "zero"], ["mask"]),
                  helper.make_node("Add", ["scores", "mask"], ["masked"])]
        x = "masked"
    nodes += [helper.make_node("Softmax", [x], ["p"], axis=-1), helper.make_node("MatMul", ["p", "V"], ["Y"])]
    graph = helper.make_graph(
        nodes, "attention_chain",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in ("Q", "K", "V")],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, shape)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    onnx.save(model, path)


def parse_dims(text: str) -> dict[str, int]:
    return {k: int(v) for k, v in (kv.split("=") for kv in text.split(","))}


def compile_both(path: Path, out: Path):
    """(fused library, GEMM-chain library)."""
    import onnxcc
    from onnxcc.passes import attention_chain

    libs = []
    for fused in (True, False):
        saved = attention_chain.fuse_attention_chains
        if not fused:  # the path before the pass: GEMM, softmax, GEMM
            attention_chain.fuse_attention_chains = lambda *a, **k: False  # type: ignore[assignment]
        try:
            onnxcc.compile(path, out / str(fused), name="attn")
        finally:
            attention_chain.fuse_attention_chains = saved
        libs.append(onnxcc.load(out / str(fused)))
    return libs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=12)
    ap.add_argument("--seqs", default="32,64,128,256,512,1024,2048")
    ap.add_argument("--batches", default="1,4")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--head", type=int, default=64)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--budget", type=float, default=4.0, help="seconds per timed pair, at most")
    ap.add_argument("--model", type=Path, help="time this model instead of the generated chain")
    ap.add_argument("--dims", action="append", default=[], help="with --model: one shape, k=v,... (repeatable)")
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
        path = args.model if args.model is not None else Path(tmp) / "attention_chain.onnx"
        if args.model is None:
            make_model(path, args.heads, args.head, args.causal)
        fused, plain = compile_both(path, Path(tmp))
        sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        what = path.name if args.model is not None else f"heads={args.heads} head={args.head} causal={args.causal}"
        print(f"{what} threads={args.threads} (clock: {clock.__name__})")
        for label, feeds in _shapes(args, path):
            want = sess.run(None, feeds)
            for lib in (fused, plain):
                for got, w in zip(lib.run(feeds).values(), want, strict=True):
                    np.testing.assert_allclose(got, w, rtol=1e-4, atol=1e-4)
            t_f, t_o1 = bench_pair(lambda: fused.run(feeds), lambda: sess.run(None, feeds), args.repeats,
                                   budget_s=args.budget, clock=clock)
            t_p, t_o2 = bench_pair(lambda: plain.run(feeds), lambda: sess.run(None, feeds), args.repeats,
                                   budget_s=args.budget, clock=clock)
            t_o = statistics.median([t_o1, t_o2])
            row = {"shape": label, "fused_ms": t_f * 1e3, "chain_ms": t_p * 1e3, "ort_ms": t_o * 1e3,
                   "fused_vs_ort": t_f / t_o1, "chain_vs_ort": t_p / t_o2, "fused_vs_chain": t_f / t_p}
            rows.append(row)
            print(f"  {label:24s} fused {t_f * 1e3:9.3f} ms ({row['fused_vs_ort']:.2f}x ort)  "
                  f"chain {t_p * 1e3:9.3f} ms ({row['chain_vs_ort']:.2f}x ort)  ort {t_o * 1e3:9.3f} ms  "
                  f"fused/chain {row['fused_vs_chain']:.2f}", flush=True)
    for key in ("fused_vs_ort", "chain_vs_ort", "fused_vs_chain"):
        geo = math.exp(statistics.fmean(math.log(r[key]) for r in rows))
        print(f"geomean {key}: {geo:.3f}")
    if args.json:
        args.json.write_text(json.dumps({"threads": args.threads, "heads": args.heads, "head": args.head,
                                         "causal": args.causal, "rows": rows}, indent=2))


def _shapes(args, path: Path):
    """(label, feeds) per row: the generated chain's batches x seqs, or the model's --dims."""
    if args.model is not None:
        from onnxcc.testing import random_inputs

        for text in args.dims:
            yield text, random_inputs(path, parse_dims(text), seed=1)
        return
    rng = np.random.default_rng(0)
    for b in (int(x) for x in args.batches.split(",")):
        for s in (int(x) for x in args.seqs.split(",")):
            shape = (b, args.heads, s, args.head)
            yield f"batch={b},seq={s}", {n: rng.standard_normal(shape).astype(np.float32) for n in ("Q", "K", "V")}


if __name__ == "__main__":
    main()
