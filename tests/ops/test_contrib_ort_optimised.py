"""What real users hand us: models that onnxruntime's own graph optimiser rewrote offline
(SessionOptions.optimized_model_filepath, ORT_ENABLE_EXTENDED), so they hold com.microsoft
fused ops (FusedMatMul, SkipLayerNormalization, BiasGelu, QuickGelu) and onnxruntime's
ONNX-domain SimplifiedLayerNormalization. Each is compiled once with `onnxcc.compile` (the
user's path: libNAME.so through the loader) and run at several (batch, seq) settings against
onnxruntime on the original, unfused model; the in-process JIT of the lowered graph (no memory
planning, no linking) is checked the same way."""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import onnxcc
from onnxcc.testing import jit_compile, ort_run, random_inputs

D = 32


class _Builder:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.inits: dict[str, np.ndarray] = {}

    def w(self, name: str, *shape) -> str:
        self.inits[name] = (self.rng.standard_normal(shape) * 0.2).astype(np.float32)
        return name

    def c(self, name: str, value: float) -> str:
        self.inits[name] = np.array(value, np.float32)
        return name

    def n(self, op: str, ins: list, out: str | None = None, **attrs) -> str:
        out = out or f"t{len(self.nodes)}"
        self.nodes.append(h.make_node(op, ins, [out], **attrs))
        return out

    def model(self, name: str, opset: int, extra_inputs=()) -> onnx.ModelProto:
        x = [h.make_tensor_value_info("x", T.FLOAT, ["B", "S", D]), *extra_inputs]
        y = h.make_tensor_value_info("y", T.FLOAT, ["B", "S", D])
        inits = [nh.from_array(a, k) for k, a in self.inits.items()]
        m = h.make_model(h.make_graph(self.nodes, name, x, [y], inits),
                         opset_imports=[h.make_opsetid("", opset)])
        m.ir_version = 8
        onnx.checker.check_model(m)
        return m


def bert_layer() -> onnx.ModelProto:
    """Single-head self-attention + erf-Gelu FFN, post-LayerNorm residuals (BERT's layout)."""
    b = _Builder(0)

    def dense(x, name, k, n):
        return b.n("Add", [b.n("MatMul", [x, b.w(f"w{name}", k, n)]), b.w(f"b{name}", n)])

    q, k, v = (dense("x", s, D, D) for s in "qkv")
    kt = b.n("Transpose", [k], perm=[0, 2, 1])
    scores = b.n("Div", [b.n("MatMul", [q, kt]), b.c("sqrt_d", math.sqrt(D))])
    att = dense(b.n("MatMul", [b.n("Softmax", [scores], axis=-1), v]), "o", D, D)
    h1 = b.n("LayerNormalization", [b.n("Add", [att, "x"]), b.w("g1", D), b.w("be1", D)], epsilon=1e-5)
    f = dense(h1, "f1", D, 2 * D)
    erf = b.n("Erf", [b.n("Div", [f, b.c("sqrt2", math.sqrt(2.0))])])
    gelu = b.n("Mul", [b.n("Mul", [f, b.c("half", 0.5)]), b.n("Add", [erf, b.c("one", 1.0)])])
    f2 = dense(gelu, "f2", 2 * D, D)
    b.n("LayerNormalization", [b.n("Add", [f2, h1]), b.w("g2", D), b.w("be2", D)], "y", epsilon=1e-5)
    return b.model("bert_layer", 17)


def llama_mlp() -> onnx.ModelProto:
    """RMS-normed residual blocks with a QuickGelu (x * sigmoid(1.702 x)) MLP."""
    b = _Builder(1)

    def rms(x, g):
        ms = b.n("ReduceMean", [b.n("Pow", [x, b.c(f"two{len(b.nodes)}", 2.0)])], axes=[-1], keepdims=1)
        inv = b.n("Sqrt", [b.n("Add", [ms, b.c(f"eps{len(b.nodes)}", 1e-6)])])
        return b.n("Mul", [b.n("Div", [x, inv]), b.w(g, D)])

    r1 = b.n("Add", [b.n("MatMul", [rms("x", "g0"), b.w("w0", D, D)]), "x"])
    f = b.n("MatMul", [rms(r1, "g1"), b.w("w1", D, 2 * D)])
    act = b.n("Mul", [f, b.n("Sigmoid", [b.n("Mul", [f, b.c("alpha", 1.702)])])])
    b.n("Add", [b.n("MatMul", [act, b.w("w2", 2 * D, D)]), r1], "y")
    return b.model("llama_mlp", 13)


def bert_multihead_layer() -> onnx.ModelProto:
    """A BERT encoder layer as exporters wrote it (opset 13: LayerNorm as primitives,
    per-head Reshape / Transpose, the additive (1 - mask) * -10000 mask), for onnxruntime's
    transformers optimizer, which fuses it into Attention (mask_index = end positions),
    SkipLayerNormalization and BiasGelu."""
    b = _Builder(2)
    heads, hd = 4, D // 4
    shape = b.n("Constant", [], value=nh.from_array(np.array([0, 0, heads, hd], np.int64)))
    back = b.n("Constant", [], value=nh.from_array(np.array([0, 0, D], np.int64)))

    def dense(x, name, k, n):
        return b.n("Add", [b.n("MatMul", [x, b.w(f"w{name}", k, n)]), b.w(f"b{name}", n)])

    def split_heads(x, perm):
        return b.n("Transpose", [b.n("Reshape", [x, shape])], perm=perm)

    def layer_norm(x, g, be, out=None):
        mu = b.n("ReduceMean", [x], axes=[-1])
        d = b.n("Sub", [x, mu])
        var = b.n("ReduceMean", [b.n("Pow", [d, b.c(f"two{len(b.nodes)}", 2.0)])], axes=[-1])
        inv = b.n("Sqrt", [b.n("Add", [var, b.c(f"eps{len(b.nodes)}", 1e-12)])])
        return b.n("Add", [b.n("Mul", [b.n("Div", [d, inv]), b.w(g, D)]), b.w(be, D)], out)

    q = split_heads(dense("x", "q", D, D), [0, 2, 1, 3])
    k = split_heads(dense("x", "k", D, D), [0, 2, 3, 1])
    v = split_heads(dense("x", "v", D, D), [0, 2, 1, 3])
    ax1 = b.n("Constant", [], value=nh.from_array(np.array([1], np.int64)))
    ax2 = b.n("Constant", [], value=nh.from_array(np.array([2], np.int64)))
    m = b.n("Unsqueeze", [b.n("Unsqueeze", ["mask", ax1]), ax2])
    m = b.n("Mul", [b.n("Sub", [b.c("one", 1.0), b.n("Cast", [m], to=T.FLOAT)]), b.c("neg", -10000.0)])
    s = b.n("Add", [b.n("Div", [b.n("MatMul", [q, k]), b.c("sqrt_hd", math.sqrt(hd))]), m])
    ctx = b.n("MatMul", [b.n("Softmax", [s], axis=-1), v])
    ctx = b.n("Reshape", [b.n("Transpose", [ctx], perm=[0, 2, 1, 3]), back])
    h1 = layer_norm(b.n("Add", [dense(ctx, "o", D, D), "x"]), "g1", "be1")
    f = dense(h1, "f1", D, 2 * D)
    erf = b.n("Erf", [b.n("Div", [f, b.c("sqrt2", math.sqrt(2.0))])])
    gelu = b.n("Mul", [b.n("Mul", [f, b.c("half", 0.5)]), b.n("Add", [erf, b.c("one2", 1.0)])])
    layer_norm(b.n("Add", [dense(gelu, "f2", 2 * D, D), h1]), "g2", "be2", "y")
    mask = h.make_tensor_value_info("mask", T.INT64, ["B", "S"])
    return b.model("bert_multihead", 13, extra_inputs=[mask])


def _optimise(m: onnx.ModelProto, path) -> onnx.ModelProto:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = str(path)
    ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return onnx.load(str(path))


_DIMS = [{"B": 2, "S": 7}, {"B": 1, "S": 1}, {"B": 3, "S": 20}]
_BERT_OPS = {("com.microsoft", "FusedMatMul"), ("com.microsoft", "SkipLayerNormalization"),
             ("com.microsoft", "BiasGelu")}
_RMS_OPS = {("", "SimplifiedLayerNormalization"), ("com.microsoft", "QuickGelu")}


def _optimised(tmp_path, m: onnx.ModelProto, expect: set[tuple[str, str]]):
    opt_path = tmp_path / "opt.onnx"
    opt = _optimise(m, opt_path)
    ops = {(nd.domain, nd.op_type) for nd in opt.graph.node}
    assert expect <= ops, f"onnxruntime no longer emits {expect - ops}; got {sorted(ops)}"
    return opt_path, opt


def _compare(m, opt, run) -> None:
    for seed, dims in enumerate(_DIMS):
        feeds = random_inputs(m, dims, seed=seed)
        if "mask" in feeds:  # an attention mask: each batch row's first tokens are real, the rest padding
            b, s = feeds["mask"].shape
            ends = np.array([s - i % s for i in range(b)])
            feeds["mask"] = (np.arange(s)[None, :] < ends[:, None]).astype(np.int64)
        want = ort_run(m, feeds)["y"]
        np.testing.assert_allclose(ort_run(opt, feeds)["y"], want, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(run(feeds), want, rtol=1e-4, atol=1e-4, err_msg=f"at {dims}")


def _compile_and_compare(tmp_path, m: onnx.ModelProto, expect: set[tuple[str, str]]) -> None:
    opt_path, opt = _optimised(tmp_path, m, expect)
    onnxcc.compile(opt_path, tmp_path / "lib")
    lib = onnxcc.load(tmp_path / "lib")
    _compare(m, opt, lambda feeds: lib.run(feeds)["y"])


def _jit_and_compare(tmp_path, m: onnx.ModelProto, expect: set[tuple[str, str]]) -> None:
    _, opt = _optimised(tmp_path, m, expect)
    mod, _, k = jit_compile(opt)
    _compare(m, opt, lambda feeds: k(*[feeds[a.name] for a in mod.main.params])[0])


def test_ort_optimised_bert_layer_jit_matches(tmp_path):
    _jit_and_compare(tmp_path, bert_layer(), _BERT_OPS)


# the per-range memory plan of this graph has a layout offset whose Piecewise condition sympy
# merged into `(S <= 16) | (S <= 33)` (an internal error before kernel exprs took Or / And)
def test_ort_optimised_bert_layer_compiles_and_matches(tmp_path):
    _compile_and_compare(tmp_path, bert_layer(), _BERT_OPS)


def test_ort_optimised_rms_mlp_jit_matches(tmp_path):
    _jit_and_compare(tmp_path, llama_mlp(), _RMS_OPS)


def test_ort_optimised_rms_mlp_compiles_and_matches(tmp_path):
    _compile_and_compare(tmp_path, llama_mlp(), _RMS_OPS)


def test_transformers_optimised_bert_attention_compiles_and_matches(tmp_path):
    from onnxruntime.transformers import optimizer

    src = tmp_path / "bert.onnx"
    onnx.save(bert_multihead_layer(), str(src))
    fused = optimizer.optimize_model(str(src), model_type="bert", num_heads=4, hidden_size=D, opt_level=0)
    opt_path = tmp_path / "opt.onnx"
    fused.save_model_to_file(str(opt_path))
    opt = onnx.load(str(opt_path))
    ops = {(nd.domain, nd.op_type) for nd in opt.graph.node}
    expect = {("com.microsoft", "Attention"), ("com.microsoft", "SkipLayerNormalization"),
              ("com.microsoft", "BiasGelu")}
    assert expect <= ops, f"the transformers optimizer no longer emits {expect - ops}; got {sorted(ops)}"
    mod, _, k = jit_compile(opt)
    _compare(bert_multihead_layer(), opt, lambda feeds: k(*[feeds[a.name] for a in mod.main.params])[0])
    onnxcc.compile(opt_path, tmp_path / "lib")
    lib = onnxcc.load(tmp_path / "lib")
    _compare(bert_multihead_layer(), opt, lambda feeds: lib.run(feeds)["y"])
