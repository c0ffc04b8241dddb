"""Quantization ops (ops/quant.py): QuantizeLinear / DequantizeLinear (per tensor, per axis,
blocked; 8- and 16-bit types), DynamicQuantizeLinear, ConvInteger, QLinearMatMul, QLinearConv
and com.microsoft QLinearAdd / QLinearMul. Each model is JIT-compiled once and run at two
settings of its symbolic dims; the native result and the numpy reference interpreter are
both compared with onnxruntime, exactly for integer outputs (onnxruntime's kernels use the
same f32 arithmetic and half-to-even rounding), unless a test says otherwise."""

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from onnxcc.errors import OnnxccError
from onnxcc.frontend import load_onnx
from onnxcc.interp import run as interp_run
from onnxcc.passes import run_pipeline
from onnxcc.testing import jit_compile, op_model, ort_run

U8, I8, U16, I16, I32, F = T.UINT8, T.INT8, T.UINT16, T.INT16, T.INT32, T.FLOAT


def _model(nodes, inputs, outputs, inits=None, opset=21, ms=False):
    domains = {"com.microsoft": 1} if ms else None
    return op_model(nodes, inputs, outputs, inits, opset, 10 if opset >= 21 else 8, domains)


def _compare(name, got, want, tol_q=0, rtol=1e-6, atol=1e-6):
    assert got.shape == want.shape, (name, got.shape, want.shape)
    assert got.dtype == want.dtype, (name, got.dtype, want.dtype)
    if want.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=name)
    else:
        diff = np.abs(got.astype(np.int64) - want.astype(np.int64))
        assert diff.max(initial=0) <= tol_q, f"{name}: max |diff| {diff.max()} > {tol_q}"


def _check(m, feeds_list, tol_q=0, tol_native=None, **tol):
    """Native (JIT) and interpreter vs onnxruntime for every feeds dict in `feeds_list`;
    quantized outputs may differ by tol_q steps (tol_native for the native result)."""
    mod, _, k = jit_compile(m)
    ref = load_onnx(m)
    run_pipeline(ref, "shape-inference")
    names = [o.name for o in m.graph.output]
    for feeds in feeds_list:
        want = ort_run(m, feeds)
        native = k(*[feeds[a.name] for a in mod.main.params])
        interp = interp_run(ref, feeds)
        for n, g, r in zip(names, native, interp):
            _compare(f"native {n}", np.asarray(g).reshape(want[n].shape), want[n],
                     tol_q if tol_native is None else tol_native, **tol)
            _compare(f"interp {n}", r, want[n], tol_q, **tol)
    return mod


def _rng(seed):
    return np.random.default_rng(seed)


def test_quantize_dequantize_forms():
    """Per tensor (with and without zero point), per axis, blocked; u8 i8 u16 i16 (and an i32
    DequantizeLinear input: QuantizeLinear has no i32 output type)."""
    inits = {"s": np.float32(0.05), "zu8": np.uint8(128), "zi8": np.int8(-3), "zu16": np.uint16(30000),
             "zi16": np.int16(-200), "zi32": np.int32(7),
             "sa": np.array([0.02, 0.1, 0.5], np.float32), "za": np.array([0, -5, 9], np.int8),
             "sb": np.array([[0.03, 0.2], [0.1, 0.07], [0.5, 0.01]], np.float32),
             "zb": np.array([[1, 2], [250, 4], [5, 128]], np.uint8)}
    nodes = [h.make_node("QuantizeLinear", ["x", "s", z], [f"q_{z}"]) for z in ("zu8", "zi8", "zu16", "zi16")]
    nodes += [h.make_node("QuantizeLinear", ["x", "s"], ["q_none"]),                            # -> uint8
              h.make_node("QuantizeLinear", ["x", "sa", "za"], ["q_axis"], axis=1),
              h.make_node("QuantizeLinear", ["xb", "sb", "zb"], ["q_block"], axis=1, block_size=2)]
    nodes += [h.make_node("DequantizeLinear", [f"q_{z}", "s", z], [f"d_{z}"]) for z in ("zu8", "zi8", "zu16",
                                                                                         "zi16")]
    nodes += [h.make_node("DequantizeLinear", ["q_none", "s"], ["d_none"]),
              h.make_node("DequantizeLinear", ["q_axis", "sa", "za"], ["d_axis"], axis=-2),
              h.make_node("DequantizeLinear", ["x32", "s", "zi32"], ["d_i32"]),
              h.make_node("DequantizeLinear", ["q_block", "sb", "zb"], ["d_block"], axis=1, block_size=2)]
    outs = [n.output[0] for n in nodes]
    # xb's blocks along dim 1: one of 2 columns and a partial one of 1
    m = _model(nodes, [("x", F, ["N", 3, 4]), ("xb", F, [3, 3]), ("x32", I32, ["N"])], outs, inits)
    feeds = []
    for n, seed in ((1, 0), (6, 1)):
        x = _rng(seed).uniform(-40, 40, (n, 3, 4)).astype(np.float32)
        x.reshape(-1)[:4] = [0.025, -0.075, 0.125, 1e6]  # ties round to even; a saturating value
        x32 = _rng(seed).integers(-2**31, 2**31 - 1, (n,)).astype(np.int32)
        feeds.append({"x": x, "x32": x32, "xb": _rng(seed + 5).uniform(-30, 30, (3, 3)).astype(np.float32)})
    _check(m, feeds)


def test_quantize_opset13_per_axis_default_axis():
    """Opset 13 forms: axis defaults to 1; the importer's oldest opset (10 is refused there)."""
    nodes = [h.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             h.make_node("DequantizeLinear", ["q", "s", "z"], ["d"])]
    inits = {"s": np.array([0.5, 0.25], np.float32), "z": np.array([3, -7], np.int8)}
    m = _model(nodes, [("x", F, ["N", 2, "S"])], ["q", "d"], inits, opset=13)
    feeds = [{"x": _rng(s).uniform(-90, 90, (n, 2, n + 1)).astype(np.float32)} for s, n in ((0, 1), (1, 7))]
    _check(m, feeds)


def test_dynamic_quantize_linear():
    nodes = [h.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])]
    m = _model(nodes, [("x", F, ["N", 5])], ["y", "s", "z"], opset=13)
    feeds = [{"x": _rng(0).uniform(-3, 7, (1, 5)).astype(np.float32)},
             {"x": _rng(1).uniform(0.5, 2, (9, 5)).astype(np.float32)},     # all positive: min widened to 0
             {"x": np.zeros((2, 5), np.float32)}]                            # empty range: scale 1
    _check(m, feeds)


def test_conv_integer_and_qlinear_conv():
    w = _rng(2).integers(-128, 127, (4, 3, 3, 3)).astype(np.int8)
    inits = {"w": w, "xz": np.uint8(120), "wz": np.int8(0), "xs": np.float32(0.02),
             "ws": np.array([0.01, 0.03, 0.002, 0.05], np.float32), "ys": np.float32(0.4),
             "yz": np.uint8(100),
             "b": np.array([100, -2000, 0, 55], np.int32)}
    nodes = [h.make_node("ConvInteger", ["x", "w", "xz"], ["c0"], pads=[1, 1, 1, 1]),
             h.make_node("ConvInteger", ["x", "w"], ["c1"], strides=[2, 1]),
             h.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["q0"],
                         pads=[1, 0, 1, 0], dilations=[1, 2]),
             h.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["q1"])]
    m = _model(nodes, [("x", U8, ["N", 3, "H", 7])], ["c0", "c1", "q0", "q1"], inits, opset=13)
    feeds = [{"x": _rng(s).integers(0, 255, (n, 3, hh, 7)).astype(np.uint8)}
             for s, n, hh in ((0, 1, 5), (1, 3, 8))]
    _check(m, feeds)


def test_integer_conv_gemm_forms():
    """The two GEMM forms of the integer conv: channels-last padded rows (2-D, one group, no
    dilation along W) and the general im2col (groups, 1-D, W dilation): W as an input (copied
    into a temp with its zero point applied), per-channel W zero points, strided / padded
    windows; exact vs onnxruntime."""
    r = _rng(5)
    w = r.integers(-128, 127, (6, 2, 3, 2)).astype(np.int8)
    w1 = r.integers(-128, 127, (4, 4, 3)).astype(np.int8)
    inits = {"w": w, "w1": w1, "xz": np.uint8(7), "wz": np.int8(3), "xs": np.float32(0.02),
             "ws": np.linspace(0.01, 0.06, 6).astype(np.float32), "ys": np.float32(0.3),
             "yz": np.uint8(90), "wzc": r.integers(-4, 4, (6,)).astype(np.int8),
             "b": r.integers(-900, 900, (6,)).astype(np.int32),
             "w4": r.integers(-128, 127, (6, 4, 2, 3)).astype(np.int8)}
    nodes = [h.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["c0"], group=2, pads=[1, 0, 1, 1]),
             h.make_node("QLinearConv", ["x", "xs", "xz", "w4", "ws", "wzc", "ys", "yz", "b"], ["q1"],
                         pads=[1, 2, 0, 1], strides=[1, 2], dilations=[2, 1]),
             h.make_node("ConvInteger", ["x", "wv", "xz"], ["c1"], strides=[2, 1]),   # W an input
             h.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wzc", "ys", "yz", "b"], ["q0"],
                         group=2, pads=[0, 1, 0, 1], dilations=[2, 1]),
             h.make_node("ConvInteger", ["x1", "w1", "xz"], ["c2"], pads=[2, 1], strides=[2])]
    m = _model(nodes, [("x", U8, ["N", 4, "H", 5]), ("wv", U8, [3, 4, 2, 2]), ("x1", U8, ["N", 4, "L"])],
               ["c0", "q1", "c1", "q0", "c2"], inits, opset=13)
    feeds = [{"x": r.integers(0, 255, (n, 4, hh, 5)).astype(np.uint8),
              "wv": r.integers(0, 255, (3, 4, 2, 2)).astype(np.uint8),
              "x1": r.integers(0, 255, (n, 4, hh + 2)).astype(np.uint8)} for n, hh in ((1, 5), (2, 9))]
    _check(m, feeds)


@pytest.mark.parametrize("dt", [U8, I8])
def test_qlinear_matmul(dt):
    npd = np.uint8 if dt == U8 else np.int8
    lo, hi = np.iinfo(npd).min, np.iinfo(npd).max
    r = _rng(3)
    inits = {"as": np.float32(0.03), "az": npd(5), "b": r.integers(lo, hi, (6, 4)).astype(npd),
             "bs": np.array([0.01, 0.02, 0.005, 0.04], np.float32),
             "bz": np.array([0, 3, -1 if dt == I8 else 9, 7], npd),
             "ys": np.float32(0.7), "yz": npd(10)}
    nodes = [h.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"]),
             h.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["acc"]),
             # B not a constant (the constant one is stored transposed)
             h.make_node("QLinearMatMul", ["a", "as", "az", "bin", "bs", "bz", "ys", "yz"], ["y2"])]
    m = _model(nodes, [("a", dt, ["B", "M", 6]), ("bin", dt, [6, 4])], ["y", "acc", "y2"], inits, opset=13)
    feeds = [{"a": _rng(s).integers(lo, hi, (bb, mm, 6)).astype(npd),
              "bin": _rng(s + 9).integers(lo, hi, (6, 4)).astype(npd)}
             for s, bb, mm in ((0, 1, 1), (1, 2, 9))]
    _check(m, feeds)


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
def test_contrib_qlinear_binary(op):
    """Our f32 formula is onnxruntime's (MLAS): (sa/sc)(a - za) + (sb/sc)(b - zb) + zc and
    (a - za)(b - zb)(sa sb / sc) + zc (zc added in f32 before rounding half to even), saturated:
    the interpreter is exact on these 320 random elements (rounding first, then adding zc,
    differs in ~1%). Natively QLinearMul's `v * ratio + zc` is contracted by LLVM into one
    fused multiply-add (codegen's f32 ops carry `contract`), which rounds once where
    onnxruntime rounds twice: +-1 allowed there, and at most 2% of elements off."""
    inits = {"as": np.float32(0.05), "az": np.uint8(128), "bs": np.float32(0.02), "bz": np.uint8(3),
             "cs": np.float32(0.08), "cz": np.uint8(100)}
    nodes = [h.make_node(op, ["a", "as", "az", "b", "bs", "bz", "cs", "cz"], ["y"], domain="com.microsoft"),
             h.make_node(op, ["a", "as", "az", "b1", "bs", "bz", "cs", "cz"], ["y1"], domain="com.microsoft")]
    m = _model(nodes, [("a", U8, ["N", 64]), ("b", U8, ["N", 64]), ("b1", U8, [64])], ["y", "y1"], inits,
               opset=13, ms=True)
    feeds = []
    for s, n in ((0, 1), (1, 5)):
        r = _rng(s)
        feeds.append({"a": r.integers(0, 255, (n, 64)).astype(np.uint8),
                      "b": r.integers(0, 255, (n, 64)).astype(np.uint8),
                      "b1": r.integers(0, 255, (64,)).astype(np.uint8)})
    _check(m, feeds, tol_native=1 if op == "QLinearMul" else 0)
    mod, _, k = jit_compile(m)
    for f in feeds:
        got, want = k(*[f[a.name] for a in mod.main.params])[0], ort_run(m, f)["y"]
        assert np.mean(got.reshape(want.shape) != want) <= 0.02


@pytest.mark.parametrize("typ,name", [(T.FLOAT8E8M0, "f8e8m0")])
def test_refuses_e8m0(typ, name):
    """Not a quantized type: refused by name, as an output_dtype and as a zero point's type."""
    nodes = [h.make_node("QuantizeLinear", ["x", "s"], ["q"], output_dtype=typ)]
    m = _model(nodes, [("x", F, [4])], ["q"], {"s": np.float32(1.0)})
    with pytest.raises(OnnxccError, match=name):
        jit_compile(m)
    nodes = [h.make_node("QuantizeLinear", ["x", "s", "z"], ["q"])]
    m = _model(nodes, [("x", F, [4])], ["q"], {"s": np.float32(1.0)})
    m.graph.initializer.append(h.make_tensor("z", typ, [], [0]))
    with pytest.raises(OnnxccError, match=name):
        jit_compile(m)


@pytest.mark.parametrize("bt", [U8, I8])
def test_contrib_matmul_integer_to_float_and_dynamic_quantize_matmul(bt):
    npd = np.uint8 if bt == U8 else np.int8
    lo, hi = np.iinfo(npd).min, np.iinfo(npd).max
    r = _rng(4)
    inits = {"b": r.integers(lo, hi, (6, 5)).astype(npd), "as": np.float32(0.03), "az": np.uint8(7),
             "bs": np.array([0.01, 0.02, 0.005, 0.04, 0.1], np.float32),
             "bz": r.integers(lo, hi, (5,)).astype(npd),
             "bs1": np.float32(0.02), "bias": r.standard_normal(5).astype(np.float32)}
    ms = "com.microsoft"
    nodes = [h.make_node("MatMulIntegerToFloat", ["a", "b", "as", "bs", "az", "bz", "bias"], ["y0"],
                         domain=ms),
             h.make_node("MatMulIntegerToFloat", ["a", "b", "as", "bs1"], ["y1"], domain=ms),
             h.make_node("DynamicQuantizeMatMul", ["x", "b", "bs", "bz", "bias"], ["y2"], domain=ms),
             h.make_node("DynamicQuantizeMatMul", ["x", "b", "bs1"], ["y3"], domain=ms)]
    m = _model(nodes, [("a", U8, ["M", 6]), ("x", F, ["B", "M", 6])], ["y0", "y1", "y2", "y3"], inits,
               opset=13, ms=True)
    feeds = [{"a": _rng(s).integers(0, 255, (mm, 6)).astype(np.uint8),
              "x": _rng(s).standard_normal((bb, mm, 6)).astype(np.float32)}
             for s, bb, mm in ((0, 1, 1), (1, 3, 4))]
    _check(m, feeds, rtol=1e-5, atol=1e-5)


def test_shape_rules_and_constraints(infer_ir):
    m = infer_ir("""module @t {
  sym S in [1, 64]
  sym N in [1, 64]
  func @main(%x: f32[N, S], %s: f32[N, 2], %sa: f32[S], %q: i8[N, S], %z: i8[S])
      -> (u8[?], u8[?], f32[?], u8[?], f32[?], u8[?]) {
    %0 = onnx.QuantizeLinear(%x, %s) {axis = 1, block_size = 4} loc("qb") : (u8[?])
    %1 = onnx.QuantizeLinear(%x, %sa) {axis = -1} loc("qa") : (u8[?])
    %2 = onnx.DequantizeLinear(%q, %sa, %z) {axis = 1} : (f32[?])
    %3, %4, %5 = onnx.DynamicQuantizeLinear(%x) : (u8[?], f32[?], u8[?])
    return %0, %1, %2, %3, %4, %5
  }
}""")
    text = str(m)
    assert 'constraint 2 == ceiling(S/4)  // node "qb": y_scale dim 1 vs ceil(x dim 1 / block_size)' in text
    assert "onnx.QuantizeLinear(%x, %s) {axis = 1, block_size = 4} loc(\"qb\") : (u8[N, S])" in text
    assert "onnx.DequantizeLinear(%q, %sa, %z) {axis = 1} : (f32[N, S])" in text
    assert ": (u8[N, S], f32[], u8[])" in text


def test_shape_errors():
    from onnxcc.errors import ShapeError
    from onnxcc.ir.parser import parse_module
    from onnxcc.passes.shape_inference import infer_shapes

    m = parse_module("""module @t {
  func @main(%x: f32[2, 3], %s: f32[4]) -> (u8[?]) {
    %0 = onnx.QuantizeLinear(%x, %s) loc("q") : (u8[?])
    return %0
  }
}""")
    want = r'node "q" \(onnx.QuantizeLinear\): y_scale length vs x dim 1: 4 != 3'
    with pytest.raises(ShapeError, match=want):
        infer_shapes(m)
