"""Integer kernels: onnxcc vs onnxruntime, side by side in one process, same thread count.

    python benchmarks/int_kernels.py [--threads 1,2] [--repeats 30] [--cases mmi,qlmm,...]

Each case is a one-node ONNX model with a constant (initializer) weight, as
onnxruntime.quantization.quantize_dynamic / quantize_static produce them; `mmi_var` takes
B as an input. Printed: median ms per call of each runtime (calls alternate in rounds),
the ratio onnxcc / onnxruntime (lower is better), and whether the outputs are equal
(integer outputs must be exactly equal).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

ROUNDS = 5
PAUSE_S = 0.1


def _models():
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    m, k, n = 128, 512, 512

    def model(nodes, inputs, outputs, inits):
        tensors = [numpy_helper.from_array(v, nm) for nm, v in inits]
        g = helper.make_graph(nodes, "g", inputs, outputs, tensors)
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])

    def vi(name, dt, shape):
        return helper.make_tensor_value_info(name, dt, shape)

    u8, i8, i32 = TensorProto.UINT8, TensorProto.INT8, TensorProto.INT32
    a = rng.integers(0, 256, (m, k), dtype=np.uint8)
    b = rng.integers(-128, 128, (k, n), dtype=np.int8)
    cases = {}
    cases["mmi"] = (model([helper.make_node("MatMulInteger", ["A", "B", "az", "bz"], ["Y"])],
                          [vi("A", u8, ["M", k])], [vi("Y", i32, None)],
                          [("B", b), ("az", np.array(3, np.uint8)), ("bz", np.array(0, np.int8))]),
                    {"A": a})
    cases["mmi_var"] = (model([helper.make_node("MatMulInteger", ["A", "B", "az"], ["Y"])],
                              [vi("A", u8, ["M", k]), vi("B", i8, [k, n])], [vi("Y", i32, None)],
                              [("az", np.array(3, np.uint8))]),
                        {"A": a, "B": b})
    sc = np.array(0.02, np.float32)
    cases["qlmm"] = (model([helper.make_node("QLinearMatMul", ["A", "as", "az", "B", "bs", "bz", "ys", "yz"],
                                             ["Y"])],
                           [vi("A", u8, ["M", k])], [vi("Y", u8, None)],
                           [("as", sc), ("az", np.array(3, np.uint8)), ("B", b), ("bs", sc),
                            ("bz", np.array(0, np.int8)), ("ys", np.array(4.0, np.float32)),
                            ("yz", np.array(128, np.uint8))]),
                     {"A": a})
    x = rng.integers(0, 256, (1, 64, 28, 28), dtype=np.uint8)
    w = rng.integers(-128, 128, (64, 64, 3, 3), dtype=np.int8)
    cases["convint"] = (model([helper.make_node("ConvInteger", ["X", "W", "xz"], ["Y"], pads=[1, 1, 1, 1])],
                              [vi("X", u8, [1, 64, 28, 28])], [vi("Y", i32, None)],
                              [("W", w), ("xz", np.array(3, np.uint8))]),
                        {"X": x})
    cases["qlconv"] = (model([helper.make_node("QLinearConv", ["X", "xs", "xz", "W", "ws", "wz", "ys", "yz"],
                                               ["Y"], pads=[1, 1, 1, 1])],
                             [vi("X", u8, [1, 64, 28, 28])], [vi("Y", u8, None)],
                             [("xs", sc), ("xz", np.array(3, np.uint8)), ("W", w), ("ws", sc),
                              ("wz", np.array(0, np.int8)), ("ys", np.array(4.0, np.float32)),
                              ("yz", np.array(128, np.uint8))]),
                       {"X": x})
    return cases


def bench_pair(fa, fb, repeats: int) -> tuple[float, float]:
    """Medians of a and b; they alternate in ROUNDS rounds so neither's spinning workers sit beside
    the other's timed calls."""
    ta: list[float] = []
    tb: list[float] = []
    per = max(1, -(-repeats // ROUNDS))
    for _ in range(ROUNDS):
        for fn, out in ((fa, ta), (fb, tb)):
            time.sleep(PAUSE_S)
            for _ in range(3):
                fn()
            for _ in range(per):
                t0 = time.perf_counter()
                fn()
                out.append(time.perf_counter() - t0)
    return statistics.median(ta), statistics.median(tb)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--cases", default="mmi,mmi_var,qlmm,convint,qlconv")
    args = ap.parse_args()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    import numpy as np
    import onnx
    import onnxruntime as ort

    import onnxcc

    cases = _models()
    with tempfile.TemporaryDirectory() as tmp:
        names = args.cases.split(",")
        for name in names:
            onnx.save(cases[name][0], Path(tmp) / f"{name}.onnx")
        for threads in (int(t) for t in args.threads.split(",")):
            # a library's runtime fixes its thread count (ONNXCC_NUM_THREADS) at its first
            # parallel call, so each thread count gets its own build (its own .so)
            os.environ["ONNXCC_NUM_THREADS"] = str(threads)
            so = ort.SessionOptions()
            so.intra_op_num_threads = threads
            so.inter_op_num_threads = 1
            for name in names:
                path = Path(tmp) / f"{name}.onnx"
                onnxcc.compile(path, Path(tmp) / f"{name}_t{threads}")
                feeds = cases[name][1]
                lib = onnxcc.load(Path(tmp) / f"{name}_t{threads}")
                sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
                ours = next(iter(lib.run(feeds).values()))
                theirs = sess.run(None, feeds)[0]
                same = ours.shape == theirs.shape and bool(np.array_equal(ours, theirs))
                t_cc, t_ort = bench_pair(lambda: lib.run(feeds), lambda: sess.run(None, feeds), args.repeats)
                print(f"{threads} thr  {name:8s} onnxcc {t_cc * 1e3:8.3f} ms  ort {t_ort * 1e3:7.3f} ms  "
                      f"ratio {t_cc / t_ort:7.2f}  equal={same}")


if __name__ == "__main__":
    main()
