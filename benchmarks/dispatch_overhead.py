"""Dispatch overhead per call: a tiny model compiled with 1 version vs with 8 versions.

The call always lands on the LAST version (the generic one), so the 8-version library
evaluates 7 failing guards first: the worst case for the dispatcher. Timed through the C
ABI from a C program (no Python in the loop) with a compact input, a strided one (which
the dispatcher compacts into scratch first) and in place (y over x, which the Relu version
is proved safe for), and through the Python loader. Each C figure is the best of --repeat
runs.

    python benchmarks/dispatch_overhead.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

import onnxcc

C_BENCH = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "tiny.h"
/* argv[1]: "compact" (x and y separate, strides NULL), "strided" (x = every other column of
 * a [4, 8] buffer: strides {8, 2}, compacted by the dispatcher), "inplace" (y is x) */
int main(int argc, char **argv) {
  static float x[4 * 8], y[4 * 4];
  int64_t shape[2] = {4, 4}, strides[2] = {8, 2};
  const char *mode = argc > 1 ? argv[1] : "compact";
  DLTensor in = {0}, out = {0};
  in.data = x; in.device.device_type = kDLCPU; in.ndim = 2; in.dtype.code = kDLFloat; in.dtype.bits = 32;
  in.dtype.lanes = 1; in.shape = shape;
  out = in; out.data = y;
  if (strcmp(mode, "strided") == 0) in.strides = strides;
  if (strcmp(mode, "inplace") == 0) out.data = x;
  const int n = argc > 2 ? atoi(argv[2]) : 2000000;
  for (int i = 0; i < 1000; i++) tiny_run(&in, 1, &out, 1);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int i = 0; i < n; i++) if (tiny_run(&in, 1, &out, 1)) { printf("error %s\n", tiny_last_error()); return 1; }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  printf("%.2f %d\n", ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / n, tiny_last_version());
  return 0;
}
"""

MODES = ("compact", "strided", "inplace")


def tiny_model() -> onnx.ModelProto:
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "tiny",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def instructions_per_call(exe: Path, mode: str) -> int | None:
    """Instructions one tiny_run takes (valgrind's callgrind, the difference of two loop
    counts): a figure a loaded machine does not blur. None without valgrind."""
    if shutil.which("valgrind") is None:
        return None

    def total(n: int) -> int:
        r = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", str(exe), mode, str(n)],
                           capture_output=True, text=True, env={**os.environ, "ONNXCC_NUM_THREADS": "1"})
        m = re.search(r"Collected : (\d+)", r.stderr)
        if r.returncode != 0 or m is None:
            raise RuntimeError(f"callgrind run failed: {r.stdout[-500:]} {r.stderr[-1000:]}")
        return int(m.group(1))

    return round((total(11000) - total(1000)) / 10000)


def measure(n_versions: int, work: Path, repeat: int, count: bool = False) -> dict:
    """ns per call from C in each mode (the best of `repeat` runs: the floor, not the noise of
    a shared machine), and us per call from Python. With `count`, the library is built for
    x86-64-v3 (valgrind decodes no AVX-512) and instructions per call are counted too."""
    out = work / f"v{n_versions}"
    spec = {"N": [8 + k for k in range(n_versions - 1)]} if n_versions > 1 else {}
    onnxcc.compile(tiny_model(), out, name="tiny", specialize=spec, specialize_one=False, divisible=0,
                   max_versions=n_versions, parallel=False, **({"cpu": "x86-64-v3"} if count else {}))
    (out / "bench.c").write_text(C_BENCH)
    exe = out / "bench"
    subprocess.run(["cc", "-O2", "-o", str(exe), str(out / "bench.c"), f"-I{out}", f"-L{out}", "-ltiny",
                    f"-Wl,-rpath,{out}"], check=True)
    row: dict = {"versions": n_versions}
    for mode in MODES:
        best, last = float("inf"), -1
        for _ in range(repeat):
            ns, v = subprocess.run([str(exe), mode], capture_output=True, text=True, check=True).stdout.split()
            best, last = min(best, float(ns)), int(v)
        row[f"c_ns_{mode}"] = best
        row["last_version"] = last
        if count:
            row[f"instructions_{mode}"] = instructions_per_call(exe, mode)
    model = onnxcc.load(out)
    x = np.ones((4, 4), np.float32)
    for _ in range(200):
        model.run({"x": x})
    n = 20000
    t0 = time.perf_counter()
    for _ in range(n):
        model.run({"x": x})
    row["python_us_per_call"] = round((time.perf_counter() - t0) / n * 1e6, 2)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path)
    ap.add_argument("--repeat", type=int, default=5, help="runs per figure; the best is reported")
    ap.add_argument("--instructions", action="store_true",
                    help="also count instructions per call under valgrind (library built for x86-64-v3)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        rows = [measure(1, Path(d), args.repeat, args.instructions),
                measure(8, Path(d), args.repeat, args.instructions)]
    for r in rows:
        print(f"{r['versions']} version(s): {r['c_ns_compact']:.1f} ns/call from C (ran version {r['last_version']}), "
              f"strided input {r['c_ns_strided']:.1f} ns, in place {r['c_ns_inplace']:.1f} ns; "
              f"{r['python_us_per_call']:.1f} us/call from Python")
        if r.get("instructions_compact") is not None:
            print(f"    instructions per call: compact {r['instructions_compact']}, strided "
                  f"{r['instructions_strided']}, in place {r['instructions_inplace']}")
    extra = rows[1]["c_ns_compact"] - rows[0]["c_ns_compact"]
    print(f"7 extra guards cost {extra:.1f} ns per call ({extra / 7:.2f} ns per guard)")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "extra_ns_for_7_guards": extra}, indent=2))


if __name__ == "__main__":
    main()
