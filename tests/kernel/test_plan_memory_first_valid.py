"""The placement's shortcut (`_place`): at a sample point the prover proves over, with exact
values, the candidates are tried best key first and the first valid one is taken, each
overlapping slot proved only on the side it is on at the point. The plans are the ones the
full search (every candidate proved, the best kept) gives; the shortcut asks fewer questions;
points outside the prover's domain (a symbol not a multiple of what the table says) or
values that are not exact keep the full search."""

from __future__ import annotations

import sympy

from onnxcc.ir import DType, SymbolTable, sym
from onnxcc.ir.dims import _has_max
from onnxcc.kernel import KernelProgram, plan, relu
from onnxcc.kernel import plan_memory as pm

H, W, B = sym("H"), sym("W"), sym("batch")


def _side(s, k):
    for _ in range(k):
        s = sympy.floor(s / 2 - sympy.Rational(1, 2)) + 1
    return s


def _net(name: str, chans: list[int], skip: int, plane=None) -> KernelProgram:
    """Stride-2 stages whose computes read the last `skip` maps (lifetimes overlap, sizes are
    nested floors of H and W: many candidates per slot, most of them not provable), or maps
    of `plane(k)` elements per channel (sizes linear in batch, or numbers: many candidates
    valid, the best fit is the one of least key)."""
    p = KernelProgram.new(name, ["batch", "H", "W"])
    p.input("x", DType.f32, (B, 3, H, W))
    names = ["x"]
    for k, c in enumerate(chans):
        t = f"t{k}"
        shape = (B, c, _side(H, k // 3 + 1), _side(W, k // 2 + 1)) if plane is None else (c, *plane(k))
        p.temp(t, DType.f32, shape)
        p.compute(t, lambda b, c_, h, w, rs=tuple(names[-skip:]): sum(
            (relu(p.buffers[r].load(b, 0, 0, 0)) for r in rs), 0.0) + 1.0)
        names.append(t)
    p.output("y", DType.f32, (B, 1))
    p.compute("y", lambda b, j: p.buffers[names[-1]].load(b, 0, 0, 0) + p.buffers[names[-4]].load(b, 0, 0, 0))
    return p


def _table(h_multiple: int = 1) -> SymbolTable:
    t = SymbolTable()
    t.declare("batch")
    t.declare("H", multiple_of=h_multiple)
    t.declare("W", lo=1, hi=4096)
    return t


def _plans(monkeypatch, full_search: bool, h_multiple: int = 1) -> tuple[list[str], int]:
    # budgets off: they count proofs, which the full search makes more of, so both searches
    # make the same layouts only when neither is cut
    monkeypatch.setattr(pm, "PROOF_QUERIES", float("inf"))
    monkeypatch.setattr(pm, "PLAN_PROOFS", float("inf"))
    if full_search:
        monkeypatch.setattr(pm._Sampler, "inside", lambda self, table: False)
    asked = [0]
    le = pm._le

    def counted(prover, a, b):
        asked[0] += 1
        return le(prover, a, b)

    monkeypatch.setattr(pm, "_le", counted)
    chans = [16, 24, 24, 40, 40, 48, 96, 96, 24, 8, 96, 16, 64, 24, 64, 32, 8, 8, 128]
    nets = [_net("a", chans[:9], 3), _net("b", chans[9:16], 4),
            _net("c", chans, 3, lambda k: (B, 1 + (k * 7) % 5, 1)),
            _net("d", chans, 4, lambda k: (1 + (k * 5) % 7, 3, 1))]
    out = [plan(p, _table(h_multiple)).describe() for p in nets]
    monkeypatch.undo()
    return out, asked[0]


def test_first_valid_candidate_gives_the_full_searchs_plans(monkeypatch):
    fast, asked_fast = _plans(monkeypatch, full_search=False)
    full, asked_full = _plans(monkeypatch, full_search=True)
    assert fast == full
    assert asked_fast < asked_full  # the shortcut was taken


def test_points_outside_the_provers_domain_keep_the_full_search(monkeypatch):
    # H a multiple of 16: the sample point H = 4 is not one, so the prover may prove there
    # what is false at it; the search is the full one, proof for proof
    fast, asked_fast = _plans(monkeypatch, full_search=False, h_multiple=16)
    full, asked_full = _plans(monkeypatch, full_search=True, h_multiple=16)
    assert fast == full and asked_fast <= asked_full
    table = _table(16)
    assert not pm._Sampler({"batch": 1, "H": 4, "W": 4}).inside(table)
    assert pm._Sampler({"batch": 1, "H": 64, "W": 4}).inside(table)
    assert not pm._Sampler({"batch": 1, "H": 64, "W": 5000}).inside(table)  # W above its range


def test_sampler_marks_values_that_are_not_exact():
    s = pm._Sampler({"H": 3})
    assert s(2 * H) == 6 and not s.inexact
    assert s(H / 2) == 0 and s.inexact  # not an integer there: ranked as 0, not exact
    s = pm._Sampler({"H": 3})
    s(W + 1)  # a symbol without a value
    assert s.inexact


def test_has_max_is_sympys_has():
    f = _side(H, 3)
    exprs = [f, 64 * B * f * _side(W, 2), pm.unevaluated_max([64 * B * f, 128 * B]) + 7 * B,
             3 * pm.unevaluated_max([B, H]), B + sympy.ceiling(pm.unevaluated_max([B, W]) / 8), sympy.Integer(5)]
    for e in exprs:
        assert _has_max(e) == e.has(sympy.Max), e
    assert [_has_max(e) for e in exprs] == [False, False, True, True, True, False]
