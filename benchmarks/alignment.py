"""Does pointer alignment pay? The same compiled kernel called from C with 64-byte aligned
tensors and with tensors misaligned by 4 bytes (every input and output pointer), on an
elementwise chain at three sizes (L1-, L2-resident and memory-bound) and a GEMM.

A version specialised for aligned pointers could only win what the hardware gives for
aligned data to the very same instructions (onnxcc's kernels use element-aligned loads and
stores, which x86 runs at full speed when the address happens to be aligned), so this
measures that difference: if it is within noise, no alignment guard is worth its cost.

Each figure is the best of --repeat runs (each the best of 15 batches, timed in the calling
thread's CPU time so that time spent descheduled on a shared machine does not count),
aligned and misaligned runs alternating so that the machine's load drifts over both alike;
one thread (ONNXCC_NUM_THREADS=1). Misalignments of 0, 4, 32 and 64 bytes are run: 64 is
aligned again, so it shows how much of any difference is placement noise, not alignment.

    python benchmarks/alignment.py [--repeat 7] [--json out.json]

Measured on the development machine (AMD EPYC, AVX-512, December 2026, --repeat 5): the L1
chain 160 ns aligned vs 273 ns at +4 bytes (195 at +32, 160 at +64); L2 4506 vs 4681 ns;
memory 3.00 vs 2.75 ms (misaligned faster: placement); GEMM 312 vs 316 us. Only the
cache-resident call gains, and a version compiled for aligned pointers would run the same
instructions, so no alignment version is built (docs/ARCHITECTURE.md, "Strides and
aliasing").
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
from pathlib import Path

import onnx
from onnx import TensorProto, helper

import onnxcc

C_BENCH = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "NAME.h"
/* argv: misalign (bytes added to every pointer), iterations, then per input its dims
 * (rank taken from the header's signature), then per output its dims. */
#define NIN UPNAME_NUM_INPUTS
#define NOUT UPNAME_NUM_OUTPUTS
static int64_t numel(const int64_t *s, int r) { int64_t n = 1; for (int i = 0; i < r; i++) n *= s[i]; return n; }
int main(int argc, char **argv) {
  int mis = atoi(argv[1]), iters = atoi(argv[2]), a = 3;
  static int64_t shapes[NIN + NOUT][8];
  static int ranks[NIN + NOUT] = {RANKS};
  DLTensor ts[NIN + NOUT];
  memset(ts, 0, sizeof ts);
  for (int k = 0; k < NIN + NOUT; k++) {
    for (int d = 0; d < ranks[k]; d++) shapes[k][d] = atoll(argv[a++]);
    size_t bytes = (size_t)numel(shapes[k], ranks[k]) * 4;
    char *p;
    if (posix_memalign((void **)&p, 64, bytes + 64)) return 2;
    for (size_t i = 0; i < bytes / 4 + 16; i++) ((float *)p)[i] = (float)(i % 17) * 0.125f - 1.0f;
    ts[k].data = p + mis;
    ts[k].device.device_type = kDLCPU;
    ts[k].ndim = ranks[k];
    ts[k].shape = shapes[k];
    ts[k].dtype.code = kDLFloat; ts[k].dtype.bits = 32; ts[k].dtype.lanes = 1;
  }
  for (int i = 0; i < 3; i++)
    if (NAME_run(ts, NIN, ts + NIN, NOUT)) { printf("error %s\n", NAME_last_error()); return 1; }
  /* the calling thread's CPU time (one thread runs the kernels): time the process spends
   * descheduled on a shared machine is not counted; the best of 15 batches */
  double best = 1e300;
  for (int b = 0; b < 15; b++) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
    for (int i = 0; i < iters; i++) NAME_run(ts, NIN, ts + NIN, NOUT);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
    double ns = ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / iters;
    if (ns < best) best = ns;
  }
  printf("%.1f\n", best);
  return 0;
}
"""


def _model(nodes, inputs, outputs, name):
    g = helper.make_graph(nodes, name, inputs, outputs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def chain_model() -> onnx.ModelProto:
    """y = Relu(x * s + t) - x * 0.5: two streams in, one out, a few flops per element."""
    vi = helper.make_tensor_value_info
    half = helper.make_tensor("half", TensorProto.FLOAT, [], [0.5])
    return _model([helper.make_node("Mul", ["x", "s"], ["m"]), helper.make_node("Add", ["m", "t"], ["a"]),
                   helper.make_node("Relu", ["a"], ["r"]), helper.make_node("Constant", [], ["h"], value=half),
                   helper.make_node("Mul", ["x", "h"], ["xh"]), helper.make_node("Sub", ["r", "xh"], ["y"])],
                  [vi("x", TensorProto.FLOAT, ["N"]), vi("s", TensorProto.FLOAT, ["N"]),
                   vi("t", TensorProto.FLOAT, ["N"])], [vi("y", TensorProto.FLOAT, ["N"])], "chain")


def gemm_model() -> onnx.ModelProto:
    vi = helper.make_tensor_value_info
    return _model([helper.make_node("MatMul", ["a", "b"], ["c"])], [vi("a", TensorProto.FLOAT, ["M", "K"]),
                  vi("b", TensorProto.FLOAT, ["K", "N"])], [vi("c", TensorProto.FLOAT, ["M", "N"])], "mm")


def build(model, name: str, ranks: list[int], work: Path) -> Path:
    out = work / name
    onnxcc.compile(model, out, name=name)
    src = C_BENCH.replace("UPNAME", name.upper()).replace("NAME", name).replace("RANKS", ", ".join(map(str, ranks)))
    (out / "bench.c").write_text(src)
    exe = out / "bench"
    subprocess.run(["cc", "-O2", "-o", str(exe), str(out / "bench.c"), f"-I{out}", f"-L{out}", f"-l{name}",
                    f"-Wl,-rpath,{out}"], check=True)
    return exe


def timed(exe: Path, mis: int, iters: int, dims: list[int]) -> float:
    env = {**os.environ, "ONNXCC_NUM_THREADS": "1"}
    r = subprocess.run([str(exe), str(mis), str(iters), *map(str, dims)], capture_output=True, text=True,
                       env=env, check=True)
    return float(r.stdout.split()[0])


MISALIGN = (0, 4, 32, 64)  # bytes added to every pointer; 64 is aligned again (the noise floor)
CASES = [  # (label, model, dims per tensor, iterations)
    ("chain N=2048 (L1, 32 KiB)", "chain", [2048] * 4, 2000),
    ("chain N=32768 (L2, 512 KiB)", "chain", [32768] * 4, 200),
    ("chain N=4M (memory, 64 MiB)", "chain", [1 << 22] * 4, 2),
    ("gemm 256^3", "mm", [256, 256, 256, 256, 256, 256], 20),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    ap.add_argument("--repeat", type=int, default=7, help="alternating runs per case; the best of each is kept")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        exes = {"chain": build(chain_model(), "chain", [1, 1, 1, 1], Path(d)),
                "mm": build(gemm_model(), "mm", [2, 2, 2], Path(d))}
        for label, key, dims, iters in CASES:
            best = dict.fromkeys(MISALIGN, float("inf"))
            for _ in range(args.repeat):
                for mis in MISALIGN:
                    best[mis] = min(best[mis], timed(exes[key], mis, iters, dims))
            gain = (best[4] - best[0]) / best[4] * 100
            rows.append({"case": label, **{f"ns_misaligned_{m}": best[m] for m in MISALIGN},
                         "aligned_gain_pct": gain})
            print(f"{label:30s} " + "  ".join(f"+{m} B {best[m]:11.1f} ns" for m in MISALIGN)
                  + f"  aligned (0) faster than +4 by {gain:5.1f}%")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
