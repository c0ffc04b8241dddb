"""bucketize: pad-safety decisions on small textual IR, checked as text and by the interpreter.

Every bucket version must compute exactly what the generic version computes for every true
length its guard admits (run both through the numpy interpreter)."""

from __future__ import annotations

import numpy as np
import pytest
import sympy

import onnxcc
from onnxcc.errors import OnnxccError
from onnxcc.interp import run
from onnxcc.ir import evaluate, sym
from onnxcc.passes import run_pipeline
from onnxcc.passes.base import get_pass
from onnxcc.passes.bucketize import BucketError, BucketizePass, bucket_table, parse_buckets

PIPE = "shape-inference,specialize{one=false},bucketize{buckets=seq:8:16}"


def bucketize(text: str, pipeline: str = PIPE):
    m = onnxcc.parse_ir(text)
    run_pipeline(m, pipeline)
    return m


def inputs_at(f, env: dict[str, int], rng) -> list[np.ndarray]:
    out = []
    for a in f.params:
        shape = [evaluate(d, env) for d in a.type.shape]
        if a.type.dtype.is_float:
            out.append(rng.standard_normal(shape).astype(a.type.dtype.np))
        else:
            out.append(rng.integers(0, 4, size=shape).astype(a.type.dtype.np))
    return out


def check_exact(m, lengths=(1, 3, 8, 9, 13, 16), env=None):
    """Each bucket version == the generic version at every length its guard admits."""
    generic = m.functions[m.dispatch["main"][-1]]
    rng = np.random.default_rng(0)
    checked = 0
    for name in m.dispatch["main"]:
        f = m.functions[name]
        if f.attrs.get("kind") != "bucket":
            continue
        for n in lengths:
            vals = {"seq": n, **(env or {})}
            if not bool(sympy.sympify(f.guard).xreplace({sym(k): v for k, v in vals.items()})):
                continue
            args = inputs_at(generic, vals, rng)
            want = run(m, args, generic)
            got = run(m, args, f)
            for w, g in zip(want, got):
                assert g.shape == w.shape, f"{name} at seq={n}"
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=f"{name} at seq={n}")
            checked += 1
    assert checked >= 4


def bucket_text(m, bucket: int = 16) -> str:
    from onnxcc.ir.printer import print_function

    return print_function(m.functions[f"main.seq_b{bucket}"])


SOFTMAX = """
module @attn {
  sym seq in [1, 1024]
  func @main(%x: f32[seq, 8]) -> (f32[seq, 8]) {
    %xt = onnx.Transpose(%x) {perm = [1, 0]} loc("Transpose_1") : (f32[8, seq])
    %s = onnx.MatMul(%x, %xt) loc("MatMul_2") : (f32[seq, seq])
    %p = onnx.Softmax(%s) {axis = -1} loc("Softmax_3") : (f32[seq, seq])
    %o = onnx.MatMul(%p, %x) loc("MatMul_4") : (f32[seq, 8])
    return %o
  }
}
"""


def test_bucketize_softmax_masks_with_minus_inf():
    m = bucketize(SOFTMAX)
    assert m.dispatch["main"] == ["main.seq_b8", "main.seq_b16", "main.generic"]
    text = bucket_text(m)
    assert 'cc.pad_dim(%x) {axis = 1, fill = 0.0, size = 16}' not in text  # x is [seq, 8]: axis 0
    assert 'cc.pad_dim(%x) {axis = 0, fill = 0.0, size = 16}' in text
    assert ('cc.mask_dim(%s) {axis = 1, fill = -inf, len = "seq"} loc("Softmax_3.mask") : (f32[16, 16])'
            in text)
    assert text.count("cc.mask_dim") == 1  # P is 0 past the true length, x is zero-padded: no more masks
    assert 'cc.unpad_dim(%o) {axis = 0, len = "seq"}' in text
    assert "guard 8 < seq & seq <= 16" in text
    check_exact(m)


def test_bucketize_reduce_sum_masks_with_identity():
    m = bucketize("""
module @r {
  sym seq in [1, 1024]
  func @main(%x: f32[seq, 8]) -> (f32[8], f32[1, 8], f32[8]) {
    %e = onnx.Exp(%x) loc("Exp_1") : (f32[seq, 8])
    %axes = cc.const() {value = dense<i64[1]: [0]>} : (i64[1])
    %s = onnx.ReduceSum(%e, %axes) {keepdims = 0} loc("ReduceSum_2") : (f32[8])
    %mx = onnx.ReduceMax(%x) {axes = [0]} loc("ReduceMax_3") : (f32[1, 8])
    %plain = onnx.ReduceSum(%x, %axes) {keepdims = 0} loc("ReduceSum_4") : (f32[8])
    return %s, %mx, %plain
  }
}
""")
    text = bucket_text(m)
    # exp(0) = 1 in the padding: the sum needs 0 there; the max needs -inf; padded x (%0) is 0 already
    assert 'cc.mask_dim(%e) {axis = 0, fill = 0.0, len = "seq"} loc("ReduceSum_2.mask")' in text
    assert 'cc.mask_dim(%0) {axis = 0, fill = -inf, len = "seq"} loc("ReduceMax_3.mask")' in text
    assert text.count("cc.mask_dim") == 2
    check_exact(m)


def test_bucketize_matmul_contraction_gets_zeros():
    m = bucketize("""
module @mm {
  sym seq in [1, 1024]
  func @main(%x: f32[seq, 8]) -> (f32[8, 8]) {
    %e = onnx.Exp(%x) loc("Exp_1") : (f32[seq, 8])
    %et = onnx.Transpose(%e) {perm = [1, 0]} loc("Transpose_2") : (f32[8, seq])
    %g = onnx.MatMul(%et, %e) loc("MatMul_3") : (f32[8, 8])
    return %g
  }
}
""")
    text = bucket_text(m)
    # both sides hold exp(0) = 1 past the true length: one is zeroed, the other is finite
    assert 'cc.mask_dim(%et) {axis = 1, fill = 0.0, len = "seq"} loc("MatMul_3.mask")' in text
    assert text.count("cc.mask_dim") == 1
    check_exact(m)


def test_bucketize_matmul_garbage_both_sides_masked():
    m = bucketize("""
module @mm2 {
  sym seq in [1, 1024]
  func @main(%x: f32[seq, 8]) -> (f32[8, 8]) {
    %l = onnx.Log(%x) loc("Log_1") : (f32[seq, 8])
    %lt = onnx.Transpose(%l) {perm = [1, 0]} loc("Transpose_2") : (f32[8, seq])
    %g = onnx.MatMul(%lt, %l) loc("MatMul_3") : (f32[8, 8])
    return %g
  }
}
""")
    text = bucket_text(m)
    # log(0) = -inf: 0 * -inf is NaN, so zeroing one side is not enough
    assert text.count("cc.mask_dim") == 2
    m2 = onnxcc.parse_ir(str(m))
    generic, f = m2.functions["main.generic"], m2.functions["main.seq_b16"]
    x = np.abs(np.random.default_rng(1).standard_normal((11, 8))).astype(np.float32) + 0.5
    with np.errstate(divide="ignore"):  # log(0) in the padding, masked before it is summed
        np.testing.assert_allclose(run(m2, [x], f)[0], run(m2, [x], generic)[0], rtol=1e-5)


def test_bucketize_reduce_mean_divides_by_true_length():
    m = bucketize("""
module @mean {
  sym seq in [1, 1024]
  func @main(%x: f32[2, seq, 8]) -> (f32[2, 1, 1], f32[2, seq, 1]) {
    %e = onnx.Exp(%x) loc("Exp_1") : (f32[2, seq, 8])
    %m = onnx.ReduceMean(%e) {axes = [1, 2]} loc("ReduceMean_2") : (f32[2, 1, 1])
    %r = onnx.ReduceMean(%e) {axes = [2]} loc("ReduceMean_3") : (f32[2, seq, 1])
    return %m, %r
  }
}
""")
    text = bucket_text(m)
    assert 'cc.mask_dim(%e) {axis = 1, fill = 0.0, len = "seq"}' in text
    assert 'onnx.ReduceSum(' in text and 'loc("ReduceMean_2.sum")' in text
    assert 'cc.true_len() {len = "8*seq"} loc("ReduceMean_2.count") : (f32[])' in text
    assert 'loc("ReduceMean_2.mean") : (f32[2, 1, 1])' in text
    assert 'onnx.ReduceMean(%e) {axes = [2]} loc("ReduceMean_3")' in text  # not over seq: untouched
    check_exact(m)


def test_bucketize_layernorm_over_padded_axis_uses_true_count():
    m = bucketize("""
module @ln {
  sym seq in [1, 1024]
  func @main(%x: f32[3, seq], %w: f32[seq]) -> (f32[3, seq], f32[seq, 4]) {
    %y = onnx.LayerNormalization(%x, %w) {axis = -1, epsilon = 1e-05} loc("LN_1") : (f32[3, seq])
    %xt = onnx.Transpose(%x) {perm = [1, 0]} loc("T_2") : (f32[seq, 3])
    %g = cc.const() {value = dense<f32[4]: [1.0, 2.0, 0.5, 1.5]>} : (f32[4])
    %e = onnx.Exp(%xt) loc("Exp_3") : (f32[seq, 3])
    %one = cc.const() {value = dense<i64[1]: [1]>} : (i64[1])
    %c = onnx.ReduceSum(%e, %one) {keepdims = 1} loc("Sum_4") : (f32[seq, 1])
    %z = onnx.Mul(%c, %g) loc("Mul_5") : (f32[seq, 4])
    return %y, %z
  }
}
""")
    text = bucket_text(m)
    assert "onnx.LayerNormalization" not in text
    assert 'cc.true_len() {len = "seq"} loc("LN_1.count")' in text
    assert "onnx.LayerNormalization" in str(m.functions["main.generic"].body.ops[0].name)
    check_exact(m)


def test_bucketize_refuses_reshape_merging_padded_dim():
    text = """
module @bad {
  sym seq in [1, 1024]
  func @main(%x: f32[2, seq, 4]) -> (f32[2, 4*seq]) {
    %t = cc.dims() {dims = [2, #dim<4*seq>]} loc("Concat_4") : (i64[2])
    %r = onnx.Reshape(%x, %t) loc("Reshape_5") : (f32[2, 4*seq])
    return %r
  }
}
"""
    want = r'node "Reshape_5" \(onnx\.Reshape\) merges padded dim seq with dim 2; cannot bucket seq'
    with pytest.raises(OnnxccError, match=want) as e:
        bucketize(text)
    assert isinstance(e.value.cause, BucketError)


@pytest.mark.parametrize("body, why", [
    ("""    %i = cc.const() {value = dense<i64[]: [-1]>} : (i64[])
    %r = onnx.Gather(%x, %i) {axis = 0} loc("Gather_7") : (f32[4])""",
     r'node "Gather_7" \(onnx\.Gather\) gathers along padded dim seq with indices that may reach the '
     r"padding"),
    ("""    %n = cc.dims() {dims = [#dim<seq>]} loc("Shape_1") : (i64[1])
    %f = onnx.Cast(%n) {to = 1} loc("Cast_2") : (f32[1])
    %r = onnx.Div(%w, %f) loc("Div_3") : (f32[4])""",
     r'node "Cast_2" \(onnx\.Cast\) reads seq as data'),
    ("""    %z = cc.const() {value = dense<i64[]: [0]>} : (i64[])
    %o = cc.const() {value = dense<i64[]: [1]>} : (i64[])
    %n = cc.dims() {dims = [#dim<seq>]} loc("Shape_1") : (i64[])
    %p = onnx.Range(%z, %n, %o) loc("Range_2") : (i64[seq])
    %r = onnx.ReduceSum(%x) {keepdims = 0} loc("Sum_3") : (f32[4])""",
     r'node "Range_2" \(onnx\.Range\) reads seq as data'),
    ("""    %r = onnx.Trilu(%x) loc("Trilu_9") : (f32[seq, 4])""",
     r'node "Trilu_9" \(onnx\.Trilu\) is not known to be pad-safe along padded dim seq'),
])
def test_bucketize_refusals_name_op_and_node(body, why):
    ret = body.strip().splitlines()[-1].split("=")[0].strip()
    rtype = body.strip().splitlines()[-1].rsplit(": (", 1)[1].rstrip(")")
    text = f"""
module @bad {{
  sym seq in [1, 1024]
  func @main(%x: f32[seq, 4], %w: f32[4]) -> ({rtype}) {{
{body}
    return {ret}
  }}
}}
"""
    with pytest.raises(OnnxccError, match=why + r".*cannot bucket seq"):
        bucketize(text)


def test_bucketize_constant_gather_below_the_bucket_floor_is_safe():
    m = bucketize("""
module @cls {
  sym seq in [1, 1024]
  func @main(%x: f32[seq, 4]) -> (f32[4]) {
    %i = cc.const() {value = dense<i64[]: [0]>} : (i64[])
    %r = onnx.Gather(%x, %i) {axis = 0} loc("Gather_1") : (f32[4])
    return %r
  }
}
""")
    check_exact(m)


def test_bucketize_dispatch_order_and_roundtrip():
    m = bucketize(SOFTMAX, "shape-inference,specialize{exact=seq:16,one=false,divisible=4},"
                           "bucketize{buckets=seq:8:32}")
    assert m.dispatch["main"] == ["main.seq16", "main.seq_b8", "main.seq_b32", "main.seq_mod4",
                                  "main.generic"]
    f = m.functions["main.seq_b32"]
    assert f.attrs["kind"] == "bucket" and f.attrs["bucket"] == 32 and f.attrs["symbol"] == "seq"
    assert not f.subs  # seq keeps its true value inside: masks read it
    assert [str(a.type) for a in f.params] == ["f32[seq, 8]"]
    text = str(m)
    assert str(onnxcc.parse_ir(text)) == text


def test_bucketize_option_parsing_and_errors():
    # the pipeline text is parsed once, into the typed option
    assert parse_buckets("seq:64:16|batch:4") == (("seq", (64, 16)), ("batch", (4,)))
    assert get_pass("bucketize{buckets=seq:64:16|batch:4}") == BucketizePass((("seq", (64, 16)), ("batch", (4,))))
    assert bucket_table(parse_buckets("seq:64:16|batch:4|seq:64")) == {"seq": [16, 64], "batch": [4]}
    with pytest.raises(OnnxccError, match="positive"):
        bucket_table(parse_buckets("seq:0"))
    with pytest.raises(OnnxccError, match="must be integers in 'seq:x'"):
        get_pass("bucketize{buckets=seq:x}")
    with pytest.raises(OnnxccError, match="unknown symbol 'len'"):
        bucketize(SOFTMAX, "shape-inference,bucketize{buckets=len:8}")
