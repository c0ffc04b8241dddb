"""Latency of onnxcc vs onnxruntime on the model zoo (tests/zoo): models nobody here wrote.

Each zoo model that tests/zoo/expected.json marks "pass" is compiled once with the default
flags (one library serves its three dim settings), checked against onnxruntime at each
setting (the zoo's tolerances), then timed side by side with onnxruntime in the same process
(`compare_ort.bench_pair`: the two alternate in rounds, medians). Per row: both medians, the
ratio onnxcc / onnxruntime (lower is better), and the achieved GFLOP/s from onnxcc's cost
model (`passes.bucket_choice.flops_polynomial`: 2 per multiply-add, 1 per elementwise op)
against the machine's sgemm roof. Per model the geomean ratio and the compile seconds;
overall the geomean and the rows above 1.25x.

    python benchmarks/zoo.py [--threads N] [--repeats R] [--json out.json] [NAME ...]
    python benchmarks/zoo.py --list          # the models it would run

Unset OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE in the command when comparing with numpy-backed
figures; they do not affect the two runtimes measured here.
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

ROOT = Path(__file__).resolve().parents[1]
ZOO = ROOT / "tests" / "zoo"
sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(ZOO))

SGEMM_ROOF_GFLOPS = {1: 235.0, 2: 459.0}
"""numpy's OpenBLAS sgemm on this machine (1 and 2 cores), the roof the GFLOP/s are read against"""


def _flops_fn(model_path: Path):
    """dims -> FLOPs of one run, from the imported graph's cost polynomial (None if unknown)."""
    import sympy

    from onnxcc.compiler import load_module
    from onnxcc.passes.bucket_choice import flops_polynomial

    try:
        module = load_module(model_path)
        poly = flops_polynomial(module.functions["main"])
    except Exception:  # the figure is a by-product; a model we cannot cost still runs
        return lambda dims: None

    def at(dims: dict) -> float | None:
        subs = {s: sympy.Integer(dims[s.name]) for s in poly.free_symbols if s.name in dims}
        v = poly.xreplace(subs)
        return float(v) if v.is_number else None

    return at


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help="zoo model names (default: every passing model)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--budget", type=float, default=2.0, help="seconds of timing per row (at least 2 rounds)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args()
    os.environ["ONNXCC_NUM_THREADS"] = str(args.threads)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # numpy only builds inputs here

    import numpy as np
    import onnxruntime as ort
    from compare_ort import bench_pair
    from test_zoo import ATOL, EXPECTED, MANIFEST, RTOL, make_inputs, reference

    import onnxcc

    entries = [e for e in MANIFEST if (e["name"] in args.names if args.names else EXPECTED[e["name"]] == "pass")]
    if args.list:
        print("\n".join(e["name"] for e in entries))
        return 0
    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    roof = SGEMM_ROOF_GFLOPS.get(args.threads)
    rows, models = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for e in entries:
            path = ZOO / e["file"]
            t0 = time.perf_counter()
            try:
                onnxcc.compile(path, Path(tmp) / e["name"])
            except Exception as ex:  # report and go on: one model must not stop the run
                print(f"{e['name']}: not compiled: {str(ex).splitlines()[0][:200]}", flush=True)
                models[e["name"]] = {"error": str(ex).splitlines()[0][:200]}
                continue
            compile_s = time.perf_counter() - t0
            lib = onnxcc.load(Path(tmp) / e["name"])
            sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]) \
                if "oracle_opset" not in e else None
            flops = _flops_fn(path)
            print(f"{e['name']}: compiled in {compile_s:.1f} s, {lib.num_versions} versions", flush=True)
            ratios = []
            for k, dims in enumerate(e["dims"]):
                feeds = make_inputs(e, dims, seed=k)
                ours, want = lib.run(feeds), reference(e, str(path), feeds)
                ok = all(np.allclose(ours[n], w, rtol=RTOL, atol=ATOL) for n, w in want.items())
                if sess is None:  # onnxruntime refuses the file as it is (see test_zoo.reference)
                    print(f"  {dims}: checked (ok={ok}); not timed: onnxruntime refuses the file", flush=True)
                    continue
                t_cc, t_ort = bench_pair(lambda: lib.run(feeds), lambda: sess.run(None, feeds),
                                         args.repeats, args.budget)
                f = flops(dims)
                gflops = f / t_cc / 1e9 if f else None
                ratio = t_cc / t_ort
                ratios.append(ratio)
                rows.append({"model": e["name"], "dims": dims, "onnxcc_ms": t_cc * 1e3, "ort_ms": t_ort * 1e3,
                             "ratio": ratio, "correct": bool(ok), "gflop": f / 1e9 if f else None,
                             "onnxcc_gflops": gflops, "roof_fraction": gflops / roof if gflops and roof else None})
                shape = ",".join(f"{k}={v}" for k, v in dims.items())
                g = f"{gflops:7.1f} GFLOP/s" if gflops else "      - GFLOP/s"
                print(f"  {shape:22s} onnxcc {t_cc * 1e3:9.3f} ms  ort {t_ort * 1e3:9.3f} ms  "
                      f"ratio {ratio:6.3f}  {g}{'' if ok else '  WRONG'}", flush=True)
            geo = math.exp(statistics.fmean(math.log(x) for x in ratios)) if ratios else None
            models[e["name"]] = {"compile_s": compile_s, "versions": lib.num_versions, "geomean_ratio": geo}
    overall = math.exp(statistics.fmean(math.log(r["ratio"]) for r in rows)) if rows else None
    slow = [r for r in rows if r["ratio"] > 1.25]
    per_model = [m["geomean_ratio"] for m in models.values() if m.get("geomean_ratio")]
    model_geo = math.exp(statistics.fmean(math.log(x) for x in per_model)) if per_model else None
    print()
    for name, m in models.items():
        if m.get("geomean_ratio"):
            print(f"{name:32s} geomean {m['geomean_ratio']:6.3f}  compile {m['compile_s']:6.1f} s")
    if overall is not None:
        print(f"geomean ratio over {len(rows)} rows ({len(per_model)} models, {args.threads} threads): "
              f"{overall:.3f}; over model geomeans {model_geo:.3f}; rows above 1.25x: {len(slow)}")
    wrong = [r for r in rows if not r["correct"]]
    if wrong:
        print(f"WRONG results in {len(wrong)} rows", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps({"threads": args.threads, "rows": rows, "models": models,
                                         "geomean_rows": overall, "geomean_models": model_geo,
                                         "above_1_25": len(slow)}, indent=2))
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
