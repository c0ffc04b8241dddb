"""CausalConvWithState, TensorScatter and SwiGLU: shape rules, numpy references and native
lowerings (JIT) against onnxruntime, with symbolic dims; and the clear errors for bad input
(an unknown activation, a cache write past the end)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx.reference import ReferenceEvaluator

from onnxcc import load_onnx
from onnxcc.errors import OnnxccError, RuntimeCallError, ShapeError
from onnxcc.interp import run as interp_run
from onnxcc.ir.parser import parse_module
from onnxcc.passes import run_pipeline
from onnxcc.testing import jit_run, ort_run


def one_node(op, ins, outs, opset, **attrs):
    """A one-node model; ins / outs: (name, elem, shape) with str dims symbolic ('' = absent input)."""
    args = [i if isinstance(i, str) else i[0] for i in ins]
    node = oh.make_node(op, args, [o[0] for o in outs], **attrs)
    graph = oh.make_graph([node], "g", [oh.make_tensor_value_info(*i) for i in ins if not isinstance(i, str)],
                          [oh.make_tensor_value_info(*o) for o in outs])
    m = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def imported(m):
    mod = load_onnx(m)
    run_pipeline(mod, "shape-inference,canonicalize")
    return mod


def compare(m, feeds_list, rtol=1e-5, atol=1e-6, oracle=ort_run):
    """interp and JIT against the oracle (onnxruntime by default) on each feed dict."""
    mod = imported(m)
    names = [o.name for o in m.graph.output]
    for f in feeds_list:
        want = oracle(m, f)
        for how, got in (("interp", interp_run(mod, f)), ("native", jit_run(mod, f))):
            assert len(got) == len(names)
            for name, g in zip(names, got, strict=True):
                assert g.shape == want[name].shape and g.dtype == want[name].dtype, (how, name)
                np.testing.assert_allclose(g, want[name], rtol=rtol, atol=atol, err_msg=f"{how} {name}")


def onnx_reference(m, feeds):
    return dict(zip([o.name for o in m.graph.output], ReferenceEvaluator(m).run(None, feeds), strict=True))


def randn(rng, *shape, dtype: type = np.float32):
    return rng.standard_normal(shape).astype(dtype)


# ---- CausalConvWithState ------------------------------------------------------------------------

def conv_model(k, *, bias=False, past=False, act=None, elem=TP.FLOAT):
    ins = [("x", elem, ["batch", 3, "len"]), ("w", elem, [3, 1, k]), ("b", elem, [3]) if bias else "",
           ("past", elem, ["batch", 3, k - 1]) if past else ""]
    while isinstance(ins[-1], str):
        ins.pop()
    attrs = {"activation": act} if act else {}
    return one_node("CausalConvWithState", ins, [("y", elem, ["batch", 3, "len"]),
                                                 ("state", elem, ["batch", 3, k - 1])], 27, **attrs)


@pytest.mark.parametrize("k, bias, past, act", [(4, False, False, None), (3, True, True, "silu"),
                                                (1, True, False, "swish"), (5, False, True, None)])
def test_causal_conv_matches_onnxruntime(k, bias, past, act):
    rng = np.random.default_rng(k)
    feeds = []
    for batch, n in ((2, 7), (1, 1), (3, 2)):  # lengths shorter than the kernel too
        f = {"x": randn(rng, batch, 3, n), "w": randn(rng, 3, 1, k)}
        if bias:
            f["b"] = randn(rng, 3)
        if past:
            f["past"] = randn(rng, batch, 3, k - 1)
        feeds.append(f)
    compare(conv_model(k, bias=bias, past=past, act=act), feeds)


def test_causal_conv_half_precision():
    rng = np.random.default_rng(7)
    f = {"x": randn(rng, 2, 3, 6, dtype=np.float16), "w": randn(rng, 3, 1, 4, dtype=np.float16),
         "past": randn(rng, 2, 3, 3, dtype=np.float16)}
    compare(conv_model(4, past=True, act="silu", elem=TP.FLOAT16), [f], rtol=2e-3, atol=2e-3)


def test_causal_conv_shapes_and_bad_activation():
    mod = imported(conv_model(4, past=True))
    assert [str(r.type) for r in mod.main.return_op.operands] == ["f32[batch, 3, len]", "f32[batch, 3, 3]"]
    with pytest.raises(ShapeError, match="activation must be one of"):
        imported(conv_model(4, act="gelu"))


# ---- TensorScatter ----------------------------------------------------------------------------------

def scatter_model(mode="linear", axis=-2, idx=True, shape=("batch", 2, 6, 3), upd=("batch", 2, "n", 3)):
    ins = [("past", TP.FLOAT, list(shape)), ("upd", TP.FLOAT, list(upd))]
    if idx:
        ins.append(("w", TP.INT64, ["batch"]))
    return one_node("TensorScatter", ins, [("y", TP.FLOAT, list(shape))], 24, mode=mode, axis=axis)


@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_tensor_scatter_matches_onnxruntime(mode):
    rng = np.random.default_rng(1)
    w = np.array([0, 3, 4], np.int64) if mode == "linear" else np.array([5, 3, 4], np.int64)
    feeds = [{"past": randn(rng, 3, 2, 6, 3), "upd": randn(rng, 3, 2, 2, 3), "w": w},
             {"past": randn(rng, 1, 2, 6, 3), "upd": randn(rng, 1, 2, 6, 3), "w": np.zeros(1, np.int64)}]
    compare(scatter_model(mode), feeds, rtol=0, atol=0)


def test_tensor_scatter_prefill_on_another_axis():
    rng = np.random.default_rng(2)
    m = scatter_model(axis=1, idx=False, shape=("batch", 5, 4), upd=("batch", "n", 4))
    compare(m, [{"past": randn(rng, 2, 5, 4), "upd": randn(rng, 2, 3, 4)}], rtol=0, atol=0)


def test_tensor_scatter_write_past_the_end_is_an_error():
    rng = np.random.default_rng(3)
    m = scatter_model("linear")
    mod = imported(m)
    f = {"past": randn(rng, 1, 2, 6, 3), "upd": randn(rng, 1, 2, 2, 3), "w": np.array([5], np.int64)}
    with pytest.raises(OnnxccError, match="outside the cache"):
        interp_run(mod, f)
    with pytest.raises(RuntimeCallError, match="index"):
        jit_run(mod, f)


def test_tensor_scatter_refuses_the_batch_axis_and_longer_updates():
    with pytest.raises(ShapeError, match="axis must not be 0"):
        imported(scatter_model(axis=0))
    with pytest.raises(ShapeError, match="sequence length <= the cache length"):
        imported(scatter_model(shape=(2, 2, 3, 3), upd=(2, 2, 4, 3)))


# ---- SwiGLU -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("alpha, elem, dtype, tol", [(None, TP.FLOAT, np.float32, 1e-5),
                                                     (1.702, TP.FLOAT, np.float32, 1e-5),
                                                     (None, TP.FLOAT16, np.float16, 2e-3)])
def test_swiglu_matches_the_onnx_reference(alpha, elem, dtype, tol):
    """onnxruntime 1.32 runs SwiGLU only through its function body, whose Swish(24) it has no
    kernel for: onnx's own reference evaluator is the oracle here."""
    attrs = {"alpha": alpha} if alpha is not None else {}
    m = one_node("SwiGLU", [("a", elem, ["batch", "hidden"]), ("b", elem, ["batch", "hidden"])],
                 [("y", elem, ["batch", "hidden"])], 28, **attrs)
    rng = np.random.default_rng(4)
    compare(m, [{"a": randn(rng, 2, 7, dtype=dtype), "b": randn(rng, 2, 7, dtype=dtype)},
                {"a": randn(rng, 1, 1, dtype=dtype), "b": randn(rng, 1, 1, dtype=dtype)}], rtol=tol, atol=tol,
            oracle=onnx_reference)


def test_swiglu_does_not_broadcast():
    m = one_node("SwiGLU", [("a", TP.FLOAT, [2, 4]), ("b", TP.FLOAT, [1, 4])], [("y", TP.FLOAT, [2, 4])], 28)
    with pytest.raises(ShapeError, match="no broadcasting"):
        imported(m)


# ---- the IR text ------------------------------------------------------------------------------------

@pytest.mark.parametrize("build", [
    lambda: conv_model(4, bias=True, past=True, act="silu"),
    lambda: scatter_model("circular"),
    lambda: one_node("SwiGLU", [("a", TP.FLOAT, ["n"]), ("b", TP.FLOAT, ["n"])], [("y", TP.FLOAT, ["n"])], 28,
                     alpha=0.5),
], ids=["causal_conv", "tensor_scatter", "swiglu"])
def test_ir_round_trip(build):
    """The imported module prints and parses back to the same text (attributes included)."""
    text = str(imported(build()))
    assert "onnx." in text and str(parse_module(text)) == text
