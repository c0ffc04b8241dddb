"""Write attention-score softmax models with symbolic batch and seq for `compare_ort.py --model`:

    python benchmarks/make_softmax.py /tmp/smbench
    python benchmarks/compare_ort.py --threads 1 --model /tmp/smbench/softmax_attn.onnx \\
        --dims batch=1,seq=17 --dims batch=1,seq=128 --dims batch=4,seq=512

Files: softmax_attn.onnx (x[batch, 4, seq, seq] * 0.125 + mask[batch, 1, 1, seq] -> Softmax
over the last axis: the scale and the mask fuse into the softmax), attention.onnx (the
opset-23 Attention op, 4 heads of 32, an additive float mask [seq, seq]).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper, numpy_helper


def softmax_attn() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", T.FLOAT, ["batch", 4, "seq", "seq"])
    m = helper.make_tensor_value_info("mask", T.FLOAT, ["batch", 1, 1, "seq"])
    y = helper.make_tensor_value_info("y", T.FLOAT, ["batch", 4, "seq", "seq"])
    sc = numpy_helper.from_array(np.array(0.125, np.float32), "sc")
    nodes = [helper.make_node("Mul", ["x", "sc"], ["xs"]), helper.make_node("Add", ["xs", "mask"], ["xm"]),
             helper.make_node("Softmax", ["xm"], ["y"], axis=-1)]
    mo = helper.make_model(helper.make_graph(nodes, "softmax_attn", [x, m], [y], initializer=[sc]),
                           opset_imports=[helper.make_opsetid("", 17)])
    mo.ir_version = 8
    return mo


def attention() -> onnx.ModelProto:
    ins = [helper.make_tensor_value_info(n, T.FLOAT, ["batch", 4, "seq", 32]) for n in ("q", "k", "v")]
    ins.append(helper.make_tensor_value_info("mask", T.FLOAT, ["seq", "seq"]))
    y = helper.make_tensor_value_info("y", T.FLOAT, ["batch", 4, "seq", 32])
    node = helper.make_node("Attention", ["q", "k", "v", "mask"], ["y"])
    mo = helper.make_model(helper.make_graph([node], "attention", ins, [y]),
                           opset_imports=[helper.make_opsetid("", 23)])
    mo.ir_version = 10
    return mo


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    onnx.save(softmax_attn(), out / "softmax_attn.onnx")
    onnx.save(attention(), out / "attention.onnx")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "smbench"))
