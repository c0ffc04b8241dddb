"""Latency of onnxcc vs onnxruntime on the sample models, side by side in one process.

Each sample model is compiled once (one library, every shape below served by it). For
each shape the two runtimes alternate in rounds (same inputs, same thread count; see
`bench_pair`), and the median of each is reported with the ratio onnxcc / onnxruntime (lower is better) and
the geometric mean over all rows.

    python benchmarks/compare_ort.py [--threads N] [--repeats R] [--models a,b] [--json out.json]
    python benchmarks/compare_ort.py --model tests/zoo/models/mobilenet_v2_ts13.onnx \
        --dims batch=1,H=64,W=64 --dims batch=4,H=64,W=64
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SEQS = (17, 64, 128, 200, 512)
BATCHES = (1, 4)

SHAPES = {
    "mlp": [{"batch": b} for b in (1, 4, 64, 256)],
    "gelu_layernorm": [{"batch": b, "seq": s} for b in BATCHES for s in SEQS],
    "transformer": [{"batch": b, "seq": s} for b in BATCHES for s in SEQS],
    "convnet": [{"batch": b, "H": h, "W": h} for b in BATCHES for h in (32, 64)],
}


ROUNDS = 6
"""the two runtimes alternate in this many rounds of calls each"""
PAUSE_S = 0.15
"""idle time before each round. Both runtimes' worker threads spin a while after a call
(onnxcc's 100 us; onnxruntime's measured between 20 and 100 ms), and with as many threads as
cores one runtime's spinning worker steals a core from the other's measured calls: calling
them turn by turn measured the transformer 2x slower than it runs alone."""
WARM_S = 0.025
"""untimed calls at the start of each round, for at least this long (3 calls at least): after
an idle spell the scheduler needs a few milliseconds to spread a runtime's threads over the
cores again (measured on both runtimes: up to 1.5x slower calls for ~5 ms)"""


def bench_pair(fn_a, fn_b, repeats: int, budget_s: float = 2.0, clock=time.perf_counter) -> tuple[float, float]:
    """Median seconds per call of a and b, each measured in its own steady state.

    The two alternate in ROUNDS rounds; a round is a pause, untimed warm-up calls (WARM_S)
    and repeats/ROUNDS timed calls. Alternating rounds instead of single calls measures each
    runtime without the other's threads spinning beside it, and still keeps the comparison
    fair when the machine's load drifts. `clock` times each call (`time.process_time` gives CPU
    seconds, for single-threaded rows on a loaded machine)."""
    per_round = max(1, -(-repeats // ROUNDS))
    ta: list[float] = []
    tb: list[float] = []
    deadline = time.perf_counter() + budget_s
    for r in range(ROUNDS):
        for fn, out in ((fn_a, ta), (fn_b, tb)):
            time.sleep(PAUSE_S)
            warm_until = time.perf_counter() + WARM_S
            for i in range(1000):
                fn()
                if i >= 2 and time.perf_counter() > warm_until:
                    break
            for _ in range(per_round):
                t0 = clock()
                fn()
                out.append(clock() - t0)
        if r >= 1 and time.perf_counter() > deadline:
            break
    return statistics.median(ta), statistics.median(tb)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--models", default=",".join(SHAPES))
    ap.add_argument("--model", type=Path, help="an arbitrary .onnx model instead of the samples")
    ap.add_argument("--dims", action="append", default=[],
                    help="symbol values for --model, e.g. batch=1,H=64,W=64 (repeatable: one row each)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.model is not None:
        if not args.dims:
            ap.error("--model needs at least one --dims")
        args.models = args.model.stem
        SHAPES[args.model.stem] = [{k: int(v) for k, v in (kv.split("=") for kv in d.split(","))}
                                   for d in args.dims]
    os.environ["ONNXCC_NUM_THREADS"] = str(args.threads)
    # numpy only makes inputs and checks outputs here: its BLAS threads would only add
    # spinning workers competing for the measured cores
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

    import numpy as np
    import onnxruntime as ort

    import onnxcc
    from onnxcc.testing import random_inputs

    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            path = args.model if args.model is not None else ROOT / "models" / f"{name}.onnx"
            t0 = time.perf_counter()
            onnxcc.compile(path, Path(tmp) / name)
            compile_s = time.perf_counter() - t0
            lib = onnxcc.load(Path(tmp) / name)
            sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
            print(f"{name}: compiled in {compile_s:.2f} s, {lib.num_versions} versions")
            for dims in SHAPES[name]:
                feeds = random_inputs(path, dims, seed=1)
                ours = lib.run(feeds)
                theirs = sess.run(None, feeds)
                err = max(float(np.max(np.abs(o - t))) for o, t in zip(ours.values(), theirs))
                t_cc, t_ort = bench_pair(lambda: lib.run(feeds), lambda: sess.run(None, feeds), args.repeats)
                ratio = t_cc / t_ort
                rows.append({"model": name, "dims": dims, "onnxcc_ms": t_cc * 1e3, "ort_ms": t_ort * 1e3,
                             "ratio": ratio, "version": lib.last_version, "max_abs_err": err})
                shape = ",".join(f"{k}={v}" for k, v in dims.items())
                print(f"  {shape:24s} onnxcc {t_cc * 1e3:9.3f} ms  ort {t_ort * 1e3:9.3f} ms  "
                      f"ratio {ratio:6.3f}  (version {lib.last_version}, max err {err:.1e})")
    by_model = {}
    for r in rows:
        by_model.setdefault(r["model"], []).append(r["ratio"])
    geo = {m: math.exp(statistics.fmean(math.log(x) for x in v)) for m, v in by_model.items()}
    overall = math.exp(statistics.fmean(math.log(r["ratio"]) for r in rows))
    for m, g in geo.items():
        print(f"geomean ratio {m}: {g:.3f}")
    print(f"geomean ratio overall ({len(rows)} shapes, {args.threads} threads): {overall:.3f}")
    if args.json:
        args.json.write_text(json.dumps({"threads": args.threads, "rows": rows, "geomean": geo,
                                         "geomean_overall": overall}, indent=2))


if __name__ == "__main__":
    main()
