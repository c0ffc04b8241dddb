"""What the attention tests share: the causal mask as torch exports it, a model of several
score chains side by side (each its own Q, K, V, masking steps, softmax, @ V), and the fused
attention computes of a compiled kernel program."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import ModelProto, NodeProto, helper
from onnx import TensorProto as T


def torch_causal_mask(query: str, out: str = "causal") -> list[NodeProto]:
    """Nodes making `out` [S, S] from the sequence axis (2) of `query`: 0 on and below the
    diagonal, `lowest` above it (Trilu of ones, Equal 0, Where). The graph must hold the
    scalar initializers `one`, `zero` and `lowest`."""
    n = helper.make_node
    return [n("Shape", [query], ["qs"], start=2, end=3), n("Concat", ["qs", "qs"], ["tt"], axis=0),
            n("Expand", ["one", "tt"], ["ones"]), n("Trilu", ["ones"], ["tril"], upper=0),
            n("Equal", ["tril", "zero"], ["above"]), n("Where", ["above", "lowest", "zero"], [out])]


def score_chains_model(name: str, heads: dict[int, tuple[int, int]], scale: float, steps: list[NodeProto],
                       masks: list[tuple], n_heads: int = 2) -> ModelProto:
    """Chains i of `heads` (i -> (Q's and K's head, V's head)), each s_i = Q_i @ K_iᵀ, then
    `steps` (from s_i to x_i, using `masks`: graph inputs as (name, elem type, shape)), then
    Y_i = Softmax(x_i) @ V_i; Q, K, V of shape [B, n_heads, S, head]. The scalar
    initializers `scale`, `one`, `zero`, `lowest` (f32's) and `neginf` are there for steps
    (and `torch_causal_mask`) to read."""
    inits = [helper.make_tensor("scale", T.FLOAT, [], [scale]),
             helper.make_tensor("one", T.FLOAT, [], [1.0]), helper.make_tensor("zero", T.FLOAT, [], [0.0]),
             helper.make_tensor("lowest", T.FLOAT, [], [float(np.finfo(np.float32).min)]),
             helper.make_tensor("neginf", T.FLOAT, [], [-np.inf])]
    n = helper.make_node
    nodes = []
    for i in heads:
        nodes.append(n("Transpose", [f"K{i}"], [f"Kt{i}"], perm=[0, 1, 3, 2]))
        nodes.append(n("MatMul", [f"Q{i}", f"Kt{i}"], [f"s{i}"]))
    nodes += steps
    for i in heads:
        nodes += [n("Softmax", [f"x{i}"], [f"p{i}"], axis=-1), n("MatMul", [f"p{i}", f"V{i}"], [f"Y{i}"])]
    f = T.FLOAT
    inputs = [io for i, (d, dv) in heads.items() for io in
              ((f"Q{i}", f, ["B", n_heads, "S", d]), (f"K{i}", f, ["B", n_heads, "S", d]),
               (f"V{i}", f, ["B", n_heads, "S", dv]))]
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info(*i) for i in [*inputs, *masks]],
                          [helper.make_tensor_value_info(f"Y{i}", f, None) for i in heads], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    return m


def build_one_version(model: ModelProto, d, name: str) -> str:
    """`model` saved as d/m.onnx and built with one version: its library in d/lib, and the
    kernel text (`--emit kernel`), which is returned."""
    import onnxcc

    onnx.save(model, d / "m.onnx")
    text = onnxcc.compile(d / "m.onnx", d / "kir", name=name, emit="kernel", max_versions=1).text
    onnxcc.compile(d / "m.onnx", d / "lib", name=name, max_versions=1)
    return text


def fused_attention(kernel_text: str) -> list:
    """The fused-attention cores (kernel/flash.py `Flash`) of the last (generic) program in
    `--emit kernel`'s text, parsed back, in compute order."""
    from onnxcc.kernel.flash import match_flash
    from onnxcc.kernel.parser import parse_kernel_text

    return [fl for c in parse_kernel_text(kernel_text)[-1].computes() if (fl := match_flash(c)) is not None]
