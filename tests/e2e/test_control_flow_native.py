"""If, Loop, Scan, LSTM and GRU compiled into one native library (no graph breaks), run from
Python through onnxcc.load and from a C program, compared with onnxruntime at several
settings of the symbolic dims, with predicates that take each branch.

Run-determined dims (NAME.h documents the contract): a Loop's stacked scan outputs over a
data-dependent number of iterations are allocated for the trip count's upper bound, which
NAME_output_shape reports; NAME_output_dims gives the true shape after the run, and the
loader returns arrays cut to it.
"""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh

import onnxcc
from onnxcc.errors import RuntimeCallError
from onnxcc.testing import MODELS_DIR, ort_run, random_inputs
from onnxcc.testing_c import C_F32_TENSOR

RTOL, ATOL = 1e-4, 1e-5


def _close(got: dict, want: dict, where: str) -> None:
    assert list(got) == list(want)
    for name, w in want.items():
        assert got[name].shape == w.shape, f"{name} at {where}: shape {got[name].shape} != {w.shape}"
        np.testing.assert_allclose(got[name], w, rtol=RTOL, atol=ATOL, err_msg=f"{name} at {where}")


def vi(name: str, elem: int, shape) -> onnx.ValueInfoProto:
    return oh.make_tensor_value_info(name, elem, shape)


def cst(name: str, value, elem: int = TP.FLOAT, shape=()) -> onnx.NodeProto:
    """A Constant node (a scalar unless `shape` is given)."""
    vals = list(value) if shape else [value]
    return oh.make_node("Constant", [], [name], value=oh.make_tensor(name, elem, list(shape), vals))


def _model(nodes, inputs, outputs, inits=(), opset=17) -> onnx.ModelProto:
    m = oh.make_model(oh.make_graph(nodes, "m", inputs, outputs, list(inits)),
                      opset_imports=[oh.make_opsetid("", opset)])
    m.ir_version = 8
    return m


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """name -> loaded artifact, compiled once per module."""
    cache: dict = {}

    def get(name: str, model=None, **options):
        if name not in cache:
            d = tmp_path_factory.mktemp(name)
            src = model if model is not None else MODELS_DIR / f"{name}.onnx"
            onnxcc.compile(src, d, name=name, **options)
            cache[name] = (d, onnxcc.load(d))
        return cache[name]

    return get


# ---- the sample models ---------------------------------------------------------------------


@pytest.mark.parametrize("batch", [1, 3, 64])
@pytest.mark.parametrize("sign", [1.0, -1.0], ids=["then", "else"])
def test_if_model_takes_each_branch(built, batch, sign):
    _, m = built("if_model")
    x = (np.abs(np.random.default_rng(batch).standard_normal((batch, 16))) + 0.1).astype(np.float32) * sign
    _close(m.run({"x": x}), ort_run(MODELS_DIR / "if_model.onnx", {"x": x}), f"batch={batch}")


@pytest.mark.parametrize("dims", [{"batch": 1}, {"batch": 3}, {"batch": 64}])
def test_loop_model_data_dependent_exit(built, dims):
    _, m = built("loop_model")
    for seed, scale in ((0, 1.0), (1, 0.05)):  # small inputs converge in fewer iterations
        feeds = random_inputs(MODELS_DIR / "loop_model.onnx", dims, seed)
        feeds = {k: v * np.float32(scale) for k, v in feeds.items()}
        want = ort_run(MODELS_DIR / "loop_model.onnx", feeds)
        got = m.run(feeds)
        _close(got, want, f"{dims} scale {scale}")
        # the caller allocates for the bound (10 trips); the run reports the true count
        assert m.output_shape(feeds, "h_all") == (10, dims["batch"], 8)


@pytest.mark.parametrize("dims", [{"batch": 1, "seq": 1}, {"batch": 3, "seq": 7}, {"batch": 2, "seq": 64}])
def test_scan_model(built, dims):
    _, m = built("scan_model")
    feeds = random_inputs(MODELS_DIR / "scan_model.onnx", dims, seed=2)
    _close(m.run(feeds), ort_run(MODELS_DIR / "scan_model.onnx", feeds), str(dims))


def test_loop_header_documents_the_contract(built):
    d, _ = built("loop_model")
    h = (d / "loop_model.h").read_text()
    assert "iters <= 10" in h and "loop_model_output_dims(int output, int64_t *shape)" in h
    meta = (d / "loop_model.json").read_text()
    assert '"run_determined"' in meta and '"run_dims"' in meta


# ---- LSTM and GRU ---------------------------------------------------------------------------

HID, INP = 6, 4


def rnn_model() -> onnx.ModelProto:
    """Six recurrent layers over one X[seq, batch, 4]: LSTM forward / reverse / bidirectional
    and GRU forward (linear_before_reset) / reverse / bidirectional, with and without B and
    initial states."""
    rng = np.random.default_rng(7)
    inits, nodes, outs = [], [], []

    def w(name, *shape):
        inits.append(oh.make_tensor(name, TP.FLOAT, shape, (rng.standard_normal(shape) * 0.4).ravel()))
        return name

    ins = [oh.make_tensor_value_info("X", TP.FLOAT, ["seq", "batch", INP]),
           oh.make_tensor_value_info("h0", TP.FLOAT, [2, "batch", HID]),
           oh.make_tensor_value_info("c0", TP.FLOAT, [2, "batch", HID])]
    layers = [("LSTM", "forward", True, False), ("LSTM", "reverse", False, False),
              ("LSTM", "bidirectional", True, True), ("GRU", "forward", True, False),
              ("GRU", "reverse", False, False), ("GRU", "bidirectional", True, True)]
    for n, (kind, direction, bias, init) in enumerate(layers):
        nd, g = (2 if direction == "bidirectional" else 1), (4 if kind == "LSTM" else 3)
        args = ["X", w(f"W{n}", nd, g * HID, INP), w(f"R{n}", nd, g * HID, HID),
                w(f"B{n}", nd, 2 * g * HID) if bias else "", ""]
        if init:
            args += ["h0", "c0"] if kind == "LSTM" else ["h0"]
        names = [f"Y{n}", f"Yh{n}"] + ([f"Yc{n}"] if kind == "LSTM" else [])
        attrs = {"linear_before_reset": 1} if (kind, direction) == ("GRU", "forward") else {}
        nodes.append(oh.make_node(kind, [a for a in args] if init else args[:4], names, hidden_size=HID,
                                  direction=direction, **attrs))
        outs.append(oh.make_tensor_value_info(f"Y{n}", TP.FLOAT, ["seq", nd, "batch", HID]))
        outs += [oh.make_tensor_value_info(x, TP.FLOAT, [nd, "batch", HID]) for x in names[1:]]
    return _model(nodes, ins, outs, inits, opset=14)


@pytest.mark.parametrize("dims", [{"seq": 1, "batch": 1}, {"seq": 5, "batch": 3}, {"seq": 17, "batch": 2}])
def test_lstm_gru_symbolic_seq_and_batch(built, dims):
    model = rnn_model()
    _, m = built("rnn", model)
    feeds = random_inputs(model, dims, seed=dims["seq"])
    _close(m.run(feeds), ort_run(model, feeds), str(dims))


def test_lstm_sequence_lens(built):
    """Per-row lengths: Y is zero past a row's length, Y_h holds its last valid step."""
    rng = np.random.default_rng(3)
    shapes = {"W": (2, 4 * HID, INP), "R": (2, 4 * HID, HID)}
    inits = [oh.make_tensor(k, TP.FLOAT, v, (rng.standard_normal(v) * 0.4).ravel())
             for k, v in shapes.items()]
    model = _model([oh.make_node("LSTM", ["X", "W", "R", "", "L"], ["Y", "Yh", "Yc"], hidden_size=HID,
                                 direction="bidirectional")],
                   [oh.make_tensor_value_info("X", TP.FLOAT, ["seq", "batch", INP]),
                    oh.make_tensor_value_info("L", TP.INT32, ["batch"])],
                   [oh.make_tensor_value_info("Y", TP.FLOAT, ["seq", 2, "batch", HID]),
                    oh.make_tensor_value_info("Yh", TP.FLOAT, [2, "batch", HID]),
                    oh.make_tensor_value_info("Yc", TP.FLOAT, [2, "batch", HID])], inits, opset=14)
    _, m = built("lstm_lens", model)
    for seq, lens in ((6, [6, 1, 3]), (9, [2, 9])):
        feeds = {"X": rng.standard_normal((seq, len(lens), INP)).astype(np.float32),
                 "L": np.array(lens, np.int32)}
        _close(m.run(feeds), ort_run(model, feeds), f"lens {lens}")


def torch_style_lstm() -> onnx.ModelProto:
    """What torch.onnx.export writes for nn.LSTM(4, 6, num_layers=2, batch_first=True) and a
    linear head on the last step: zero initial states from a Shape -> Gather -> Concat ->
    ConstantOfShape chain, Transpose to time-major, Squeeze of the direction axis."""
    rng = np.random.default_rng(11)
    inits, nodes = [], []

    def init(name, arr):
        inits.append(onnx.numpy_helper.from_array(np.asarray(arr), name))
        return name

    def node(op, ins, out, **attrs):
        nodes.append(oh.make_node(op, ins, [out] if isinstance(out, str) else out, **attrs))
        return out

    shape = node("Shape", ["x"], "shape")
    b0 = node("Gather", [shape, init("zero_i", np.array(0))], "b0")
    b = node("Unsqueeze", [b0, init("ax0", np.array([0]))], "b")
    dims = node("Concat", [init("one_l", np.array([1])), b, init("hid", np.array([HID]))], "h0_shape", axis=0)
    zeros = onnx.numpy_helper.from_array(np.zeros(1, np.float32), "v")
    h = node("Transpose", ["x"], "xt", perm=[1, 0, 2])
    for layer, inp in enumerate((INP, HID)):
        h0 = node("ConstantOfShape", [dims], f"h0_{layer}", value=zeros)
        w = init(f"W{layer}", (rng.standard_normal((1, 4 * HID, inp)) * 0.4).astype(np.float32))
        r = init(f"R{layer}", (rng.standard_normal((1, 4 * HID, HID)) * 0.4).astype(np.float32))
        bb = init(f"B{layer}", (rng.standard_normal((1, 8 * HID)) * 0.4).astype(np.float32))
        outs = [f"y{layer}", f"yh{layer}", f"yc{layer}"]
        y = node("LSTM", [h, w, r, bb, "", h0, h0], outs, hidden_size=HID)[0]
        h = node("Squeeze", [y, init(f"ax1_{layer}", np.array([1]))], f"ys{layer}")
    out = node("Transpose", [h], "out", perm=[1, 0, 2])
    last = node("Gather", [out, init("minus1", np.array(-1))], "last", axis=1)
    _head = node("MatMul", [last, init("Wo", rng.standard_normal((HID, 3)).astype(np.float32))], "head")
    return _model(nodes, [oh.make_tensor_value_info("x", TP.FLOAT, ["batch", "seq", INP])],
                  [oh.make_tensor_value_info("out", TP.FLOAT, ["batch", "seq", HID]),
                   oh.make_tensor_value_info("head", TP.FLOAT, ["batch", 3]),
                   oh.make_tensor_value_info("yh1", TP.FLOAT, [1, "batch", HID])], inits, opset=14)


@pytest.mark.parametrize("dims", [{"batch": 1, "seq": 1}, {"batch": 4, "seq": 3}, {"batch": 2, "seq": 33}])
def test_torch_style_stacked_lstm(built, dims):
    model = torch_style_lstm()
    _, m = built("torch_lstm", model)
    feeds = random_inputs(model, dims, seed=dims["seq"])
    _close(m.run(feeds), ort_run(model, feeds), str(dims))


# ---- If with branch-dependent shapes, while loops, nesting ----------------------------------


def if_shapes_model() -> onnx.ModelProto:
    """then: x * 2 (f32[n, 16]); else: x[:, :8] + 1 (f32[n, 8]); the result's dim 1 is run-determined."""
    then_g = oh.make_graph([cst("two", 2.0), oh.make_node("Mul", ["x", "two"], ["t_out"])], "then", [],
                           [vi("t_out", TP.FLOAT, ["n", 16])])
    ints = [cst(k, [v], TP.INT64, [1]) for k, v in (("st", 0), ("en", 8), ("ax", 1))]
    else_g = oh.make_graph([*ints, cst("one", 1.0),
                            oh.make_node("Slice", ["x", "st", "en", "ax"], ["sl"]),
                            oh.make_node("Add", ["sl", "one"], ["e_out"])], "else", [],
                           [vi("e_out", TP.FLOAT, ["n", 8])])
    nodes = [oh.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             oh.make_node("Constant", [], ["zero"], value=oh.make_tensor("zero", TP.FLOAT, [], [0.0])),
             oh.make_node("Greater", ["s", "zero"], ["p"]),
             oh.make_node("If", ["p"], ["y"], then_branch=then_g, else_branch=else_g)]
    return _model(nodes, [oh.make_tensor_value_info("x", TP.FLOAT, ["n", 16])],
                  [oh.make_tensor_value_info("y", TP.FLOAT, ["n", None])])


@pytest.mark.parametrize("n", [1, 5, 12])
@pytest.mark.parametrize("sign", [1.0, -1.0], ids=["then", "else"])
def test_if_branches_with_different_shapes(built, n, sign):
    model = if_shapes_model()
    _, m = built("if_shapes", model)
    x = (np.abs(np.random.default_rng(n).standard_normal((n, 16))) + 0.1).astype(np.float32) * sign
    got, want = m.run({"x": x}), ort_run(model, {"x": x})
    _close(got, want, f"n={n}")
    assert m.output_shape({"x": x}, 0) == (n, 16)  # allocated for the larger branch


def while_model() -> onnx.ModelProto:
    """Loop(M from an input, cond): carried (a, b) swapped every trip and a counter; inside the
    body an If doubles `a` on even trips; stops when sum(a) > limit. No scan outputs."""
    then_g = oh.make_graph([cst("k2", 2.0), oh.make_node("Mul", ["b_in", "k2"], ["dbl"])], "then", [],
                           [oh.make_tensor_value_info("dbl", TP.FLOAT, ["n"])])
    else_g = oh.make_graph([oh.make_node("Identity", ["b_in"], ["same"])], "else", [],
                           [oh.make_tensor_value_info("same", TP.FLOAT, ["n"])])
    body = oh.make_graph(
        [cst("two_i", 2, TP.INT64), oh.make_node("Mod", ["it", "two_i"], ["par"]), cst("zero_i", 0, TP.INT64),
         oh.make_node("Equal", ["par", "zero_i"], ["even"]),
         oh.make_node("If", ["even"], ["b2"], then_branch=then_g, else_branch=else_g),
         cst("one_f", 1.0), oh.make_node("Add", ["cnt_in", "one_f"], ["cnt_out"]),
         oh.make_node("ReduceSum", ["b2"], ["sb"], keepdims=0),
         oh.make_node("Less", ["sb", "limit"], ["go"]),
         oh.make_node("Identity", ["a_in"], ["a_out"])],
        "body",
        [vi("it", TP.INT64, []), vi("c", TP.BOOL, []), vi("a_in", TP.FLOAT, ["n"]),
         vi("b_in", TP.FLOAT, ["n"]), vi("cnt_in", TP.FLOAT, [])],
        [vi("go", TP.BOOL, []), vi("b2", TP.FLOAT, ["n"]), vi("a_out", TP.FLOAT, ["n"]),
         vi("cnt_out", TP.FLOAT, [])])
    nodes = [oh.make_node("Constant", [], ["t"], value=oh.make_tensor("t", TP.BOOL, [], [True])),
             oh.make_node("Constant", [], ["c0"], value=oh.make_tensor("c0", TP.FLOAT, [], [0.0])),
             oh.make_node("Loop", ["M", "t", "a", "b", "c0"], ["a_f", "b_f", "cnt"], body=body)]
    ins = [oh.make_tensor_value_info("M", TP.INT64, []), oh.make_tensor_value_info("limit", TP.FLOAT, []),
           oh.make_tensor_value_info("a", TP.FLOAT, ["n"]), oh.make_tensor_value_info("b", TP.FLOAT, ["n"])]
    outs = [oh.make_tensor_value_info(x, TP.FLOAT, ["n"]) for x in ("a_f", "b_f")]
    return _model(nodes, ins, outs + [oh.make_tensor_value_info("cnt", TP.FLOAT, [])])


@pytest.mark.parametrize("n,M,limit", [(1, 0, 5.0), (4, 3, 1e9), (7, 20, 40.0), (3, 20, -1.0)])
def test_while_loop_swap_and_nested_if(built, n, M, limit):
    model = while_model()
    _, m = built("while", model)
    rng = np.random.default_rng(n)
    feeds = {"M": np.array(M, np.int64), "limit": np.array(limit, np.float32),
             "a": (np.abs(rng.standard_normal(n)) + 0.5).astype(np.float32),
             "b": (np.abs(rng.standard_normal(n)) + 0.5).astype(np.float32)}
    _close(m.run(feeds), ort_run(model, feeds), f"n={n} M={M} limit={limit}")


def stacked_while_model() -> onnx.ModelProto:
    """A Loop with M from an input and a scan output: its trip count has no bound the input
    shapes give, so compiling needs the range of the run-determined symbol."""
    body = oh.make_graph(
        [oh.make_node("Constant", [], ["k"], value=oh.make_tensor("k", TP.FLOAT, [], [1.5])),
         oh.make_node("Mul", ["v_in", "k"], ["v_out"]),
         oh.make_node("ReduceMax", ["v_out"], ["mx"], keepdims=0),
         oh.make_node("Less", ["mx", "lim"], ["go"])],
        "body", [oh.make_tensor_value_info("it", TP.INT64, []), oh.make_tensor_value_info("c", TP.BOOL, []),
                 oh.make_tensor_value_info("v_in", TP.FLOAT, ["n"])],
        [oh.make_tensor_value_info("go", TP.BOOL, []), oh.make_tensor_value_info("v_out", TP.FLOAT, ["n"]),
         oh.make_tensor_value_info("v_out", TP.FLOAT, ["n"])])
    nodes = [oh.make_node("Constant", [], ["t"], value=oh.make_tensor("t", TP.BOOL, [], [True])),
             oh.make_node("Loop", ["M", "t", "v"], ["v_f", "hist"], body=body)]
    ins = [oh.make_tensor_value_info("M", TP.INT64, []), oh.make_tensor_value_info("lim", TP.FLOAT, []),
           oh.make_tensor_value_info("v", TP.FLOAT, ["n"])]
    return _model(nodes, ins, [oh.make_tensor_value_info("v_f", TP.FLOAT, ["n"]),
                               oh.make_tensor_value_info("hist", TP.FLOAT, [None, "n"])])


def test_stacked_outputs_need_a_bound_when_the_trip_count_is_data(tmp_path, built):
    # no bound: the stacked rows get a capacity the library grows (ops/loop_capacity.py)
    onnxcc.compile(stacked_while_model(), tmp_path / "nobound", name="nobound")
    free = onnxcc.load(tmp_path / "nobound")
    v = np.array([0.5, 1.0, 0.25], np.float32)
    for M, lim in ((40, 1e9), (3, 1e9), (40, 30.0)):
        feeds = {"M": np.array(M, np.int64), "lim": np.array(lim, np.float32), "v": v}
        _close(free.run(feeds), ort_run(stacked_while_model(), feeds), f"no bound: M={M} lim={lim}")
    _, m = built("bounded", stacked_while_model(), dims={"iters": (1, 6)})
    for M, lim in ((4, 100.0), (10, 3.0), (1, 1.0)):
        feeds = {"M": np.array(M, np.int64), "lim": np.array(lim, np.float32), "v": v}
        _close(m.run(feeds), ort_run(stacked_while_model(), feeds), f"M={M} lim={lim}")
    # no trip at all: zero rows of the slice shape (onnxruntime says (0, 0))
    got = m.run({"M": np.array(0, np.int64), "lim": np.array(1.0, np.float32), "v": v})
    assert got["hist"].shape == (0, 3) and np.array_equal(got["v_f"], v)
    with pytest.raises(RuntimeCallError, match="code 4"):  # a 7th trip would overrun the 6 rows
        m.run({"M": np.array(10, np.int64), "lim": np.array(1e9, np.float32), "v": v})


# ---- from C ------------------------------------------------------------------------------------

C_MAIN = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "loop_model.h"

""" + C_F32_TENSOR + r"""
/* usage: prog BATCH IN.bin OUT.bin: writes h_final then the valid rows of h_all */
int main(int argc, char **argv) {
  int64_t b = atoll(argv[1]);
  float *x = malloc(b * 8 * sizeof(float));
  FILE *f = fopen(argv[2], "rb");
  if (fread(x, sizeof(float), b * 8, f) != (size_t)(b * 8)) return 10;
  fclose(f);
  int64_t xs[2] = {b, 8}, s0[2], s1[3], d1[3];
  DLTensor in = tensor(x, 2, xs);
  if (loop_model_output_shape(&in, 1, 0, s0) || loop_model_output_shape(&in, 1, 1, s1)) return 11;
  float *h = malloc(s0[0] * s0[1] * sizeof(float)), *all = malloc(s1[0] * s1[1] * s1[2] * sizeof(float));
  DLTensor outs[2] = {tensor(h, 2, s0), tensor(all, 3, s1)};
  int rc = loop_model_run(&in, 1, outs, 2);
  if (rc != 0) { printf("run rc=%d: %s\n", rc, loop_model_last_error()); return 12; }
  if (loop_model_output_dims(1, d1) != 0) return 13;
  f = fopen(argv[3], "wb");
  fwrite(h, sizeof(float), s0[0] * s0[1], f);
  fwrite(all, sizeof(float), d1[0] * d1[1] * d1[2], f); /* the valid rows: a compact prefix */
  fclose(f);
  printf("bound=%lld iters=%lld\n", (long long)s1[0], (long long)d1[0]);
  return 0;
}
"""


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_loop_model_from_c(built):
    d, _ = built("loop_model")
    (d / "main.c").write_text(C_MAIN)
    exe = d / "main"
    subprocess.run(["cc", "-O1", "-o", str(exe), str(d / "main.c"), f"-I{d}", f"-L{d}", "-lloop_model",
                    f"-Wl,-rpath,{d}"], check=True, capture_output=True, text=True)
    for batch in (1, 3, 17):
        feeds = random_inputs(MODELS_DIR / "loop_model.onnx", {"batch": batch}, seed=batch)
        feeds["x"].tofile(d / "in.bin")
        r = subprocess.run([str(exe), str(batch), str(d / "in.bin"), str(d / "out.bin")],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
        want = ort_run(MODELS_DIR / "loop_model.onnx", feeds)
        iters = want["h_all"].shape[0]
        assert r.stdout.strip() == f"bound=10 iters={iters}"
        out = np.fromfile(d / "out.bin", np.float32)
        got = {"h_final": out[:batch * 8].reshape(batch, 8),
               "h_all": out[batch * 8:].reshape(iters, batch, 8)}
        _close(got, want, f"C batch={batch}")
