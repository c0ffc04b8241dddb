"""The one-conv models the conv op tests build alike (test_conv1d_grouped.py,
test_conv_deadtaps.py, test_convt_col2im.py): `y = op(x, w[, b])` with N(0, 1) weights."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper


def one_conv_model(op: str, x_dims: list, w_shape: tuple[int, ...], bias: int | None, seed: int, graph: str,
                   **attrs) -> onnx.ModelProto:
    """`y = op(x, w, b)`: x f32 of `x_dims` (ints or symbol names), w of `w_shape` and, where
    `bias` is a length, b of that length, both N(0, 1) drawn in that order from `seed`; y typed
    by inference. Opset 17."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(w_shape).astype(np.float32)
    inits = [helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.ravel())]
    ins = ["x", "w"]
    if bias is not None:
        b = rng.standard_normal(bias).astype(np.float32)
        inits.append(helper.make_tensor("b", TensorProto.FLOAT, b.shape, b))
        ins.append("b")
    node = helper.make_node(op, ins, ["y"], **attrs)
    g = helper.make_graph([node], graph, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_dims)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
