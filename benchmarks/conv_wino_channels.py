"""A single dense 3x3 stride-1 conv (+ Relu, channels-last: a 3 -> C stem conv before it, not
timed apart) on the Winograd call vs the implicit-GEMM call, per channel count: where the
Winograd route starts to pay (ops/conv_implicit.py `_callee`, kernel/conv_wino_call.py
MIN_CHANNELS, lifted here). Both libraries are built in this process (`conv_implicit.WINOGRAD` on / off)
and their calls alternate; one thread (ONNXCC_NUM_THREADS=1), process CPU time, medians.

    python benchmarks/conv_wino_channels.py [--channels 8,16,24,32,64,128] [--size 56] [--batch 1]

Prints per C: the GEMM call's and the Winograd call's median model time and their ratio (the
stem and the call overhead included in both, so the ratio understates the conv's own)."""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

os.environ.setdefault("ONNXCC_NUM_THREADS", "1")


def _model(c: int) -> onnx.ModelProto:
    rng = np.random.default_rng(c)

    def init(name, arr):
        return numpy_helper.from_array(np.asarray(arr, np.float32), name)

    inits = [init("w0", rng.standard_normal((c, 3, 3, 3)) / 5), init("b0", np.zeros(c)),
             init("w1", rng.standard_normal((c, c, 3, 3)) / np.sqrt(9 * c)), init("b1", rng.standard_normal(c) * 0.1),
             init("w2", rng.standard_normal((c, c, 3, 3)) / np.sqrt(9 * c)), init("b2", rng.standard_normal(c) * 0.1)]
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["h0"], pads=[1] * 4),
             helper.make_node("Relu", ["h0"], ["r0"]),
             helper.make_node("Conv", ["r0", "w1", "b1"], ["h1"], pads=[1] * 4),
             helper.make_node("Relu", ["h1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["h2"], pads=[1] * 4),
             helper.make_node("Relu", ["h2"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph(nodes, f"c{c}", [x], [y], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--channels", default="8,16,24,32,48,64,128")
    ap.add_argument("--size", type=int, default=56)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    import onnxcc
    from onnxcc.kernel import conv_wino_call
    from onnxcc.ops import conv_implicit

    conv_wino_call.MIN_CHANNELS = 1  # lifted, so channel counts below the route's threshold are measured too

    tmp = Path(tempfile.mkdtemp(prefix="wino_ch_"))
    x = np.random.default_rng(0).standard_normal((args.batch, 3, args.size, args.size)).astype(np.float32)
    print(f"{'C':>5} {'gemm us':>10} {'wino us':>10} {'ratio':>7}   (1 thread, {args.batch}x{args.size}x{args.size}, "
          f"two C -> C convs, load {os.getloadavg()[0]:.1f})")
    for c in (int(v) for v in args.channels.split(",")):
        path = tmp / f"c{c}.onnx"
        onnx.save(_model(c), path)
        libs = {}
        for on in (False, True):
            conv_implicit.WINOGRAD = on
            d = tmp / f"c{c}_{int(on)}"
            kir = onnxcc.compile(path, d / "k", emit="kernel", max_versions=1).text
            calls = re.findall(r"call (onnxcc_f32\w+)\(", kir)
            onnxcc.compile(path, d / "lib", max_versions=1)
            libs[on] = (onnxcc.load(d / "lib"), sum("wino" in k for k in calls))
        times = {False: [], True: []}
        reps = max(1, int(2e8 / (args.batch * args.size ** 2 * c * c * 18)))
        for _ in range(args.rounds):
            for on in (False, True):
                lib = libs[on][0]
                t = time.process_time()
                for _ in range(reps):
                    lib.run({"x": x})
                times[on].append((time.process_time() - t) / reps * 1e6)
        g, w = statistics.median(times[False]), statistics.median(times[True])
        print(f"{c:>5} {g:>10.1f} {w:>10.1f} {w / g:>7.3f}   wino calls {libs[True][1]}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
