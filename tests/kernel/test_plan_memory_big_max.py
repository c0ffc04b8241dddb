"""The prover and the planner on stacked offsets (Maxes of sums of nested floors, what an
Inception's plan builds): a Max is never evaluated again on the way (sympy compares every
pair of its arguments there, minutes on such trees), its value is kept, and the workspace's
Max is taken over the ends no other slot covers by construction."""

from __future__ import annotations

import itertools

import sympy

from onnxcc.ir import DType, SymbolTable, evaluate, sym
from onnxcc.ir import dims as D
from onnxcc.kernel import KernelProgram, plan, relu
from onnxcc.kernel import plan_memory as pm

H, W, B = sym("H"), sym("W"), sym("batch")
POINTS = ({"H": 1, "W": 1, "batch": 1}, {"H": 37, "W": 5, "batch": 3}, {"H": 299, "W": 224, "batch": 2})


def _side(s, k):
    for _ in range(k):
        s = sympy.floor(s / 2 - sympy.Rational(1, 2)) + 1
    return s


def _sizes() -> list:
    return [c * B * _side(H, k) * _side(W, k) for k, c in enumerate((64, 192, 288, 768, 1280))]


def test_expanded_keeps_a_max_unevaluated_and_its_value():
    a, b, c = _sizes()[:3]
    m = sympy.Max(a, b + c, evaluate=False)
    e = 3 * (m + a) * 2 + sympy.floor((m + b) / 64)
    out = D._expanded(e)
    maxes = out.atoms(sympy.Max)
    assert maxes and all(len(x.args) == 2 for x in maxes)  # held as an atom, not re-evaluated
    for env in POINTS:
        assert evaluate(out, env) == evaluate(e, env)


def test_unevaluated_is_order_independent_and_keeps_the_value():
    xs = _sizes()
    m1 = D.unevaluated(sympy.Max, xs)
    m2 = D.unevaluated(sympy.Max, list(reversed(xs)) + [xs[0]])
    assert m1 == m2 and str(m1) == str(m2)  # one expression whatever order the args came in
    assert D.unevaluated(sympy.Max, [xs[0], xs[0]]) == xs[0]
    for env in POINTS:
        assert evaluate(m1, env) == max(evaluate(x, env) for x in xs)


def test_alternatives_past_the_limit_keep_the_sum_whole():
    xs = _sizes()
    small = D.unevaluated(sympy.Max, xs[:4]) + D.unevaluated(sympy.Max, xs[1:5])  # 16 sums
    alts = D.max_alternatives(small)
    assert len(alts) == 16 and not any(a.has(sympy.Max) for a in alts)
    for env in POINTS:
        assert max(evaluate(a, env) for a in alts) == evaluate(small, env)
    big = small + D.unevaluated(sympy.Max, xs) + D.unevaluated(sympy.Max, xs[:3])  # 16 * 5 * 3
    assert D.max_alternatives(big) == [big]


def test_prover_still_proves_through_a_held_max():
    p = D.Prover(SymbolTable())
    a, b = _sizes()[:2]
    m = D.unevaluated(sympy.Max, [a, b])
    assert p.le(a, m + 64) and p.le(m, m + b) and not p.le(m + b, m)


def test_tops_are_the_ends_nothing_covers():
    sizes = [pm.align_up(4 * s) for s in _sizes()]
    slots = [pm._Slot([f"t{k}"], 0, 9, s, k) for k, s in enumerate(sizes)]  # all live at once
    prover = pm.Prover(SymbolTable())
    pm._place(slots, prover, pm._Sampler({"H": 64, "W": 64, "batch": 1}))
    tops = pm._tops(slots)
    assert len(tops) == 1  # each slot stacked on the one below: only the last end counts
    for env in POINTS:
        assert evaluate(tops[0], env) == max(evaluate(x.end, env) for x in slots) == \
            sum(evaluate(s, env) for s in sizes)


def test_stacked_convnet_plan_is_disjoint_and_its_workspace_holds_every_slot():
    # a chain where every feature map stays live to the end (an Inception's concat inputs):
    # every slot is stacked, the workspace is the Max over the tops only
    p = KernelProgram.new("k", ["batch", "H", "W"])
    p.input("x", DType.f32, (B, 3, H, W))
    names = []
    for k, c in enumerate((16, 24, 32, 40, 48)):
        name = f"t{k}"
        p.temp(name, DType.f32, (B, c, _side(H, k % 3), _side(W, k % 3)))
        src = names[-1] if names else "x"
        p.compute(name, lambda b, c_, h, w, s=src: relu(p.buffers[s].load(b, 0, 0, 0)) + 1.0)
        names.append(name)
    p.output("y", DType.f32, (B, 1))
    p.compute("y", lambda b, j: sum((p.buffers[n].load(b, 0, 0, 0) for n in names), 0.0))
    t = SymbolTable()
    for s in ("batch", "H", "W"):
        t.declare(s)
    mp = plan(p, t)
    assert not mp.proofs_cut
    for env in POINTS:
        spans = sorted((evaluate(mp.offsets[n], env), evaluate(mp.offsets[n], env) + evaluate(mp.sizes[n], env))
                       for n in names)
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))  # all live at the end: disjoint
        assert spans[-1][1] <= evaluate(mp.workspace_bytes, env)


def test_identical_answers_without_simplify_where_a_point_differs(monkeypatch):
    def no_simplify(d):
        raise AssertionError(f"simplify asked for {d}")

    monkeypatch.setattr(D, "_simplified", no_simplify)
    L = sym("L")
    a = sympy.Max(0, sympy.Min(sympy.floor(L / 10) - 1, sympy.floor(L / 5) - 3))
    b = sympy.Max(0, sympy.Min(sympy.floor(L / 10), sympy.floor(L / 5) - 3))
    assert not D.identical(a, b)  # L = 100: 9 against 10
    assert D.identical(a + b, b + a)


def test_identical_still_asks_simplify_where_every_point_agrees():
    L = sym("L")
    # Max(L, 1) is L for every positive L: no point differs, the answer is simplify's
    a = sympy.Max(L, 1) + sympy.floor(L / 7)
    assert D.identical(a, L + sympy.floor(L / 7)) == (sympy.simplify(a - L - sympy.floor(L / 7)) == 0)
