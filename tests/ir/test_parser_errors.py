"""Every parse error says what was expected and where: line and column (1-based)."""

from __future__ import annotations

import pytest

from onnxcc.errors import ParseError
from onnxcc.ir.parser import parse_module


def _func(body: str, sig: str = "(%x: f32[4]) -> (f32[4])") -> str:
    return f"module @m {{\n  func @f{sig} {{\n{body}\n  }}\n}}\n"


def _sig(sig: str) -> str:
    """A function whose signature (line 2) is `sig`."""
    return _func("    return %x", sig)


def _op(line: str) -> str:
    """A function whose first op (line 3) is `line`."""
    return _func(f"    {line}\n    return %x")


_GUARDED = "module @m {{\n  sym N in [1, 4]\n  func @f() -> () guard {} {{\n    return\n  }}\n}}\n"

# name -> (text, line, col, message regex)
CASES = {
    "unknown_type": (_sig("(%x: q32[4]) -> (f32[4])"), 2, 15, r"unknown element type 'q32'"),
    "undefined_value": (_func("    return %y"), 3, 12, r"use of undefined value %y"),
    "value_defined_twice": (_func("    %a = test.a(%x) : (f32[4])\n    %a = test.b(%x) : (f32[4])\n"
                                  "    return %a"), 4, 5, r"value %a defined twice"),
    "param_defined_twice": (_sig("(%x: f32[4], %x: f32[4]) -> (f32[4])"), 2, 23, r"value %x defined twice"),
    "bad_dim_expression": (_sig("(%x: f32[N +]) -> (f32[4])"), 2, 22, r"expected a dim expression, got '\]'"),
    "dim_function_without_paren": (_sig("(%x: f32[floor N]) -> (f32[4])"), 2, 25,
                                   r"expected '\(' after floor"),
    "float_dim": (_sig("(%x: f32[1.5]) -> (f32[4])"), 2, 19, r"expected integer in dim expression"),
    "missing_close_brace": ("module @m {\n  func @f(%x: f32[4]) -> (f32[4]) {\n    return %x\n  }\n", 5, 1,
                            r"expected 'sym', 'constraint', 'func', 'dispatch' or '\}', got 'end of input'"),
    "missing_close_brace_in_attrs": (_op("%0 = test.a(%x) {k = 1 : (f32[4])"), 3, 28,
                                     r"expected attribute name, got ':'"),
    "unknown_attribute_value": (_op("%0 = test.a(%x) {k = bogus} : (f32[4])"), 3, 26,
                                r"unknown attribute value 'bogus'"),
    "dense_count_mismatch": (_op("%0 = cc.const() {value = dense<f32[3]: [1.0, 2.0]>} : (f32[3])"), 3, 30,
                             r"dense constant of type f32\[3\] needs 3 values, got 2"),
    "dense_symbolic_shape": (_op("%0 = cc.const() {value = dense<f32[N]: [1.0]>} : (f32[1])"), 3, 30,
                             r"dense constants need a static shape"),
    "dense_value_out_of_range": (_op("%0 = cc.const() {value = dense<i8[1]: [300]>} : (i8[1])"), 3, 44,
                                 r"value 300 does not fit element type i8"),
    "dense_float_for_int": (_op("%0 = cc.const() {value = dense<i64[1]: [1.5]>} : (i64[1])"), 3, 45,
                            r"value 1.5 does not fit element type i64"),
    "dense_number_for_bool": (_op("%0 = cc.const() {value = dense<bool[1]: [1]>} : (bool[1])"), 3, 46,
                              r"value 1 does not fit element type bool"),
    "unexpected_character": (_func("    ~"), 3, 5, r"unexpected character '~'"),
    "results_types_mismatch": (_op("%0, %1 = test.a() : (f32[3])"), 3, 14,
                               r"test.a has 2 results but 1 types"),
    "symbol_declared_twice": ("module @m {\n  sym N in [1, 2]\n  sym N in [1, 3]\n}\n", 3, 3,
                              r"symbol 'N' declared twice"),
    "trailing_garbage": ("module @m {\n}\nfoo\n", 3, 1, r"expected end of input after module, got 'foo'"),
    "empty_input": ("", 1, 1, r"expected 'module', got 'end of input'"),
    "missing_result_types": (_func("    %0 = test.a(%x)\n    return %0"), 4, 5,
                             r"expected ':', got 'return'"),
    "unterminated_string": (_op('%0 = test.a() {s = "abc} : (f32[1])'), 3, 24, r"unexpected character '\"'"),
    "bad_symbol_range": ("module @m {\n  sym N in [1, x]\n}\n", 2, 16, r"expected integer, got 'x'"),
    "bad_guard": (_GUARDED.format("N +"), 3, 29, r"expected a dim expression"),
    "guard_not_a_relation": (_GUARDED.format("N"), 3, 27, r"expected a comparison"),
    "unknown_dense_kind": (_op("%0 = test.a() {k = #foo<1>} : (f32[1])"), 3, 25,
                           r"expected #dim<...>, #bool<...> or #divisible<...>, got 'foo'"),
    "divisible_not_a_fact": (_op("%0 = test.a() {k = #divisible<N <= 4>} : (f32[1])"), 3, 35,
                             r"expected #divisible<SYM % K == 0>, got 'N'"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_parse_error_has_line_and_column(name: str):
    text, line, col, msg = CASES[name]
    with pytest.raises(ParseError, match=msg) as info:
        parse_module(text, "case.onnxir")
    e = info.value
    assert (e.line, e.col) == (line, col), f"{name}: reported {e.line}:{e.col}, want {line}:{col} ({e})"
    assert str(e).startswith(f"case.onnxir:{line}:{col}: ")


def test_parse_error_is_an_onnxcc_error():
    from onnxcc.errors import OnnxccError

    assert issubclass(ParseError, OnnxccError)
