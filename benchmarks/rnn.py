"""LSTM and GRU layers, onnxcc vs onnxruntime and OpenVINO: side by side in one process.

Each case is one LSTM or GRU node (forward or bidirectional, default activations, with B)
built with onnx.helper at fixed sizes; every runtime gets the same inputs, the outputs are
checked against onnxruntime's (rtol 1e-4, atol 1e-5) and each is timed with `peers.time_row`
(alternating rounds, medians; `--clock cpu` times one-thread runs by CPU time, robust on a
shared machine). Prints one line per case with the ratio onnxcc / onnxruntime and onnxcc /
the fastest peer (below 1: onnxcc is faster) and the geometric means.

    python benchmarks/rnn.py                 # the full grid, one thread
    python benchmarks/rnn.py --quick         # a few representative cases
    python benchmarks/rnn.py --only lstm-bi --threads 2 --json out.json
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
from pathlib import Path

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
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=24)
    ap.add_argument("--budget", type=float, default=1.5, help="seconds per case, roughly")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    ap.add_argument("--peers", default="auto", help="comma list of ort,openvino (auto: OpenVINO if installed)")
    ap.add_argument("--json", default="", help="write the results to this file")
    args = ap.parse_args()
    os.environ["ONNXCC_NUM_THREADS"] = str(args.threads)
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from peers import available_peers, format_row, geomean, make_peers, time_row

    import onnxcc

    peer_names = available_peers(args.peers)
    if "ort" not in peer_names:
        peer_names.insert(0, "ort")  # the outputs are checked against onnxruntime's
    cpu_clock = args.clock == "cpu" and args.threads == 1
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
        peers = make_peers(Path(path), args.threads, peer_names)
        feeds = {"X": np.random.default_rng(1).standard_normal((seq, batch, inp)).astype(np.float32)}
        got = [np.asarray(v) for v in lib.run(feeds).values()]
        want = peers["ort"](feeds)
        ok = all(np.allclose(a, b, rtol=1e-4, atol=1e-5) for a, b in zip(got, want))
        row = time_row(lambda f: list(lib.run(f).values()), peers, feeds, args.repeats, args.budget,
                       clock=time.process_time if cpu_clock else None)
        row.update(case=name, match=ok, threads=args.threads, clock="cpu" if cpu_clock else "wall")
        rows.append(row)
        print(f"{name:24s} {format_row(row, peer_names)}{'' if ok else '  MISMATCH'}", flush=True)
    if rows:
        geo = geomean(r.get("ratio") for r in rows)
        geo_best = geomean(r.get("ratio_best") for r in rows)
        print(f"geomean onnxcc / onnxruntime {geo:.3f}, onnxcc / best peer {geo_best:.3f} over {len(rows)} cases "
              f"({args.threads} threads)")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"cases": rows, "geomean_ratio": geo, "geomean_ratio_best": geo_best,
                           "threads": args.threads, "peers": peer_names, "load": os.getloadavg()}, f, indent=1)
    if any(not r["match"] for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
