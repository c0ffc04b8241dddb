"""Core cycles per 16-float vector of the held-out activation + LayerNorm chains, by the
minimum over many calls: what one thread's code costs, readable on a loaded machine.

heldout_table.py times the chains end to end (medians, with the peers); on a shared
machine its rows move by 20-30% from run to run. This script times only the library call:
a C harness (built here with the system compiler) loads libNAME.so, calls NAME_run on
x[1, rows, 768] into a preallocated, 64-byte-aligned output (or, with --misaligned, one 4
bytes past a line: the plain-store path of codegen/cpu/streaming_stores.py) `reps` times,
and reports the fastest and the median call as core cycles per vector of 16 floats (the
core clock measured in the same process by a chain of dependent integer adds). A call
another process preempts only raises the median; the minimum is the code's own cost as
long as the rows stay in this core's caches (rows of 128: 384 KiB in and out). Rows past
the L3 (16384 and up) include DRAM and so every other process's memory traffic. With
--threads 2 a call's wall time is counted (cycles of one core's clock per vector the pool
finishes), and its minimum needs both cores free for a whole call.

    python benchmarks/chain_cycles.py [--models silu,gelu_tanh,gelu_erf,mish] [--rows 128,2048]
        [--reps 300] [--before OTHER/src] [--rounds 3] [--threads 1]

With --before, each model is also compiled by the sources in OTHER/src (a subprocess) and
the two libraries alternate, round by round. Measured (December 2026, this 2-core AMD EPYC
(Zen 4) VM at 3.69 GHz, 1 thread, load 6.5-7.9, `--before` main 0deede3's sources, 3 rounds
of 300 calls), minimum cycles per vector before -> after branch dram2 (tanh-GELU as
x sigmoid(2u), vmath's scaled sums on the add pipe), rows of 128 (2048 within 0.3):

    silu       21.44 -> 20.68  (0.965; 22.8 GB/s)
    gelu_tanh  30.03 -> 25.07  (0.835; 18.8 GB/s)
    gelu_erf   34.60 -> 34.01  (0.983; 13.9 GB/s)
    mish       24.51 -> 23.96  (0.978; 19.7 GB/s)

20 GB/s (read + write counted, as heldout_table does) is 23.6 cycles a vector at 3.69 GHz.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))

HARNESS = r"""
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <dlfcn.h>
#include <math.h>
#include <time.h>
typedef struct { int32_t type, id; } Dev;
typedef struct { uint8_t code, bits; uint16_t lanes; } DType;
typedef struct { void *data; Dev dev; int32_t ndim; DType dtype; int64_t *shape, *strides; uint64_t off; } Tensor;
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}
static double ghz(void) {  /* 10 dependent adds an iteration, one a cycle; short windows, the */
  double best = 1e30;       /* fastest: a window another process shares only runs slower */
  for (int r = 0; r < 400; r++) {
    long x = 0; double t = now();
    for (long i = 0; i < 100000; i++)
      __asm__ volatile("add $1,%0\n add $1,%0\n add $1,%0\n add $1,%0\n add $1,%0\n"
                       "add $1,%0\n add $1,%0\n add $1,%0\n add $1,%0\n add $1,%0" : "+r"(x));
    t = now() - t; if (t < best) best = t;
  }
  return 1e6 / best / 1e9;
}
int main(int argc, char **argv) {  /* LIB NAME ROWS REPS MISALIGNED */
  void *h = dlopen(argv[1], RTLD_NOW);
  if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
  char sym[256]; snprintf(sym, sizeof sym, "%s_run", argv[2]);
  int (*run)(const Tensor *, int, Tensor *, int) = (int (*)(const Tensor *, int, Tensor *, int))dlsym(h, sym);
  long rows = atol(argv[3]); int reps = atoi(argv[4]), mis = atoi(argv[5]);
  size_t n = (size_t)rows * 768;
  float *x = aligned_alloc(64, n * 4), *y0 = aligned_alloc(64, n * 4 + 64), *y = y0 + mis;
  for (size_t i = 0; i < n; i++) { x[i] = 3.0f * sinf(0.37f * (float)i); y[i] = 0.0f; }
  int64_t shape[3] = {1, rows, 768};
  Tensor in = {x, {1, 0}, 3, {2, 32, 1}, shape, 0, 0}, out = {y, {1, 0}, 3, {2, 32, 1}, shape, 0, 0};
  double *t = malloc(sizeof(double) * reps), f = ghz();
  for (int r = 0; r < reps; r++) {
    double a = now(); int rc = run(&in, 1, &out, 1); t[r] = now() - a;
    if (rc) { fprintf(stderr, "%s returned %d\n", sym, rc); return 1; }
  }
  qsort(t, reps, sizeof(double), cmp);
  double per = 1e9 * f / (rows * 48.0);
  printf("%.2f %.2f %.2f\n", t[0] * per, t[reps / 2] * per, f);
  return 0;
}
"""


def _compile(src: Path | None, model: Path, out: Path) -> Path:
    """`model` compiled by the onnxcc sources in `src` (this process's when None), in a
    subprocess either way; the library's path."""
    env = dict(os.environ, **({"PYTHONPATH": str(src.resolve())} if src else {}))
    subprocess.run([sys.executable, "-c", "import sys, onnxcc; onnxcc.compile(sys.argv[1], sys.argv[2])",
                    str(model), str(out)], env=env, check=True)
    return out / f"lib{out.name}.so"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="silu,gelu_tanh,gelu_erf,mish")
    ap.add_argument("--rows", default="128,2048", help="comma list of row counts (x is [1, rows, 768])")
    ap.add_argument("--reps", type=int, default=300, help="calls per row count and round (fewer past 2048 rows)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--misaligned", action="store_true", help="an output 4 bytes past a line (plain stores)")
    ap.add_argument("--before", type=Path, metavar="SRC", help="also time the libraries OTHER/src compiles")
    args = ap.parse_args()
    from heldout_table import chain

    env = dict(os.environ, ONNXCC_NUM_THREADS=str(args.threads))
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        (tmp / "harness.c").write_text(HARNESS)
        subprocess.run(["cc", "-O2", str(tmp / "harness.c"), "-o", str(tmp / "harness"), "-ldl", "-lm"], check=True)
        for name in args.models.split(","):
            model = tmp / f"{name}.onnx"
            onnx.save(chain(name), model)
            libs = {"after": _compile(None, model, tmp / "after" / name)}
            if args.before:
                libs["before"] = _compile(args.before, model, tmp / "before" / name)
            for rows in (int(r) for r in args.rows.split(",")):
                clock: list[float] = []
                reps = args.reps if rows <= 2048 else max(5, args.reps * 2048 // rows)
                best: dict[str, list[float]] = {k: [] for k in libs}
                for _ in range(args.rounds):
                    for label, lib in libs.items():
                        res = subprocess.run([str(tmp / "harness"), str(lib), name, str(rows), str(reps),
                                              str(int(args.misaligned))], env=env, check=True, capture_output=True,
                                             text=True).stdout.split()
                        best[label].append(float(res[0]))
                        clock.append(float(res[2]))
                text = "  ".join(f"{k} {min(v):6.2f}" for k, v in best.items())
                ratio = f"  after / before {min(best['after']) / min(best['before']):.3f}" if args.before else ""
                print(f"{name:10s} rows {rows:6d}: min cycles a vector  {text}{ratio}"
                      f"  ({128 / (min(best['after']) / max(clock)):.1f} GB/s after at {max(clock):.2f} GHz)",
                      flush=True)
    print("load", os.getloadavg())


if __name__ == "__main__":
    main()
