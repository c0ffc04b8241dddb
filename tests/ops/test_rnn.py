"""RNN, LSTM and GRU: symbolic shape rules, the numpy reference against onnxruntime (layout 0) and
onnx.reference (layout 1, which onnxruntime does not run), the lowering through the JIT, and
the messages for what is not supported."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx.reference import ReferenceEvaluator

from onnxcc import load_onnx
from onnxcc.codegen.cpu.jit import JitKernel
from onnxcc.errors import UnsupportedOp
from onnxcc.interp import run as interp_run
from onnxcc.passes import run_pipeline
from onnxcc.passes.lower import lower_function
from onnxcc.testing import ort_run

HID, INP = 5, 3


def rnn(kind, direction="forward", layout=0, *, bias=True, init=False, lens=False, peep=False, clip=None,
        lbr=0, **attrs) -> onnx.ModelProto:
    nd, g = (2 if direction == "bidirectional" else 1), {"LSTM": 4, "GRU": 3, "RNN": 1}[kind]
    rng = np.random.default_rng(g * 10 + nd)

    def w(name, *shape):
        return oh.make_tensor(name, TP.FLOAT, shape, (rng.standard_normal(shape) * 0.5).ravel())

    inits = [w("W", nd, g * HID, INP), w("R", nd, g * HID, HID)]
    xs = ["batch", "seq", INP] if layout else ["seq", "batch", INP]
    st = ["batch", nd, HID] if layout else [nd, "batch", HID]
    ins = [oh.make_tensor_value_info("X", TP.FLOAT, xs)]
    args = ["X", "W", "R", "B" if bias else "", "L" if lens else ""]
    if bias:
        inits.append(w("B", nd, 2 * g * HID))
    if lens:
        ins.append(oh.make_tensor_value_info("L", TP.INT32, ["batch"]))
    states = ["h0", "c0"] if kind == "LSTM" else ["h0"]
    args += states if init else [""] * len(states)
    ins += [oh.make_tensor_value_info(s, TP.FLOAT, st) for s in states] if init else []
    if peep:
        inits.append(w("P", nd, 3 * HID))
        args.append("P")
    while not args[-1]:
        args.pop()
    outs = ["Y", "Yh"] + (["Yc"] if kind == "LSTM" else [])
    extra = dict(attrs)
    if kind == "GRU":
        extra["linear_before_reset"] = lbr
    if clip is not None:
        extra["clip"] = clip
    node = oh.make_node(kind, args, outs, hidden_size=HID, direction=direction, layout=layout, **extra)
    ys = ["batch", "seq", nd, HID] if layout else ["seq", nd, "batch", HID]
    ovis = [oh.make_tensor_value_info("Y", TP.FLOAT, ys)] + [oh.make_tensor_value_info(o, TP.FLOAT, st)
                                                            for o in outs[1:]]
    m = oh.make_model(oh.make_graph([node], "rnn", ins, ovis, inits), opset_imports=[oh.make_opsetid("", 14)])
    m.ir_version = 8
    return m


def feeds_for(model, dims, seed=0):
    rng = np.random.default_rng(seed)
    out = {}
    for vi in model.graph.input:
        shape = [d.dim_value or dims[d.dim_param] for d in vi.type.tensor_type.shape.dim]
        if vi.name == "L":
            out["L"] = rng.integers(1, dims["seq"] + 1, shape).astype(np.int32)
        else:
            out[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return out


def imported(model):
    m = load_onnx(model)
    run_pipeline(m, "shape-inference,canonicalize")
    return m


def jitted(m):
    """The lowered @main JIT-compiled once (call it with the inputs in order)."""
    return JitKernel(lower_function(m, m.main, "rnn"))


def test_shapes_are_symbolic():
    text = str(imported(rnn("LSTM", "bidirectional")))
    assert "-> (f32[seq, 2, batch, 5], f32[2, batch, 5], f32[2, batch, 5])" in text
    text = str(imported(rnn("GRU", "reverse", layout=1)))
    assert "-> (f32[batch, seq, 1, 5], f32[batch, 1, 5])" in text
    text = str(imported(rnn("RNN", "bidirectional")))
    assert "-> (f32[seq, 2, batch, 5], f32[2, batch, 5])" in text


CASES = [("LSTM", "forward", {}), ("LSTM", "reverse", {"init": True, "peep": True, "clip": 1.5}),
         ("LSTM", "bidirectional", {"lens": True, "bias": False}),
         ("GRU", "forward", {"lbr": 1, "init": True}),
         ("GRU", "reverse", {"lens": True, "clip": 2.0}), ("GRU", "bidirectional", {"init": True}),
         ("RNN", "forward", {}), ("RNN", "reverse", {"lens": True, "init": True, "clip": 0.8}),
         ("RNN", "bidirectional", {"lens": True, "bias": False})]
DIMS = [{"seq": 1, "batch": 1}, {"seq": 6, "batch": 3}]


@pytest.mark.parametrize("kind,direction,kw", CASES, ids=[f"{k}-{d}" for k, d, _ in CASES])
def test_reference_and_lowering_match_onnxruntime(kind, direction, kw):
    model = rnn(kind, direction, **kw)
    m = imported(model)
    kernel = jitted(m)
    for k, dims in enumerate(DIMS):
        feeds = feeds_for(model, dims, k)
        want = list(ort_run(model, feeds).values())
        ref, low = interp_run(m, list(feeds.values())), kernel(*feeds.values())
        for what, got in (("reference", ref), ("lowering", low)):
            for w, g in zip(want, got):
                np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=f"{what} at {dims}")


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_layout_1_matches_onnx_reference(kind):
    model = rnn(kind, "bidirectional", layout=1, init=True)
    m = imported(model)
    feeds = feeds_for(model, {"seq": 4, "batch": 2}, 5)
    want = ReferenceEvaluator(model).run(None, feeds)
    for got in (interp_run(m, list(feeds.values())), jitted(m)(*feeds.values())):
        for w, g in zip(want, got):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("attrs,msg", [({"activations": ["Relu", "Tanh", "Tanh"]}, "only the defaults"),
                                       ({"input_forget": 1}, "input_forget=1")])
def test_unsupported_attributes_say_so(attrs, msg):
    with pytest.raises(UnsupportedOp, match=msg):
        imported(rnn("LSTM", **attrs))


def test_rnn_unsupported_activation_says_so():
    with pytest.raises(UnsupportedOp, match="only the defaults"):
        imported(rnn("RNN", activations=["Relu"]))
