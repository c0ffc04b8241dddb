"""What a growing loop capacity costs (ops/loop_capacity.py): per-call thread CPU time (median)
of a while loop appending one element per iteration (tests/e2e/test_loop_capacity.py's model)
at k iterations, built with the default capacity (16 rows, re-run with the capacity doubled
until it fits: 16 -> 32 -> ... ) and with one large enough for a single run, beside
onnxruntime on one thread.

    ONNXCC_NUM_THREADS=1 python benchmarks/loop_capacity.py [--repeats 15] [--counts 10,100,1000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import onnx
import onnxruntime as ort

import onnxcc

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "e2e"))
from test_loop_capacity import appended_feeds, appended_while


def _median_us(f, repeats: int) -> float:
    for _ in range(3):  # warm: the first calls page in the library and the workspace
        f()
    ts = []
    for _ in range(repeats):
        t = time.thread_time()
        f()
        ts.append(time.thread_time() - t)
    return sorted(ts)[len(ts) // 2] * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description="what a growing loop capacity costs")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--counts", default="10,100,1000")
    args = ap.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    with tempfile.TemporaryDirectory() as d:
        model = Path(d) / "appended.onnx"
        onnx.save(appended_while(), model)
        big = 1 << max(4, (max(counts) - 1).bit_length())
        libs = {}
        for cap in (16, big):
            onnxcc.compile(model, Path(d) / f"cap{cap}", name="appended", loop_capacity=(cap, max(big, 1 << 24)))
            libs[cap] = onnxcc.load(Path(d) / f"cap{cap}")
        so = ort.SessionOptions()
        so.intra_op_num_threads = so.inter_op_num_threads = 1
        sess = ort.InferenceSession(str(model), so)
        for k in counts:
            feeds = appended_feeds(k)
            row = [f"{name} {_median_us(f, args.repeats):.0f} us" for name, f in (
                ("capacity 16", lambda: libs[16].run(feeds)), (f"capacity {big}", lambda: libs[big].run(feeds)),
                ("onnxruntime", lambda: sess.run(None, feeds)))]
            print(f"k={k}: " + ", ".join(row))


if __name__ == "__main__":
    main()
