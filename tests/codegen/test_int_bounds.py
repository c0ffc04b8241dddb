"""codegen/llvm/int_bounds.py: a floor division or modulo of symbol arithmetic that is
provably non-negative is emitted as one unsigned division (no sign fix), one bounded below
as a signed division of the dividend shifted down when negative; every one keeps Python's
floor semantics. Values compared with Python's // and % over symbol values
that make the unproved dividends negative."""

from __future__ import annotations

import numpy as np
import sympy
from llvmlite import ir

from onnxcc.codegen.cpu.jit import JitKernel
from onnxcc.codegen.llvm.exprs import ExprEmitter
from onnxcc.codegen.llvm.int_bounds import LowerBounds
from onnxcc.ir import DType, sym
from onnxcc.ir.dims import SymbolTable
from onnxcc.kernel import KernelProgram, select
from onnxcc.kernel.expr import Binary, Const, SymRef, Var, binary, cast, dim_to_expr

I64 = DType.i64
N, M = SymRef("N"), SymRef("M")


def _lower(e, run_dims=()):
    return LowerBounds(lambda name: 0 if name in run_dims else 1).lower(e)


def test_lower_bounds_of_symbol_arithmetic():
    assert _lower(N - 1) == 0
    assert _lower(N - 3) == -2
    assert _lower((N - 1) // 2 + 1) == 1
    assert _lower((N - 3) // 2) == -1  # floor(-2 / 2)
    assert _lower(N * M - 1) == 0
    assert _lower(binary("max", N - 5, Const(0, I64))) == 0
    assert _lower(binary("min", N, M - 1)) == 0
    assert _lower((N - 9) % 4) == 0
    assert _lower(N - 1, run_dims=("N",)) == -1  # a count may be 0
    assert _lower((N - 9) % M) == 0  # floor mod by a positive divisor
    assert _lower((N - 5) * 2) == -8
    assert _lower(Var("i")) is None  # loop vars are not bounded
    assert _lower(N // M) is None  # only constant divisors
    assert _lower(N - M) is None  # a symbol's upper bound is not known
    assert _lower(cast(N, DType.i32)) is None


def test_lowered_dims_bounded_as_ir_bounds_them():
    """The bound of a lowered dim is the lower end ir/dims gives the dim itself (one set of
    interval rules, ir/intervals.py), with the symbols' lower ends the backend declares."""
    table = SymbolTable()
    table.declare("H", lo=1)
    table.declare("W", lo=1)
    H, W = sym("H"), sym("W")
    dims = [sympy.floor((W - 1) / 2) + 1, sympy.floor((H - 3) / 2), sympy.floor((sympy.floor((H - 3) / 2) - 1) / 2),
            sympy.ceiling(W / 3), sympy.Max(H - 5, 0), sympy.Min(W, H - 1), sympy.Mod(W - 9, 4),
            sympy.Mod(-2, W), 3 * W - 7, H * W - 1]
    bounds = LowerBounds(lambda name: table[name].lo)
    for d in dims:
        assert bounds.lower(dim_to_expr(d)) == table.bounds(d)[0], d


def test_proved_division_is_one_udiv():
    m = ir.Module(name="t")
    fn = ir.Function(m, ir.FunctionType(ir.IntType(64), [ir.IntType(64)]), "f")
    b = ir.IRBuilder(fn.append_basic_block("entry"))

    class Ctx:
        module = m

        def sym(self, name):
            return fn.args[0]

        def sym_lower(self, name):
            return 1

    em = ExprEmitter(Ctx(), b)
    em.emit((N - 1) // 2)
    text = str(fn)
    assert "udiv" in text and "sdiv" not in text and "srem" not in text
    em.emit((N - 3) // 2)  # may be negative, bounded below: the dividend shifted when negative
    assert "sdiv" in str(fn) and "a.floor" in str(fn) and "srem" not in str(fn)
    em.emit((N - M) // 2)  # unbounded: the remainder's sign fix
    assert "srem" in str(fn)


def test_floor_division_values_match_python():
    """Outputs of symbol arithmetic: non-negative (N - 1) // 3, (N - 1) % 3, (2 N + 1) // 4;
    bounded below (N - 5) // 3, (N - 5) % 3, ((N - 3) // 2 - 1) // 2; unbounded (M - N) // 3
    (M = 2), for N from 1 to 12."""
    exprs = [(N - 1) // 3, (N - 1) % 3, (N * 2 + 1) // 4, (N - 5) // 3, (N - 5) % 3, ((N - 3) // 2 - 1) // 2,
             (M - N) // 3]
    p = KernelProgram.new("divs", ["N", "M"])
    X = p.input("X", I64, (sym("N"),))
    p.input("Z", I64, (sym("M"),))
    Y = p.output("Y", I64, (len(exprs),))

    def body(i):
        out = X[0]  # zeros
        for k, e in enumerate(exprs):
            out = select(binary("eq", i, Const(k, I64)), e, out)
        return out

    p.compute(Y, body)
    kern = JitKernel(p)
    for n in range(1, 13):
        (y,) = kern(np.zeros(n, np.int64), np.zeros(2, np.int64))
        want = [(n - 1) // 3, (n - 1) % 3, (2 * n + 1) // 4, (n - 5) // 3, (n - 5) % 3, ((n - 3) // 2 - 1) // 2,
                (2 - n) // 3]
        assert y.tolist() == want, n


def test_i32_constants_near_the_wrap_keep_the_sign_fix():
    """A bound from i32 constants near INT32_MIN: shifting the dividend would wrap, so the
    remainder form stays (and computes Python's floor)."""
    m = ir.Module(name="t")
    fn = ir.Function(m, ir.FunctionType(ir.IntType(32), []), "f")
    b = ir.IRBuilder(fn.append_basic_block("entry"))

    class Ctx:
        module = m

        def sym_lower(self, name):
            return None

    em = ExprEmitter(Ctx(), b, check_div=False)
    em.emit(Binary("floordiv", Const(-(1 << 31), DType.i32), Const(3, DType.i32)))
    assert "srem" in str(fn) and "a.floor" not in str(fn)
