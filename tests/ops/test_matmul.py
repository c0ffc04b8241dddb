"""MatMul, Gemm and MatMulInteger: shape rules (1-D operands, batch broadcasting, constraints on
the contraction dim), references vs onnxruntime, errors."""

import numpy as np
import pytest

from onnxcc.errors import PassError, ShapeError
from onnxcc.ir.parser import parse_module
from onnxcc.passes.shape_inference import infer_shapes

F32 = np.float32
ENVS = ({"B": 1, "S": 3, "N": 2}, {"B": 2, "S": 1, "N": 5})


def test_matmul_shapes(infer_ir):
    m = infer_ir("""module @t {
  sym B in [1, 64]
  sym S in [1, 512]
  sym K in [1, 512]
  func @main(%a: f32[B, 1, S, 16], %b: f32[4, 16, 8], %v: f32[16], %w: f32[8], %k: f32[S, K], %c: f32[K, 3])
      -> (f32[?], f32[?], f32[?], f32[?], f32[?]) {
    %0 = onnx.MatMul(%a, %b) : (f32[?])
    %1 = onnx.MatMul(%v, %b) : (f32[?])
    %2 = onnx.MatMul(%a, %v) : (f32[?])
    %3 = onnx.MatMul(%w, %w) : (f32[?])
    %4 = onnx.MatMul(%k, %c) : (f32[?])
    return %0, %1, %2, %3, %4
  }
}""")
    text = str(m)
    assert "onnx.MatMul(%a, %b) : (f32[B, 4, S, 8])" in text
    assert "onnx.MatMul(%v, %b) : (f32[4, 8])" in text
    assert "onnx.MatMul(%a, %v) : (f32[B, 1, S])" in text
    assert "onnx.MatMul(%w, %w) : (f32[])" in text
    assert "onnx.MatMul(%k, %c) : (f32[S, 3])" in text
    assert "constraint" not in text


def test_matmul_symbolic_inner_dim_constraint(infer_ir):
    m = infer_ir("""module @t {
  sym S in [1, 512]
  sym T in [1, 512]
  func @main(%a: f32[4, S], %b: f32[T, 8]) -> (f32[?, ?]) {
    %0 = onnx.MatMul(%a, %b) loc("mm") : (f32[?, ?])
    return %0
  }
}""")
    assert 'constraint S == T  // node "mm": inner dim (a dim -1 vs b dim -2) (S == T)' in str(m)


def test_gemm_shapes(infer_ir):
    m = infer_ir("""module @t {
  sym N in [1, 64]
  func @main(%x: f32[N, 32], %w: f32[10, 32], %b: f32[10], %wt: f32[N, 5]) -> (f32[?], f32[?]) {
    %0 = onnx.Gemm(%x, %w, %b) {transB = 1} : (f32[?])
    %1 = onnx.Gemm(%x, %wt) {transA = 1} : (f32[?])
    return %0, %1
  }
}""")
    text = str(m)
    assert "onnx.Gemm(%x, %w, %b) {transB = 1} : (f32[N, 10])" in text
    assert "onnx.Gemm(%x, %wt) {transA = 1} : (f32[32, 5])" in text


@pytest.mark.parametrize("text,msg", [
    ("%0 = onnx.MatMul(%a, %b) loc(\"mm\") : (f32[?])",
     'node "mm" (onnx.MatMul): inner dim (a dim -1 vs b dim -2): 3 != 4'),
    ("%0 = onnx.MatMul(%a, %s) loc(\"mm\") : (f32[?])",
     'node "mm" (onnx.MatMul): operands must have rank >= 1'),
    ("%0 = onnx.Gemm(%a, %a) loc(\"g\") : (f32[?])",
     'node "g" (onnx.Gemm): inner dim (a\'s k vs b\'s k): 3 != 2'),
    ("%0 = onnx.Gemm(%a, %b, %c) {transB = 1} loc(\"g\") : (f32[?])", 'node "g" (onnx.Gemm): inner dim'),
    ("%0 = onnx.Gemm(%a, %a, %c) {transB = 1} loc(\"g\") : (f32[?])",
     'node "g" (onnx.Gemm): c dim 0: 2 != 5'),
    ("%0 = onnx.MatMul(%a, %i) loc(\"mm\") : (f32[?])", "operand dtypes differ"),
])
def test_matmul_errors(text, msg):
    m = parse_module(f"""module @t {{
  func @main(%a: f32[2, 3], %b: f32[4, 5], %c: f32[5, 1], %s: f32[], %i: i64[3, 2]) -> (f32[?]) {{
    {text}
    return %0
  }}
}}""")
    with pytest.raises(ShapeError) as e:
        infer_shapes(m)
    assert msg in str(e.value)


def test_matmul_mismatch_through_pipeline(build_node):
    from onnxcc.passes import run_pipeline

    _, m = build_node("MatMul", [("a", F32, ["N", 3]), ("b", F32, [4, 2])])
    with pytest.raises(PassError, match=r'node "n0" \(onnx.MatMul\): inner dim') as e:
        run_pipeline(m, "shape-inference")
    assert isinstance(e.value.cause, ShapeError)


# ---- vs onnxruntime -----------------------------------------------------------------------------------


@pytest.mark.parametrize("a,b,want", [
    (["N", 6], [6, "S"], "f32[N, S]"),
    ([6], [6, "S"], "f32[S]"),
    (["N", 6], [6], "f32[N]"),
    ([6], [6], "f32[]"),
    (["B", 1, "N", 6], ["S", 6, 3], "f32[B, S, N, 3]"),
    (["B", "N", 6], [6], "f32[B, N]"),
    ([6], ["B", 6, "S"], "f32[B, S]"),
])
def test_matmul_vs_ort(a, b, want, ort_check):
    ort_check("MatMul", [("a", F32, a), ("b", F32, b)], envs=ENVS, expect_shapes=[want])


def test_matmul_int_and_f64_vs_ort(ort_check):
    ort_check("MatMul", [("a", np.int64, ["N", 4], -5, 5), ("b", np.int64, [4, 3], -5, 5)], envs=ENVS)
    ort_check("MatMul", [("a", np.float64, ["N", 4]), ("b", np.float64, [4, 3])], envs=ENVS)


@pytest.mark.parametrize("ta,tb", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_gemm_vs_ort(ta, tb, ort_check):
    a = ("a", F32, [5, "N"] if ta else ["N", 5])
    b = ("b", F32, [3, 5] if tb else [5, 3])
    attrs = {"transA": ta, "transB": tb, "alpha": 0.5, "beta": 2.0}
    for c in ([3], ["N", 3], ["N", 1], [], [1, 3]):
        ort_check("Gemm", [a, b, ("c", F32, c)], attrs, envs=ENVS, expect_shapes=["f32[N, 3]"])
    ort_check("Gemm", [a, b], attrs, envs=ENVS, opset=13)


def test_matmul_integer_vs_ort(ort_check):
    a = ("a", np.uint8, ["N", 4], 0, 255)
    b = ("b", np.uint8, [4, 3], 0, 255)
    ort_check("MatMulInteger", [a, b], envs=ENVS, expect_shapes=["i32[N, 3]"])
    azp, bzp = np.array(7, dtype=np.uint8), np.array([1, 2, 3], dtype=np.uint8)
    ort_check("MatMulInteger", [a, b, ("azp", np.uint8, []), ("bzp", np.uint8, [3])],
              consts={"azp": azp, "bzp": bzp}, envs=ENVS)
    m = ort_check("MatMulInteger", [a, b, None, ("bzp", np.uint8, [3])], consts={"bzp": bzp}, envs=ENVS)
    assert "absent = [2]" in str(m)
