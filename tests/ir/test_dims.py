"""Dims and symbols: canon, prove_eq / prove_le over ranges, bounds, evaluate, substitute.

The property test draws random dim expressions and random symbol values inside each
symbol's range and checks that `bounds()` contains the evaluated value. It uses
hypothesis when the environment has it, else a seeded random loop (same property).
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import sympy

from onnxcc.ir import INT_MAX, DType, SymbolTable, TensorType, canon, evaluate, free_symbols, identifier, is_static, sym


@pytest.fixture
def table() -> SymbolTable:
    t = SymbolTable()
    t.declare("N", 1, 64)
    t.declare("M", 2, 16, multiple_of=2)
    t.declare("B", 1, 1)
    return t


N, M, B = sym("N"), sym("M"), sym("B")


def test_sym_is_integer_positive_and_canonical():
    assert sym("N") is sym("N") or sym("N") == sym("N")
    assert N.is_integer and N.is_positive
    assert sympy.Symbol("N") != N  # plain symbols are different objects on purpose


def test_canon():
    assert canon(sympy.Integer(3)) == 3 and isinstance(canon(sympy.Integer(3)), int)
    assert isinstance(canon(np.int64(5)), int) and canon(True) == 1
    assert canon(None) is None
    assert canon(N + 1 - 1) == N
    assert canon(2 * N - N) == N
    assert canon(sympy.floor(sympy.Rational(7, 2))) == 3


def test_is_static_and_free_symbols():
    assert is_static(3) and not is_static(N)
    assert free_symbols(3) == set() and free_symbols(None) == set()
    assert free_symbols(N * M + 1) == {N, M}


def test_declare_and_fresh(table: SymbolTable):
    assert table.declare("N", 5, 6) == N
    assert (table["N"].lo, table["N"].hi) == (1, 64)  # the first declaration wins
    f1 = table.fresh("N")
    f2 = table.fresh("N")
    assert {f1.name, f2.name} == {"N_1", "N_2"}
    assert table.fresh("3 weird-name").name == "d3_weird_name"
    assert table[f1.name].hi == INT_MAX
    assert "N" in table and len(table) == 6


def test_copy_is_independent(table: SymbolTable):
    c = table.copy()
    c["N"].hi = 2
    assert table["N"].hi == 64 and c["N"].multiple_of == 1 and c["M"].multiple_of == 2


@pytest.mark.parametrize("a, b, want", [
    (N, N, True),
    (2 * N, N + N, True),
    (N + 1, N, False),
    (N, 100, False),  # N <= 64
    (N, 64, None),
    (N, M, None),
    (B, 1, True),  # range [1, 1]
    (M, 1, False),  # M >= 2
    (sympy.Mod(N, 4), 4, False),
    (sympy.floor(N / 2) * 2, N, None),
    (sympy.Max(N, M), 0, False),
    (None, N, None),
    (3, 3, True),
    (3, 4, False),
])
def test_prove_eq(table: SymbolTable, a, b, want):
    assert table.prove_eq(a, b) is want


@pytest.mark.parametrize("a, b, want", [
    (N, 64, True),
    (N, 63, None),
    (N, 0, False),
    (N, N + 1, True),
    (N + 1, N, False),
    (N * M, 1024, True),
    (N * M, 1023, None),
    (M, N, None),
    (sympy.Mod(N, 8), 7, True),
    (0, sympy.Mod(-2, N), True),
    (sympy.floor(N / 2), 32, True),
    (sympy.ceiling(N / 4), 16, True),
    (sympy.Min(N, 3), 3, True),
    (65, sympy.Max(N, 65), True),
    (None, 1, None),
])
def test_prove_le(table: SymbolTable, a, b, want):
    assert table.prove_le(a, b) is want


@pytest.mark.parametrize("expr, lo, hi", [
    (N, 1, 64),
    (N * M, 2, 1024),
    (N - M, -15, 62),
    (-N, -64, -1),
    (2 * N + 1, 3, 129),
    (sympy.floor(N / 2), 0, 32),
    (sympy.ceiling(N / 4), 1, 16),
    (sympy.Mod(N, 4), 0, 3),
    (sympy.Mod(-2, N), 0, 63),  # a symbolic positive divisor (torch.roll's split point)
    (sympy.Mod(N, M), 0, 15),
    (sympy.Max(N, M), 2, 64),
    (sympy.Min(N, M), 1, 16),
    (N**2, 1, 4096),
    (sym("undeclared"), 1, INT_MAX),
    (7, 7, 7),
])
def test_bounds(table: SymbolTable, expr, lo, hi):
    assert table.bounds(expr) == (lo, hi)


def test_bounds_unknown_shapes_are_infinite(table: SymbolTable):
    lo, hi = table.bounds(N / M)  # division by a symbol: no interval rule
    assert lo == -sympy.oo and hi == sympy.oo


def test_evaluate_and_substitute(table: SymbolTable):
    assert evaluate(2 * N + M, {"N": 3, "M": 4}) == 10
    assert evaluate(sympy.floor(N / 2), {"N": 7}) == 3
    assert evaluate(sympy.Mod(N + 1, 4), {"N": 6}) == 3
    assert evaluate(5, {}) == 5
    with pytest.raises(ValueError, match="does not evaluate to an integer"):
        evaluate(N + M, {"N": 1})
    assert table.substitute(N * M, {M: 2}) == 2 * N
    assert table.substitute(N + 1, {N: 3}) == 4 and isinstance(table.substitute(N + 1, {N: 3}), int)
    assert table.substitute(None, {N: 3}) is None
    # sympy's subs leaves Min(6, 10000) unevaluated; evaluate / substitute must not
    expr = sympy.Max(N - sympy.Mod(M, 4), sympy.Min(M**2, sympy.Max(6, N)))
    assert evaluate(expr, {"N": 1, "M": 100}) == 6
    assert table.substitute(expr, {N: 1, M: 100}) == 6


def test_identifier():
    assert identifier("seq_len") == "seq_len"
    assert identifier("batch size") == "batch_size"
    assert identifier("2d") == "d2d"
    assert identifier("") == "d"


def test_tensor_type_dims():
    t = TensorType(DType.f32, (N, sympy.Integer(4), None))
    assert t.shape[1] == 4 and isinstance(t.shape[1], int)
    assert t.has_unknown and not t.is_static and t.rank == 3
    assert t.numel() is None
    u = TensorType(DType.f16, (N, 4))
    assert u.numel() == 4 * N and u.nbytes() == 8 * N
    assert TensorType(DType.bf16, (2,)).nbytes() == 4
    assert u.symbols() == {N}
    assert hash(u) == hash(TensorType(DType.f16, (N, 4)))


# ---- property: bounds() contains every value the expression takes in range ------------------

SYMBOLS = {"a": (1, 8), "b": (3, 100), "c": (1, 1), "d": (1, 2**20)}


def _table() -> SymbolTable:
    t = SymbolTable()
    for name, (lo, hi) in SYMBOLS.items():
        t.declare(name, lo, hi)
    return t


def _random_expr(rng: random.Random, depth: int):
    if depth == 0 or rng.random() < 0.3:
        if rng.random() < 0.7:
            return sym(rng.choice(sorted(SYMBOLS)))
        return sympy.Integer(rng.randint(-5, 9))
    x, y, k = _random_expr(rng, depth - 1), _random_expr(rng, depth - 1), rng.randint(1, 5)
    pick = rng.randrange(9)
    return [x + y, x - y, x * y, sympy.floor(x / k), sympy.ceiling(x / k), sympy.Mod(x, k),
            sympy.Max(x, y), sympy.Min(x, y), x * k][pick]


def _check_contains(table: SymbolTable, expr, env: dict[str, int]) -> None:
    lo, hi = table.bounds(expr)
    v = evaluate(expr, env)
    assert lo <= v <= hi, f"bounds({expr}) = [{lo}, {hi}] misses {v} at {env}"


def _random_env(rng: random.Random) -> dict[str, int]:
    env = {}
    for name, (lo, hi) in SYMBOLS.items():
        env[name] = rng.choice([lo, hi, rng.randint(lo, hi)])
    return env


try:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    HAVE_HYPOTHESIS = True
except ImportError:  # not in the venv: fall back to a seeded loop
    HAVE_HYPOTHESIS = False


if HAVE_HYPOTHESIS:
    @settings(max_examples=300, deadline=None)
    @given(st.integers(0, 2**32 - 1))
    def test_bounds_contain_evaluated_values(seed: int):
        rng = random.Random(seed)
        table = _table()
        expr = _random_expr(rng, 3)
        for _ in range(4):
            _check_contains(table, expr, _random_env(rng))
else:
    def test_bounds_contain_evaluated_values():
        rng = random.Random(1234)
        table = _table()
        for _ in range(200):
            expr = _random_expr(rng, 3)
            for _ in range(4):
                _check_contains(table, expr, _random_env(rng))


def test_prove_answers_agree_with_evaluation():
    """When prove_eq / prove_le answer True or False, every in-range assignment agrees."""
    rng = random.Random(99)
    table = _table()
    decided = 0
    for _ in range(60):
        a, b = _random_expr(rng, 2), _random_expr(rng, 2)
        eq, le = table.prove_eq(a, b), table.prove_le(a, b)
        decided += (eq is not None) + (le is not None)
        for _ in range(4):
            env = _random_env(rng)
            va, vb = evaluate(a, env), evaluate(b, env)
            if eq is not None:
                assert (va == vb) == eq, f"prove_eq({a}, {b}) = {eq} but {va} vs {vb} at {env}"
            if le is not None:
                assert (va <= vb) == le, f"prove_le({a}, {b}) = {le} but {va} vs {vb} at {env}"
    # a prover that always answered None would pass the loop above: it must decide a fair share
    assert decided >= 40, f"the prover decided only {decided} of 120 random questions"
