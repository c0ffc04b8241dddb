"""The held-out table of the performance issue, rebuilt: onnxcc vs onnxruntime and OpenVINO in one run.

Models are built here, fresh (symbolic dims, seeded weights), the way the held-out benchmark
describes them, not taken from models/:

- `mlp`: x[batch, 512] -> Gemm 512x2048 -> Relu -> Gemm 2048x512 -> + x (residual); this
  row and the transformer's also give GFLOP/s against numpy's sgemm (ROOF_GFLOPS);
- `transformer`: the post-LN encoder layer (hidden 256, 4 heads, FFN 1024) that
  models/build.py writes, exported torch-style (the issue's row names exactly this layer);
- `gelu_tanh`, `gelu_erf`, `silu`, `mish`: an activation then LayerNormalization on
  [batch, seq, 768], written as exporters write them (tanh-GELU with Pow(x, 3); the exact
  GELU with Erf(x / sqrt(2)); SiLU as x * Sigmoid(x); Mish as x * Tanh(Softplus(x)), its
  opset-17 form). These are the memory-bound chains: each row
  also gives GB/s (one read of x, one write of y) and the share of the DRAM stream roof
  (ROOF_GBS) on working sets larger than the 32 MiB L3.

Each model is compiled once (one library for every shape) and timed with `peers.time_row`
(alternating rounds, medians) against every installed peer. One thread count per run, as
both runtimes fix their pool size at start-up; `--clock cpu` times one-thread rows by CPU time
(robust on a shared machine), more threads always by the wall clock.

    unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
    python benchmarks/heldout_table.py --threads 1 --clock cpu --json t1.json
    python benchmarks/heldout_table.py --threads 2 --models mlp,silu --json t2.json
    python benchmarks/heldout_table.py --threads 1 --clock cpu --models silu,gelu_tanh,mish --pool-ab

`--reuse-out` runs onnxcc into preallocated outputs. Without it each call returns its
output from the loader's output pool (runtime/out_pool.py), which reuses a block once the
previous call's result is gone, as onnxruntime's arena does; `ONNXCC_OUT_POOL_MB=0` shows the
loader before the pool: an output past glibc's mmap threshold (32 MiB; the [16, 1024, 768]
chains' 48 MiB) was fresh pages the OS cleared on first touch (a third of the time of those
rows, perf: clear_page_erms).

    ONNXCC_OUT_POOL_MB=0 python benchmarks/heldout_table.py --threads 1 --clock cpu --models silu_noln

Measured (December 2026, 1 thread, CPU clock, `--pool-ab`, load 9-10 on the 2 cores): the
pool took the [16|32, 1024, 768] chain rows to 0.59-0.79x of their time without it (SiLU + LN
[32, 1024, 768] 24.8 -> 17.0 ms, 0.84 -> 0.58x onnxruntime, 8.1 -> 11.8 GB/s). What is left
there is compute, not memory: one core runs this SiLU + LN at ~500 ns per row of 768 in cache
and out of it alike, and a hand-written AVX-512 version of the same algorithm at ~400 ns
(15 GB/s), no faster with its result written by non-temporal stores from a stack row; one core
streams y = a * x at 17-18 GB/s with plain stores and 27-28 GB/s with non-temporal ones. So
streaming stores pay only once two cores run the compute (then the write-allocate reads of
plain stores are a third of the traffic); one thread's lever is the activation's instruction
count (codegen/llvm/vmath.py), which is also why SiLU alone is 1.2-1.5x onnxruntime (its
fused QuickGelu: a rational logistic, about half our ops per element).

After vmath's cheaper sigmoid (shifter-rounded exp(-|x|), 17 vector ops and a division per 16
floats instead of 22; same night, 1 thread, CPU clock, both libraries and onnxruntime alternated
in one process, medians of 15): SiLU alone [4,512|16,1024|32,1024, 768] 0.78-0.82x its time
before (1.25-1.44 -> 1.02-1.19x onnxruntime), Sigmoid alone (`sigmoid_noln`) 0.78-0.83x, SiLU +
LN 0.84-0.88x (0.55-0.61 -> 0.48-0.54x onnxruntime).

After branch ewloop (sigmoid as c / (c + c exp(-x)); tanh, tanh_softplus and erf on the shifter
exp; 1 + tanh(u) as 2 sigmoid(2u); the variance's row sum on 4 accumulators), `--before` main's
sources, same run, 1 thread, CPU clock, medians, load 4-5 on the 2 cores; after / before, then
onnxcc / onnxruntime after:

    silu_noln       0.77-0.97   0.87-1.19     (at parity: onnxruntime's rational logistic is
    sigmoid_noln    0.91-0.94   0.68-1.03      about as many vector ops as ours)
    silu            0.66-0.90   0.35-0.50
    gelu_tanh_noln  0.54-0.59   0.11-0.25
    gelu_tanh       0.61-0.75   0.16-0.28
    mish_noln       0.75-0.79   0.03-0.04
    mish            0.66-0.82   0.04-0.06
    gelu_erf_noln   0.72-0.85   1.04-1.25     (erf's degree-11 erfc polynomial is what is left)
    gelu_erf        0.72-0.88   0.61-0.69     (these two rows: a later run, load 2-4, after
                                                 erf dropped its x**2 rounding correction)

After branch erfgelu (erf f32's fits weighted by the error they make in erf: Q of degree 7
for 11, P and the exp of degree 5; erf(x / sqrt 2) without the vdivps, vmath `erf_div`; the
GELU's x * (1 + erf) * 0.5 as one fma, codegen/llvm/gelu_forms.py: about 40 vector ops a
vector for 49 and a division), `--before` main's sources, same run, 1 thread, CPU clock,
repeats 60, load 1-2:

    gelu_erf_noln   0.73-0.82   0.80-0.95
    gelu_erf        0.81-0.90   0.50-0.67

After branch erfln (the f32 exact GELU as one vmath function, x Phi(x) with Phi(-|x|) =
exp(-x**2 / 2) R(|x|) / 2, R a degree 4/5 rational: 31 arithmetic vector ops per 16 floats,
a division among them, for 37 and 6 constant reloads, and more accurate than the graph's
1 + erf where that cancels), `--before`
main's sources, same run, 1 thread, CPU clock, repeats 60, load 11 on the 2 cores:

    gelu_erf        0.82-0.96   0.44-0.57   (geomean 0.479; the 0.57 at [1, 128], noisiest)
    gelu_erf_noln   0.79-0.85   0.68-0.81

A software prefetch of the next row before a staged row's first pass (a line at a time;
load 7-8): of the input and, for writing, the output, 1.01-1.45x the time without it on
gelu_erf and 1.00-1.62x on silu (the [4, 512] and larger rows all 1.38 or more); of the
input alone, 0.87-1.29x (noise). Dropped.

After branch gemmmlp (dense layers, kernel/schedule.py `GemmPlan.dense`: tiles row block by
row block so A's 12 rows stay in L1 while the prepacked B panels stream; one k block up to
K = 512, the bias / ReLU / residual in registers; A rows 4 KiB apart copied per task to a
stride that does not alias in L1; tasks of one row panel, codegen/cpu/gemm_dense.py), after /
before against main's sources in the same rounds, 1 thread, CPU clock, medians, load 6-11 on
the 2 cores (six runs, the last two against main after the padfuse / erfln merges): MLP
batch 1 / 16 / 128 / 512 0.75-0.91 / 0.64-0.84 / 0.82-0.97 / 0.79-0.95, onnxcc / onnxruntime
0.55-0.93 at batch 16-512 (main: 1.03-1.17); transformer 0.89-0.99 in before / after runs
without the peers (0.77-1.07 in this table's rows; seq 128 batch 4 0.86-0.99x onnxruntime). The x[M, 512] @ W[512, 2048]
and x[M, 2048] @ W[2048, 512] GEMMs alone at M = 128 / 512: 0.87-0.92x their time, 95-105
GFLOP/s where numpy's sgemm and onnxruntime ran 85-105 in the same rounds. `--threads 2` was
not measurable that night: every runtime ran 4-6x slower on 2 threads than on 1.

GB/s at 1 thread, activations alone: SiLU / Sigmoid 16-27 (31-54% of ROOF_GBS), tanh-GELU 13-15,
Mish 15-18, Erf-GELU 7-10; with LN 7-18. Two
threads (`--threads 2`, wall clock) were noise on that loaded machine (the [16, 1024] rows
slower than one thread); onnxcc_parallel_for deals chunks out dynamically, so a loaded core
does not hold the other back.

The roof (benchmarks/dram_stream.py, 100 MB arrays, quiet machine, load 0.7): y = x streams
22-30 GB/s at 2 threads with plain stores (read + write counted, as here) and 36-46 GB/s with
non-temporal ones; one thread 22-26 and 33-37. Plain stores read each output line first, so
60% of ROOF_GBS (30 GB/s) is out of reach of a chain whose output misses the caches unless it
streams: branch ntstore (codegen/cpu/streaming_stores.py) stages a row-staged chain's rows on
the stack and copies them out non-temporally where the output is 16 MiB or more. `--before`
main's sources, 1 thread, CPU clock, medians of 31 alternated rounds, load 9-11, after / before:
[16|32, 1024] rows 0.96 / 0.99 (silu), 0.94 / 0.96 (gelu_tanh), 0.96 / 0.98 (gelu_erf), 0.91 /
0.92 (mish); [1, 128] and [4, 512] 0.99-1.04 (plain stores there: a threshold of 1 MiB took
[4, 512] to 1.06-1.13x at 2 threads). Two threads were not measurable that hour (load 8-10:
4-7 GB/s for every library).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
ROOT = Path(__file__).resolve().parents[1]
WIDTH = 768
ROOF_GBS = 50.0
"""the DRAM stream rate this machine measured (45-55 GB/s)"""
ROOF_GFLOPS = {1: 235.0, 2: 459.0}
"""numpy's OpenBLAS sgemm on this machine at 1 and 2 threads (the issue's roof)"""
CHAIN_SHAPES = [{"batch": b, "seq": s} for b, s in ((1, 128), (4, 512), (16, 1024), (32, 1024))]
SHAPES = {
    "mlp": [{"batch": b} for b in (1, 16, 128, 512)],
    "transformer": [{"batch": b, "seq": s} for b in (1, 4) for s in (17, 128, 512)],
    "gelu_tanh": CHAIN_SHAPES,
    "gelu_erf": CHAIN_SHAPES,
    "silu": CHAIN_SHAPES,
    "mish": CHAIN_SHAPES,
    # the activations alone (no LayerNormalization): the elementwise chains
    "gelu_tanh_noln": CHAIN_SHAPES,
    "gelu_erf_noln": CHAIN_SHAPES,
    "silu_noln": CHAIN_SHAPES,
    "mish_noln": CHAIN_SHAPES,
    "sigmoid_noln": CHAIN_SHAPES,  # the logistic alone (vmath's sigmoid, no multiply)
}


def _c(name: str, v) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(v, np.float32), name)


def mlp() -> onnx.ModelProto:
    rng = np.random.default_rng(11)
    d, h = 512, 2048
    inits = [_c("w1", rng.standard_normal((d, h)) / math.sqrt(d)), _c("b1", 0.1 * rng.standard_normal(h)),
             _c("w2", rng.standard_normal((h, d)) / math.sqrt(h)), _c("b2", 0.1 * rng.standard_normal(d))]
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"]),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Gemm", ["r", "w2", "b2"], ["o"]),
             helper.make_node("Add", ["o", "x"], ["y"])]
    g = helper.make_graph(nodes, "mlp_res", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", d])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", d])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def chain(act: str, ln: bool = True) -> onnx.ModelProto:
    """act(x) then LayerNormalization over the last axis, on [batch, seq, WIDTH] (without
    `ln`: the activation alone, the elementwise chain)."""
    rng = np.random.default_rng(7)
    n = helper.make_node
    inits = [_c("gamma", 1.0 + 0.1 * rng.standard_normal(WIDTH)), _c("beta", 0.1 * rng.standard_normal(WIDTH))]
    if act == "gelu_tanh":
        inits += [_c("three", 3.0), _c("k", 0.044715), _c("s", math.sqrt(2.0 / math.pi)), _c("one", 1.0),
                  _c("half", 0.5)]
        nodes = [n("Pow", ["x", "three"], ["x3"]), n("Mul", ["x3", "k"], ["kx3"]), n("Add", ["x", "kx3"], ["in"]),
                 n("Mul", ["in", "s"], ["arg"]), n("Tanh", ["arg"], ["t"]), n("Add", ["t", "one"], ["t1"]),
                 n("Mul", ["x", "t1"], ["xt"]), n("Mul", ["xt", "half"], ["a"])]
    elif act == "gelu_erf":  # the exact GELU as torch exports it: x * 0.5 * (1 + erf(x / sqrt(2)))
        inits += [_c("sqrt2", math.sqrt(2.0)), _c("one", 1.0), _c("half", 0.5)]
        nodes = [n("Div", ["x", "sqrt2"], ["xs"]), n("Erf", ["xs"], ["e"]), n("Add", ["e", "one"], ["e1"]),
                 n("Mul", ["x", "e1"], ["xe"]), n("Mul", ["xe", "half"], ["a"])]
    elif act == "silu":
        nodes = [n("Sigmoid", ["x"], ["sg"]), n("Mul", ["x", "sg"], ["a"])]
    elif act == "sigmoid":
        nodes = [n("Sigmoid", ["x"], ["a"])]
    elif act == "mish":
        nodes = [n("Softplus", ["x"], ["sp"]), n("Tanh", ["sp"], ["t"]), n("Mul", ["x", "t"], ["a"])]
    else:
        raise ValueError(act)
    if ln:
        nodes.append(n("LayerNormalization", ["a", "gamma", "beta"], ["y"], axis=-1, epsilon=1e-5))
    else:
        nodes[-1].output[0] = "y"
        inits = [t for t in inits if t.name not in ("gamma", "beta")]
    shape = ["batch", "seq", WIDTH]
    g = helper.make_graph(nodes, f"{act}_layernorm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def flops(name: str, dims: dict) -> float | None:
    """Multiply-adds x 2 of one call (the GEMMs and attention products; elementwise work
    not counted), for GFLOP/s against the sgemm roof."""
    if name == "mlp":
        return 2.0 * dims["batch"] * (512 * 2048 * 2)
    if name == "transformer":
        tokens, seq, h = dims["batch"] * dims["seq"], dims["seq"], 256
        return 2.0 * tokens * (4 * h * h + 2 * h * 1024 + 2 * seq * h)
    return None


def build(name: str, path: Path) -> Path:
    if name == "transformer":
        return ROOT / "models" / "transformer.onnx"
    if name == "mlp":
        onnx.save(mlp(), path)
    else:
        act, ln = (name[:-5], False) if name.endswith("_noln") else (name, True)
        onnx.save(chain(act, ln), path)
    return path


def _compile_before(src: Path, model: Path, out: Path):
    """`model` compiled by the onnxcc sources in `src` (a subprocess, so this process keeps
    its own), loaded by this one's loader."""
    import subprocess

    import onnxcc

    env = dict(os.environ, PYTHONPATH=str(src.resolve()))
    subprocess.run([sys.executable, "-c", "import sys, onnxcc; onnxcc.compile(sys.argv[1], sys.argv[2])",
                    str(model), str(out)], env=env, check=True)
    return onnxcc.load(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--models", default=",".join(m for m in SHAPES if not m.endswith("_noln")),
                    help=f"comma list of {', '.join(SHAPES)}")
    ap.add_argument("--repeats", type=int, default=24)
    ap.add_argument("--budget", type=float, default=2.0, help="seconds per row, roughly")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    ap.add_argument("--peers", default="auto", help="comma list of ort,openvino (auto: OpenVINO if installed)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--reuse-out", action="store_true",
                    help="run onnxcc into preallocated outputs (lib.run(..., out=)), as a C caller or an "
                         "arena would: a fresh output past glibc's mmap threshold (32 MiB) is new pages "
                         "every call, and the kernel's first-touch page clearing then costs about as much "
                         "as the chain itself (onnxruntime's arena reuses its buffers)")
    ap.add_argument("--before", type=Path, metavar="SRC",
                    help="also compile each model with the onnxcc sources in SRC (another checkout's src/, "
                         "in a subprocess) and time that library in the same rounds: before / after "
                         "without the machine's drift between runs (e.g. `git worktree add` of main)")
    ap.add_argument("--pool-ab", action="store_true",
                    help="also time onnxcc with the output pool off (load(out_pool_mb=0)), alternating in "
                         "the same rounds: the pool's effect without the machine's drift between runs")
    args = ap.parse_args()
    os.environ["ONNXCC_NUM_THREADS"] = str(args.threads)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # numpy only makes inputs here
    from peers import available_peers, format_row, geomean, make_peers, time_row

    import onnxcc
    from onnxcc.testing import random_inputs

    peer_names = available_peers(args.peers)
    cpu_clock = args.clock == "cpu" and args.threads == 1
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            path = build(name, Path(tmp) / f"{name}.onnx")
            t0 = time.perf_counter()
            onnxcc.compile(path, Path(tmp) / name)
            compile_s = time.perf_counter() - t0
            lib = onnxcc.load(Path(tmp) / name)
            peers = make_peers(path, args.threads, peer_names)
            if args.before:  # the same model compiled by other sources, timed in the same rounds
                lib_before = _compile_before(args.before, path, Path(tmp) / f"{name}_before")
                peers["before"] = lambda f, lib_before=lib_before: list(lib_before.run(f).values())
            if args.pool_ab:  # the same library without the output pool, timed in the same rounds
                lib_off = onnxcc.load(Path(tmp) / name, out_pool_mb=0)
                peers["nopool"] = lambda f, lib_off=lib_off: list(lib_off.run(f).values())
            print(f"{name}: compiled in {compile_s:.2f} s, {lib.num_versions} versions", flush=True)
            for dims in SHAPES[name]:
                feeds = random_inputs(path, dims, seed=1)
                outs = ({k: np.empty_like(v) for k, v in lib.run(feeds).items()} if args.reuse_out else None)
                row = time_row(lambda f: list(lib.run(f, out=outs).values()), peers, feeds, args.repeats, args.budget,
                               clock=time.process_time if cpu_clock else None)
                if args.before:  # a row against the peers as without it, plus after / before
                    row["before_ratio"] = row["onnxcc_ms"] / row["before_ms"]
                    if peer_names:
                        best = min(peer_names, key=lambda n: row[f"{n}_ms"])
                        row["best_peer"], row["ratio_best"] = best, row["onnxcc_ms"] / row[f"{best}_ms"]
                if args.pool_ab:  # a row against the peers as without it, plus the pool's own ratio
                    row["pool_ratio"] = row["onnxcc_ms"] / row["nopool_ms"]
                    row["peer_max_abs_err"].pop("nopool")
                    if peer_names:
                        best = min(peer_names, key=lambda n: row[f"{n}_ms"])
                        row["best_peer"], row["ratio_best"] = best, row["onnxcc_ms"] / row[f"{best}_ms"]
                row.update(model=name, dims=dims, threads=args.threads, clock="cpu" if cpu_clock else "wall",
                           reuse_out=args.reuse_out, out_pool_mb=lib.out_pool.max_bytes / 2**20)
                extra = ""
                work = flops(name, dims)
                if work is not None:
                    row["onnxcc_gflops"] = work / (row["onnxcc_ms"] / 1e3) / 1e9
                    roof = ROOF_GFLOPS.get(args.threads)
                    if roof:
                        row["roof_share"] = row["onnxcc_gflops"] / roof
                    extra = f"  {row['onnxcc_gflops']:6.1f} GFLOP/s" + (f" ({100 * row['roof_share']:.0f}% of sgemm)"
                                                                        if roof else "")
                else:  # memory-bound: bytes moved / time
                    gb = 2 * feeds["x"].nbytes / 1e9
                    row["mbytes"] = gb * 1e3
                    row["onnxcc_gbs"] = gb / (row["onnxcc_ms"] / 1e3)
                    row["roof_share"] = row["onnxcc_gbs"] / ROOF_GBS
                    extra = f"  {row['onnxcc_gbs']:5.1f} GB/s ({100 * row['roof_share']:.0f}% of roof)"
                rows.append(row)
                shape = ",".join(f"{k}={v}" for k, v in dims.items())
                errs = ", ".join(f"{n} {e:.1e}" for n, e in row["peer_max_abs_err"].items())
                if args.before:
                    extra += f"  before {row['before_ms']:9.3f} ms (after / before {row['before_ratio']:.3f})"
                if args.pool_ab:
                    extra += f"  no pool {row['nopool_ms']:9.3f} ms (pool / no pool {row['pool_ratio']:.3f})"
                print(f"  {shape:18s} {format_row(row, peer_names)}{extra}  (err {errs})", flush=True)
    summary = {}
    for key, label in (("ratio", "onnxruntime"), ("ratio_best", "best peer")):
        by_model: dict[str, list[float]] = {}
        for r in rows:
            if key in r:
                by_model.setdefault(r["model"], []).append(r[key])
        for m, v in by_model.items():
            summary.setdefault(m, {})[key] = {"geomean": geomean(v), "min": min(v), "max": max(v)}
            print(f"onnxcc / {label:11s} {m:12s} geomean {geomean(v):.3f}  ({min(v):.2f}-{max(v):.2f})")
    if args.json:
        args.json.write_text(json.dumps({"threads": args.threads, "clock": args.clock, "peers": peer_names,
                                         "load": os.getloadavg(), "rows": rows, "models": summary}, indent=1))


if __name__ == "__main__":
    main()
