"""A tanh-GELU (Pow, Mul, Add, Tanh) + LayerNormalization on [batch, seq, 768], onnxcc vs
onnxruntime side by side (compare_ort.bench_pair), with each side's memory rate.

    python benchmarks/gelu_tanh.py [--shapes 1x128,4x128,4x512] [--threads N] [--repeats R]

The model is built here (batch and seq symbolic): y = LayerNorm(0.5 x (1 + tanh(sqrt(2/pi)
(x + 0.044715 x^3)))) with x^3 written as Pow(x, 3), as the GPT-2 exporters write it. It is
the case that exposed the scalar libm cliff (a tanhf call per element keeps the fused loop
scalar). GB/s counts one read of the input and one write of the output.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_ort import bench_pair

WIDTH = 768


def build_model() -> onnx.ModelProto:
    rng = np.random.default_rng(7)

    def c(name, v):
        return numpy_helper.from_array(np.asarray(v, np.float32), name)

    inits = [c("three", 3.0), c("k", 0.044715), c("s", math.sqrt(2.0 / math.pi)), c("one", 1.0), c("half", 0.5),
             c("gamma", 1.0 + 0.1 * rng.standard_normal(WIDTH)), c("beta", 0.1 * rng.standard_normal(WIDTH))]
    nodes = [
        helper.make_node("Pow", ["x", "three"], ["x3"]),
        helper.make_node("Mul", ["x3", "k"], ["kx3"]),
        helper.make_node("Add", ["x", "kx3"], ["inner"]),
        helper.make_node("Mul", ["inner", "s"], ["arg"]),
        helper.make_node("Tanh", ["arg"], ["t"]),
        helper.make_node("Add", ["t", "one"], ["t1"]),
        helper.make_node("Mul", ["x", "t1"], ["xt"]),
        helper.make_node("Mul", ["xt", "half"], ["g"]),
        helper.make_node("LayerNormalization", ["g", "gamma", "beta"], ["y"], axis=-1, epsilon=1e-5),
    ]
    shape = ["batch", "seq", WIDTH]
    graph = helper.make_graph(nodes, "gelu_tanh_layernorm",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="1x128,4x128,4x512", help="batch x seq, comma separated")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--repeats", type=int, default=30)
    args = ap.parse_args()
    os.environ["ONNXCC_NUM_THREADS"] = str(args.threads)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    import onnxruntime as ort

    import onnxcc

    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "gelu_tanh.onnx"
        onnx.save(build_model(), path)
        onnxcc.compile(path, Path(tmp) / "gelu_tanh")
        lib = onnxcc.load(Path(tmp) / "gelu_tanh")
        sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        rng = np.random.default_rng(1)
        for spec in args.shapes.split(","):
            b, s = (int(v) for v in spec.split("x"))
            x = rng.standard_normal((b, s, WIDTH)).astype(np.float32)
            ours = lib.run({"x": x})["y"]
            theirs = sess.run(None, {"x": x})[0]
            err = float(np.max(np.abs(ours - theirs)))
            feeds = {"x": x}
            t_cc, t_ort = bench_pair(lambda f=feeds: lib.run(f), lambda f=feeds: sess.run(None, f), args.repeats)
            gb = 2 * x.nbytes / 1e9
            print(f"batch={b} seq={s}: onnxcc {t_cc * 1e3:8.3f} ms ({gb / t_cc:5.1f} GB/s)  "
                  f"ort {t_ort * 1e3:8.3f} ms ({gb / t_ort:5.1f} GB/s)  ratio {t_cc / t_ort:6.3f}  "
                  f"max err {err:.1e}")


if __name__ == "__main__":
    main()
