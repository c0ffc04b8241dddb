"""Write mobilenet-like layer stacks (depthwise 3x3 + 1x1 pointwise, stride 1 and 2) as
ONNX models with symbolic batch, H, W, for `compare_ort.py --model`:

    python benchmarks/make_conv_layers.py /tmp/convbench
    python benchmarks/compare_ort.py --threads 2 --model /tmp/convbench/mblayers.onnx \\
        --dims batch=1,H=56,W=56 --dims batch=1,H=113,W=113

Files: mblayers.onnx (dw 32 s1, pw 32->64, dw 64 s2, pw 64->64, each + Relu),
dw.onnx (the first dw alone), dwpw.onnx (dw + pw), dw2.onnx (the stride-2 dw + Relu on a
64-channel input).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _conv(nodes, inits, rng, name, inp, cout, cin, k, group, pads, strides=(1, 1)):
    w = (rng.standard_normal((cout, cin // group, k, k)) * 0.1).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    inits += [numpy_helper.from_array(w, "w" + name), numpy_helper.from_array(b, "b" + name)]
    nodes.append(helper.make_node("Conv", [inp, "w" + name, "b" + name], ["c" + name], group=group, pads=pads,
                                  strides=list(strides)))
    nodes.append(helper.make_node("Relu", ["c" + name], [name]))
    return name


def _save(path: Path, layers, cin: int) -> None:
    rng = np.random.default_rng(0)
    nodes: list = []
    inits: list = []
    t = "x"
    for spec in layers:
        t = _conv(nodes, inits, rng, spec[0], t, *spec[1:])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", cin, "H", "W"])
    y = helper.make_tensor_value_info(t, TensorProto.FLOAT, None)
    g = helper.make_graph(nodes, path.stem, [x], [y], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/convbench")
    out.mkdir(parents=True, exist_ok=True)
    dw1 = ("dw1", 32, 32, 3, 32, [1, 1, 1, 1])
    pw1 = ("pw1", 64, 32, 1, 1, [0, 0, 0, 0])
    dw2 = ("dw2", 64, 64, 3, 64, [1, 1, 1, 1], (2, 2))
    pw2 = ("pw2", 64, 64, 1, 1, [0, 0, 0, 0])
    _save(out / "mblayers.onnx", [dw1, pw1, dw2, pw2], 32)
    _save(out / "dw.onnx", [dw1], 32)
    _save(out / "dwpw.onnx", [dw1, pw1], 32)
    _save(out / "dw2.onnx", [dw2], 64)


if __name__ == "__main__":
    main()
