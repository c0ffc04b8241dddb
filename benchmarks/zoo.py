"""Latency of onnxcc vs onnxruntime on the model zoo (tests/zoo): models nobody here wrote.

Each zoo model that tests/zoo/expected.json marks "pass" is compiled once with the default
flags (one library serves its three dim settings), checked against onnxruntime at each
setting (the zoo's tolerances), then timed side by side with onnxruntime in the same process
(`timing.bench_many`: they alternate in rounds, medians), and with OpenVINO where it is
installed (`peers.py`; f32). Per row: the medians, the ratio onnxcc / onnxruntime (lower is
better), the ratio onnxcc / the fastest peer, and the achieved GFLOP/s from onnxcc's cost
model (`passes.bucket_choice.flops_polynomial`: 2 per multiply-add, 1 per elementwise op)
against the machine's sgemm roof. Per model the geomean ratio and the compile seconds;
overall the geomeans (against onnxruntime and against the best peer) and the rows above 1.25x.

    python benchmarks/zoo.py [--threads N] [--repeats R] [--json out.json] [NAME ...]
    python benchmarks/zoo.py --list          # the models it would run

Unset OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE in the command when comparing with numpy-backed
figures; they do not affect the two runtimes measured here.
"""

from __future__ import annotations

import argparse
import json
import os
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
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="cpu: time calls by the process's CPU time (1-thread runs on a shared machine)")
    ap.add_argument("--peers", default="auto", help="comma list of ort,openvino (auto: OpenVINO if installed)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args()
    os.environ["ONNXCC_NUM_THREADS"] = str(args.threads)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # numpy only builds inputs here

    import numpy as np
    from peers import available_peers, format_row, geomean, make_peers, time_row
    from test_zoo import ATOL, EXPECTED, MANIFEST, RTOL, make_inputs, reference

    import onnxcc

    entries = [e for e in MANIFEST if (e["name"] in args.names if args.names else EXPECTED[e["name"]] == "pass")]
    if args.list:
        print("\n".join(e["name"] for e in entries))
        return 0
    peer_names = available_peers(args.peers)
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
            # onnxruntime refuses a file with an oracle_opset as it is (see test_zoo.reference)
            peers = make_peers(path, args.threads, peer_names) if "oracle_opset" not in e else {}
            flops = _flops_fn(path)
            print(f"{e['name']}: compiled in {compile_s:.1f} s, {lib.num_versions} versions", flush=True)
            ratios, best_ratios = [], []
            for k, dims in enumerate(e["dims"]):
                feeds = make_inputs(e, dims, seed=k)
                ours, want = lib.run(feeds), reference(e, str(path), feeds)
                ok = all(np.allclose(ours[n], w, rtol=RTOL, atol=ATOL) for n, w in want.items())
                if not peers:
                    print(f"  {dims}: checked (ok={ok}); not timed: onnxruntime refuses the file", flush=True)
                    continue
                row = time_row(lambda f: list(lib.run(f).values()), peers, feeds, args.repeats, args.budget,
                               clock=time.process_time if args.clock == "cpu" else None)
                f = flops(dims)
                gflops = f / (row["onnxcc_ms"] / 1e3) / 1e9 if f else None
                ratios.append(row["ratio"])
                best_ratios.append(row["ratio_best"])
                row.update(model=e["name"], dims=dims, correct=bool(ok), gflop=f / 1e9 if f else None,
                           onnxcc_gflops=gflops, roof_fraction=gflops / roof if gflops and roof else None)
                rows.append(row)
                shape = ",".join(f"{k}={v}" for k, v in dims.items())
                g = f"{gflops:7.1f} GFLOP/s" if gflops else "      - GFLOP/s"
                print(f"  {shape:22s} {format_row(row, peer_names)}  {g}{'' if ok else '  WRONG'}", flush=True)
            models[e["name"]] = {"compile_s": compile_s, "versions": lib.num_versions,
                                 "geomean_ratio": geomean(ratios), "geomean_ratio_best": geomean(best_ratios)}
    overall = geomean(r["ratio"] for r in rows)
    overall_best = geomean(r["ratio_best"] for r in rows)
    slow = [r for r in rows if r["ratio"] > 1.25]
    slow_best = [r for r in rows if r["ratio_best"] > 1.25]
    model_geo = geomean(m.get("geomean_ratio") for m in models.values())
    print()
    for name, m in models.items():
        if m.get("geomean_ratio"):
            print(f"{name:32s} geomean {m['geomean_ratio']:6.3f}  vs best peer {m['geomean_ratio_best']:6.3f}  "
                  f"compile {m['compile_s']:6.1f} s")
    if overall is not None:
        print(f"geomean onnxcc / onnxruntime over {len(rows)} rows ({args.threads} threads): {overall:.3f}; "
              f"over model geomeans {model_geo:.3f}; rows above 1.25x: {len(slow)}")
        print(f"geomean onnxcc / best peer ({', '.join(peer_names)}): {overall_best:.3f}; "
              f"rows above 1.25x: {len(slow_best)}")
    wrong = [r for r in rows if not r["correct"]]
    if wrong:
        print(f"WRONG results in {len(wrong)} rows", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps({"threads": args.threads, "rows": rows, "models": models,
                                         "geomean_rows": overall, "geomean_models": model_geo,
                                         "above_1_25": len(slow), "peers": peer_names,
                                         "geomean_rows_best": overall_best,
                                         "above_1_25_best": len(slow_best)}, indent=2))
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
