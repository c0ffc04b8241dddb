"""The verifier rejects broken IR with a message naming the op (and its ONNX location)."""

from __future__ import annotations

import pytest

import onnxcc.ops  # noqa: F401  (installs the registry lookup the verifier checks registered ops with)
from onnxcc.errors import VerifyError
from onnxcc.ir import Block, DType, Function, Module, Op, Region, TensorType
from onnxcc.ir.parser import parse_module
from onnxcc.ir.verify import verify

F4 = TensorType(DType.f32, (4,))


def _check(text: str, match: str) -> VerifyError:
    m = parse_module(text)
    with pytest.raises(VerifyError, match=match) as info:
        verify(m)
    return info.value


def test_verifier_accepts_valid_module():
    verify(parse_module("""
module @m {
  sym N in [1, 8]
  constraint N % 2 == 0
  func @f(%c: bool[], %x: f32[N]) -> (f32[N]) guard N >= 2 {
    %0 = onnx.Relu(%x) loc("relu") : (f32[N])
    %1 = test.if(%c, %0) (
      ^(%a: f32[N]) {
        yield %a
      }
    ) : (f32[N])
    return %1
  }
  dispatch @g = [@f]
}
"""))


def test_verifier_use_before_def():
    b = Block([F4], ["x"])
    later = Op("test.b", [b.args[0]], [F4])
    b.append(Op("test.a", [later.result], [F4], loc="early"))
    b.append(later)
    b.append(Op("return", [later.result]))
    m = Module()
    m.add_function(Function("f", b, [F4]))
    with pytest.raises(VerifyError, match=r"test.a \(early\): operand 0 is used before it is defined"):
        verify(m)


def test_verifier_value_from_another_function():
    m = parse_module("module @m {\n  func @f(%x: f32[4]) -> (f32[4]) {\n    return %x\n  }\n"
                     "  func @g(%y: f32[4]) -> (f32[4]) {\n    return %y\n  }\n}\n")
    m.functions["g"].return_op.set_operand(0, m.functions["f"].params[0])
    with pytest.raises(VerifyError, match=r"return: operand 0 is used before it is defined"):
        verify(m)


def test_verifier_region_capture_from_outside_rejected():
    e = _check("""
module @m {
  func @f(%c: bool[], %x: f32[4]) -> (f32[4]) {
    %0 = test.if(%c) (
      ^() {
        %y = test.neg(%x) loc("inner") : (f32[4])
        yield %y
      }
    ) : (f32[4])
    return %0
  }
}
""", r"test.neg \(inner\): operand 0 .*regions are isolated")
    assert e.op is not None and e.op.loc == "inner"


def test_verifier_region_value_used_outside_rejected():
    m = parse_module("""
module @m {
  func @f(%c: bool[], %x: f32[4]) -> (f32[4]) {
    %0 = test.if(%c, %x) (
      ^(%a: f32[4]) {
        %y = test.neg(%a) : (f32[4])
        yield %y
      }
    ) : (f32[4])
    return %0
  }
}
""")
    f = m.main
    inner = f.body.ops[0].regions[0].block.ops[0]
    f.return_op.set_operand(0, inner.result)
    with pytest.raises(VerifyError, match=r"return: operand 0 is used before it is defined"):
        verify(m)


def test_verifier_missing_return():
    _check("module @m {\n  func @f(%x: f32[4]) -> (f32[4]) {\n    %0 = test.a(%x) : (f32[4])\n  }\n}\n",
           r"@f: block must end with 'return', got test.a")


def test_verifier_empty_function():
    _check("module @m {\n  func @f() -> () {\n  }\n}\n", r"@f: block must end with 'return', got nothing")


def test_verifier_return_not_last():
    _check("module @m {\n  func @f(%x: f32[4]) -> (f32[4]) {\n    return %x\n    return %x\n  }\n}\n",
           r"'return' must be the last op of its block")


def test_verifier_region_without_yield():
    _check("""
module @m {
  func @f(%c: bool[], %x: f32[4]) -> (f32[4]) {
    %0 = test.if(%c, %x) loc("if1") (
      ^(%a: f32[4]) {
        %b = test.a(%a) : (f32[4])
      }
    ) : (f32[4])
    return %0
  }
}
""", r"region 0 of test.if \(if1\): block must end with 'yield', got test.a")


def test_verifier_region_with_two_blocks():
    b1, b2 = Block(), Block()
    b1.append(Op("yield"))
    b2.append(Op("yield"))
    top = Block()
    top.append(Op("test.r", [], [], regions=[Region([b1, b2])]))
    top.append(Op("return"))
    m = Module()
    m.add_function(Function("f", top, []))
    with pytest.raises(VerifyError, match=r"regions must have exactly one block"):
        verify(m)


def test_verifier_return_type_mismatch():
    _check("module @m {\n  func @f(%x: f32[4]) -> (f32[5]) {\n    return %x\n  }\n}\n",
           r"@f result 0: returns f32\[4\], declared f32\[5\]")


def test_verifier_return_dtype_mismatch():
    _check("module @m {\n  func @f(%x: f32[4]) -> (f16[4]) {\n    return %x\n  }\n}\n",
           r"@f result 0: returns f32\[4\], declared f16\[4\]")


def test_verifier_return_count_mismatch():
    _check("module @m {\n  func @f(%x: f32[4]) -> (f32[4], f32[4]) {\n    return %x\n  }\n}\n",
           r"@f returns 1 values but declares 2 results")


@pytest.mark.parametrize("text, where", [
    ("module @m {\n  func @f(%x: f32[K]) -> (f32[K]) {\n    return %x\n  }\n}\n", r"@f parameter x"),
    ("module @m {\n  func @f(%x: f32[4]) -> (f32[K]) {\n    return %x\n  }\n}\n", r"@f result 0"),
    ("module @m {\n  func @f(%x: f32[4]) -> (f32[4]) {\n    %0 = test.a(%x) loc(\"a\") : (f32[K])\n"
     "    return %x\n  }\n}\n", r"result 0 of test.a \(a\)"),
    ("module @m {\n  func @f(%x: f32[4]) -> (f32[4]) guard K == 3 {\n    return %x\n  }\n}\n", r"@f guard"),
    ("module @m {\n  sym N in [1, 4]\n  func @f(%x: f32[4]) -> (f32[4]) subs {K = 3} {\n"
     "    return %x\n  }\n}\n",
     r"@f subs"),
    ("module @m {\n  constraint K == 3\n}\n", r"constraint K == 3"),
    ("module @m {\n  func @f(%x: f32[4]) -> (f32[4]) {\n    %0 = cc.dims() {dims = [#dim<K>]} : (i64[1])\n"
     "    return %x\n  }\n}\n", r"attribute 'dims' of cc.dims"),
    ("module @m {\n  func @f(%x: f32[4]) -> (f32[4]) {\n    %0 = test.a(%x) {t = [!f32[K]]} : (f32[4])\n"
     "    return %x\n  }\n}\n", r"attribute 't' of test.a"),
])
def test_verifier_undeclared_symbol(text: str, where: str):
    _check(text, where + r" uses undeclared symbol 'K'")


def test_verifier_wrong_arity_for_registered_op():
    e = _check("module @m {\n  func @f(%x: f32[4]) -> (f32[4]) {\n"
               "    %0 = onnx.Relu(%x, %x) loc(\"r1\") : (f32[4])\n    return %0\n  }\n}\n",
               r"onnx.Relu \(r1\): expects 1 operands, got 2")
    assert e.op.name == "onnx.Relu"


def test_verifier_operands_on_const():
    _check("module @m {\n  func @f(%x: f32[4]) -> (f32[4]) {\n"
           "    %0 = cc.const(%x) {value = dense<f32[]: [1.0]>} : (f32[])\n    return %x\n  }\n}\n",
           r"cc.const: expects 0 operands, got 1")


def test_verifier_wrong_result_count_for_registered_op():
    _check("module @m {\n  func @f(%x: f32[4]) -> (f32[4]) {\n    %0, %1 = onnx.Relu(%x) : (f32[4], f32[4])\n"
           "    return %0\n  }\n}\n", r"onnx.Relu: expects 1 results, got 2")


def test_verifier_unregistered_ops_are_allowed():
    verify(parse_module("module @m {\n  func @f(%x: f32[4]) -> (f32[4]) {\n"
                        "    %0 = test.anything(%x, %x, %x) : (f32[4])\n    return %0\n  }\n}\n"))


def test_verifier_dispatch_names_unknown_function():
    _check("module @m {\n  func @f(%x: f32[4]) -> (f32[4]) {\n    return %x\n  }\n"
           "  dispatch @g = [@f, @h]\n}\n",
           r"dispatch @g names unknown function @h")


def test_verifier_broken_parent_link():
    m = parse_module("module @m {\n  func @f(%x: f32[4]) -> (f32[4]) {\n    %0 = test.a(%x) : (f32[4])\n"
                     "    return %0\n  }\n}\n")
    m.main.body.ops[0].parent = None
    with pytest.raises(VerifyError, match=r"parent link"):
        verify(m)
