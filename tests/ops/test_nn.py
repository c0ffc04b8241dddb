"""Conv, pooling, normalizations and Einsum: symbolic window arithmetic on textual IR,
references vs onnxruntime, errors."""

import numpy as np
import pytest

from onnxcc.errors import ShapeError
from onnxcc.ir.parser import parse_module
from onnxcc.passes.shape_inference import infer_shapes

F32 = np.float32
ENVS2 = ({"N": 1, "H": 7, "W": 8}, {"N": 2, "H": 10, "W": 5})


def _one(infer_ir, x_type: str, op_text: str, extra_params: str = "") -> str:
    m = infer_ir(f"""module @t {{
  sym N in [1, 64]
  sym H in [1, 4096]
  sym W in [1, 4096]
  func @main(%x: {x_type}{extra_params}) -> (f32[?]) {{
    {op_text}
    return %0
  }}
}}""")
    return str(m)


def test_conv_symbolic_output_dims(infer_ir):
    text = _one(infer_ir, "f32[N, 3, H, W]",
                '%0 = onnx.Conv(%x, %w, %b) {pads = [1, 1, 1, 1], strides = [2, 2]} loc("c") : (f32[?])',
                ", %w: f32[8, 3, 3, 3], %b: f32[8]")
    assert "(f32[N, 8, floor(H/2 - 1/2) + 1, floor(W/2 - 1/2) + 1])" in text
    assert "constraint" not in text  # floor((H - 1)/2) + 1 >= 1 is provable


def test_conv_valid_records_positive_extent(infer_ir):
    text = _one(infer_ir, "f32[N, 3, H, W]",
                '%0 = onnx.Conv(%x, %w) {dilations = [2, 1]} loc("c") : (f32[?])', ", %w: f32[4, 3, 3, 3]")
    assert "(f32[N, 4, H - 4, W - 2])" in text
    assert 'constraint H - 4 >= 1  // node "c": output dim 2 >= 1 (input at least the window size)' in text
    assert 'constraint W - 2 >= 1  // node "c": output dim 3 >= 1' in text


def test_conv_same_and_groups(infer_ir):
    text = _one(infer_ir, "f32[N, 4, H, W]",
                '%0 = onnx.Conv(%x, %w) {auto_pad = "SAME_UPPER", group = 2, strides = [2, 3]} : (f32[?])',
                ", %w: f32[6, 2, 3, 3]")
    assert "(f32[N, 6, ceiling(H/2), ceiling(W/3)])" in text


def test_pool_shapes(infer_ir):
    text = _one(infer_ir, "f32[N, 3, H, W]",
                "%0 = onnx.MaxPool(%x) {ceil_mode = 1, kernel_shape = [2, 2], strides = [2, 2]} : (f32[?])")
    assert "(f32[N, 3, ceiling(H/2), ceiling(W/2)])" in text
    text = _one(infer_ir, "f32[N, 3, H, W]",
                "%0 = onnx.AveragePool(%x) {kernel_shape = [2, 2], strides = [2, 2]} : (f32[?])")
    assert "(f32[N, 3, floor(H/2), floor(W/2)])" in text
    assert "constraint floor(H/2) >= 1" in text
    text = _one(infer_ir, "f32[N, 3, H, W]", "%0 = onnx.GlobalAveragePool(%x) : (f32[?])")
    assert "(f32[N, 3, 1, 1])" in text


def test_maxpool_ceil_mode_last_window_rule(infer_ir):
    # ceil((H + 1 - 2)/2) + 1 windows, minus one when the last starts in the end padding (H even)
    attrs = "{ceil_mode = 1, kernel_shape = [2], pads = [0, 1], strides = [2]}"
    text = _one(infer_ir, "f32[N, 3, H]", f"%0 = onnx.MaxPool(%x) {attrs} : (f32[?])")
    assert "(f32[N, 3, Min(ceiling(H/2 - 1/2) + 1, floor(H/2 - 1/2) + 1)])" in text


def test_layernorm_stats_and_convtranspose_shapes(infer_ir):
    m = infer_ir("""module @t {
  sym N in [1, 64]
  sym S in [1, 512]
  sym H in [1, 512]
  func @main(%x: f32[N, S, 16], %g: f32[16], %y: f32[N, 4, H], %w: f32[4, 2, 3])
      -> (f32[?], f32[?], f32[?], f32[?]) {
    %0, %1, %2 = onnx.LayerNormalization(%x, %g) {axis = -1} : (f32[?], f32[?], f32[?])
    %3 = onnx.ConvTranspose(%y, %w) {pads = [1, 0], strides = [2]} : (f32[?])
    return %0, %1, %2, %3
  }
}""")
    text = str(m)
    assert "onnx.LayerNormalization(%x, %g) {axis = -1} : (f32[N, S, 16], f32[N, S, 1], f32[N, S, 1])" in text
    assert "onnx.ConvTranspose(%y, %w) {pads = [1, 0], strides = [2]} : (f32[N, 2, 2*H])" in text


def test_einsum_shapes(infer_ir):
    m = infer_ir("""module @t {
  sym B in [1, 64]
  sym S in [1, 512]
  func @main(%q: f32[B, 4, S, 8], %k: f32[B, 4, S, 8], %v: f32[S, 8]) -> (f32[?], f32[?], f32[?]) {
    %0 = onnx.Einsum(%q, %k) {equation = "bhid,bhjd->bhij"} : (f32[?])
    %1 = onnx.Einsum(%q, %v) {equation = "...id,jd"} : (f32[?])
    %2 = onnx.Einsum(%v) {equation = "ij->ji"} : (f32[?])
    return %0, %1, %2
  }
}""")
    text = str(m)
    assert '{equation = "bhid,bhjd->bhij"} : (f32[B, 4, S, S])' in text
    assert '{equation = "...id,jd"} : (f32[B, 4, S, S])' in text
    assert '{equation = "ij->ji"} : (f32[8, S])' in text


@pytest.mark.parametrize("text,msg", [
    ('%0 = onnx.Conv(%x, %w3) loc("c") : (f32[?])',
     'node "c" (onnx.Conv): input channels (x dim 1 vs w dim 1 * group): 3 != 2'),
    ('%0 = onnx.Conv(%x, %w) {pads = [1, 1]} loc("c") : (f32[?])',
     "pads needs 4 values for 2 spatial dims, got 2"),
    ('%0 = onnx.Conv(%x, %w) {group = 3} loc("c") : (f32[?])', "input channels"),
    ('%0 = onnx.Conv(%s, %w) loc("c") : (f32[?])', "output dim 2 is -1, expected >= 1"),
    ('%0 = onnx.MaxPool(%x) loc("c") : (f32[?])', "attribute 'kernel_shape' is required"),
    ('%0 = onnx.MaxPool(%x) {kernel_shape = [2]} loc("c") : (f32[?])', "kernel needs 2 values"),
    ('%0 = onnx.BatchNormalization(%x, %p, %p, %p, %p) loc("c") : (f32[?])', "scale length vs channels"),
    ('%0 = onnx.Einsum(%x, %x) {equation = "abcd,bacd->ab"} loc("c") : (f32[?])', "einsum label 'b': 3 != 2"),
])
def test_nn_errors(text, msg):
    m = parse_module(f"""module @t {{
  func @main(%x: f32[2, 3, 8, 8], %s: f32[2, 3, 1, 1], %w: f32[4, 3, 3, 3], %w3: f32[4, 2, 3, 3], %p: f32[5])
      -> (f32[?]) {{
    {text}
    return %0
  }}
}}""")
    with pytest.raises(ShapeError, match='node "c"') as e:
        infer_shapes(m)
    assert msg in str(e.value)


# ---- vs onnxruntime -----------------------------------------------------------------------------------

CONV_CASES = [
    {},
    {"pads": [1, 1, 1, 1]},
    {"pads": [0, 1, 2, 1], "strides": [2, 1]},
    {"strides": [2, 2], "dilations": [2, 1], "pads": [1, 0, 1, 2]},
    {"auto_pad": "SAME_UPPER", "strides": [2, 2]},
    {"auto_pad": "SAME_LOWER", "strides": [2, 3]},
    {"auto_pad": "VALID", "strides": [2, 2]},
    {"group": 2, "pads": [1, 1, 1, 1]},
]


def _ids(attrs: dict) -> str:
    return "-".join(f"{k}{v}" for k, v in attrs.items()) or "plain"


@pytest.mark.parametrize("attrs", CONV_CASES, ids=_ids)
def test_conv2d_vs_ort(attrs, ort_check):
    g = attrs.get("group", 1)
    ort_check("Conv", [("x", F32, ["N", 4, "H", "W"]), ("w", F32, [6, 4 // g, 3, 3]), ("b", F32, [6])], attrs,
              envs=ENVS2)
    ort_check("Conv", [("x", F32, ["N", 4, "H", "W"]), ("w", F32, [6, 4 // g, 2, 3])], attrs, envs=ENVS2)


def test_conv1d_3d_depthwise_vs_ort(ort_check):
    ort_check("Conv", [("x", F32, ["N", 3, "H"]), ("w", F32, [5, 3, 3])], {"pads": [1, 2], "strides": [2]},
              envs=ENVS2)
    ort_check("Conv", [("x", F32, ["N", 2, "H", 4, "W"]), ("w", F32, [3, 2, 2, 3, 2]), ("b", F32, [3])],
              {"strides": [1, 2, 2]}, envs=ENVS2)
    ort_check("Conv", [("x", F32, ["N", 4, "H", "W"]), ("w", F32, [4, 1, 3, 3])],
              {"group": 4, "pads": [1] * 4}, envs=ENVS2)


@pytest.mark.parametrize("attrs", [
    {},
    {"strides": [2, 2], "pads": [1, 0, 1, 1]},
    {"strides": [2, 1], "output_padding": [1, 0], "dilations": [1, 2]},
    {"group": 2, "strides": [2, 2]},
    {"strides": [2, 2], "output_shape": [9, 10]},
], ids=["plain", "pads", "outpad", "group", "outshape"])
def test_conv_transpose_vs_ort(attrs, ort_check):
    envs = ({"N": 1, "H": 4, "W": 5}, {"N": 2, "H": 4, "W": 5}) if "output_shape" in attrs else ENVS2
    m = 3 * attrs.get("group", 1)
    ort_check("ConvTranspose", [("x", F32, ["N", 4, "H", "W"]), ("w", F32, [4, 3, 3, 2]), ("b", F32, [m])],
              attrs, envs=envs)


POOL_CASES = [
    {"kernel_shape": [2, 2], "strides": [2, 2]},
    {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [3, 2], "strides": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 0, 1, 1], "ceil_mode": 1},
    {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [0, 0, 1, 1], "ceil_mode": 1},
    {"kernel_shape": [2, 2], "dilations": [2, 1], "strides": [1, 2]},
    {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]},
    {"kernel_shape": [2, 3], "auto_pad": "SAME_LOWER", "strides": [2, 2]},
]


@pytest.mark.parametrize("attrs", POOL_CASES, ids=_ids)
def test_maxpool_vs_ort(attrs, ort_check):
    x = ("x", F32, ["N", 3, "H", "W"])
    ort_check("MaxPool", [x], attrs, envs=ENVS2, opset=12)
    if "dilations" not in attrs:
        for order in (0, 1):
            ort_check("MaxPool", [x], {**attrs, "storage_order": order}, n_outputs=2, envs=ENVS2, opset=12)


@pytest.mark.parametrize("attrs", [a for a in POOL_CASES if "dilations" not in a],
                         ids=_ids)
def test_average_pool_vs_ort(attrs, ort_check):
    for cip in (0, 1):
        ort_check("AveragePool", [("x", F32, ["N", 3, "H", "W"])], {**attrs, "count_include_pad": cip},
                  envs=ENVS2)


def test_pool_1d_3d_and_global_vs_ort(ort_check):
    ort_check("MaxPool", [("x", F32, ["N", 2, "H"])], {"kernel_shape": [3], "strides": [2], "pads": [1, 1]},
              envs=ENVS2)
    ort_check("AveragePool", [("x", F32, ["N", 2, "H", 3, "W"])], {"kernel_shape": [2, 2, 2]}, envs=ENVS2)
    ort_check("MaxPool", [("x", np.int8, ["N", 2, "H", "W"], -100, 100)], {"kernel_shape": [2, 2]},
              envs=ENVS2)
    for op in ("GlobalAveragePool", "GlobalMaxPool"):
        ort_check(op, [("x", F32, ["N", 3, "H", "W"])], envs=ENVS2, expect_shapes=["f32[N, 3, 1, 1]"])
        ort_check(op, [("x", F32, ["N", 3, "H"])], envs=ENVS2)


def test_normalizations_vs_ort(ort_check):
    x = ("x", F32, ["N", 3, "H", "W"])
    for p in (1, 2):
        for axis in (1, -1):
            ort_check("LpNormalization", [x], {"p": p, "axis": axis}, envs=ENVS2)
    ort_check("BatchNormalization", [x, ("s", F32, [3]), ("b", F32, [3]), ("m", F32, [3]),
                                     ("v", F32, [3], 0.5, 2)], {"epsilon": 1e-3}, envs=ENVS2)
    ort_check("InstanceNormalization", [x, ("s", F32, [3]), ("b", F32, [3])], envs=ENVS2)
    ort_check("LRN", [x], {"size": 3, "alpha": 0.01, "beta": 0.5, "bias": 2.0}, envs=ENVS2)
    ort_check("LRN", [x], {"size": 5}, envs=ENVS2)


def test_lp_normalization_zero_vector_stays_zero(ort_check):
    x = np.array([[0.0, 0.0, 0.0], [3.0, -4.0, 0.0]], dtype=F32)
    for p in (1, 2):
        ort_check("LpNormalization", [("x", F32, [2, 3])], {"p": p, "axis": 1}, consts={"x": x})


def test_batchnorm_training_mode_vs_onnx_reference(build_node):
    from onnx.reference import ReferenceEvaluator

    from onnxcc.interp import run

    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((2, 3, 4, 5)).astype(F32), "s": rng.standard_normal(3).astype(F32),
             "b": rng.standard_normal(3).astype(F32), "m": rng.standard_normal(3).astype(F32),
             "v": rng.uniform(0.5, 2, 3).astype(F32)}
    inputs = [("x", F32, ["N", 3, "H", 5]), *((n, F32, [3]) for n in "sbmv")]
    model, m = build_node("BatchNormalization", inputs, {"training_mode": 1, "momentum": 0.8}, n_outputs=3,
                          opset=15)
    infer_shapes(m)
    assert [str(r.type) for r in m.main.return_op.operands] == ["f32[N, 3, H, 5]", "f32[3]", "f32[3]"]
    for got, want in zip(run(m, feeds), ReferenceEvaluator(model).run(None, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_dropout_training_mode_draws_a_mask(build_node):
    from onnxcc.interp import run

    _, m = build_node("Dropout", [("x", F32, ["N", 4]), ("r", F32, []), ("t", np.bool_, [])], n_outputs=2)
    infer_shapes(m)
    x = np.ones((500, 4), F32)
    for r, t in ((0.5, False), (0.0, True)):  # inference, or nothing to drop: the identity
        y, mask = run(m, [x, np.array(r, F32), np.array(t)])
        np.testing.assert_array_equal(y, x)
        assert mask.all()
    y, mask = run(m, [x, np.array(0.75, F32), np.array(True)])
    np.testing.assert_array_equal(y, np.where(mask, 4.0, 0.0))  # kept elements scaled by 1 / (1 - 0.75)
    assert abs(mask.mean() - 0.25) < 0.05  # 2000 draws: the standard error is 0.0097


def test_layernorm_vs_ort(ort_check):
    x = ("x", F32, ["N", "H", 6])
    ort_check("LayerNormalization", [x, ("g", F32, [6]), ("b", F32, [6])], envs=ENVS2)
    ort_check("LayerNormalization", [x, ("g", F32, [6])], {"epsilon": 0.1}, envs=ENVS2)
    m = ort_check("LayerNormalization", [x, ("g", F32, [6]), ("b", F32, [6])], n_outputs=3, envs=ENVS2,
                  expect_shapes=["f32[N, H, 6]", "f32[N, H, 1]", "f32[N, H, 1]"])
    assert m is not None
    ort_check("LayerNormalization", [x, ("g", F32, ["H", 6]), ("b", F32, [6])], {"axis": 1}, n_outputs=3,
              envs=ENVS2, expect_shapes=["f32[N, H, 6]", "f32[N, 1, 1]", "f32[N, 1, 1]"])


def test_group_norm_vs_ort(ort_check):
    x = ("x", F32, ["N", 6, "H", "W"])
    ort_check("GroupNormalization", [x, ("s", F32, [6]), ("b", F32, [6])], {"num_groups": 3}, envs=ENVS2,
              opset=21)
    ort_check("GroupNormalization", [x, ("s", F32, [6]), ("b", F32, [6])], {"num_groups": 6, "epsilon": 0.01},
              envs=ENVS2, opset=21)


@pytest.mark.parametrize("eq,shapes", [
    ("bij,bjk->bik", [["N", 3, 4], ["N", 4, "H"]]),
    ("ij->ji", [["N", "H"]]),
    ("bhid,bhjd->bhij", [["N", 2, "H", 4], ["N", 2, 3, 4]]),
    ("...ij,jk", [["N", "H", 3], [3, 2]]),
    ("ii->i", [[3, 3]]),
    ("ij,ij->", [["N", 3], ["N", 3]]),
])
def test_einsum_vs_ort(eq, shapes, ort_check):
    ort_check("Einsum", [(f"x{i}", F32, s) for i, s in enumerate(shapes)], {"equation": eq}, envs=ENVS2,
              opset=12)
