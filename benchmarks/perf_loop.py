"""Run a compiled artifact in a loop under `perf`, to see which kernels take the time.

    onnxcc compile MODEL.onnx -o /tmp/art -q
    ONNXCC_NUM_THREADS=1 perf record -F 999 -o /tmp/m.perf \\
        python benchmarks/perf_loop.py /tmp/art inputs.npz [--seconds 5]
    perf report -i /tmp/m.perf --no-children --sort sym | head -40

The library's kernels carry local symbols (`NAME_v0.par.prow_39`, `onnxcc.gemm.ukr.8x48...`;
`onnxcc compile --emit kernel` maps a name back to its compute). The loader runs a private
copy of the library that it deletes at exit, and perf reads symbols from the file after the
run, so this script leaves with `os._exit`: the copy stays on disk for perf to read.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

import onnxcc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("artifact", help="directory written by `onnxcc compile`")
    ap.add_argument("inputs", help=".npz keyed by input name")
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args()
    lib = onnxcc.load(args.artifact)
    feeds = dict(np.load(args.inputs))
    lib.run(feeds)  # the first call pays the workspace allocation
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < args.seconds:
        lib.run(feeds)
        n += 1
    print(f"{n} runs, {(time.perf_counter() - start) / n * 1e3:.3f} ms per run", flush=True)
    os._exit(0)  # keep the loader's library copy on disk for perf (see the docstring)


if __name__ == "__main__":
    main()
