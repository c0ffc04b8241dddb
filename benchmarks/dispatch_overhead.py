"""Dispatch overhead per call: a tiny model compiled with 1 version vs with 8 versions.

The call always lands on the LAST version (the generic one), so the 8-version library
evaluates 7 failing guards first: the worst case for the dispatcher. Timed through the C
ABI from a C program (no Python in the loop) with a compact input, a strided one (which
the dispatcher compacts into scratch first), a strided output (written compact, then
scattered into the caller's view), in place (y over x, which the Relu version is proved
safe for), and through the Python loader. Value guards: the same Relu times a scalar k,
compiled with 1 and with 7 value versions of k (`specialize_value`) before the generic
one, called with a compiled value (the first version: one value guard) and with another
value (every value guard fails, the generic version runs). Each C figure is the best of
--repeat runs.

    python benchmarks/dispatch_overhead.py [--repeat 7] [--instructions] [--json out.json]
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
 * a [4, 8] buffer: strides {8, 2}, compacted by the dispatcher), "strided_out" (y = every
 * other column: scattered by the dispatcher), "inplace" (y is x); "value_hit" / "value_miss"
 * (a second input k, a scalar, holding a compiled value / another one) */
int main(int argc, char **argv) {
  static float x[4 * 8], y[4 * 8];
  static float k_hit = 1.0f, k_miss = 0.5f;
  int64_t shape[2] = {4, 4}, strides[2] = {8, 2};
  const char *mode = argc > 1 ? argv[1] : "compact";
  DLTensor in[2] = {{0}}, out = {0};
  in[0].data = x; in[0].device.device_type = kDLCPU; in[0].ndim = 2; in[0].dtype.code = kDLFloat;
  in[0].dtype.bits = 32; in[0].dtype.lanes = 1; in[0].shape = shape;
  out = in[0]; out.data = y;
  in[1] = in[0]; in[1].ndim = 0; in[1].data = strcmp(mode, "value_miss") == 0 ? &k_miss : &k_hit;
  if (strcmp(mode, "strided") == 0) in[0].strides = strides;
  if (strcmp(mode, "strided_out") == 0) out.strides = strides;
  if (strcmp(mode, "inplace") == 0) out.data = x;
  const int n_in = TINY_NUM_INPUTS;
  const int n = argc > 2 ? atoi(argv[2]) : 2000000;
  for (int i = 0; i < 1000; i++) tiny_run(in, n_in, &out, 1);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int i = 0; i < n; i++) if (tiny_run(in, n_in, &out, 1)) { printf("error %s\n", tiny_last_error()); return 1; }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  printf("%.2f %d\n", ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / n, tiny_last_version());
  return 0;
}
"""

MODES = ("compact", "strided", "strided_out", "inplace")
VALUE_MODES = ("value_hit", "value_miss")


def tiny_model(scaled: bool = False) -> onnx.ModelProto:
    """y = Relu(x), or with `scaled` y = Relu(x) * k for a scalar input k."""
    vi = helper.make_tensor_value_info
    nodes = [helper.make_node("Relu", ["x"], ["r" if scaled else "y"])]
    inputs = [vi("x", TensorProto.FLOAT, ["N", 4])]
    if scaled:
        nodes.append(helper.make_node("Mul", ["r", "k"], ["y"]))
        inputs.append(vi("k", TensorProto.FLOAT, []))
    g = helper.make_graph(nodes, "tiny", inputs, [vi("y", TensorProto.FLOAT, ["N", 4])])
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


def build(out: Path, count: bool, scaled: bool = False, **options) -> Path:
    """The tiny model (`scaled`: times k) compiled into `out` with `options`, and the C bench
    linked to it."""
    onnxcc.compile(tiny_model(scaled), out, name="tiny", specialize_one=False, divisible=0,
                   parallel=False, **options, **({"cpu": "x86-64-v3"} if count else {}))
    (out / "bench.c").write_text(C_BENCH)
    exe = out / "bench"
    subprocess.run(["cc", "-O2", "-o", str(exe), str(out / "bench.c"), f"-I{out}", f"-L{out}", "-ltiny",
                    f"-Wl,-rpath,{out}"], check=True)
    return exe


def run_modes(exe: Path, modes: tuple[str, ...], repeat: int, count: bool, row: dict) -> None:
    """Fills row with c_ns_MODE (the best of `repeat` runs: the floor, not the noise of a
    shared machine), version_MODE (the version the call ran) and, with `count`,
    instructions_MODE."""
    for mode in modes:
        best, last = float("inf"), -1
        for _ in range(repeat):
            ns, v = subprocess.run([str(exe), mode], capture_output=True, text=True, check=True).stdout.split()
            best, last = min(best, float(ns)), int(v)
        row[f"c_ns_{mode}"] = best
        row[f"version_{mode}"] = last
        if count:
            row[f"instructions_{mode}"] = instructions_per_call(exe, mode)


def measure_values(n_values: int, work: Path, repeat: int, count: bool = False) -> dict:
    """Value guards: y = Relu(x) * k with n_values value versions of k before the generic one
    (0: the generic one alone, the baseline of this two-input model)."""
    values = [float(1 + j) for j in range(n_values)]  # 1.0 is the first: value_hit's k
    exe = build(work / f"k{n_values}", count, scaled=True,
                **({"specialize_value": {"k": [[v] for v in values]}} if values else {}))
    row: dict = {"value_versions": n_values}
    run_modes(exe, VALUE_MODES, repeat, count, row)
    return row


def measure(n_versions: int, work: Path, repeat: int, count: bool = False) -> dict:
    """ns per call from C in each mode, and us per call from Python. With `count`, the
    library is built for x86-64-v3 (valgrind decodes no AVX-512) and instructions per call
    are counted too."""
    out = work / f"v{n_versions}"
    spec = {"N": [8 + k for k in range(n_versions - 1)]} if n_versions > 1 else {}
    exe = build(out, count, specialize=spec, max_versions=n_versions)
    row: dict = {"versions": n_versions}
    run_modes(exe, MODES, repeat, count, row)
    row["last_version"] = row["version_compact"]
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
        value_rows = [measure_values(n, Path(d), args.repeat, args.instructions) for n in (0, 1, 7)]
    for r in rows:
        print(f"{r['versions']} version(s): {r['c_ns_compact']:.1f} ns/call from C (ran version {r['last_version']}), "
              f"strided input {r['c_ns_strided']:.1f} ns, strided output {r['c_ns_strided_out']:.1f} ns, "
              f"in place {r['c_ns_inplace']:.1f} ns; {r['python_us_per_call']:.1f} us/call from Python")
        if r.get("instructions_compact") is not None:
            print("    instructions per call: " + ", ".join(f"{m} {r[f'instructions_{m}']}" for m in MODES))
    for r in value_rows:
        print(f"{r['value_versions']} value version(s) of k + generic: a compiled value "
              f"{r['c_ns_value_hit']:.1f} ns/call (version {r['version_value_hit']}), another value "
              f"{r['c_ns_value_miss']:.1f} ns/call (version {r['version_value_miss']})")
        if r.get("instructions_value_hit") is not None:
            print("    instructions per call: " + ", ".join(f"{m} {r[f'instructions_{m}']}" for m in VALUE_MODES))
    extra = rows[1]["c_ns_compact"] - rows[0]["c_ns_compact"]
    print(f"7 extra guards cost {extra:.1f} ns per call ({extra / 7:.2f} ns per guard)")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "value_rows": value_rows, "extra_ns_for_7_guards": extra},
                                        indent=2))


if __name__ == "__main__":
    main()
