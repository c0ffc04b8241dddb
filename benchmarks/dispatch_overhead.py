"""Dispatch overhead per call: a tiny model compiled with 1 version vs with 8 versions.

The call always lands on the LAST version (the generic one), so the 8-version library
evaluates 7 failing guards first: the worst case for the dispatcher. Timed through the C
ABI from a C program (no Python in the loop) and through the Python loader.

    python benchmarks/dispatch_overhead.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json
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
#include <time.h>
#include "tiny.h"
int main(void) {
  static float x[4 * 4], y[4 * 4];
  int64_t shape[2] = {4, 4};
  DLTensor in = {0}, out = {0};
  in.data = x; in.device.device_type = kDLCPU; in.ndim = 2; in.dtype.code = kDLFloat; in.dtype.bits = 32;
  in.dtype.lanes = 1; in.shape = shape;
  out = in; out.data = y;
  const int n = 2000000;
  for (int i = 0; i < 1000; i++) tiny_run(&in, 1, &out, 1);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int i = 0; i < n; i++) if (tiny_run(&in, 1, &out, 1)) { printf("error %s\n", tiny_last_error()); return 1; }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  printf("%.2f %d\n", ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / n, tiny_last_version());
  return 0;
}
"""


def tiny_model() -> onnx.ModelProto:
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "tiny",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def measure(n_versions: int, work: Path) -> dict:
    out = work / f"v{n_versions}"
    spec = {"N": [8 + k for k in range(n_versions - 1)]} if n_versions > 1 else {}
    onnxcc.compile(tiny_model(), out, name="tiny", specialize=spec, specialize_one=False, divisible=0,
                   max_versions=n_versions, parallel=False)
    (out / "bench.c").write_text(C_BENCH)
    exe = out / "bench"
    subprocess.run(["cc", "-O2", "-o", str(exe), str(out / "bench.c"), f"-I{out}", f"-L{out}", "-ltiny",
                    f"-Wl,-rpath,{out}"], check=True)
    ns_c, last = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()
    model = onnxcc.load(out)
    x = np.ones((4, 4), np.float32)
    for _ in range(200):
        model.run({"x": x})
    n = 20000
    t0 = time.perf_counter()
    for _ in range(n):
        model.run({"x": x})
    py_us = (time.perf_counter() - t0) / n * 1e6
    return {"versions": model.num_versions, "last_version": int(last), "c_ns_per_call": float(ns_c),
            "python_us_per_call": round(py_us, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        rows = [measure(1, Path(d)), measure(8, Path(d))]
    for r in rows:
        print(f"{r['versions']} version(s): {r['c_ns_per_call']:.1f} ns/call from C (ran version {r['last_version']}), "
              f"{r['python_us_per_call']:.1f} us/call from Python")
    extra = rows[1]["c_ns_per_call"] - rows[0]["c_ns_per_call"]
    print(f"7 extra guards cost {extra:.1f} ns per call ({extra / 7:.2f} ns per guard)")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "extra_ns_for_7_guards": extra}, indent=2))


if __name__ == "__main__":
    main()
