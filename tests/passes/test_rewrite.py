"""Rewrite infrastructure (Rewriter, apply_patterns) and the graph passes' Python API."""

from __future__ import annotations

import numpy as np
import pytest

from onnxcc.ir import DType, Op, TensorType
from onnxcc.ir.parser import parse_module
from onnxcc.ir.verify import verify
from onnxcc.passes.canonicalize import canonicalize, propagate_values
from onnxcc.passes.cse import attr_key, cse
from onnxcc.passes.dce import dce, is_pure
from onnxcc.passes.rewrite import RewritePattern, Rewriter, apply_patterns

F4 = TensorType(DType.f32, (4,))

NESTED = """
module @m {
  func @f(%c: bool[], %x: f32[4]) -> (f32[4]) {
    %0 = test.neg(%x) : (f32[4])
    %1 = test.neg(%0) : (f32[4])
    %2 = test.if(%c, %1) (
      ^(%a: f32[4]) {
        %b = test.neg(%a) : (f32[4])
        %d = test.neg(%b) : (f32[4])
        yield %d
      }
    ) : (f32[4])
    return %2
  }
}
"""


class CancelNegNeg(RewritePattern):
    """neg(neg(x)) -> x."""

    op_names = ("test.neg",)

    def match_and_rewrite(self, op, rewriter):
        inner = op.operands[0].owner
        if not isinstance(inner, Op) or inner.name != "test.neg":
            return False
        rewriter.replace_op(op, [inner.operands[0]])
        return True


class EraseDead(RewritePattern):
    def match_and_rewrite(self, op, rewriter):
        if op.results and not any(r.uses for r in op.results) and is_pure(op):
            rewriter.erase_op(op)
            return True
        return False


def test_apply_patterns_reaches_fixed_point_in_nested_regions():
    m = parse_module(NESTED)
    rw = Rewriter()
    assert apply_patterns(m, [CancelNegNeg(), EraseDead()], rewriter=rw)
    verify(m)
    text = str(m)
    assert "test.neg" not in text and "test.if(%c, %x)" in text and "yield %a" in text
    assert (rw.replaced, rw.removed, rw.inserted) == (2, 4, 0)  # 2 replaced (+erased), 2 dead negs
    assert not apply_patterns(m, [CancelNegNeg(), EraseDead()])


def test_apply_patterns_max_iterations_bounds_the_work():
    calls = []

    class CountOnly(RewritePattern):
        def match_and_rewrite(self, op, rewriter):
            calls.append(op.name)
            return True  # claims a change every time: the driver must still stop

    m = parse_module(NESTED)
    apply_patterns(m, [CountOnly()], max_iterations=3)
    assert len(calls) == 3 * 5  # 5 ops (return / yield are not visited), 3 sweeps


def test_op_names_filter():
    seen = []

    class Spy(RewritePattern):
        op_names = ("test.if",)

        def match_and_rewrite(self, op, rewriter):
            seen.append(op.name)
            return False

    assert not apply_patterns(parse_module(NESTED), [Spy()])
    assert seen == ["test.if"]


def test_rewriter_insert_replace_counts_and_checks():
    m = parse_module(NESTED)
    body = m.main.body
    first = body.ops[0]
    rw = Rewriter()
    new = rw.insert_before(first, Op("test.pos", [m.main.params[1]], [F4]))
    assert body.ops[0] is new and rw.inserted == 1
    rw.replace_op(first, Op("test.abs", [new.result], [F4]))  # an op not in a block gets inserted
    assert [o.name for o in body.ops[:3]] == ["test.pos", "test.abs", "test.neg"]
    assert (rw.inserted, rw.replaced, rw.removed) == (2, 1, 1) and rw.changed
    with pytest.raises(ValueError, match=r"cannot replace a value of type f32\[4\] by one of type bool\[\]"):
        rw.replace_all_uses(body.ops[1].result, m.main.params[0])
    with pytest.raises(ValueError, match="1 results, 2 replacements"):
        rw.replace_op(body.ops[1], [new.result, new.result])
    with pytest.raises(ValueError, match="still used"):
        rw.erase_op(body.ops[0])
    verify(m)


def test_replace_op_with_none_for_unused_results():
    m = parse_module("module @m {\n  func @f(%x: f32[4]) -> (f32[4]) {\n"
                     "    %a, %b = test.split(%x) : (f32[4], f32[2])\n    return %a\n  }\n}\n")
    op = m.main.body.ops[0]
    Rewriter().replace_op(op, [m.main.params[0], None])
    verify(m)
    assert [o.name for o in m.main.body.ops] == ["return"]


# ---- canonicalize / cse / dce through Python -------------------------------------------------

def test_canonicalize_folds_weights_and_drops_them():
    m = parse_module("module @m {\n  func @f() -> (f32[]) {\n    %w = cc.const() {value = @w} : (f32[100])\n"
                     "    %0 = onnx.ReduceSum(%w) {keepdims = 0} : (f32[])\n    return %0\n  }\n}\n")
    m.weights["w"] = np.arange(100, dtype=np.float32)
    m.weights["unused"] = np.zeros(2, np.float32)
    assert canonicalize(m)
    verify(m)
    const = m.main.body.ops[0]
    assert const.name == "cc.const" and float(const.attrs["value"]) == 4950.0
    assert m.weights == {}


def test_canonicalize_leaves_weights_without_data():
    text = ("module @m {\n  func @f() -> (f32[]) {\n    %w = cc.const() {value = @w} : (f32[4])\n"
            "    %0 = onnx.ReduceSum(%w) {keepdims = 0} : (f32[])\n    return %0\n  }\n}\n")
    m = parse_module(text)
    assert not canonicalize(m)
    assert str(m) == str(parse_module(text))


def test_canonicalize_is_idempotent_on_symbolic_dims():
    m = parse_module("module @m {\n  sym N in [1, 8]\n  func @f() -> (i64[2]) {\n"
                     "    %0 = cc.dims() {dims = [#dim<N>, 4]} : (i64[2])\n    return %0\n  }\n}\n")
    before = str(m)
    assert not canonicalize(m)
    assert str(m) == before


def test_propagate_values_skips_unknown_ops():
    m = parse_module("module @m {\n  sym N in [1, 8]\n  func @f(%x: f32[N]) -> (i64[2]) {\n"
                     "    %0 = cc.dims() {dims = [#dim<N>, 4]} : (i64[2])\n    %1 = test.id(%0) : (i64[2])\n"
                     "    return %1\n  }\n}\n")
    values = propagate_values(m)
    d, t = m.main.body.ops[0], m.main.body.ops[1]
    assert list(values[d.result]) == [m.symbols["N"].symbol, 4]
    assert t.result not in values


def test_dce_and_cse_counts():
    m = parse_module("module @m {\n  func @f(%x: f32[4]) -> (f32[4]) {\n    %0 = test.a(%x) : (f32[4])\n"
                     "    %1 = test.a(%x) : (f32[4])\n    %2 = test.b(%0, %1) : (f32[4])\n"
                     "    %3 = test.b(%1, %0) : (f32[4])\n    return %2\n  }\n}\n")
    # %1 merges into %0; then %2 and %3 both read (%0, %0) and merge too, in one sweep
    assert cse(m) == 2
    assert dce(m) == 0
    verify(m)
    assert [o.name for o in m.main.body.ops] == ["test.a", "test.b", "return"]
    m.main.body.ops.insert(1, Op("test.dead", [m.main.params[0]], [F4]))
    m.main.body.ops[1].parent = m.main.body
    assert dce(m) == 1 and cse(m) == 0


def test_attr_key_distinguishes_lookalikes():
    assert attr_key(1) != attr_key(1.0) != attr_key(True)
    assert attr_key(float("nan")) == attr_key(float("nan"))
    assert attr_key(0.0) != attr_key(-0.0)
    a = np.array([1, 2], np.int64)
    assert attr_key(a) == attr_key(a.copy()) != attr_key(a.astype(np.int32))
    assert attr_key(a) != attr_key(a.reshape(2, 1))
    assert attr_key([1, [2]]) == attr_key((1, (2,)))
    hash(attr_key({"k": [np.zeros(2)]}))


def test_is_pure():
    m = parse_module("module @m {\n  func @f(%x: f32[4]) -> () {\n    %0 = test.a(%x) : (f32[4])\n"
                     "    %1 = test.a(%x) {effects = true} : (f32[4])\n    %2 = com.ms.Foo(%x) : (f32[4])\n"
                     "    %3 = onnx.Relu(%x) : (f32[4])\n    return\n  }\n}\n")
    assert [is_pure(o) for o in m.main.body.ops] == [True, False, False, True, False]
