"""Reductions, arg-reductions, the softmax family and CumSum: shape rules, value propagation,
references vs onnxruntime, errors."""

import numpy as np
import pytest
import sympy

from onnxcc.errors import ShapeError
from onnxcc.ir import sym
from onnxcc.ir.parser import parse_module
from onnxcc.passes.shape_inference import infer_shapes

F32, I64, I32 = np.float32, np.int64, np.int32
ENVS = ({"N": 1, "S": 3}, {"N": 4, "S": 2})
REDUCE = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
          "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"]


def test_reduce_shapes(infer_ir):
    m = infer_ir("""module @t {
  sym N in [1, 64]
  sym S in [1, 512]
  func @main(%x: f32[N, S, 8]) -> (f32[?], f32[?, ?, ?], f32[?], f32[?, ?, ?], i64[?, ?], f32[?, ?, ?]) {
    %ax = cc.const() {value = dense<i64[1]: [-2]>} : (i64[1])
    %0 = onnx.ReduceSum(%x, %ax) {keepdims = 0} : (f32[?])
    %1 = onnx.ReduceMean(%x) {axes = [0, 2]} : (f32[?, ?, ?])
    %2 = onnx.ReduceMax(%x) {keepdims = 0} : (f32[?])
    %3 = onnx.ReduceL2(%x) {noop_with_empty_axes = 1} : (f32[?, ?, ?])
    %4 = onnx.ArgMax(%x) {axis = 1, keepdims = 0} : (i64[?, ?])
    %5 = onnx.Softmax(%x) {axis = 1} : (f32[?, ?, ?])
    return %0, %1, %2, %3, %4, %5
  }
}""")
    text = str(m)
    assert "onnx.ReduceSum(%x, %ax) {keepdims = 0} : (f32[N, 8])" in text
    assert "onnx.ReduceMean(%x) {axes = [0, 2]} : (f32[1, S, 1])" in text
    assert "onnx.ReduceMax(%x) {keepdims = 0} : (f32[])" in text
    assert "onnx.ReduceL2(%x) {noop_with_empty_axes = 1} : (f32[N, S, 8])" in text
    assert "onnx.ArgMax(%x) {axis = 1, keepdims = 0} : (i64[N, 8])" in text
    assert "onnx.Softmax(%x) {axis = 1} : (f32[N, S, 8])" in text


def test_reduce_value_propagation():
    m = parse_module("""module @t {
  sym N in [1, 64]
  sym S in [1, 512]
  func @main(%x: f32[N, S, 8]) -> (i64[]) {
    %d = cc.dims() {dims = [#dim<N>, #dim<S>, 8]} : (i64[3])
    %p = onnx.ReduceProd(%d) {keepdims = 0} : (i64[])
    %s = onnx.ReduceSum(%d) {keepdims = 1} : (i64[1])
    %mx = onnx.ReduceMax(%d) {keepdims = 0} : (i64[])
    return %p
  }
}""")
    values = infer_shapes(m)
    res = {o.results[0].name: o.results[0] for o in m.main.body.ops if o.results}
    N, S = sym("N"), sym("S")
    assert values[res["p"]][()] == 8 * N * S
    assert list(values[res["s"]]) == [N + S + 8]
    assert values[res["mx"]][()] == sympy.Max(N, S, 8)


@pytest.mark.parametrize("text,msg", [
    ("%0 = onnx.ReduceSum(%x) {axes = [3]} loc(\"r\") : (f32[?])", "axis 3 out of range for rank 2"),
    ("%0 = onnx.ReduceSum(%x, %j) loc(\"r\") : (f32[?])", "axes must be 1-D, got i64[1, 1]"),
    ("%0 = onnx.ReduceSum(%x, %k) {keepdims = 0} loc(\"r\") : (f32[?])",
     "keepdims = 0 needs a static count of at most 2 axes, got i64[3]"),
    ("%0 = onnx.ReduceMin(%x) {axes = [1, -1]} loc(\"r\") : (f32[?])", "axis 1 repeated"),
    ("%0 = onnx.Softmax(%x) {axis = 2} loc(\"r\") : (f32[?])", "axis 2 out of range for rank 2"),
    ("%0 = onnx.CumSum(%x, %x) loc(\"r\") : (f32[?])", "axis must be a scalar or a 1-element tensor"),
])
def test_reduce_errors(text, msg):
    m = parse_module(f"""module @t {{
  func @main(%x: f32[2, 3], %i: i64[1], %j: i64[1, 1], %k: i64[3]) -> (f32[?]) {{
    {text}
    return %0
  }}
}}""")
    with pytest.raises(ShapeError, match='node "r"') as e:
        infer_shapes(m)
    assert msg in str(e.value)


def test_reduce_runtime_axes(infer_ir):
    text = """module @t {
  sym N in [1, 64]
  func @main(%x: f32[N, 1, 8], %a: i64[2], %e: i64[0]) -> (f32[?], f32[?], f32[?]) {
    %0 = onnx.ReduceSum(%x, %a) {keepdims = 0} loc("r0") : (f32[?])
    %1 = onnx.ReduceMax(%x, %a) loc("r1") : (f32[?])
    %2 = onnx.ReduceMax(%x, %e) {noop_with_empty_axes = 1} loc("r2") : (f32[?])
    return %0, %1, %2
  }
}"""
    m = infer_ir(text)
    first = str(m)
    assert "sym reduced in [1, 2147483647]  // node \"r0\": dim 0 of the result" in first
    assert 'onnx.ReduceMax(%x, %a) loc("r1") : (f32[reduced_1, 1, reduced_2])' in first
    assert "loc(\"r2\") : (f32[N, 1, 8])" in first
    from onnxcc.passes import run_pipeline

    assert str(run_pipeline(m, "shape-inference")) == first  # reruns reuse the node's symbols


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceLogSumExp"])
def test_reduce_runtime_axes_vs_ort(op, build_node):
    from onnxcc.interp import run
    from onnxcc.testing import ort_run

    x = np.random.default_rng(0).uniform(0.1, 2, (3, 4, 5)).astype(F32)
    for keep in (0, 1):
        model, m = build_node(op, [("x", F32, ["N", 4, 5]), ("axes", I64, [2])], {"keepdims": keep}, opset=18)
        infer_shapes(m)
        for axes in ([0, 2], [-1, 1]):
            feeds = {"x": x, "axes": np.array(axes, dtype=I64)}
            np.testing.assert_allclose(run(m, feeds)[0], ort_run(model, feeds)["y0"], rtol=1e-5)


# ---- vs onnxruntime -----------------------------------------------------------------------------------


@pytest.mark.parametrize("op", REDUCE)
def test_reduce_axes_input_vs_ort(op, ort_check):
    x = ("x", F32, ["N", "S", 4], 0.1, 2)  # positive: ReduceLogSum needs a positive sum
    for keep in (0, 1):
        ort_check(op, [x, ("axes", I64, [2])], {"keepdims": keep}, consts={"axes": np.array([0, -1])},
                  envs=ENVS, opset=18)
    ort_check(op, [x], {"keepdims": 0}, envs=ENVS, opset=18)  # all axes
    m = ort_check(op, [x], {"noop_with_empty_axes": 1}, envs=ENVS, opset=18)
    assert "f32[N, S, 4]" in str(m)


@pytest.mark.parametrize("op", REDUCE)
def test_reduce_axes_attr_vs_ort(op, ort_check):
    if op == "ReduceSum":
        ort_check(op, [("x", F32, ["N", "S", 4]), ("axes", I64, [1])], consts={"axes": np.array([1])},
                  envs=ENVS, opset=13)
        return
    ort_check(op, [("x", F32, ["N", "S", 4], 0.1, 2)], {"axes": [1]}, envs=ENVS, opset=13,
              expect_shapes=["f32[N, 1, 4]"])


def test_reduce_int_vs_ort(ort_check):
    for op in ("ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd"):
        ort_check(op, [("x", I64, ["N", "S"], -5, 5)], {"axes": [1]}, envs=ENVS, opset=11)
        ort_check(op, [("x", I32, ["N", "S"], -5, 5)], {"axes": [0], "keepdims": 0}, envs=ENVS, opset=11)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_arg_reduce_vs_ort(op, ort_check):
    for axis in (0, -1):
        for keep in (0, 1):
            for last in (0, 1):
                # small int range: ties make select_last_index matter
                ort_check(op, [("x", I32, ["N", "S", 3], 0, 3)],
                          {"axis": axis, "keepdims": keep, "select_last_index": last}, envs=ENVS)
    ort_check(op, [("x", F32, ["N", "S"])], envs=ENVS, expect_shapes=["i64[1, S]"])


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
def test_softmax_family_vs_ort(op, ort_check):
    for axis in (0, 1, -1):
        ort_check(op, [("x", F32, ["N", "S", 5], -4, 4)], {"axis": axis}, envs=ENVS, opset=13)
    ort_check(op, [("x", F32, ["N", 6], -4, 4)], envs=ENVS, opset=13)


def test_cumsum_vs_ort(ort_check):
    for ex in (0, 1):
        for rev in (0, 1):
            for axis in (np.array(1), np.array([-1], dtype=I32), np.array(0)):
                ort_check("CumSum", [("x", F32, ["N", "S"]), ("axis", axis.dtype, list(axis.shape))],
                          {"exclusive": ex, "reverse": rev}, consts={"axis": axis}, envs=ENVS)
    ort_check("CumSum", [("x", I64, ["N", "S"], -9, 9), ("axis", I64, [])], {"exclusive": 1},
              consts={"axis": np.array(1)}, envs=ENVS)
