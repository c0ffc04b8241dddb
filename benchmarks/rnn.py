"""LSTM and GRU layers, onnxcc vs onnxruntime: single-thread minimum latency, side by side.

Each case is one LSTM or GRU node (forward or bidirectional, default activations, with B)
built with onnx.helper at fixed sizes; both runtimes get the same inputs, the outputs are
checked against each other (rtol 1e-4, atol 1e-5) and each is timed as the minimum of
2 x N calls, alternating. Prints one line per case with the ratio onnxcc / onnxruntime
(below 1: onnxcc is faster) and the geometric mean of the ratios.

    python benchmarks/rnn.py                 # the full grid
    python benchmarks/rnn.py --quick         # a few representative cases
    python benchmarks/rnn.py --only lstm-bi --json out.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import sys
import tempfile
import time

import numpy as np


def make_model(kind: str, bidir: bool, hidden: int, seq: int, batch: int, inp: int, path: str) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    g = {"LSTM": 4, "GRU": 3}[kind]
    nd = 2 if bidir else 1
    rng = np.random.default_rng(0)
    s = 1.0 / math.sqrt(hidden)
    w = rng.uniform(-s, s, (nd, g * hidden, inp)).astype(np.float32)
    r = rng.uniform(-s, s, (nd, g * hidden, hidden)).astype(np.float32)
    b = rng.uniform(-s, s, (nd, 2 * g * hidden)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(r, "R"), numpy_helper.from_array(b, "B")]
    node = helper.make_node(kind, ["X", "W", "R", "B"], ["Y", "Y_h"], hidden_size=hidden,
                            direction="bidirectional" if bidir else "forward")
    graph = helper.make_graph(
        [node], "rnn",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [seq, batch, inp])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [seq, nd, batch, hidden]),
         helper.make_tensor_value_info("Y_h", TensorProto.FLOAT, [nd, batch, hidden])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    onnx.save(model, path)


def _tmin(fn, n: int) -> float:
    best = float("inf")
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def cases(quick: bool):
    if quick:
        return [("LSTM", True, 128, 64, 16), ("LSTM", False, 64, 300, 3), ("GRU", False, 128, 64, 3),
                ("GRU", True, 64, 300, 1), ("LSTM", False, 128, 64, 1), ("GRU", True, 128, 64, 16)]
    return list(itertools.product(("LSTM", "GRU"), (False, True), (64, 128), (64, 300), (1, 3, 16)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default="", help="substring filter on the case name (e.g. lstm-bi)")
    ap.add_argument("--input", type=int, default=0, help="input width (default: the hidden size)")
    ap.add_argument("--calls", type=int, default=0, help="calls per timing round (default: by size)")
    ap.add_argument("--json", default="", help="write the results to this file")
    args = ap.parse_args()
    os.environ["ONNXCC_NUM_THREADS"] = "1"
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    import onnxruntime as ort

    import onnxcc

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    rows = []
    tmp = tempfile.mkdtemp()
    for kind, bidir, hid, seq, batch in cases(args.quick):
        name = f"{kind.lower()}-{'bi' if bidir else 'fw'}-h{hid}-s{seq}-b{batch}"
        if args.only and args.only not in name:
            continue
        inp = args.input or hid
        path = os.path.join(tmp, name + ".onnx")
        make_model(kind, bidir, hid, seq, batch, inp, path)
        out = os.path.join(tmp, name)
        onnxcc.compile(path, out)
        lib = onnxcc.load(out)
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        feeds = {"X": np.random.default_rng(1).standard_normal((seq, batch, inp)).astype(np.float32)}
        got, want = lib.run(feeds), sess.run(None, feeds)
        got = list(got.values()) if isinstance(got, dict) else list(got)
        ok = all(np.allclose(np.asarray(a), b, rtol=1e-4, atol=1e-5) for a, b in zip(got, want))
        for _ in range(3):
            lib.run(feeds)
            sess.run(None, feeds)
        work = seq * batch * hid * hid * (2 if bidir else 1)
        n = args.calls or max(5, min(60, int(2e8 / work)))
        a = b = float("inf")
        for _ in range(2):
            a = min(a, _tmin(lambda: lib.run(feeds), n))
            b = min(b, _tmin(lambda: sess.run(None, feeds), n))
        rows.append({"case": name, "onnxcc_ms": a * 1e3, "ort_ms": b * 1e3, "ratio": a / b, "match": ok})
        print(f"{name:24s} onnxcc {a * 1e3:8.3f} ms  ort {b * 1e3:8.3f} ms  ratio {a / b:6.3f}"
              f"{'' if ok else '  MISMATCH'}", flush=True)
    if rows:
        geo = math.exp(sum(math.log(r["ratio"]) for r in rows) / len(rows))
        print(f"geomean ratio {geo:.3f} over {len(rows)} cases")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"cases": rows, "geomean_ratio": geo}, f, indent=1)
    if any(not r["match"] for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
