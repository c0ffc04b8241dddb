"""The runtimes onnxcc is measured against: onnxruntime always, OpenVINO where it is installed.

Each peer is made from a model path and a thread count and returns a callable that runs one
call on a feeds dict and returns the outputs as a list of arrays (in the model's output
order), so a benchmark can check it against onnxcc before timing it. A peer that cannot take
a model (not installed, refuses the file) is reported and left out of that model's rows; it
never stops the run.

OpenVINO is told to compute in f32: on this machine (AVX-512 BF16) its CPU plugin would
otherwise pick bf16, which is faster and less exact than what onnxcc and onnxruntime compute.

    pip install openvino      # optional: the benchmarks then add it as a peer
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

Runner = Callable[[dict], list]


def onnxruntime_peer(path: Path, threads: int) -> Runner:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return lambda feeds: sess.run(None, feeds)


def openvino_peer(path: Path, threads: int) -> Runner | None:
    """OpenVINO CPU infer requests for the model, or None if OpenVINO is absent or refuses it.

    The model is compiled once per set of input shapes, with those shapes made static (the
    way a shape-specialising runtime is used at its best; with dynamic dims its CPU plugin
    measured several times slower here). The first call at a new shape compiles; the
    benchmarks' check call and warm-up calls absorb that before anything is timed."""
    try:
        import openvino as ov
    except ImportError:
        return None
    config = {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "f32"}
    core = ov.Core()
    try:
        core.compile_model(core.read_model(str(path)), "CPU", config)
    except Exception as ex:  # a peer that refuses a model is reported, not fatal
        print(f"  openvino refuses {path.name}: {str(ex).splitlines()[0][:160]}", file=sys.stderr)
        return None
    requests: dict = {}

    def run(feeds: dict) -> list:
        key = tuple((k, v.shape) for k, v in feeds.items())
        if key not in requests:
            model = core.read_model(str(path))
            model.reshape({k: ov.PartialShape(list(v.shape)) for k, v in feeds.items()})
            compiled = core.compile_model(model, "CPU", config)
            requests[key] = (compiled.create_infer_request(), list(compiled.outputs))
        request, outputs = requests[key]
        res = request.infer(feeds)
        return [res[o] for o in outputs]

    return run


PEERS = {"ort": onnxruntime_peer, "openvino": openvino_peer}


def available_peers(requested: str) -> list[str]:
    """The peers named in a comma list ("auto": onnxruntime, and OpenVINO if it imports)."""
    if requested != "auto":
        names = [n for n in requested.split(",") if n]
        unknown = [n for n in names if n not in PEERS]
        if unknown:
            raise SystemExit(f"unknown peer(s) {unknown}; known: {sorted(PEERS)}")
        return names
    names = ["ort"]
    try:
        import openvino  # noqa: F401
        names.append("openvino")
    except ImportError:
        pass
    return names


def make_peers(path: Path, threads: int, names: list[str]) -> dict[str, Runner]:
    """name -> runner for each named peer that takes this model."""
    out = {}
    for name in names:
        run = PEERS[name](path, threads)
        if run is not None:
            out[name] = run
    return out


def time_row(run_cc: Runner, peers: dict[str, Runner], feeds: dict, repeats: int, budget_s: float = 2.0,
             clock=None) -> dict:
    """Time onnxcc and every peer on one feeds dict, side by side (`timing.bench_many`).

    The row holds each median in ms, `ratio` (onnxcc / onnxruntime, lower is better), and
    `best_peer` / `ratio_best` (onnxcc / the fastest peer). Each peer's largest absolute
    difference from onnxcc's outputs is kept too (`peer_max_abs_err`), so a peer that
    computes something else shows."""
    import time

    import numpy as np
    from timing import bench_many

    ours = [np.asarray(v) for v in run_cc(feeds)]
    errs = {}
    for name, run in peers.items():
        theirs = run(feeds)
        errs[name] = max((float(np.max(np.abs(o.astype(np.float64) - np.asarray(t, np.float64))))
                          if o.size and o.dtype.kind in "fiub" else 0.0) for o, t in zip(ours, theirs))
    fns = [lambda: run_cc(feeds)] + [lambda r=r: r(feeds) for r in peers.values()]
    med = bench_many(fns, repeats, budget_s, clock or time.perf_counter)
    row: dict = {"onnxcc_ms": med[0] * 1e3}
    for name, t in zip(peers, med[1:]):
        row[f"{name}_ms"] = t * 1e3
    if "ort" in peers:
        row["ratio"] = row["onnxcc_ms"] / row["ort_ms"]
    if peers:
        best = min(peers, key=lambda n: row[f"{n}_ms"])
        row["best_peer"], row["ratio_best"] = best, row["onnxcc_ms"] / row[f"{best}_ms"]
    row["peer_max_abs_err"] = errs
    return row


def format_row(row: dict, peers) -> str:
    parts = [f"onnxcc {row['onnxcc_ms']:9.3f} ms"]
    parts += [f"{n} {row[f'{n}_ms']:9.3f} ms" for n in peers if f"{n}_ms" in row]
    if "ratio" in row:
        parts.append(f"ratio {row['ratio']:6.3f}")
    if "ratio_best" in row and len(peers) > 1:
        parts.append(f"vs best ({row['best_peer']}) {row['ratio_best']:6.3f}")
    return "  ".join(parts)


def geomean(values) -> float | None:
    import math

    vals = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None
