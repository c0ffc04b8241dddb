"""A tanh-GELU (Pow, Mul, Add, Tanh) + LayerNormalization on [batch, seq, 768], onnxcc vs
onnxruntime and OpenVINO (where installed) side by side (peers.time_row), with each side's
memory rate. heldout_table.py runs the same chain (and SiLU, Mish) beside the other rows.

    python benchmarks/gelu_tanh.py [--shapes 1x128,4x128,4x512] [--threads N] [--repeats R]
        [--clock wall|cpu] [--json out.json]

The model is built here (batch and seq symbolic): y = LayerNorm(0.5 x (1 + tanh(sqrt(2/pi)
(x + 0.044715 x^3)))) with x^3 written as Pow(x, 3), as the GPT-2 exporters write it. It is
the case that exposed the scalar libm cliff (a tanhf call per element keeps the fused loop
scalar). GB/s counts one read of the input and one write of the output.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))

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
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall", help="cpu: CPU time (one thread only)")
    ap.add_argument("--peers", default="auto", help="comma list of ort,openvino (auto: OpenVINO if installed)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    os.environ["ONNXCC_NUM_THREADS"] = str(args.threads)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from peers import available_peers, make_peers, time_row

    import onnxcc

    peer_names = available_peers(args.peers)
    clock = time.process_time if args.clock == "cpu" and args.threads == 1 else None
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "gelu_tanh.onnx"
        onnx.save(build_model(), path)
        onnxcc.compile(path, Path(tmp) / "gelu_tanh")
        lib = onnxcc.load(Path(tmp) / "gelu_tanh")
        peers = make_peers(path, args.threads, peer_names)
        rng = np.random.default_rng(1)
        for spec in args.shapes.split(","):
            b, s = (int(v) for v in spec.split("x"))
            x = rng.standard_normal((b, s, WIDTH)).astype(np.float32)
            row = time_row(lambda f: list(lib.run(f).values()), peers, {"x": x}, args.repeats, clock=clock)
            gb = 2 * x.nbytes / 1e9
            row.update(batch=b, seq=s, threads=args.threads, gbs={n[:-3]: gb / (row[n] / 1e3) for n in row
                                                                  if n.endswith("_ms")})
            rows.append(row)
            rates = "  ".join(f"{n} {row[n + '_ms']:8.3f} ms ({g:5.1f} GB/s)" for n, g in row["gbs"].items())
            err = max(row["peer_max_abs_err"].values(), default=0.0)
            best = f"  vs best ({row['best_peer']}) {row['ratio_best']:6.3f}" if "ratio_best" in row else ""
            print(f"batch={b} seq={s}: {rates}  ratio {row.get('ratio', float('nan')):6.3f}{best}  max err {err:.1e}",
                  flush=True)
    if args.json:
        args.json.write_text(json.dumps({"threads": args.threads, "peers": peer_names, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
