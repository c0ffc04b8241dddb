"""Single conv layers (Conv + bias + Relu, symbolic N/H/W) against onnxruntime, one thread,
CPU-time medians: where a conv net's time goes, layer by layer.

    unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
    python benchmarks/conv_layers.py [LAYER,...]

Prints per layer both medians, the achieved GFLOP/s (2 per multiply-add) and the ratio
onnxcc / onnxruntime (lower is better), with the largest difference between the outputs.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("ONNXCC_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

LAYERS = {  # name: (in channels, out channels, kernel, stride, H = W, batch)
    "stem3x3_224": (3, 16, 3, 1, 224, 1),
    "stem_s2_224": (3, 32, 3, 2, 224, 1),
    "c16_32_112": (16, 32, 3, 1, 112, 1),
    "c32_32_112": (32, 32, 3, 1, 112, 1),
    "c64_64_28": (64, 64, 3, 1, 28, 1),
    "pw32_64_56": (32, 64, 1, 1, 56, 1),
    "c16_32_56_b4": (16, 32, 3, 1, 56, 4),
}


def main() -> None:
    import numpy as np
    import onnx
    import onnxruntime as ort
    from compare_ort import bench_pair
    from onnx import TensorProto, helper, numpy_helper

    import onnxcc

    sel = sys.argv[1].split(",") if len(sys.argv) > 1 else list(LAYERS)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        for name in sel:
            cin, cout, k, s, h, bt = LAYERS[name]
            w = (rng.standard_normal((cout, cin, k, k)) * 0.2).astype(np.float32)
            b = rng.standard_normal(cout).astype(np.float32)
            p = k // 2
            nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[k, k], pads=[p] * 4,
                                      strides=[s, s]),
                     helper.make_node("Relu", ["c"], ["y"])]
            x_info = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", cin, "H", "W"])
            g = helper.make_graph(nodes, name, [x_info], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                                  [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
            path = f"{tmp}/{name}.onnx"
            onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
            onnxcc.compile(path, f"{tmp}/{name}")
            lib = onnxcc.load(f"{tmp}/{name}")
            sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
            feeds = {"x": rng.standard_normal((bt, cin, h, h)).astype(np.float32)}
            err = float(np.max(np.abs(next(iter(lib.run(feeds).values())) - sess.run(None, feeds)[0])))
            tc, to = bench_pair(lambda: lib.run(feeds), lambda: sess.run(None, feeds), 30, clock=time.process_time)
            oh = (h + 2 * p - k) // s + 1
            gf = 2 * cout * cin * k * k * oh * oh * bt / 1e9
            print(f"{name:14s} onnxcc {tc * 1e3:7.3f} ms ({gf / tc:5.1f} GF/s)  ort {to * 1e3:7.3f} ms "
                  f"({gf / to:5.1f} GF/s)  ratio {tc / to:5.2f}  err {err:.1e}", flush=True)


if __name__ == "__main__":
    main()
