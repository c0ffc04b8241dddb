"""A conv net built node by node, what the e2e tests that generate one share
(test_nhwc_dw_padcopy.py, test_nhwc_region.py, test_conv_implicit.py,
test_conv_stem_region.py, test_conv_padded_output.py, test_conv_residual_stores.py,
test_conv_pool_stores.py): weights N(0, 1) / sqrt(fan-in) and biases N(0, 0.1), so every conv's
outputs stay near N(0, 1) however deep the chain, drawn from one generator in the order the convs
are added."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class ConvNet:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.inits: list[onnx.TensorProto] = []
        self.nodes: list[onnx.NodeProto] = []

    def const(self, name: str, arr) -> str:
        """An f32 initializer `name` holding `arr`."""
        self.inits.append(numpy_helper.from_array(np.asarray(arr, np.float32), name))
        return name

    def fresh(self, op: str) -> str:
        """a name for the next node's output: `op` in lower case and the node's index"""
        return f"{op.lower()}{len(self.nodes)}"

    def node(self, op: str, ins: list[str], y: str | None = None, **attrs) -> str:
        """an `op` node reading `ins` into y (`fresh(op)` by default) -> y"""
        y = self.fresh(op) if y is None else y
        self.nodes.append(helper.make_node(op, ins, [y], **attrs))
        return y

    def conv(self, x: str, y: str, cin: int, cout: int, k: int | tuple[int, int], group: int = 1,
             bias: bool = True, act: str | None = None, **attrs) -> str:
        """A 2-D Conv of x into y, weights w_y (k x k, or kh x kw) and bias b_y; with `act`, the
        unary op applied to y, into y_act (lower case). -> the name of the last value."""
        kh, kw = (k, k) if isinstance(k, int) else k
        fan_in = cin // group * kh * kw
        ins = [x, self.const(f"w_{y}", self.rng.standard_normal((cout, cin // group, kh, kw)) / np.sqrt(fan_in))]
        if bias:
            ins.append(self.const(f"b_{y}", self.rng.standard_normal(cout) * 0.1))
        if group != 1:
            attrs["group"] = group
        self.node("Conv", ins, y, **attrs)
        return y if act is None else self.node(act, [y], f"{y}_{act.lower()}")

    def model(self, name: str, inputs: list[onnx.ValueInfoProto], outputs: list[str | onnx.ValueInfoProto],
              opset: int) -> onnx.ModelProto:
        """The graph of the nodes added so far; an output given by name is typed f32 of any shape."""
        outs = [o if isinstance(o, onnx.ValueInfoProto) else helper.make_tensor_value_info(o, TensorProto.FLOAT, None)
                for o in outputs]
        g = helper.make_graph(self.nodes, name, inputs, outs, self.inits)
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
