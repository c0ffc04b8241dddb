"""The compute expression language: construction, typing, printing, dims, substitution."""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy

from onnxcc.errors import VerifyError
from onnxcc.ir import DType, sym
from onnxcc.kernel import (
    Binary,
    Check,
    Const,
    Expr,
    KernelProgram,
    Load,
    Reduce,
    Select,
    SymRef,
    Unary,
    Var,
    buffers_read,
    cast,
    dim_to_expr,
    exp,
    free_vars,
    inline_load,
    maximum,
    rmax,
    rsum,
    select,
    substitute,
    transform,
    walk,
    wrap_index,
)
from onnxcc.kernel.expr import outside_reductions, replace_nodes

F32, I64, I32, BOOL = DType.f32, DType.i64, DType.i32, DType.bool
i, j, k = Var("i"), Var("j"), Var("k")
A = Load("A", (i, j), F32)


def test_operators_lift_numbers_and_type_results():
    e = A * 2.0 + 1
    assert isinstance(e, Binary) and e.dtype is F32 and e.b == Const(1.0, F32)
    assert (i + 1).dtype is I64
    assert (A < 0.5).dtype is BOOL
    assert ((A < 0.5) & (A > -1.0)).dtype is BOOL
    assert Unary("isnan", A).dtype is BOOL
    assert rmax([(k, 4)], Load("A", (i, k), F32)).dtype is F32


def test_integer_identities_fold():
    assert i + 0 is i and i * 1 is i and 0 + i is i and i // 1 is i
    assert i * 0 == Const(0, I64)
    assert Const(3, I64) * 4 == Const(12, I64)
    assert Const(7, I64) // -2 == Const(-4, I64)  # Python floor semantics
    assert isinstance(A * 1.0, Binary)  # floats are never folded


@pytest.mark.parametrize("build,msg", [
    (lambda: A + Const(1, I64), "dtype mismatch"),
    (lambda: Load("I", (i,), I64) + 0.5, "float constant"),
    (lambda: A & A, "bool or int"),
    (lambda: exp(i), "needs a float"),
    (lambda: Load("A", (Const(1, I32),), F32), "must be i64"),
    (lambda: select(A, A, A), "must be bool"),
    (lambda: Reduce("argmax", ((i, 3), (j, 3)), A), "exactly one var"),
    (lambda: Reduce("mean", ((k, 3),), A), "unknown reduce op"),
])
def test_construction_errors(build, msg):
    with pytest.raises((TypeError, ValueError), match=msg):
        build()


def test_structural_equality_and_hash():
    a = exp(Load("A", (i, j), F32) - 1.0)
    b = exp(Load("A", (i, j), F32) - 1.0)
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert Const(0.0, F32) != Const(-0.0, F32)
    assert Const(math.nan, F32) == Const(math.nan, F32)
    assert Const(1, I64) != Const(1, I32)
    with pytest.raises(TypeError, match="truth value"):
        bool(i < 3)


def test_deep_dag_hash_is_cheap():
    e: Expr = A
    for _ in range(200):  # 2**200 tree nodes, 200 DAG nodes
        e = e + e
    assert hash(e) == hash(e) and e == e
    assert sum(1 for _ in walk(e)) == 201 + 2  # + the two index vars


@pytest.mark.parametrize("e,text", [
    ((A + 1.0) * 2.0, "(A[i, j] + 1.0) * 2.0"),
    (A - (A - 1.0), "A[i, j] - (A[i, j] - 1.0)"),
    (-(A + 1.0), "-(A[i, j] + 1.0)"),
    ((A > 0.0) & (A < 1.0), "(A[i, j] > 0.0) & (A[i, j] < 1.0)"),
    (cast(Load("I", (i,), I32), I64) * 3, "i64(I[i]) * 3"),
    (Const(2, I32) + Load("I", (i,), I32), "2:i32 + I[i]"),
    (select(i < 4, A, 0.0), "select(i < 4, A[i, j], 0.0)"),
    (rsum([(k, sym("N"))], Load("A", (i, k), F32), init=1.0), "sum(k < N, init=1.0: A[i, k])"),
    (maximum(A, -math.inf), "max(A[i, j], -inf)"),
    (Check(i < 3, i), "check(i < 3, i)"),
    (Const(1.5, DType.f16), "1.5:f16"),
])
def test_printing(e, text):
    assert str(e) == text


def _eval_index(e: Expr, env: dict[str, int]) -> int:
    if isinstance(e, Const):
        return e.value
    if isinstance(e, (SymRef, Var)):
        return env[e.name]
    if isinstance(e, Select):
        return _eval_index(e.a if _eval_index(e.cond, env) else e.b, env)
    if isinstance(e, Unary) and e.op == "not":
        return not _eval_index(e.a, env)
    assert isinstance(e, Binary), e
    a, b = _eval_index(e.a, env), _eval_index(e.b, env)
    ops = {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b, "floordiv": lambda: a // b,
           "mod": lambda: a % b, "max": lambda: max(a, b), "min": lambda: min(a, b),
           "le": lambda: a <= b, "lt": lambda: a < b, "ge": lambda: a >= b, "gt": lambda: a > b,
           "eq": lambda: a == b, "ne": lambda: a != b,
           "and": lambda: bool(a and b), "or": lambda: bool(a or b)}
    return ops[e.op]()


def test_dim_to_expr_is_exact():
    N, M = sym("N"), sym("M")
    dims = [N, 2 * N - 1, sympy.floor(N / 2), sympy.ceiling(N / 3), sympy.floor((N + 1) / 2) * M,
            sympy.ceiling(4 * N * M / 64) * 64, sympy.Mod(N, 4), sympy.Max(N, M), sympy.Min(N, 3), N ** 2,
            sympy.floor((N - 3) / 2) + 1, 7,
            sympy.Piecewise((3 * N, N <= 4), (N * M, M > N), (N + 1, True)),  # per-range memory plans
            # the conditions sympy makes when it merges pieces of equal value (a BERT encoder's
            # plan gave `(seq <= 8) | (seq <= 16)`: an internal error before)
            sympy.Piecewise((2 * N, (N <= 2) | (N <= 5)), (M, (N > 7) & (M < 3)), (N + M, True)),
            # divisions by symbols (a reshape's -1 dim over inputs with their own symbols)
            sympy.floor(N * M / (M + 1)), sympy.ceiling(5 * N / M), sympy.floor((N + 1) / (2 * M)),
            # the memory plan's unevaluated Max (a workspace size), inside a ceiling and a sum:
            # converted around the Max, never through sympy's evaluating constructor
            64 * sympy.ceiling(sympy.Max(3 * N * M, sympy.floor((N - 1) / 2) * 4 + 1, 7 * M, evaluate=False) / 64),
            sympy.Max(N, 2 * N, evaluate=False) * M + 3 * N + sympy.Min(M, N + 1, evaluate=False)]
    for d in dims:
        e = dim_to_expr(d)
        assert e.dtype is I64
        for n in range(1, 12):
            for m in (1, 5):
                want = int(sympy.sympify(d).subs({N: n, M: m}))
                assert _eval_index(e, {"N": n, "M": m}) == want, (d, n, m, str(e))
    assert str(dim_to_expr(sympy.floor(N / 2))) == "N // 2"
    assert str(dim_to_expr(2 * N - 1)) == "N * 2 - 1"
    with pytest.raises(ValueError):
        dim_to_expr(N / 2)


def test_piecewise_conditions_of_every_boolean_form():
    # sympy merges equal neighbouring parts of a per-range plan into an Or (issue 13: "cannot turn
    # condition (seq <= 33) | (seq <= 65) | (seq <= 256) into a kernel expression")
    seq, b = sym("seq"), sym("batch")
    merged = sympy.Piecewise((b * seq, seq <= 33), (b * seq, seq <= 65), (b * seq, seq <= 256),
                             (2 * b * seq, seq <= 300), (7, True))
    assert isinstance(merged.args[0][1], sympy.Or)
    dims = [merged,
            sympy.Piecewise((seq, sympy.And(seq > 3, b <= 2)), (b, True)),
            sympy.Piecewise((seq, sympy.Not(sympy.Eq(seq, 4))), (b, True)),
            sympy.Piecewise((seq, sympy.Ne(seq, b)), (3, True)),
            sympy.Piecewise((seq, seq / 2 <= 4), (b, seq * 2 / 3 > b), (1, True)),  # rational sides
            sympy.Piecewise((seq, sympy.false), (b, True)), sympy.Piecewise((seq, True))]
    for d in dims:
        e = dim_to_expr(d)
        for n in (1, 3, 4, 5, 8, 9, 33, 34, 65, 66, 256, 257, 300, 301):
            for m in (1, 2, 5):
                want = int(sympy.sympify(d).subs({seq: n, b: m}))
                assert _eval_index(e, {"seq": n, "batch": m}) == want, (d, n, m, str(e))


def test_symbolic_dims_lift_in_expressions():
    N = sym("N")
    e = i < N - 1
    assert str(e) == "i < N - 1"
    wrapped = wrap_index(Load("I", (i,), I32), N, checked=False)
    assert str(wrapped) == "select(i64(I[i]) < 0, i64(I[i]) + N, i64(I[i]))"


def test_substitute_and_capture_avoidance():
    body = rsum([(k, i + 1)], Load("X", (i, k), F32))
    assert free_vars(body) == {"i"}
    out = substitute(body, {"i": j * 2})
    assert str(out) == "sum(k < j * 2 + 1: X[j * 2, k])"
    captured = substitute(body, {"i": k})  # the reduce var must be renamed, not captured
    (v, ext), = captured.vars
    assert v.name != "k" and str(ext) == "k + 1" and captured.body == Load("X", (k, v), F32)
    assert substitute(body, {"j": i}) is body  # untouched subtrees stay shared


def test_outside_reductions_stops_at_reductions():
    """each node outside a reduction once, parents first; a reduction yielded, its body not
    entered (element_cost and the row matchers count on both)"""
    x = Load("X", (i, j), F32)
    inner = rsum([(k, 4)], Load("Y", (i, k), F32) * 2.0)
    e = (x + inner) * (x + inner)
    got = list(outside_reductions(e))
    assert got[0] is e and len(got) == 6  # the repeated operand once
    assert set(got) == {e, x + inner, x, inner, i, j}  # not inner's Y load, k, 4 or 2.0


def test_inline_load_fuses_a_producer():
    consumer = Load("T", (i, j + 1), F32) * Load("T", (i, j), F32)
    fused = inline_load(consumer, "T", ["a", "b"], exp(Load("X", (Var("a"), Var("b")), F32)))
    assert str(fused) == "exp(X[i, j + 1]) * exp(X[i, j])"
    assert buffers_read(fused) == {"X"}
    neg = transform(fused, lambda n: Unary("neg", n) if isinstance(n, Load) else None)
    assert str(neg) == "exp(-X[i, j + 1]) * exp(-X[i, j])"


def test_replace_nodes_judges_the_nodes_as_they_are():
    """A node that matches is replaced whole, even when a node inside it matches too (the row
    matchers' rewrite); `transform` sees it only after its children are rewritten."""
    x = Load("X", (i, j), F32)
    a = exp(x) * x
    e = a + exp(x)
    pats = {a: Load("Z", (i, j), F32), x: Load("W", (i, j), F32)}
    assert str(replace_nodes(e, pats.get)) == "Z[i, j] + exp(W[i, j])"
    assert str(transform(e, pats.get)) == "exp(W[i, j]) * W[i, j] + exp(W[i, j])"
    assert replace_nodes(e, lambda n: None) == e


# ---- programs ---------------------------------------------------------------------------------


def _prog():
    N = sym("N")
    p = KernelProgram.new("k", ["N"])
    X = p.input("X", F32, (N, 4))
    T = p.temp("T", F32, (N, 4))
    p.view("V", T, (4, N))
    Wc = p.const("Wc", np.ones(4, np.float32))
    Y = p.output("Y", F32, (N,))
    p.compute(T, lambda n, c: X[n, c] * Wc[c])
    p.compute(Y, lambda n: rsum([(k, 4)], T[n, k]))
    return p


def test_program_printer_and_builder():
    p = _prog()
    p.verify()
    assert str(p) == (
        "kernel k(N) {\n"
        "  input X: f32[N, 4]\n"
        "  temp T: f32[N, 4]\n"
        "  temp V: f32[4, N] = view(T)\n"
        "  const Wc: f32[4] = <4 values>\n"
        "  output Y: f32[N]\n"
        "  T[n, c] = X[n, c] * Wc[c]\n"
        "  Y[n] = sum(k < 4: T[n, k])\n"
        "}"
    )
    assert p.inputs == ["X"] and p.outputs == ["Y"] and p.root("V") == "T"


@pytest.mark.parametrize("mutate,msg", [
    (lambda p: p.compute("Y", lambda n: Load("X", (n, Var("q")), F32)), "unbound vars"),
    (lambda p: p.compute("Y", lambda n: Const(1, I64)), "body is i64"),
    (lambda p: p.compute("T", lambda n, c: Load("V", (c, n), F32)), "shares memory"),
    (lambda p: p.compute("Y", lambda n: Load("X", (n,), F32)), "1 indices"),
    (lambda p: p.compute("Y", lambda n: cast(SymRef("Q"), F32)), "unknown symbol"),
    (lambda p: p.compute("X", lambda n, c: Const(0.0, F32)), "writes input"),
    (lambda p: p.compute("Y", lambda k: rsum([(k, 4)], Load("T", (k, k), F32))), "shadows"),
    (lambda p: p.view("Bad", "T", (3,)), "elements"),
])
def test_verify_errors(mutate, msg):
    p = _prog()
    mutate(p)
    with pytest.raises(VerifyError, match=msg):
        p.verify()


def test_buffer_indexing_checks_rank():
    p = _prog()
    with pytest.raises(IndexError, match="rank 2"):
        p.buffers["X"][i]
    assert p.buffers["X"][i, 0] == Load("X", (i, Const(0, I64)), F32)


def test_broadcast_and_flat_index_helpers():
    from onnxcc.kernel import broadcast_indices, flatten_index, unflatten_index

    N = sym("N")
    a, b, c = Var("a"), Var("b"), Var("c")
    assert [str(x) for x in broadcast_indices((a, b, c), (N, 1))] == ["b", "0"]
    assert [str(x) for x in broadcast_indices((a, b, c), (4,))] == ["c"]
    assert str(flatten_index((a, b, c), (2, N, 3))) == "(a * N + b) * 3 + c"
    assert [str(x) for x in unflatten_index(Var("f"), (N, 4, 3))] == ["f // 3 // 4", "f // 3 % 4", "f % 3"]


def test_shared_subexpressions_print_once():
    N, M = sym("N"), sym("M")
    p = KernelProgram.new("softmax", ["N", "M"])
    X = p.input("X", F32, (N, M))
    Y = p.output("Y", F32, (N, M))
    c, d, n = Var("c"), Var("d"), Var("n")
    mx = rmax([(c, M)], X[n, c])
    p.compute(Y, lambda n, j: exp(X[n, j] - mx) / rsum([(d, M)], exp(X[n, d] - mx)))
    assert p.body[0].format("") == [
        "Y[n, j] = exp(X[n, j] - $0) / sum(d < M: exp(X[n, d] - $0))",
        "    where $0 = max(c < M: X[n, c])",
    ]
    e: Expr = A
    for _ in range(60):  # printing a deep DAG stays linear
        e = exp(e) + exp(e)
    assert str(e).count("where") == 1 and len(str(e)) < 5000
