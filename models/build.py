"""Build the sample ONNX models used by onnxcc's tests and benchmarks.

    python models/build.py [OUTDIR]        (default OUTDIR: this folder)

Every model is written by hand with onnx.helper, with weights drawn from a seeded numpy RNG,
so rebuilding gives byte-identical files. Weights are scaled by 1/sqrt(fan_in) so activations
stay O(1) and outputs stay finite at any size. Symbolic dims are `dim_param` names; see README.md.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17  # LayerNormalization needs >= 17
IR_VERSION = 8  # the IR version that goes with opset 17; every onnxruntime >= 1.12 loads it
F32 = TensorProto.FLOAT


# ----------------------------------------------------------------------------- helpers


class G:
    """A tiny graph builder: collects nodes and initializers, hands out fresh value names."""

    def __init__(self, seed: int = 0, prefix: str = ""):
        # Subgraph builders get a prefix: ONNX forbids a subgraph value shadowing an outer one.
        self.prefix = prefix
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def fresh(self, hint: str) -> str:
        self.count += 1
        return f"{self.prefix}{hint}_{self.count}"

    def op(self, op_type: str, *inputs: str, n_out: int = 1, **attrs) -> str | list[str]:
        outs = [self.fresh(op_type.lower()) for _ in range(n_out)]
        name = f"{self.prefix}{op_type}_{self.count}"
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=name, **attrs))
        return outs[0] if n_out == 1 else outs

    def weight(self, name: str, shape: tuple[int, ...], fan_in: int | None = None) -> str:
        scale = 1.0 / math.sqrt(fan_in if fan_in else shape[0])
        arr = (self.rng.standard_normal(shape) * scale).astype(np.float32)
        return self.init(name, arr)

    def init(self, name: str, arr: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def const(self, value, dtype=np.int64) -> str:
        # A Constant node, not an initializer: this is how torch.onnx.export writes the small
        # shape/scalar constants, and the frontend has to fold them either way.
        arr = np.asarray(value, dtype=dtype)
        out = self.fresh("const")
        name = f"{self.prefix}Constant_{self.count}"
        value = numpy_helper.from_array(arr)
        self.nodes.append(helper.make_node("Constant", [], [out], name=name, value=value))
        return out

    def graph(self, name: str, inputs, outputs) -> onnx.GraphProto:
        return helper.make_graph(self.nodes, name, inputs, outputs, initializer=self.inits)


def tensor(name: str, shape, elem=F32) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def model(graph: onnx.GraphProto) -> onnx.ModelProto:
    m = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="onnxcc-models", producer_version="1",
    )
    m.ir_version = IR_VERSION
    return m


def rename_output(g: G, value: str, name: str) -> str:
    """Route `value` into a graph output called `name` (outputs get stable, readable names)."""
    g.nodes.append(helper.make_node("Identity", [value], [name], name=f"Identity_{name}"))
    return name


def gelu_erf(g: G, x: str) -> str:
    """GELU as torch.onnx.export writes it: Mul(Mul(x, Add(Erf(Div(x, sqrt2)), 1)), 0.5)."""
    d = g.op("Div", x, g.const(math.sqrt(2.0), np.float32))
    e = g.op("Erf", d)
    a = g.op("Add", e, g.const(1.0, np.float32))
    m = g.op("Mul", x, a)
    return g.op("Mul", m, g.const(0.5, np.float32))


def layernorm(g: G, x: str, width: int, prefix: str) -> str:
    # Scale near 1 and a small bias, so the op is not an identity-on-init that folding could hide.
    scale = g.init(f"{prefix}.weight", (1.0 + 0.1 * g.rng.standard_normal(width)).astype(np.float32))
    bias = g.init(f"{prefix}.bias", (0.1 * g.rng.standard_normal(width)).astype(np.float32))
    return g.op("LayerNormalization", x, scale, bias, axis=-1, epsilon=1e-5)


def linear(g: G, x: str, n_in: int, n_out: int, prefix: str) -> str:
    """MatMul + Add, as exporters write nn.Linear on inputs of rank > 2."""
    w = g.weight(f"{prefix}.weight", (n_in, n_out))
    b = g.init(f"{prefix}.bias", (0.1 * g.rng.standard_normal(n_out)).astype(np.float32))
    return g.op("Add", g.op("MatMul", x, w), b)


# ----------------------------------------------------------------------------- models


def build_mlp() -> onnx.ModelProto:
    g = G(seed=1)
    h = g.op("Relu", linear(g, "x", 64, 128, "fc1"))
    h = g.op("Relu", linear(g, h, 128, 64, "fc2"))
    w3 = g.weight("fc3.weight", (10, 64), fan_in=64)  # Gemm transB=1: stored [out, in] like torch
    b3 = g.init("fc3.bias", (0.1 * g.rng.standard_normal(10)).astype(np.float32))
    h = g.op("Gemm", h, w3, b3, transB=1)
    rename_output(g, g.op("Softmax", h, axis=-1), "y")
    return model(g.graph("mlp", [tensor("x", ["batch", 64])], [tensor("y", ["batch", 10])]))


def build_gelu_layernorm() -> onnx.ModelProto:
    g = G(seed=2)
    b = g.init("bias", (0.1 * g.rng.standard_normal(768)).astype(np.float32))
    h = gelu_erf(g, g.op("Add", "x", b))
    h = layernorm(g, h, 768, "ln1")
    h = g.op("Add", h, "x")  # residual with the model input
    rename_output(g, layernorm(g, h, 768, "ln2"), "y")
    shape = ["batch", "seq", 768]
    return model(g.graph("gelu_layernorm", [tensor("x", shape)], [tensor("y", shape)]))


def build_transformer() -> onnx.ModelProto:
    """One post-LN encoder layer (hidden 256, 4 heads of 64, FFN 1024), exporter style.

    Every reshape target is computed at run time from Shape(x); each use gets its own Shape
    node as torch.onnx.export emits them (CSE is the compiler's job, not the model's).
    """
    g = G(seed=3)
    hidden, heads, hd, ffn = 256, 4, 64, 1024

    def batch_seq_unsqueezed() -> tuple[str, str]:
        # Shape(x) -> Gather(0) -> Unsqueeze, Shape(x) -> Gather(1) -> Unsqueeze
        dims = []
        for i in (0, 1):
            gi = g.op("Gather", g.op("Shape", "x"), g.const(i), axis=0)  # scalar index -> scalar
            dims.append(g.op("Unsqueeze", gi, g.const([0])))
        return dims[0], dims[1]

    def split_heads(t: str, perm: list[int]) -> str:
        b, s = batch_seq_unsqueezed()
        shape = g.op("Concat", b, s, g.const([heads]), g.const([hd]), axis=0)
        return g.op("Transpose", g.op("Reshape", t, shape), perm=perm)

    q = split_heads(linear(g, "x", hidden, hidden, "attn.q"), [0, 2, 1, 3])  # [b, h, s, d]
    k = split_heads(linear(g, "x", hidden, hidden, "attn.k"), [0, 2, 3, 1])  # [b, h, d, s]
    v = split_heads(linear(g, "x", hidden, hidden, "attn.v"), [0, 2, 1, 3])  # [b, h, s, d]
    scores = g.op("Div", g.op("MatMul", q, k), g.const(math.sqrt(hd), np.float32))
    probs = g.op("Softmax", scores, axis=-1)
    ctx = g.op("Transpose", g.op("MatMul", probs, v), perm=[0, 2, 1, 3])  # [b, s, h, d]
    b, s = batch_seq_unsqueezed()
    ctx = g.op("Reshape", ctx, g.op("Concat", b, s, g.const([hidden]), axis=0))  # head merge
    h = g.op("Add", linear(g, ctx, hidden, hidden, "attn.out"), "x")
    h1 = layernorm(g, h, hidden, "ln1")
    f = gelu_erf(g, linear(g, h1, hidden, ffn, "ffn.up"))
    h = g.op("Add", linear(g, f, ffn, hidden, "ffn.down"), h1)
    h = layernorm(g, h, hidden, "ln2")
    # A (value-wise no-op) reshape to Concat(Slice(Shape(x), 0, 2), [256]): the Shape -> Slice
    # pattern that exporters produce for `x.shape[:2]`.
    bs = g.op("Slice", g.op("Shape", "x"), g.const([0]), g.const([2]), g.const([0]))
    h = g.op("Reshape", h, g.op("Concat", bs, g.const([hidden]), axis=0))
    rename_output(g, h, "y")
    shape = ["batch", "seq", hidden]
    return model(g.graph("transformer", [tensor("x", shape)], [tensor("y", shape)]))


def build_convnet() -> onnx.ModelProto:
    g = G(seed=4)

    def conv(x: str, cin: int, cout: int, prefix: str) -> str:
        w = g.weight(f"{prefix}.weight", (cout, cin, 3, 3), fan_in=cin * 9)
        b = g.init(f"{prefix}.bias", (0.1 * g.rng.standard_normal(cout)).astype(np.float32))
        return g.op("Conv", x, w, b, kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1])

    h = g.op("Relu", conv("x", 3, 8, "conv1"))
    h = g.op("MaxPool", h, kernel_shape=[2, 2], strides=[2, 2])  # floor mode: H -> H // 2
    h = conv(h, 8, 16, "conv2")
    # Inference-mode BatchNormalization with non-trivial running stats (positive variance).
    bn = [
        g.init("bn.scale", (1.0 + 0.1 * g.rng.standard_normal(16)).astype(np.float32)),
        g.init("bn.bias", (0.1 * g.rng.standard_normal(16)).astype(np.float32)),
        g.init("bn.mean", (0.1 * g.rng.standard_normal(16)).astype(np.float32)),
        g.init("bn.var", g.rng.uniform(0.5, 1.5, 16).astype(np.float32)),
    ]
    h = g.op("Relu", g.op("BatchNormalization", h, *bn, epsilon=1e-5))
    p = g.op("AveragePool", h, kernel_shape=[2, 2], strides=[2, 2])
    h = g.op("Relu", g.op("Add", conv(p, 16, 16, "conv3"), p))  # residual block
    h = g.op("Flatten", g.op("GlobalAveragePool", h), axis=1)
    w = g.weight("fc.weight", (10, 16), fan_in=16)
    b = g.init("fc.bias", (0.1 * g.rng.standard_normal(10)).astype(np.float32))
    rename_output(g, g.op("Gemm", h, w, b, transB=1), "y")
    x = tensor("x", ["batch", 3, "H", "W"])
    return model(g.graph("convnet", [x], [tensor("y", ["batch", 10])]))


def build_if_model() -> onnx.ModelProto:
    g = G(seed=5)
    w = g.init("w", (0.5 * g.rng.standard_normal(16)).astype(np.float32))
    xw = g.op("Add", "x", w)  # outer-scope value that the then-branch captures
    # cond = ReduceSum(x) > 0; keepdims=0 and no axes -> a rank-0 bool, as If requires.
    cond = g.op("Greater", g.op("ReduceSum", "x", keepdims=0), g.const(0.0, np.float32))

    t = G(prefix="then/")
    r = t.op("Mul", t.op("Relu", "x"), t.const(2.0, np.float32))
    t.nodes.append(helper.make_node("Add", [r, xw], ["then_out"], name="then_add"))
    then_g = t.graph("then_branch", [], [tensor("then_out", ["batch", 16])])

    e = G(prefix="else/")
    s = e.op("Sigmoid", "x")
    e.nodes.append(helper.make_node("Sub", [s, e.const(1.0, np.float32)], ["else_out"], name="else_sub"))
    else_g = e.graph("else_branch", [], [tensor("else_out", ["batch", 16])])

    g.nodes.append(helper.make_node("If", [cond], ["y"], name="If_0", then_branch=then_g, else_branch=else_g))
    return model(g.graph("if_model", [tensor("x", ["batch", 16])], [tensor("y", ["batch", 16])]))


def build_loop_model() -> onnx.ModelProto:
    """h <- tanh(h @ W + x), at most 10 times, until max|h_new - h| <= 1e-3.

    W is scaled so the map is a contraction: the trip count depends on the data and is often
    below the maximum, so the stacked output's leading dim is a genuinely new symbol.
    """
    g = G(seed=6)
    g.init("W", (0.3 * g.rng.standard_normal((8, 8)) / math.sqrt(8)).astype(np.float32))

    b = G(prefix="body/")
    hw = b.op("Add", b.op("MatMul", "h_in", "W"), "x")  # W and x come from the outer scope
    b.nodes.append(helper.make_node("Tanh", [hw], ["h_out"], name="Tanh_body"))
    delta = b.op("ReduceMax", b.op("Abs", b.op("Sub", "h_out", "h_in")), keepdims=0)  # rank 0
    eps = b.const(1e-3, np.float32)
    b.nodes.append(helper.make_node("Greater", [delta, eps], ["cond_out"], name="cond"))
    b.nodes.append(helper.make_node("Identity", ["h_out"], ["h_scan"], name="scan_copy"))
    body = b.graph(
        "loop_body",
        [tensor("iter", [], TensorProto.INT64), tensor("cond_in", [], TensorProto.BOOL),
         tensor("h_in", ["batch", 8])],
        [tensor("cond_out", [], TensorProto.BOOL), tensor("h_out", ["batch", 8]),
         tensor("h_scan", ["batch", 8])],
    )
    trip = g.const(10)  # rank-0 int64 max trip count
    start = g.const(True, np.bool_)
    loop = helper.make_node("Loop", [trip, start, "x"], ["h_final", "h_all"], name="Loop_0", body=body)
    g.nodes.append(loop)
    outputs = [tensor("h_final", ["batch", 8]), tensor("h_all", ["iters", "batch", 8])]
    return model(g.graph("loop_model", [tensor("x", ["batch", 8])], outputs))


def build_scan_model() -> onnx.ModelProto:
    """s <- tanh(s @ W + x[:, t]) over t; s0 = mean of x over seq (data-derived, no extra input)."""
    g = G(seed=7)
    g.init("W", (0.5 * g.rng.standard_normal((16, 16)) / math.sqrt(16)).astype(np.float32))
    s0 = g.op("ReduceMean", "x", axes=[1], keepdims=0)  # opset 17 ReduceMean: axes is an attribute

    b = G(prefix="body/")
    hw = b.op("Add", b.op("MatMul", "s_in", "W"), "x_t")  # W from the outer scope
    b.nodes.append(helper.make_node("Tanh", [hw], ["s_out"], name="Tanh_body"))
    b.nodes.append(helper.make_node("Identity", ["s_out"], ["y_t"], name="scan_copy"))
    body = b.graph(
        "scan_body",
        [tensor("s_in", ["batch", 16]), tensor("x_t", ["batch", 16])],
        [tensor("s_out", ["batch", 16]), tensor("y_t", ["batch", 16])],
    )
    g.nodes.append(
        helper.make_node(
            "Scan", [s0, "x"], ["s_final", "ys"], name="Scan_0", body=body,
            num_scan_inputs=1, scan_input_axes=[1], scan_output_axes=[1],
        )
    )
    outputs = [tensor("s_final", ["batch", 16]), tensor("ys", ["batch", "seq", 16])]
    return model(g.graph("scan_model", [tensor("x", ["batch", "seq", 16])], outputs))


BUILDERS = {
    "mlp": build_mlp,
    "gelu_layernorm": build_gelu_layernorm,
    "transformer": build_transformer,
    "convnet": build_convnet,
    "if_model": build_if_model,
    "loop_model": build_loop_model,
    "scan_model": build_scan_model,
}


def main(argv: list[str]) -> int:
    out_dir = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, build in BUILDERS.items():
        m = build()
        onnx.checker.check_model(m, full_check=True)
        path = out_dir / f"{name}.onnx"
        path.write_bytes(m.SerializeToString())
        print(f"{path}  {path.stat().st_size / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
