"""LinearAttention: the symbolic shape rule, the numpy reference and the native lowering (JIT),
each against onnxruntime, for every update rule, GQA, past state and half precision; and the
errors for inputs that contradict the update rule."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh

from onnxcc import load_onnx
from onnxcc.errors import ShapeError
from onnxcc.interp import run as interp_run
from onnxcc.ir.parser import parse_module
from onnxcc.passes import run_pipeline
from onnxcc.testing import jit_module, jit_run, ort_run

HQ, HKV, DK, DV = 4, 2, 3, 5
NEEDS = {"linear": (), "gated": ("decay",), "delta": ("beta",), "gated_delta": ("decay", "beta")}


def model(rule, *, past=False, per_key=True, beta_scalar=False, elem=TP.FLOAT, hq=HQ, scale=None):
    """One LinearAttention node over [batch, seq, H*D] inputs with symbolic batch and seq."""
    ins = [oh.make_tensor_value_info("q", elem, ["batch", "seq", hq * DK]),
           oh.make_tensor_value_info("k", elem, ["batch", "seq", HKV * DK]),
           oh.make_tensor_value_info("v", elem, ["batch", "seq", HKV * DV])]
    args = ["q", "k", "v", "past" if past else ""]
    if past:
        ins.append(oh.make_tensor_value_info("past", elem, ["batch", HKV, DK, DV]))
    for name, width in (("decay", HKV * DK if per_key else HKV), ("beta", 1 if beta_scalar else HKV)):
        if name in NEEDS[rule]:
            ins.append(oh.make_tensor_value_info(name, elem, ["batch", "seq", width]))
            args.append(name)
        else:
            args.append("")
    while not args[-1]:
        args.pop()
    attrs = {"update_rule": rule, "q_num_heads": hq, "kv_num_heads": HKV}
    if scale is not None:
        attrs["scale"] = scale
    node = oh.make_node("LinearAttention", args, ["y", "state"], **attrs)
    outs = [oh.make_tensor_value_info("y", elem, ["batch", "seq", hq * DV]),
            oh.make_tensor_value_info("state", elem, ["batch", HKV, DK, DV])]
    m = oh.make_model(oh.make_graph([node], "la", ins, outs), opset_imports=[oh.make_opsetid("", 27)])
    m.ir_version = 10
    return m


def feeds(m, batch, seq, seed=0, dtype=np.float32):
    """Inputs in the ranges real layers use: decay a small negative log-gate, beta in (0, 1),
    keys unit-norm per head (what keeps the delta rule's state bounded)."""
    rng = np.random.default_rng(seed)
    out = {}
    for vi in m.graph.input:
        shape = [d.dim_value or {"batch": batch, "seq": seq}[d.dim_param] for d in vi.type.tensor_type.shape.dim]
        x = rng.standard_normal(shape)
        if vi.name == "decay":
            x = -np.abs(x) * 0.1
        elif vi.name == "beta":
            x = rng.random(shape)
        elif vi.name == "k":
            x4 = x.reshape(batch, seq, HKV, DK)
            x = (x4 / np.linalg.norm(x4, axis=-1, keepdims=True)).reshape(shape)
        elif vi.name == "past":
            x = x * 0.1
        out[vi.name] = x.astype(dtype)
    return out


native = jit_module  # lowered and JIT-compiled once: feeds -> results


def imported(m):
    mod = load_onnx(m)
    run_pipeline(mod, "shape-inference,canonicalize")
    return mod


def compare(m, sizes, rtol=1e-4, atol=1e-5, dtype=np.float32):
    mod = imported(m)
    run = native(mod)
    for k, (batch, seq) in enumerate(sizes):
        f = feeds(m, batch, seq, seed=k, dtype=dtype)
        want = ort_run(m, f)
        for how, got in (("interp", interp_run(mod, f)), ("native", run(f))):
            for name, g in zip(("y", "state"), got, strict=True):
                assert g.dtype == want[name].dtype, (how, name, g.dtype)
                np.testing.assert_allclose(g, want[name], rtol=rtol, atol=atol,
                                           err_msg=f"{how} {name} at batch={batch} seq={seq}")


@pytest.mark.parametrize("rule", list(NEEDS))
def test_update_rules_match_onnxruntime(rule):
    compare(model(rule), [(1, 1), (2, 5)])


def test_past_state_per_head_decay_and_scalar_beta():
    compare(model("gated_delta", past=True, per_key=False, beta_scalar=True), [(2, 3), (1, 1)])


def test_multi_query_and_explicit_scale():
    compare(model("gated", hq=HKV * 3, scale=0.25), [(2, 4)])


@pytest.mark.slow  # fp16 is also in the node-test gate (test_linear_attention_fp16)
def test_half_precision_within_half_tolerance():
    compare(model("gated_delta", past=True, elem=TP.FLOAT16), [(2, 4)], rtol=2e-2, atol=2e-2, dtype=np.float16)


def test_shapes_are_symbolic():
    mod = imported(model("delta", past=True))
    assert [str(r.type) for r in mod.main.return_op.operands] == \
        [f"f32[batch, seq, {HQ * DV}]", f"f32[batch, {HKV}, {DK}, {DV}]"]
    text = str(mod)
    assert str(parse_module(text)) == text  # the IR text round-trips, attributes included


@pytest.mark.parametrize("rule, drop, want", [
    ("linear", "add-decay", "takes no decay"),
    ("gated_delta", "beta", "needs beta"),
])
def test_inputs_contradicting_the_rule_are_refused(rule, drop, want):
    m = model(rule)
    node = m.graph.node[0]
    if drop == "add-decay":
        m.graph.input.append(oh.make_tensor_value_info("decay", TP.FLOAT, ["batch", "seq", HKV]))
        del node.input[3:]
        node.input.extend(["", "decay"])
    else:
        del node.input[5:]
        m.graph.input.pop()
    with pytest.raises(ShapeError, match=want):
        imported(m)


def test_heads_that_do_not_divide_are_refused():
    m = model("linear")
    for a in m.graph.node[0].attribute:
        if a.name == "q_num_heads":
            a.i = 3
    with pytest.raises(ShapeError, match="multiple of kv_num_heads"):
        imported(m)


def test_cost_counts_every_state_element_per_token():
    """The bucket cost model's flops: per token and state element ~6 per kv head, 2 per query head."""
    from onnxcc.ops import get_opdef

    mod = imported(model("gated_delta"))
    op = next(o for o in mod.main.body.ops if o.name == "onnx.LinearAttention")
    assert str(get_opdef(op.name).flops(op)) == f"{DK * DV * (6 * HKV + 2 * HQ)}*batch*seq"


def test_bfloat16_activations_with_a_float32_state():
    """T = bf16, S = f32 (the spec allows a wider state): the native kernel against the
    interpreter, which is itself checked against onnx's reference evaluator."""
    import ml_dtypes
    from onnx.reference import ReferenceEvaluator

    m = model("gated_delta", past=True, elem=TP.BFLOAT16)
    for vi in [*m.graph.input, *m.graph.output]:
        if vi.name in ("past", "state"):
            vi.type.tensor_type.elem_type = TP.FLOAT
    mod = imported(m)
    assert [r.type.dtype.value for r in mod.main.return_op.operands] == ["bf16", "f32"]
    bf16 = ml_dtypes.bfloat16
    f = {k: (v if k == "past" else v.astype(bf16)) for k, v in feeds(m, 2, 4).items()}
    want = interp_run(mod, f)
    for w, r in zip(want, ReferenceEvaluator(m).run(None, f), strict=True):
        np.testing.assert_allclose(w.astype(np.float32), r.astype(np.float32), rtol=1e-2, atol=1e-2)
    got = jit_run(mod, {k: (v.view(np.uint16) if v.dtype == bf16 else v) for k, v in f.items()})  # bf16 as bits
    # one bf16 ulp: the f32 results may differ in their last bits before the rounding to bf16
    np.testing.assert_allclose(got[0].view(bf16).astype(np.float32), want[0].astype(np.float32), rtol=2 ** -7,
                               atol=1e-6)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6)
