"""The memory planner's compile-time shortcuts give the answers of the slow paths:
`_le` (Max split into alternatives, numeric refutation at points of the ranges, proofs
reused from the whole-range prover in narrowed ranges) agrees with `Prover.le` pair by
pair; the workspace `Max` built unevaluated has the value of sympy's own; a plan over
convnet-like sizes (nested floors of two symbols, what made mobilenet_v3 take minutes)
stays disjoint at concrete values."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
import sympy

from onnxcc.ir import DType, SymbolTable, evaluate, sym
from onnxcc.kernel import KernelProgram, plan, relu
from onnxcc.kernel import plan_memory as pm

H, W, B = sym("H"), sym("W"), sym("batch")


def _table(h_lo: int = 1, h_hi: int = 2**31 - 1) -> SymbolTable:
    t = SymbolTable()
    t.declare("H", lo=h_lo, hi=h_hi)
    t.declare("W")
    t.declare("batch")
    return t


def _dims(seed: int, n: int) -> list:
    """Byte counts shaped like a convnet's: batch * C * (floor(H/2^k ...) + 1) * (same in W),
    sums of them, `ceiling` alignments and Maxes of those."""
    rng = random.Random(seed)

    def side(s, k):
        e = s
        for _ in range(k):
            e = sympy.floor(e / 2 - sympy.Rational(1, 2)) + 1
        return e

    base = [rng.choice([4, 16, 64, 96]) * B * side(H, k) * side(W, k) for k in range(4)]
    base += [rng.choice([64, 256]) * B, 576 * B + 7]
    out = list(base)
    for _ in range(n):
        a, b = rng.choice(out), rng.choice(out)
        kind = rng.randrange(4)
        if kind == 0:
            out.append(a + b)
        elif kind == 1:
            out.append(pm.align_up(a))
        elif kind == 2:
            out.append(pm.unevaluated_max([a, b]))
        else:
            out.append(a + rng.choice([0, 64, 128]))
    return out


def test_le_shortcuts_agree_with_the_prover():
    dims = _dims(0, 14)
    fast, slow = pm.Prover(_table()), pm.Prover(_table())
    proved = 0
    for a in dims:
        for b in dims:
            want = slow.le(a, b)
            assert pm._le(fast, a, b) == want, (a, b)
            proved += want
    assert proved > len(dims)  # not only the reflexive pairs


def test_proofs_reused_in_a_narrowed_range_are_the_narrow_provers_answers():
    dims = _dims(1, 10)
    whole = pm.Prover(_table())
    for a in dims:  # the whole-range prover proves what it can first
        for b in dims:
            pm._le(whole, a, b)
    narrow_table = _table()
    narrow_table.infos["H"] = replace(narrow_table.infos["H"], lo=3, hi=40)
    child = pm.Prover(narrow_table)
    pm._PARENTS[child] = whole
    alone = pm.Prover(narrow_table)
    for a in dims:
        for b in dims:
            got = pm._le(child, a, b)
            # never more than the narrow prover could prove itself, never less than it proves
            assert got == alone.le(a, b) or (got and whole.le(a, b)), (a, b)


def test_unevaluated_max_has_sympys_value():
    items = _dims(2, 6)[:8]
    m = pm.unevaluated_max(items + [items[0], 5, 9])
    ref = sympy.Max(*[sympy.sympify(x) for x in items], 9)
    for env in ({"H": 1, "W": 1, "batch": 1}, {"H": 37, "W": 5, "batch": 3}, {"H": 224, "W": 160, "batch": 2}):
        assert evaluate(m, env) == evaluate(ref, env)
    assert pm.unevaluated_max([3, 7]) == 7 and pm.unevaluated_max([H]) == H


def _side(s, k):
    for _ in range(k):
        s = sympy.floor(s / 2 - sympy.Rational(1, 2)) + 1
    return s


@pytest.mark.parametrize("budget", [None, ("PROOF_QUERIES", 0), ("PROOF_SECONDS", -1.0)],
                         ids=["full-search", "proof-count-spent", "proof-backstop-spent"])
def test_convnet_like_plan_is_disjoint(budget, monkeypatch):
    # stride-2 stages with skip reads: sizes are nested floors of H and W, lifetimes overlap.
    # With the proof budget spent before the first proof (the count, PROOF_QUERIES, or the
    # CPU-time backstop, PROOF_SECONDS), the plan falls back to one region per temp: it must
    # stay disjoint, only larger, and say it was cut.
    if budget is not None:
        monkeypatch.setattr(pm, *budget)
    p = KernelProgram.new("k", ["batch", "H", "W"])
    chans = [16, 24, 24, 40, 40, 48, 96, 96]
    p.input("x", DType.f32, (B, 3, H, W))
    names = ["x"]
    for k, c in enumerate(chans):
        stage = k // 2 + 1
        name = f"t{k}"
        p.temp(name, DType.f32, (B, c, _side(H, stage), _side(W, stage)))
        reads = names[-2:]
        p.compute(name, lambda b, c_, h, w, rs=tuple(reads): sum(
            (relu(p.buffers[r].load(b, 0, 0, 0)) for r in rs), 0.0) + 1.0)
        names.append(name)
    p.output("y", DType.f32, (B, 1))
    p.compute("y", lambda b, j: p.buffers[names[-1]].load(b, 0, 0, 0) + p.buffers[names[-3]].load(b, 0, 0, 0))
    mp = plan(p, _table())
    assert mp.proofs_cut == (budget is not None)
    live = pm.liveness(p)
    assert len(live) == len(chans)
    for env in ({"batch": 1, "H": 1, "W": 1}, {"batch": 2, "H": 7, "W": 3}, {"batch": 1, "H": 64, "W": 64},
                {"batch": 3, "H": 225, "W": 97}):
        spans = {}
        for n in live:
            lo = evaluate(mp.offsets[n], env)
            spans[n] = (lo, lo + evaluate(mp.sizes[n], env))
            assert lo % 64 == 0
        for a in live:
            for b in live:
                if a < b and live[a][0] <= live[b][1] and live[b][0] <= live[a][1]:
                    assert spans[a][1] <= spans[b][0] or spans[b][1] <= spans[a][0], (a, b, env)
        assert max(hi for _, hi in spans.values()) <= evaluate(mp.workspace_bytes, env)


def _chain(name: str, chans: list[int]) -> KernelProgram:
    p = KernelProgram.new(name, ["batch", "H", "W"])
    p.input("x", DType.f32, (B, 3, H, W))
    names = ["x"]
    for k, c in enumerate(chans):
        t = f"t{k}"
        p.temp(t, DType.f32, (B, c, _side(H, k // 2 + 1), _side(W, k // 2 + 1)))
        p.compute(t, lambda b, c_, h, w, rs=tuple(names[-2:]): sum(
            (relu(p.buffers[r].load(b, 0, 0, 0)) for r in rs), 0.0) + 1.0)
        names.append(t)
    p.output("y", DType.f32, (B, 1))
    p.compute("y", lambda b, j: p.buffers[names[-1]].load(b, 0, 0, 0) + p.buffers[names[-3]].load(b, 0, 0, 0))
    return p


def test_versions_sharing_plan_memos_plan_as_alone():
    # two versions' plans through one PlanMemos (the pass's way): the plans each gets alone,
    # one whole-range prover between them, and proofs over a copy of the table, so a range
    # narrowed afterwards (a later pass) gets a prover of its own
    a, b = _chain("a", [16, 24, 24, 40, 40]), _chain("b", [16, 24, 40, 40, 48, 96])
    table = _table()
    alone = [plan(a, table).describe(), plan(b, table).describe()]
    memos = pm.PlanMemos()
    shared = [plan(a, table, memos).describe(), plan(b, table, memos).describe()]
    assert shared == alone
    whole = [p for k, p in memos.provers.items() if dict((n, (lo, hi)) for n, lo, hi, _ in k)["H"] == (1, 2**31 - 1)]
    assert len(whole) == 1 and whole[0].table is not table
    table.infos["H"] = replace(table.infos["H"], lo=9, hi=40)
    plan(a, table, memos)
    assert any(dict((n, (lo, hi)) for n, lo, hi, _ in k)["H"] == (9, 40) for k in memos.provers)


def test_alternatives_of_different_maxes_are_one_object():
    # the same sum split out of two Maxes (a stacked offset's and the end above it) is one
    # object, so the prover's memos keyed by it stop at identity instead of comparing trees;
    # the lists are max_alternatives' own, element for element
    x, y, z = 64 * B * H, 128 * B * W, 64 * B * H * W
    m1 = pm.unevaluated_max([x + z, y])
    m2 = pm.unevaluated_max([pm.unevaluated_max([x, y + 64]) + z, 7 * B])
    pm._RUNNING[0] = pm.PlanMemos()
    try:
        a1, a2 = pm._alternatives(m1), pm._alternatives(m2)
        assert a1 == pm.max_alternatives(m1) and a2 == pm.max_alternatives(m2)
        (s1,) = [a for a in a1 if a == x + z]
        (s2,) = [a for a in a2 if a == x + z]
        assert s1 is s2
        assert pm._alternatives(m1) is a1
    finally:
        pm._RUNNING[0] = pm.PlanMemos()
