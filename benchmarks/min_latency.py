"""Single-thread minimum latency of onnxcc vs onnxruntime on one model: the minimum of
2 x 60 calls each, which a loaded shared machine disturbs far less than a median does.

    python benchmarks/min_latency.py MODEL.onnx batch=1,H=64,W=64 [more dims ...]
"""

from __future__ import annotations

import os
import sys
import tempfile
import time


def _tmin(fn, n: int = 60) -> float:
    best = float("inf")
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    os.environ["ONNXCC_NUM_THREADS"] = "1"
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    import onnxruntime as ort

    import onnxcc
    from onnxcc.testing import random_inputs

    path = sys.argv[1]
    settings = [{k: int(v) for k, v in (kv.split("=") for kv in d.split(","))} for d in sys.argv[2:]]
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    out = tempfile.mkdtemp()
    onnxcc.compile(path, out)
    lib = onnxcc.load(out)
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    for dims in settings:
        feeds = random_inputs(path, dims, seed=1)
        for _ in range(3):
            lib.run(feeds)
            sess.run(None, feeds)
        a = min(_tmin(lambda: lib.run(feeds)) for _ in range(2))
        b = min(_tmin(lambda: sess.run(None, feeds)) for _ in range(2))
        name = os.path.basename(path)
        print(f"{name} {dims} onnxcc {a * 1e3:.3f} ms ort {b * 1e3:.3f} ms ratio {a / b:.3f}", flush=True)


if __name__ == "__main__":
    main()
