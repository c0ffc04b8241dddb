"""ai.onnx.preview.FlexAttention: the shape rule over its subgraphs, the numpy reference and the
native lowering (JIT) against onnx's reference evaluator (onnxruntime 1.32 does not run the op),
with GQA, symbolic sequence lengths, both modifiers in either attribute order, a modifier that
captures an outer value, the IR round trip, and the refusal of an unsupported precision."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx.reference import ReferenceEvaluator

from onnxcc import load_onnx
from onnxcc.errors import OnnxccError
from onnxcc.interp import run as interp_run
from onnxcc.ir.parser import parse_module
from onnxcc.passes import run_pipeline
from onnxcc.testing import jit_module

DIMS = ["B", "H", "L", "S"]


def causal_mask():
    """score_mod: Where(q_idx >= k_idx, scores, -inf), the indices from the scores' shape."""
    c = oh.make_tensor
    nodes = [oh.make_node("Shape", ["s"], ["shp"]),
             oh.make_node("Gather", ["shp", "i2"], ["n_l"], axis=0),
             oh.make_node("Gather", ["shp", "i3"], ["n_s"], axis=0),
             oh.make_node("Range", ["zero", "n_l", "one"], ["rl"]),
             oh.make_node("Reshape", ["rl", "ql"], ["qi"]),
             oh.make_node("Range", ["zero", "n_s", "one"], ["rs"]),
             oh.make_node("Reshape", ["rs", "ks"], ["ki"]),
             oh.make_node("GreaterOrEqual", ["qi", "ki"], ["keep"]),
             oh.make_node("Where", ["keep", "s", "ninf"], ["out"])]
    inits = [c("zero", TP.INT64, [], [0]), c("one", TP.INT64, [], [1]), c("i2", TP.INT64, [], [2]),
             c("i3", TP.INT64, [], [3]), c("ql", TP.INT64, [4], [1, 1, -1, 1]), c("ks", TP.INT64, [4], [1, 1, 1, -1]),
             c("ninf", TP.FLOAT, [], [float("-inf")])]
    return oh.make_graph(nodes, "causal", [oh.make_tensor_value_info("s", TP.FLOAT, DIMS)],
                         [oh.make_tensor_value_info("out", TP.FLOAT, DIMS)], inits)


def elementwise(op, const_name, value=None, name="mod"):
    """x -> op(x, c): c an initializer of the subgraph, or (value None) an outer graph input."""
    inits = [] if value is None else [oh.make_tensor(const_name, TP.FLOAT, [], [value])]
    return oh.make_graph([oh.make_node(op, ["x", const_name], ["out"])], name,
                         [oh.make_tensor_value_info("x", TP.FLOAT, DIMS)],
                         [oh.make_tensor_value_info("out", TP.FLOAT, DIMS)], inits)


def model(hq=4, hkv=2, extra_inputs=(), **attrs):
    node = oh.make_node("FlexAttention", ["q", "k", "v"], ["y"], domain="ai.onnx.preview")
    node.attribute.extend(oh.make_attribute(k, v) for k, v in attrs.items())  # in the order given
    ins = [oh.make_tensor_value_info("q", TP.FLOAT, ["b", hq, "l", 8]),
           oh.make_tensor_value_info("k", TP.FLOAT, ["b", hkv, "s", 8]),
           oh.make_tensor_value_info("v", TP.FLOAT, ["b", hkv, "s", 6]), *extra_inputs]
    g = oh.make_graph([node], "g", ins, [oh.make_tensor_value_info("y", TP.FLOAT, ["b", hq, "l", 6])])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 23), oh.make_opsetid("ai.onnx.preview", 1)])
    m.ir_version = 10
    return m


def feeds(m, b, lq, s, seed=0):
    rng = np.random.default_rng(seed)
    out = {}
    for vi in m.graph.input:
        shape = [d.dim_value or {"b": b, "l": lq, "s": s}[d.dim_param] for d in vi.type.tensor_type.shape.dim]
        out[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return out


native = jit_module  # lowered and JIT-compiled once: feeds -> results


def imported(m):
    mod = load_onnx(m)
    run_pipeline(mod, "shape-inference,canonicalize,prune-symbols")  # the subgraphs' own dim names go
    return mod


def compare(m, sizes, oracle=None):
    """interp and JIT against onnx's reference evaluator run on `oracle` (default: m itself)."""
    mod = imported(m)
    assert str(mod.main.return_op.operands[0].type).startswith("f32[b, ")
    run = native(mod)
    for k, size in enumerate(sizes):
        f = feeds(m, *size, seed=k)
        ref = ReferenceEvaluator(oracle or m)
        want = ref.run(None, {n: f[n] for n in ref.input_names})[0]
        np.testing.assert_allclose(interp_run(mod, f)[0], want, rtol=1e-4, atol=1e-5, err_msg=f"interp {size}")
        np.testing.assert_allclose(run(f)[0], want, rtol=1e-4, atol=1e-5, err_msg=f"native {size}")


def test_causal_gqa():
    compare(model(score_mod=causal_mask()), [(2, 5, 5), (1, 3, 3), (1, 2, 4)])


def test_plain_attention_with_scale():
    compare(model(hq=2, hkv=2, scale=0.3), [(2, 3, 7)])


@pytest.mark.parametrize("order", ["score_first", "prob_first"])
def test_both_modifiers_in_either_attribute_order(order):
    mods = {"score_mod": elementwise("Add", "bias", 0.5), "prob_mod": elementwise("Mul", "f", 2.0)}
    attrs = mods if order == "score_first" else dict(reversed(list(mods.items())))
    m = model(**attrs)
    assert [a.name for a in m.graph.node[0].attribute] == list(attrs)
    compare(m, [(2, 4, 6)])


def test_a_modifier_capturing_an_outer_input():
    """The oracle (whose evaluator cannot capture into this op) is the same model with the
    captured value as a constant of the subgraph."""
    extra = [oh.make_tensor_value_info("cap", TP.FLOAT, [])]
    m = model(extra_inputs=extra, score_mod=elementwise("Mul", "cap"))
    f = feeds(m, 1, 3, 4)
    folded = model(score_mod=elementwise("Mul", "cap", float(f["cap"])))
    compare(m, [(1, 3, 4)], oracle=folded)


def test_ir_round_trip_keeps_the_region_names():
    mod = imported(model(prob_mod=elementwise("Mul", "f", 2.0), score_mod=causal_mask()))
    text = str(mod)
    assert "region_names" in text and str(parse_module(text)) == text


def test_half_softmax_precision_is_refused():
    with pytest.raises(OnnxccError, match="softmax_precision 10"):
        imported(model(softmax_precision=10))


def test_cost_counts_both_products_and_the_softmax():
    from onnxcc.ops import get_opdef

    mod = imported(model(score_mod=causal_mask()))
    op = next(o for o in mod.main.body.ops if o.name == "ai.onnx.preview.FlexAttention")
    assert str(get_opdef(op.name).flops(op)) == f"{4 * (2 * 8 + 2 * 6 + 5)}*b*l*s"
