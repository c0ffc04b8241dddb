"""print -> parse -> print is a fixed point, on a corpus of IR snippets and on built modules."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import sympy

from onnxcc.errors import OnnxccError
from onnxcc.ir import Block, DType, Function, Module, Op, Region, TensorType, WeightRef, sym
from onnxcc.ir.parser import parse_module
from onnxcc.ir.verify import verify


def roundtrip(text: str) -> str:
    """Parse, print, parse the print, print again; both prints must agree."""
    first = str(parse_module(text))
    second = str(parse_module(first))
    assert first == second, f"not a fixed point:\n{first}\n---\n{second}"
    return first


CORPUS = {
    "empty": "module @m {\n}\n",
    "symbols": """
module @m attributes {opset = 17} {
  sym batch in [1, 2147483647]  // input "x" dim 0
  sym seq in [1, 4096] multiple_of 8  // input "x" dim 1
  sym heads in [1, 64] multiple_of 2
  func @main(%x: f32[batch, seq, 64]) -> (f32[batch, seq, 64]) {
    return %x
  }
}
""",
    "constraints": """
module @m {
  sym N in [1, 64]
  sym M in [1, 64]
  constraint N % 4 == 0  // node "Reshape_3": split into heads
  constraint N == M & M <= 32
  constraint N < 3 | !(N == M)
  constraint !(N <= 2 & M >= 8)
  constraint floor((N - 1)/2) + 1 == M
  constraint N*M <= 1024 | N + M != 7
}
""",
    "guards_subs_dispatch": """
module @m {
  sym N in [1, 64]
  sym S in [1, 512]
  func @main.n8(%x: f32[N, S]) -> (f32[N, S]) guard N == 8 & S <= 64 & S % 4 == 0 subs {N = 8} {
    return %x
  }
  func @main.any(%x: f32[N, S]) -> (f32[N, S]) attributes {kind = "generic"} {
    return %x
  }
  dispatch @main = [@main.n8, @main.any]
}
""",
    "dims": """
module @m {
  sym N in [1, 64]
  sym M in [1, 64]
  func @f(%x: f32[N, ?], %y: i64[(N + 1) % 4, floor(N/2), ceiling(N/4), Max(N, M), Min(N, 3)], %z: f32[2*N + 1, N*M, 70 - N, N**2, 2*(N % 3)]) -> (f32[N, ?]) {
    return %x
  }
}
""",
    "scalar_and_empty_types": """
module @m {
  func @f(%x: f32[], %y: bool[0, 3], %z: i8[1]) -> (f32[]) {
    return %x
  }
}
""",
    "dense_every_dtype": """
module @m {
  func @f() -> () {
    test.c() {a = dense<f16[3]: [0.5, -inf, inf]>, b = dense<f32[2, 2]: [1.5, -0.0, nan, -1e-07]>, c = dense<f64[1]: [3.141592653589793]>, d = dense<i8[2]: [-128, 127]>, e = dense<i16[1]: [-32768]>, f = dense<i32[1]: [2147483647]>, g = dense<i64[2]: [-9223372036854775808, 9223372036854775807]>, h = dense<u8[1]: [255]>, i = dense<u16[1]: [65535]>, j = dense<u32[1]: [4294967295]>, k = dense<u64[1]: [18446744073709551615]>, l = dense<bool[3]: [true, false, true]>, m = dense<f32[]: [2.0]>, n = dense<f32[0]: []>} : ()
    return
  }
}
""",
    "scalar_attrs": """
module @m {
  sym N in [1, 8]
  func @f(%x: f32[N]) -> (f32[N]) {
    %0 = test.a(%x) {a = 1, b = -2, c = 1.0, d = -2.5e-12, e = nan, f = -inf, g = inf, h = true, i = false, j = "s \\"q\\" \\\\ \\n", k = f16, l = #dim<2*N + 1>, m = #dim<N>, n = #bool<N >= 2 & N <= 4>, o = !f32[N, ?], p = @w, q = @"weights/0:w", "r-s" = [], t = [1, 2], u = [1.5, nan], v = ["a", "b"], w = [[1], [2, 3]], x = [#dim<N>, 4]} loc("node 0") : (f32[N])
    return %0
  }
}
""",
    "regions": """
module @m {
  sym N in [1, 8]
  func @f(%c: bool[], %x: f32[N], %n: i64[]) -> (f32[N], f32[?, N]) {
    %0 = onnx.If(%c, %x) loc("if") (
      ^(%a: f32[N]) {
        %r = onnx.Relu(%a) : (f32[N])
        yield %r
      },
      ^(%b: f32[N]) {
        yield %b
      }
    ) : (f32[N])
    %1, %2 = onnx.Loop(%n, %c, %0) {absent = []} (
      ^(%i: i64[], %cond: bool[], %h: f32[N]) {
        %h2 = onnx.Neg(%h) : (f32[N])
        %in = test.nest(%h2) (
          ^(%deep: f32[N]) {
            yield %deep
          }
        ) : (f32[N])
        yield %cond, %in, %h2
      }
    ) : (f32[N], f32[?, N])
    return %1, %2
  }
}
""",
    "quoted_names": """
module @"torch-jit-export" attributes {"producer name" = "pytorch"} {
  sym N in [1, 8]
  func @"main graph"(%x: f32[N]) -> (f32[N]) {
    %0 = test.a(%x) {"weird key" = 1} loc("/layer.0/Add \\"x\\"") : (f32[N])
    return %0
  }
  dispatch @"main graph" = [@"main graph"]
}
""",
    "multi_result_and_no_result": """
module @m {
  func @f(%x: f32[4]) -> (f32[2], f32[2]) {
    %a, %b = test.split(%x) : (f32[2], f32[2])
    test.print(%a) {effects = true} : ()
    return %a, %b
  }
}
""",
}


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_roundtrip_corpus(name: str):
    text = roundtrip(CORPUS[name])
    verify(parse_module(text))


def test_roundtrip_preserves_content():
    m = parse_module(CORPUS["scalar_attrs"])
    a = m.main.body.ops[0].attrs
    assert a["a"] == 1 and a["b"] == -2 and isinstance(a["c"], float)
    assert np.isnan(a["e"]) and a["f"] == -np.inf and a["h"] is True
    assert a["j"] == 's "q" \\ \n' and a["k"] is DType.f16
    assert a["l"] == 2 * sym("N") + 1 and a["m"] == sym("N")
    assert a["o"] == TensorType(DType.f32, (sym("N"), None))
    assert a["p"] == WeightRef("w") and a["q"] == WeightRef("weights/0:w")
    assert a["x"] == [sym("N"), 4]
    assert m.main.body.ops[0].loc == "node 0"


def test_roundtrip_dense_values_bit_exact():
    m = parse_module(roundtrip(CORPUS["dense_every_dtype"]))
    a = m.main.body.ops[0].attrs
    assert a["a"].dtype == np.float16 and np.isinf(a["a"][1]) and a["a"][1] < 0
    b = a["b"]
    assert b.dtype == np.float32 and b.shape == (2, 2)
    assert np.signbit(b[0, 1]) and np.isnan(b[1, 0]) and b[1, 1] == np.float32(-1e-07)
    assert a["g"].dtype == np.int64 and a["g"][0] == np.iinfo(np.int64).min
    assert a["k"].dtype == np.uint64 and a["k"][0] == np.iinfo(np.uint64).max
    assert a["l"].dtype == np.bool_ and a["l"].tolist() == [True, False, True]
    assert a["m"].shape == () and a["n"].shape == (0,)


def test_roundtrip_symbols_and_constraints_content():
    m = parse_module(CORPUS["symbols"])
    s = m.symbols["seq"]
    assert (s.lo, s.hi, s.multiple_of, s.origin) == (1, 4096, 8, 'input "x" dim 1')
    m = parse_module(CORPUS["constraints"])
    assert m.constraints[0].origin == 'node "Reshape_3": split into heads'
    n, mm = sym("N"), sym("M")
    assert m.constraints[1].expr == sympy.And(sympy.Eq(n, mm), mm <= 32)
    f = parse_module(CORPUS["guards_subs_dispatch"]).functions["main.n8"]
    assert f.subs == {n: 8} and m is not None
    assert parse_module(CORPUS["guards_subs_dispatch"]).dispatch == {"main": ["main.n8", "main.any"]}


def test_roundtrip_built_module_with_onnx_names():
    """Names that are not identifiers, or clash, are renumbered; symbol names get quoted."""
    m = Module("torch-jit export")
    n = m.symbols.declare("N", 1, 10, origin='input "x:0" dim 0')
    t = TensorType(DType.f32, (n, 4))
    b = Block([t, t], ["x:0", "1"])
    o1 = b.append(Op("test.a", b.args, [t], {"k-1": 1}, loc='node "q"', result_names=["x"]))
    o2 = b.append(Op("test.a", [o1.result], [t], result_names=["x"]))
    o3 = b.append(Op("test.a", [o2.result], [t], result_names=["0"]))
    inner = Block([t], ["x"])
    inner.append(Op("yield", inner.args))
    o4 = b.append(Op("test.r", [o3.result], [t], regions=[Region([inner])], result_names=["y"]))
    b.append(Op("return", [o4.result]))
    m.add_function(Function("main graph", b, [t]))
    m.dispatch["main graph"] = ["main graph"]
    m.weights["w"] = np.zeros(3, np.float32)
    verify(m)
    text = str(m)
    assert roundtrip(text) == text
    assert '@"main graph"' in text and "%x = test.a(%0, %1)" in text
    assert len(set(re.findall(r"(%\w+) = ", text))) == 4  # four distinct result names


def test_roundtrip_every_pass_test_input():
    """Every module in tests/passes/*.onnxir that parses round-trips too."""
    count = 0
    for path in sorted((Path(__file__).parents[1] / "passes").glob("*.onnxir")):
        for chunk in re.split(r"^//\s*-----\s*$", path.read_text(), flags=re.M):
            if not re.search(r"^\s*module\b", chunk, re.M):
                continue
            try:
                parse_module(chunk)
            except OnnxccError:
                continue  # cases that test parse errors
            roundtrip(chunk)
            count += 1
    assert count > 10
