"""Latency of onnxcc vs onnxruntime on the sample models, side by side in one process.

Each sample model is compiled once (one library, every shape below served by it). For
each shape the two runtimes alternate in rounds (same inputs, same thread count; see
`bench_pair`), and the median of each is reported with the ratio onnxcc / onnxruntime (lower is better) and
the geometric mean over all rows.

    python benchmarks/compare_ort.py [--threads N] [--repeats R] [--models a,b] [--clock wall|cpu] [--json out.json]
    python benchmarks/compare_ort.py --model tests/zoo/models/mobilenet_v2_ts13.onnx \
        --dims batch=1,H=64,W=64 --dims batch=4,H=64,W=64
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from timing import bench_many, bench_pair  # noqa: F401  (bench_pair: other benchmarks import it from here)

ROOT = Path(__file__).resolve().parents[1]

SEQS = (17, 64, 128, 200, 512)
BATCHES = (1, 4)

SHAPES = {
    "mlp": [{"batch": b} for b in (1, 4, 64, 256)],
    "gelu_layernorm": [{"batch": b, "seq": s} for b in BATCHES for s in SEQS],
    "transformer": [{"batch": b, "seq": s} for b in BATCHES for s in SEQS],
    "convnet": [{"batch": b, "H": h, "W": h} for b in BATCHES for h in (32, 64)],
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--models", default=",".join(SHAPES))
    ap.add_argument("--model", type=Path, help="an arbitrary .onnx model instead of the samples")
    ap.add_argument("--dims", action="append", default=[],
                    help="symbol values for --model, e.g. batch=1,H=64,W=64 (repeatable: one row each)")
    ap.add_argument("--peers", default="auto", help="comma list of ort,openvino (auto: OpenVINO if installed)")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="cpu: one-thread calls timed by CPU time (robust on a shared machine)")
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

    from peers import available_peers, format_row, geomean, make_peers, time_row

    import onnxcc
    from onnxcc.testing import random_inputs

    peer_names = available_peers(args.peers)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            path = args.model if args.model is not None else ROOT / "models" / f"{name}.onnx"
            t0 = time.perf_counter()
            onnxcc.compile(path, Path(tmp) / name)
            compile_s = time.perf_counter() - t0
            lib = onnxcc.load(Path(tmp) / name)
            peers = make_peers(path, args.threads, peer_names)
            print(f"{name}: compiled in {compile_s:.2f} s, {lib.num_versions} versions")
            for dims in SHAPES[name]:
                feeds = random_inputs(path, dims, seed=1)
                row = time_row(lambda f: list(lib.run(f).values()), peers, feeds, args.repeats,
                               clock=time.process_time if args.clock == "cpu" and args.threads == 1 else None)
                row.update(model=name, dims=dims, version=lib.last_version)
                rows.append(row)
                shape = ",".join(f"{k}={v}" for k, v in dims.items())
                errs = ", ".join(f"{n} {e:.1e}" for n, e in row["peer_max_abs_err"].items())
                print(f"  {shape:24s} {format_row(row, peer_names)}  (version {lib.last_version}; max err {errs})")
    for key, label in (("ratio", "onnxruntime"), ("ratio_best", "best peer")):
        by_model: dict[str, list[float]] = {}
        for r in rows:
            if key in r:
                by_model.setdefault(r["model"], []).append(r[key])
        if not by_model:
            continue
        for m, v in by_model.items():
            print(f"geomean onnxcc / {label} {m}: {geomean(v):.3f}")
        print(f"geomean onnxcc / {label} overall ({sum(map(len, by_model.values()))} shapes, "
              f"{args.threads} threads): {geomean(x for v in by_model.values() for x in v):.3f}")
    if args.json:
        args.json.write_text(json.dumps({"threads": args.threads, "peers": peer_names, "rows": rows,
                                         "clock": args.clock, "load": os.getloadavg(),
                                         "geomean_ort": geomean(r.get("ratio") for r in rows),
                                         "geomean_best": geomean(r.get("ratio_best") for r in rows)}, indent=2))


if __name__ == "__main__":
    main()
