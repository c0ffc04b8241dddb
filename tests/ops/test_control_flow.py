"""Control flow (If, Loop, Scan): symbolic shape rules over region bodies, region-aware
verification errors, and the interpreter against onnxruntime on models built with
onnx.helper and imported with load_onnx."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxcc import load_onnx
from onnxcc.errors import ShapeError, VerifyError
from onnxcc.interp import run as interp_run
from onnxcc.ir import evaluate
from onnxcc.ir.parser import parse_module
from onnxcc.ir.verify import verify
from onnxcc.passes import run_pipeline
from onnxcc.passes.shape_inference import infer_shapes
from onnxcc.testing import ort_run

F = TensorProto.FLOAT
I = TensorProto.INT64  # noqa: E741 - the dtype table's short names
B = TensorProto.BOOL


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def const(name, arr):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(arr)))


def make(nodes, inputs, outputs, opset=17):
    m = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs),
                          opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def imported(model):
    m = load_onnx(model)
    run_pipeline(m, "shape-inference")
    verify(m)
    text = str(m)
    again = parse_module(text)
    run_pipeline(again, "shape-inference")  # rerunning is stable (fresh symbols are reused)
    assert str(again) == text
    return m


def out_types(m):
    return [str(v.type) for v in m.main.return_op.operands]


def compare(model, m, feeds_list):
    """Interpreter vs onnxruntime; also checks the symbolic result shapes where they evaluate."""
    for feeds in feeds_list:
        want = ort_run(model, feeds)
        got = interp_run(m, feeds)
        env = {}
        for a in m.main.params:
            for d, n in zip(a.type.shape, feeds[a.name].shape):
                if not isinstance(d, int):
                    env[str(d)] = n
        for g, (name, w), r in zip(got, want.items(), m.main.return_op.operands):
            assert g.shape == w.shape, (name, g.shape, w.shape)
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=name)
            syms = {str(s) for d in r.type.shape if not isinstance(d, int) for s in d.free_symbols}
            if syms <= set(env):
                assert tuple(evaluate(d, env) for d in r.type.shape) == w.shape


# ---- If ------------------------------------------------------------------------------------------

IF_TEXT = """module @t {
  sym N in [1, 64]
  func @main(%c: bool[], %x: f32[N, 4]) -> (f32[?, ?], f32[?, ?]) {
    %0, %1 = onnx.If(%c, %x) loc("if0") (
      ^(%a: f32[N, 4]) {
        %2 = onnx.Concat(%a, %a) {axis = 0} : (f32[?, ?])
        %3 = onnx.Transpose(%a) {perm = [0, 1]} : (f32[?, ?])
        yield %2, %3
      },
      ^(%b: f32[N, 4]) {
        yield %b, %b
      }
    ) : (f32[?, ?], f32[?, ?])
    return %0, %1
  }
}"""


def test_if_differing_branch_dims_get_fresh_symbol(infer_ir):
    m = infer_ir(IF_TEXT)
    assert out_types(m) == ["f32[branch, 4]", "f32[N, 4]"]
    assert 'sym branch in [1, 2147483647]  // node "if0": result 0 dim 0 is 2*N or N depending on the branch' in str(m)
    verify(m)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    y0, y1 = interp_run(m, [np.array(True), x])
    np.testing.assert_array_equal(y0, np.concatenate([x, x]))
    y0, y1 = interp_run(m, [np.array(False), x])
    np.testing.assert_array_equal(y0, x)
    np.testing.assert_array_equal(y1, x)


def test_if_constant_condition_takes_branch_type(infer_ir):
    m = infer_ir(IF_TEXT.replace("%c: bool[], ", "").replace(
        "    %0, %1 = onnx.If(%c, %x)",
        "    %c = cc.const() {value = dense<bool[]: [true]>} : (bool[])\n    %0, %1 = onnx.If(%c, %x)"))
    assert out_types(m) == ["f32[2*N, 4]", "f32[N, 4]"]


def test_if_captured_shape_value_reaches_branch_vs_ort():
    # The reshape target is computed outside and captured: the branch still gets [N, S, 2, 2].
    then_g = helper.make_graph([helper.make_node("Reshape", ["x", "tgt"], ["t_out"])], "then", [],
                               [vi("t_out", F, None)])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e0"]),
                                helper.make_node("Reshape", ["e0", "tgt"], ["e_out"])], "else", [],
                               [vi("e_out", F, None)])
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             const("st", np.array([0], np.int64)), const("en", np.array([2], np.int64)),
             helper.make_node("Slice", ["s", "st", "en"], ["ns"]),
             const("hd", np.array([2, 2], np.int64)),
             helper.make_node("Concat", ["ns", "hd"], ["tgt"], axis=0),
             helper.make_node("ReduceSum", ["x"], ["tot"], keepdims=0),
             const("zero", np.array(0.0, np.float32)),
             helper.make_node("Greater", ["tot", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y"], name="If_0", then_branch=then_g, else_branch=else_g)]
    model = make(nodes, [vi("x", F, ["N", "S", 4])], [vi("y", F, None)])
    m = imported(model)
    assert out_types(m) == ["f32[N, S, 2, 2]"]
    rng = np.random.default_rng(0)
    compare(model, m, [{"x": rng.standard_normal((n, s, 4)).astype(np.float32)} for n, s in ((1, 1), (2, 3), (3, 5))])


def test_if_branch_yield_counts_differ_is_verify_error():
    m = parse_module("""module @t {
  sym N in [1, 64]
  func @main(%c: bool[], %x: f32[N, 4]) -> (f32[N, 4]) {
    %0 = onnx.If(%c, %x) loc("if_bad") (
      ^(%a: f32[N, 4]) {
        yield %a, %a
      },
      ^(%b: f32[N, 4]) {
        yield %b
      }
    ) : (f32[N, 4])
    return %0
  }
}""")
    with pytest.raises(VerifyError, match=r"onnx.If \(if_bad\): then_branch yields 2 values but else_branch "
                                          r"yields 1"):
        verify(m)
    with pytest.raises(ShapeError, match="then_branch yields 2 values but else_branch yields 1"):
        infer_shapes(m)


@pytest.mark.parametrize("branches, msg", [
    ("^(%a: f32[N, 4]) {\n yield %a\n },\n ^(%b: f32[N, 4]) {\n %i = onnx.Shape(%b) : (i64[2])\n yield %i\n }",
     r"result 0: then_branch yields f32\[N, 4\] but else_branch yields i64\[2\]"),
    ("^(%a: f32[N, 4]) {\n yield %a\n }", r"expects 2 regions \(then_branch, else_branch\), got 1"),
    ("^(%a: f32[N, 4], %z: f32[N, 4]) {\n yield %a\n },\n ^(%b: f32[N, 4]) {\n yield %b\n }",
     r"then_branch takes 2 arguments but the op passes 1 captures"),
])
def test_if_verify_errors(branches, msg):
    m = parse_module(f"""module @t {{
  sym N in [1, 64]
  func @main(%c: bool[], %x: f32[N, 4]) -> (f32[N, 4]) {{
    %0 = onnx.If(%c, %x) loc("if_bad") (
      {branches}
    ) : (f32[N, 4])
    return %0
  }}
}}""")
    with pytest.raises(VerifyError, match=msg):
        verify(m)


def test_if_condition_must_be_bool():
    m = parse_module("""module @t {
  func @main(%c: f32[], %x: f32[4]) -> (f32[4]) {
    %0 = onnx.If(%c, %x) (
      ^(%a: f32[4]) {
        yield %a
      },
      ^(%b: f32[4]) {
        yield %b
      }
    ) : (f32[4])
    return %0
  }
}""")
    with pytest.raises(VerifyError, match=r"condition must be a single bool, got f32\[\]"):
        verify(m)


# ---- Loop --------------------------------------------------------------------------------------

def _loop_body(cond_out: str):
    """body(i, cond, acc): acc += x * i; scan out acc; cond_out names the yielded condition."""
    nodes = [helper.make_node("Cast", ["i"], ["fi"], to=F),
             helper.make_node("Mul", ["x", "fi"], ["xi"]),
             helper.make_node("Add", ["acc", "xi"], ["acc_out"]),
             helper.make_node("Identity", ["acc_out"], ["scan_out"]),
             const("lim", np.array(2.5, np.float32)),
             helper.make_node("ReduceMax", ["acc_out"], ["mx"], keepdims=0),
             helper.make_node("Less", ["mx", "lim"], ["c_less"]),
             helper.make_node("Identity", [cond_out], ["cond_out"])]
    return helper.make_graph(nodes, "body", [vi("i", I, []), vi("cond", B, []), vi("acc", F, None)],
                             [vi("cond_out", B, []), vi("acc_out", F, None), vi("scan_out", F, None)])


def test_loop_trip_count_from_shape_vs_ort():
    # M = Shape(x)[1] and no condition input: the scan output's leading dim is exactly S.
    nodes = [helper.make_node("Shape", ["x"], ["s"]), const("one", np.array(1, np.int64)),
             helper.make_node("Gather", ["s", "one"], ["m"], axis=0),
             helper.make_node("Loop", ["m", "", "x"], ["acc", "all"], name="Loop_0", body=_loop_body("cond"))]
    model = make(nodes, [vi("x", F, ["N", "S"])], [vi("acc", F, None), vi("all", F, None)])
    m = imported(model)
    assert out_types(m) == ["f32[N, S]", "f32[S, N, S]"]
    rng = np.random.default_rng(1)
    compare(model, m, [
       {"x": rng.standard_normal((n, s)).astype(np.float32) * 0.1} for n, s in ((1, 1), (2, 3), (3, 6))])


def test_loop_data_dependent_condition_vs_ort():
    nodes = [const("m", np.array(6, np.int64)), const("c0", np.array(True)),
             helper.make_node("Loop", ["m", "c0", "x"], ["acc", "all"], name="Loop_0", body=_loop_body("c_less"))]
    model = make(nodes, [vi("x", F, ["N", 3])], [vi("acc", F, None), vi("all", F, None)])
    m = imported(model)
    assert out_types(m) == ["f32[N, 3]", "f32[iters, N, 3]"]
    assert 'sym iters in [1, 6]  // node "Loop_0": trip count of the loop (data-dependent)' in str(m)
    rng = np.random.default_rng(2)
    compare(model, m, [{"x": rng.uniform(0, 0.4, (n, 3)).astype(np.float32)} for n in (1, 2, 5)])


def test_loop_constant_true_condition_keeps_trip_count():
    # The exporter pattern: cond input = true, body passes its cond through -> M trips.
    nodes = [helper.make_node("Shape", ["x"], ["s"]), const("zero", np.array(0, np.int64)),
             helper.make_node("Gather", ["s", "zero"], ["m"], axis=0), const("c0", np.array(True)),
             helper.make_node("Loop", ["m", "c0", "x"], ["acc", "all"], name="Loop_0", body=_loop_body("cond"))]
    model = make(nodes, [vi("x", F, ["N", 2])], [vi("acc", F, None), vi("all", F, None)])
    m = imported(model)
    assert out_types(m) == ["f32[N, 2]", "f32[N, N, 2]"]
    rng = np.random.default_rng(3)
    compare(model, m, [{"x": rng.standard_normal((n, 2)).astype(np.float32)} for n in (1, 4)])


def test_loop_growing_carried_value_is_widened_vs_ort():
    # v grows by one row per iteration: its dim becomes a fresh symbol (varies across iterations).
    body = helper.make_graph(
        [helper.make_node("Concat", ["v", "row"], ["v_out"], axis=0),
         helper.make_node("Identity", ["cond"], ["cond_out"])],
        "body", [vi("i", I, []), vi("cond", B, []), vi("v", F, None)],
        [vi("cond_out", B, []), vi("v_out", F, None)])
    nodes = [helper.make_node("Shape", ["x"], ["s"]), const("zero", np.array(0, np.int64)),
             helper.make_node("Gather", ["s", "zero"], ["m"], axis=0),
             helper.make_node("Loop", ["m", "", "x"], ["v_final"], name="Loop_0", body=body)]
    model = make(nodes, [vi("x", F, ["N", 3]), vi("row", F, [1, 3])], [vi("v_final", F, None)])
    m = imported(model)
    text = str(m)
    assert "sym carried0_d0 in [1, 2147483647]  // node \"Loop_0\": loop-carried value 0 dim 0 varies" in text
    assert "%v: f32[carried0_d0, 3]" in text
    assert out_types(m) == ["f32[carried0_d0, 3]"]
    rng = np.random.default_rng(4)
    compare(model, m, [{"x": rng.standard_normal((n, 3)).astype(np.float32),
                        "row": rng.standard_normal((1, 3)).astype(np.float32)} for n in (1, 3)])


LOOP_TEXT = """module @t {{
  sym N in [1, 64]
  func @main(%m: i64[], %x: f32[N, 4]) -> (f32[N, 4]) {{
    %0 = onnx.Loop(%m, %x) {{absent = [1]}} loc("loop_bad") (
      ^(%i: i64[], %c: bool[], %v: f32[N, 4]) {{
        {body}
      }}
    ) : (f32[N, 4])
    return %0
  }}
}}"""


@pytest.mark.parametrize("body, msg", [
    ("%w = onnx.Concat(%v, %v) {axis = 1} : (f32[N, 8])\n yield %c, %w",
     r"onnx.Loop \(loop_bad\): loop-carried value 0 changes type: it enters the body as f32\[N, 4\] but the "
     r"body yields f32\[N, 8\]"),
    ("%s = onnx.Shape(%v) : (i64[2])\n yield %c, %s",
     r"loop-carried value 0 changes type: it enters the body as f32\[N, 4\] but the body yields i64\[2\]"),
    ("yield %c", r"body yields 1 values, expected 1 \(cond\) \+ 1 carried \+ 0 scan outputs"),
    ("yield %v, %v", r"body's first yield \(the condition\) must be bool, got f32\[N, 4\]"),
])
def test_loop_verify_errors(body, msg):
    m = parse_module(LOOP_TEXT.format(body=body))
    with pytest.raises(VerifyError, match=msg):
        verify(m)


def test_loop_carried_dtype_change_is_shape_error():
    m = parse_module(LOOP_TEXT.format(body="%s = onnx.Shape(%v) : (i64[2])\n yield %c, %s"))
    with pytest.raises(ShapeError, match=r"loop-carried value 0 enters the body as f32\[N, 4\] but the body "
                                         r"yields i64\[2\]"):
        infer_shapes(m)


def test_loop_body_args_must_start_with_iter_and_cond():
    m = parse_module(LOOP_TEXT.format(body="yield %c, %v").replace("%i: i64[]", "%i: i32[]"))
    with pytest.raises(VerifyError, match=r"body must take \(i64\[\], bool\[\], ...\), got \(i32\[\], bool\[\]"):
        verify(m)


def test_loop_textual_with_captures(infer_ir):
    m = infer_ir("""module @t {
  sym N in [1, 64]
  func @main(%x: f32[N, 4], %w: f32[4, 4]) -> (f32[?, ?], f32[?, ?, ?]) {
    %m = cc.const() {value = dense<i64[]: [3]>} : (i64[])
    %0, %1 = onnx.Loop(%m, %x, %w) {absent = [1], num_captures = 1} loc("loop0") (
      ^(%i: i64[], %c: bool[], %v: f32[?, ?], %cw: f32[?, ?]) {
        %y = onnx.MatMul(%v, %cw) : (f32[?, ?])
        %t = onnx.Tanh(%y) : (f32[?, ?])
        yield %c, %t, %y
      }
    ) : (f32[?, ?], f32[?, ?, ?])
    return %0, %1
  }
}""")
    assert out_types(m) == ["f32[N, 4]", "f32[3, N, 4]"]
    assert "^(%i: i64[], %c: bool[], %v: f32[N, 4], %cw: f32[4, 4])" in str(m)
    x = np.random.default_rng(5).standard_normal((2, 4)).astype(np.float32)
    w = np.eye(4, dtype=np.float32) * 0.5
    h, ys = interp_run(m, [x, w])
    want, outs = x, []
    for _ in range(3):
        outs.append(want @ w)
        want = np.tanh(want @ w)
    np.testing.assert_allclose(h, want, rtol=1e-6)
    np.testing.assert_allclose(ys, np.stack(outs), rtol=1e-6)


# ---- Scan --------------------------------------------------------------------------------------

@pytest.mark.parametrize("in_dir, out_dir, out_axis", [(0, 0, 0), (1, 0, 1), (0, 1, 0), (1, 1, -1)])
def test_scan_axes_and_directions_vs_ort(in_dir, out_dir, out_axis):
    body = helper.make_graph(
        [helper.make_node("Add", ["s", "xt"], ["s_out"]),
         helper.make_node("Mul", ["s_out", "w"], ["y"])],
        "body", [vi("s", F, None), vi("xt", F, None)], [vi("s_out", F, None), vi("y", F, None)])
    nodes = [helper.make_node("Scan", ["s0", "x"], ["s_final", "ys"], name="Scan_0", body=body,
                              num_scan_inputs=1, scan_input_axes=[1], scan_input_directions=[in_dir],
                              scan_output_axes=[out_axis], scan_output_directions=[out_dir])]
    model = make(nodes, [vi("s0", F, ["N", 3]), vi("x", F, ["N", "S", 3]), vi("w", F, [3])],
                 [vi("s_final", F, None), vi("ys", F, None)])
    m = imported(model)
    want_ys = {0: "f32[S, N, 3]", 1: "f32[N, S, 3]", -1: "f32[N, 3, S]"}[out_axis]
    assert out_types(m) == ["f32[N, 3]", want_ys]
    rng = np.random.default_rng(6)
    compare(model, m, [{"s0": rng.standard_normal((n, 3)).astype(np.float32),
                        "x": rng.standard_normal((n, s, 3)).astype(np.float32),
                        "w": rng.standard_normal(3).astype(np.float32)} for n, s in ((1, 1), (2, 4), (3, 7))])


def test_scan_length_mismatch_records_constraint(infer_ir):
    m = infer_ir("""module @t {
  sym N in [1, 64]
  sym S in [1, 64]
  sym T in [1, 64]
  func @main(%a: f32[S, N], %b: f32[T, N]) -> (f32[?, ?]) {
    %0 = onnx.Scan(%a, %b) {num_scan_inputs = 2} loc("scan0") (
      ^(%x: f32[N], %y: f32[N]) {
        %z = onnx.Add(%x, %y) : (f32[N])
        yield %z
      }
    ) : (f32[?, ?])
    return %0
  }
}""")
    assert out_types(m) == ["f32[S, N]"]
    assert 'constraint S == T  // node "scan0": scan length of scan input 1 (S == T)' in str(m)


def test_scan_verify_yield_count():
    m = parse_module("""module @t {
  sym N in [1, 64]
  func @main(%s: f32[N], %a: f32[4, N]) -> (f32[N], f32[4, N]) {
    %0, %1 = onnx.Scan(%s, %a) {num_scan_inputs = 1} loc("scan_bad") (
      ^(%st: f32[N], %x: f32[N]) {
        yield %st
      }
    ) : (f32[N], f32[4, N])
    return %0, %1
  }
}""")
    with pytest.raises(VerifyError, match=r"onnx.Scan \(scan_bad\): body yields 1 values, expected 1 states \+ "
                                          r"1 scan outputs"):
        verify(m)


def test_sample_control_flow_models_vs_ort():
    from onnxcc.testing import MODELS_DIR, SAMPLE_MODELS, random_inputs

    for name, want in (("if_model", ["f32[batch, 16]"]), ("loop_model", ["f32[batch, 8]", "f32[iters, batch, 8]"]),
                       ("scan_model", ["f32[batch, 16]", "f32[batch, seq, 16]"])):
        path = MODELS_DIR / f"{name}.onnx"
        model = onnx.load(str(path))
        m = imported(model)
        assert out_types(m) == want
        compare(model, m, [random_inputs(model, dims) for dims in SAMPLE_MODELS[name]])
