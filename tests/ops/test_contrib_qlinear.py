"""com.microsoft QOperator ops (ops/contrib_qlinear.py): QLinearConcat, QLinearSigmoid,
QLinearLeakyRelu, QLinearWhere, QLinearSoftmax, QLinearGlobalAveragePool, QLinearReduceMean and
QGemm. Each model is JIT-compiled once and run at two settings of its symbolic dims; the native
result and the numpy reference interpreter are both compared with onnxruntime: exactly where
onnxruntime's table or requantization uses the same f32 arithmetic (Concat, LeakyRelu, Where,
the averages, QGemm), within one quantization step where it approximates (Sigmoid: MLAS's
logistic; Softmax: an exp table built in double)."""

from functools import partial

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from onnxcc.errors import OnnxccError
from onnxcc.frontend import load_onnx
from onnxcc.interp import run as interp_run
from onnxcc.passes import run_pipeline
from onnxcc.testing import jit_compile, op_model, ort_run

U8, I8, I32, F, B = T.UINT8, T.INT8, T.INT32, T.FLOAT, T.BOOL
MS = "com.microsoft"


_model = partial(op_model, domains={MS: 1})


def _check(m, feeds_list, tol_q=0, rtol=1e-6, atol=1e-6, max_off=1.0):
    """Native and interpreter vs onnxruntime: integer outputs within tol_q steps (and at most a
    fraction max_off of the elements off at all), float outputs within rtol / atol."""
    mod, _, k = jit_compile(m)
    ref = load_onnx(m)
    run_pipeline(ref, "shape-inference")
    names = [o.name for o in m.graph.output]
    for feeds in feeds_list:
        want = ort_run(m, feeds)
        native = k(*[feeds[a.name] for a in mod.main.params])
        interp = interp_run(ref, feeds)
        for n, g, r in zip(names, native, interp, strict=True):
            for what, got in (("native", np.asarray(g).reshape(want[n].shape)), ("interp", r)):
                assert got.dtype == want[n].dtype, (what, n, got.dtype, want[n].dtype)
                if want[n].dtype.kind == "f":
                    np.testing.assert_allclose(got, want[n], rtol=rtol, atol=atol, err_msg=f"{what} {n}")
                    continue
                diff = np.abs(got.astype(np.int64) - want[n].astype(np.int64))
                assert diff.max(initial=0) <= tol_q, f"{what} {n}: max |diff| {diff.max()} > {tol_q}"
                assert np.mean(diff > 0) <= max_off, f"{what} {n}: {np.mean(diff > 0):.3f} of elements off"


def _u8(seed, shape, dt: type = np.uint8):
    info = np.iinfo(dt)
    return np.random.default_rng(seed).integers(info.min, info.max, shape, endpoint=True).astype(dt)


@pytest.mark.parametrize("dt", [np.uint8, np.int8])
def test_concat_requantizes_each_input(dt):
    """Three inputs: one already at Y's scale (copied), two requantized; axis 1 with a
    symbolic batch."""
    zp = dt(3) if dt is np.uint8 else dt(-3)
    inits = {"ys": np.float32(0.05), "yz": zp, "as": np.float32(0.05), "az": zp, "bs": np.float32(0.013),
             "bz": dt(7), "cs": np.float32(0.2), "cz": dt(0)}
    node = h.make_node("QLinearConcat", ["ys", "yz", "a", "as", "az", "b", "bs", "bz", "c", "cs", "cz"], ["y"],
                       axis=1, domain=MS)
    t = U8 if dt is np.uint8 else I8
    m = _model([node], [("a", t, ["N", 3, 4]), ("b", t, ["N", 5, 4]), ("c", t, ["N", 1, 4])], ["y"], inits)
    _check(m, [{"a": _u8(s, (n, 3, 4), dt), "b": _u8(s + 1, (n, 5, 4), dt), "c": _u8(s + 2, (n, 1, 4), dt)}
               for s, n in ((0, 1), (5, 6))])


@pytest.mark.parametrize("dt", [np.uint8, np.int8])
def test_sigmoid_and_leaky_relu(dt):
    t = U8 if dt is np.uint8 else I8
    inits = {"xs": np.float32(0.06), "xz": dt(100 if dt is np.uint8 else -10), "ys": np.float32(1 / 256),
             "yz": dt(0 if dt is np.uint8 else -128), "ls": np.float32(0.05), "lz": dt(60 if dt is np.uint8 else 5)}
    nodes = [h.make_node("QLinearSigmoid", ["x", "xs", "xz", "ys", "yz"], ["s"], domain=MS),
             h.make_node("QLinearLeakyRelu", ["x", "xs", "xz", "ls", "lz"], ["l"], alpha=0.1, domain=MS)]
    m = _model(nodes, [("x", t, ["N", 64])], ["s", "l"], inits)
    # every input value once: the whole table is compared
    allv = np.arange(np.iinfo(dt).min, np.iinfo(dt).max + 1).astype(dt).reshape(4, 64)
    _check(m, [{"x": allv}, {"x": _u8(1, (3, 64), dt)}], tol_q=1, max_off=0.02)


def test_leaky_relu_exact():
    """LeakyRelu's table is onnxruntime's f32 arithmetic exactly."""
    inits = {"xs": np.float32(0.06), "xz": np.uint8(100), "ls": np.float32(0.05), "lz": np.uint8(60)}
    node = h.make_node("QLinearLeakyRelu", ["x", "xs", "xz", "ls", "lz"], ["l"], alpha=0.1, domain=MS)
    m = _model([node], [("x", U8, [256])], ["l"], inits)
    _check(m, [{"x": np.arange(256).astype(np.uint8)}])


def test_where_broadcasts_and_requantizes():
    inits = {"xs": np.float32(0.03), "xz": np.uint8(120), "ys": np.float32(0.11), "yz": np.uint8(9),
             "zs": np.float32(0.05), "zz": np.uint8(128)}
    node = h.make_node("QLinearWhere", ["c", "x", "xs", "xz", "y", "ys", "yz", "zs", "zz"], ["z"], domain=MS)
    m = _model([node], [("c", B, ["N", 1]), ("x", U8, ["N", 8]), ("y", U8, [8])], ["z"], inits)
    r = np.random.default_rng(0)
    _check(m, [{"c": r.random((n, 1)) < 0.5, "x": _u8(n, (n, 8)), "y": _u8(n + 1, (8,))} for n in (1, 7)])


@pytest.mark.parametrize(("dt", "opset", "axis"), [(np.uint8, 13, -1), (np.int8, 13, -1), (np.uint8, 13, 1),
                                                  (np.uint8, 1, 1)])
def test_softmax(dt, opset, axis):
    """One step of tolerance: onnxruntime reads exp from a table and divides by 1 / y_scale."""
    t = U8 if dt is np.uint8 else I8
    inits = {"xs": np.float32(0.08), "xz": dt(128 if dt is np.uint8 else 0), "ys": np.float32(1 / 256),
             "yz": dt(0 if dt is np.uint8 else -128)}
    node = h.make_node("QLinearSoftmax", ["x", "xs", "xz", "ys", "yz"], ["y"], axis=axis, opset=opset, domain=MS)
    m = _model([node], [("x", t, ["N", 6, 16])], ["y"], inits)
    _check(m, [{"x": _u8(s, (n, 6, 16), dt)} for s, n in ((0, 1), (1, 3))], tol_q=1, max_off=0.05)


@pytest.mark.parametrize("channels_last", [0, 1])
def test_global_average_pool(channels_last):
    inits = {"xs": np.float32(0.04), "xz": np.uint8(90), "ys": np.float32(0.02), "yz": np.uint8(70)}
    node = h.make_node("QLinearGlobalAveragePool", ["x", "xs", "xz", "ys", "yz"], ["y"],
                       channels_last=channels_last, domain=MS)
    m = _model([node], [("x", U8, ["N", 5, 6, 7])], ["y"], inits)
    _check(m, [{"x": _u8(s, (n, 5, 6, 7))} for s, n in ((0, 1), (1, 2))])


@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_mean(keepdims):
    """onnxruntime has no CPU kernel for QLinearReduceMean: the oracle is its definition
    (DequantizeLinear -> ReduceMean -> QuantizeLinear) run by onnxruntime, within one step
    (the float mean rounds differently from the exact integer sum)."""
    inits = {"xs": np.float32(0.04), "xz": np.int8(-5), "ys": np.float32(0.03), "yz": np.int8(2)}
    node = h.make_node("QLinearReduceMean", ["x", "xs", "xz", "ys", "yz"], ["y"], axes=[1, -1],
                       keepdims=keepdims, domain=MS)
    m = _model([node], [("x", I8, ["N", 5, 6])], ["y"], inits)
    twin = _model([h.make_node("DequantizeLinear", ["x", "xs", "xz"], ["d"]),
                   h.make_node("ReduceMean", ["d"], ["r"], axes=[1, -1], keepdims=keepdims),
                   h.make_node("QuantizeLinear", ["r", "ys", "yz"], ["y"])], [("x", I8, ["N", 5, 6])], ["y"], inits)
    _, _, k = jit_compile(m)
    ref = load_onnx(m)
    run_pipeline(ref, "shape-inference")
    for s, n in ((0, 1), (1, 3)):
        x = _u8(s, (n, 5, 6), np.int8)
        want = ort_run(twin, {"x": x})["y"]
        for got in (np.asarray(k(x)[0]).reshape(want.shape), interp_run(ref, {"x": x})[0]):
            assert got.dtype == want.dtype and got.shape == want.shape
            assert np.abs(got.astype(np.int64) - want).max() <= 1


@pytest.mark.parametrize(("trans_b", "per_col", "with_y"), [(1, False, True), (0, True, True), (1, True, False)])
def test_qgemm(trans_b, per_col, with_y):
    """As the quantizer writes it (transB=1, an i32 bias C), per-column b parameters, and the
    float output form (no y_scale)."""
    r = np.random.default_rng(3)
    k, n = 24, 10
    w = r.integers(-128, 127, (n, k) if trans_b else (k, n)).astype(np.int8)
    inits = {"w": w, "as": np.float32(0.02), "az": np.uint8(120),
             "bs": (r.uniform(0.001, 0.01, n) if per_col else np.array(0.004)).astype(np.float32),
             "bz": np.zeros(n if per_col else (), np.int8), "c": r.integers(-2000, 2000, n).astype(np.int32),
             "ys": np.float32(0.05), "yz": np.uint8(128)}
    ins = ["a", "as", "az", "w", "bs", "bz", "c"] + (["ys", "yz"] if with_y else [])
    node = h.make_node("QGemm", ins, ["y"], transB=trans_b, alpha=1.0, domain=MS)
    m = _model([node], [("a", U8, ["M", k])], ["y"], inits)
    _check(m, [{"a": _u8(s, (mm, k))} for s, mm in ((0, 1), (1, 9))], rtol=1e-5, atol=1e-5)


def test_concat_refuses_a_broken_triple():
    inits = {"ys": np.float32(0.05), "yz": np.uint8(3), "as": np.float32(0.05)}
    node = h.make_node("QLinearConcat", ["ys", "yz", "a", "as"], ["y"], axis=0, domain=MS)
    m = _model([node], [("a", U8, [3])], ["y"], inits)
    with pytest.raises(OnnxccError, match="triples"):
        run_pipeline(load_onnx(m), "shape-inference")


@pytest.mark.parametrize(("direction", "per_col"), [("forward", False), ("bidirectional", True)])
def test_dynamic_quantize_lstm(direction, per_col):
    """W and R dequantized at compile time into the f32 LSTM. onnxruntime quantizes X and each
    step's H to u8 and multiplies in integers: its outputs differ from the f32 LSTM by that
    rounding, here within 2e-2 absolute (the interpreter, which is the same f32 LSTM, within
    1e-5 of the native result)."""
    r = np.random.default_rng(7)
    nd, inp, hid = (2 if direction == "bidirectional" else 1), 6, 5
    cols = 4 * hid

    def q(rows):
        w = r.integers(-128, 127, (nd, rows, cols)).astype(np.int8)
        shape = (nd, cols) if per_col else (nd,)
        # onnxruntime requires int8 weights' zero points to be 0
        return w, r.uniform(0.002, 0.01, shape).astype(np.float32), np.zeros(shape, np.int8)

    (w, ws, wz), (rr, rs, rz) = q(inp), q(hid)
    inits = {"w": w, "ws": ws, "wz": wz, "r": rr, "rs": rs, "rz": rz,
             "b": r.uniform(-0.1, 0.1, (nd, 8 * hid)).astype(np.float32)}
    node = h.make_node("DynamicQuantizeLSTM", ["x", "w", "r", "b", "", "", "", "", "ws", "wz", "rs", "rz"],
                       ["y", "yh", "yc"], hidden_size=hid, direction=direction, domain=MS)
    m = _model([node], [("x", F, ["T", "N", inp])], ["y", "yh", "yc"], inits)
    _, _, k = jit_compile(m)
    ref = load_onnx(m)
    run_pipeline(ref, "shape-inference")
    for t, n in ((1, 1), (7, 3)):
        x = r.uniform(-1, 1, (t, n, inp)).astype(np.float32)
        want = ort_run(m, {"x": x})
        native = k(x)
        interp = interp_run(ref, {"x": x})
        for name, g, i in zip(("y", "yh", "yc"), native, interp, strict=True):
            g = np.asarray(g).reshape(want[name].shape)
            np.testing.assert_allclose(g, want[name], atol=2e-2, rtol=0, err_msg=name)
            np.testing.assert_allclose(g, i, atol=1e-5, rtol=1e-5, err_msg=name)


@pytest.mark.parametrize(("attrs", "channels_last"), [
    ({"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, 0),
    ({"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "count_include_pad": 1}, 0),
    ({"kernel_shape": [2, 3], "strides": [2, 1], "ceil_mode": 1}, 0),
    ({"kernel_shape": [3, 2], "pads": [0, 1, 1, 0]}, 1)])
def test_average_pool(attrs, channels_last):
    """onnxruntime dequantizes, averages in f32 and quantizes: one step of tolerance for the
    order of the f32 sum (averages of a few multiples of x_scale often land on a rounding
    midpoint of y_scale, where the last f32 bit decides), and at most 5% of elements off."""
    inits = {"xs": np.float32(0.05), "xz": np.uint8(128), "ys": np.float32(0.03), "yz": np.uint8(120)}
    node = h.make_node("QLinearAveragePool", ["x", "xs", "xz", "ys", "yz"], ["y"], channels_last=channels_last,
                       domain=MS, **attrs)
    shape = ["N", 7, 9, 4] if channels_last else ["N", 4, 7, 9]
    m = _model([node], [("x", U8, shape)], ["y"], inits)
    _check(m, [{"x": _u8(s, (n, *shape[1:]))} for s, n in ((0, 1), (1, 2))], tol_q=1, max_off=0.05)


def test_dynamic_quantize_lstm_refuses_weights_given_at_run_time():
    """W dequantized at compile time needs W and its parameters as constants: a W fed as an
    input is a clear refusal naming the op, not a wrong result."""
    inits = {"ws": np.ones(1, np.float32), "wz": np.zeros(1, np.int8), "r": np.zeros((1, 2, 8), np.int8),
             "rs": np.ones(1, np.float32), "rz": np.zeros(1, np.int8)}
    node = h.make_node("DynamicQuantizeLSTM", ["x", "w", "r", "", "", "", "", "", "ws", "wz", "rs", "rz"], ["y"],
                       hidden_size=2, domain=MS)
    m = _model([node], [("x", F, [3, 1, 4]), ("w", I8, [1, 4, 8])], ["y"], inits)
    with pytest.raises(OnnxccError, match=r"DynamicQuantizeLSTM.*constants"):
        jit_compile(m)


def test_qgemm_refuses_float_b():
    inits = {"as": np.float32(0.1), "az": np.uint8(0), "b": np.zeros((4, 3), np.float32), "bs": np.float32(0.1),
             "bz": np.uint8(0)}
    node = h.make_node("QGemm", ["a", "as", "az", "b", "bs", "bz"], ["y"], domain=MS)
    m = _model([node], [("a", U8, [2, 4])], ["y"], inits)
    with pytest.raises(OnnxccError, match="B must be u8 or i8"):
        run_pipeline(load_onnx(m), "shape-inference")


@pytest.mark.parametrize(("mask", "unidirectional", "per_col"), [(None, 0, False), ("raw", 0, True),
                                                                 ("end", 1, False)])
def test_qattention(mask, unidirectional, per_col):
    """The projection is onnxruntime's (exact i32 product scaled in f32); the attention is f32
    in another order: 1e-4."""
    r = np.random.default_rng(11)
    hin, d, heads = 12, 16, 2
    inits = {"w": r.integers(-128, 127, (hin, 3 * d)).astype(np.int8),
             "b": r.uniform(-0.2, 0.2, 3 * d).astype(np.float32), "xs": np.array([0.02], np.float32),
             "ws": (r.uniform(0.005, 0.02, 3 * d) if per_col else np.array([0.01])).astype(np.float32),
             "xz": np.array([120], np.uint8), "wz": np.zeros(3 * d if per_col else 1, np.int8)}
    ins = ["x", "w", "b", "xs", "ws", "m" if mask else "", "xz", "wz"]
    node = h.make_node("QAttention", ins, ["y"], num_heads=heads, unidirectional=unidirectional, domain=MS)
    inputs = [("x", U8, ["B", "S", hin])]
    if mask:
        inputs.append(("m", I32, ["B", "S"] if mask == "raw" else ["B"]))
    m = _model([node], inputs, ["y"], inits)
    feeds = []
    for s, (bb, ss) in enumerate(((1, 1), (2, 5))):
        f: dict[str, np.ndarray] = {"x": _u8(s, (bb, ss, hin))}
        if mask == "raw":
            f["m"] = (np.random.default_rng(s).random((bb, ss)) < 0.7).astype(np.int32)
            f["m"][:, 0] = 1
        elif mask == "end":
            f["m"] = np.full(bb, max(ss - 1, 1), np.int32)
        feeds.append(f)
    _check(m, feeds, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("segments", [True, False])
def test_qembed_layer_normalization(segments):
    """f32 sums and LayerNorm in another order than onnxruntime's: 1e-4 (outputs are ~1)."""
    r = np.random.default_rng(5)
    v, p, hid = 30, 8, 16
    inits: dict[str, np.ndarray] = {"we": _u8(1, (v, hid)), "pe": _u8(2, (p, hid)), "se": _u8(3, (2, hid)),
                                    "g": _u8(4, (hid,)), "be": _u8(5, (hid,))}
    for k, (s, z) in {"we": (0.02, 128), "pe": (0.01, 100), "se": (0.03, 120), "g": (0.01, 0),
                      "be": (0.005, 128)}.items():
        inits[k + "_s"], inits[k + "_z"] = np.array([s], np.float32), np.array([z], np.uint8)
    names = ["ids", "seg" if segments else "", "we", "pe", "se" if segments else "", "g", "be", "mask",
             "we_s", "pe_s", "se_s" if segments else "", "g_s", "be_s", "we_z", "pe_z", "se_z" if segments else "",
             "g_z", "be_z"]
    node = h.make_node("QEmbedLayerNormalization", names, ["y", "mi"], epsilon=1e-5, domain=MS)
    inputs = [("ids", I32, ["B", "S"]), ("mask", I32, ["B", "S"])] + ([("seg", I32, ["B", "S"])] if segments else [])
    m = _model([node], inputs, ["y", "mi"], inits)
    feeds = []
    for bb, ss in ((1, 1), (2, 7)):
        f = {"ids": r.integers(0, v, (bb, ss)).astype(np.int32),
             "mask": (r.random((bb, ss)) < 0.6).astype(np.int32)}
        if segments:
            f["seg"] = r.integers(0, 2, (bb, ss)).astype(np.int32)
        feeds.append(f)
    _check(m, feeds, rtol=1e-4, atol=1e-4)


def test_qembed_refuses_an_id_past_the_table():
    """An id outside the word table fails the call (ERR_INDEX), never reads stray memory."""
    inits: dict[str, np.ndarray] = {"we": _u8(1, (4, 8)), "pe": _u8(2, (3, 8)), "g": _u8(4, (8,)), "be": _u8(5, (8,))}
    for k in ("we", "pe", "g", "be"):
        inits[k + "_s"], inits[k + "_z"] = np.array([0.01], np.float32), np.array([3], np.uint8)
    names = ["ids", "", "we", "pe", "", "g", "be", "", "we_s", "pe_s", "", "g_s", "be_s", "we_z", "pe_z", "",
             "g_z", "be_z"]
    node = h.make_node("QEmbedLayerNormalization", names, ["y"], domain=MS)
    m = _model([node], [("ids", I32, [1, "S"])], ["y"], inits)
    _, _, k = jit_compile(m)
    assert np.asarray(k(np.array([[0, 3]], np.int32))[0]).shape == (1, 2, 8)
    with pytest.raises(OnnxccError):
        k(np.array([[0, 4]], np.int32))
    with pytest.raises(OnnxccError):  # 4 positions, 3 rows in the position table
        k(np.array([[0, 1, 2, 3]], np.int32))
