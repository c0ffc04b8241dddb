"""The plan's work budgets (kernel/plan_memory.py), counted in proofs, never timed: the same
plan on an infinitely fast and an infinitely slow machine; the work that only improves a plan
(`PLAN_PROOFS`: the whole-range layout's placements after its first, the range layouts)
started only within the count; `PROOF_QUERIES` spent: the stacked plan. Every cut plan stays
valid (no two live temps overlap, checked by brute force at concrete sizes)."""

from __future__ import annotations

import itertools
import math

import pytest
import sympy
from test_plan_memory_first_valid import _net, _table
from test_plan_memory_liveness import check_plan

from onnxcc.kernel import plan
from onnxcc.kernel import plan_memory as pm

CHANS = [16, 24, 24, 40, 40, 48, 96, 96, 24]
ENVS = [{"batch": 1, "H": 1, "W": 1}, {"batch": 2, "H": 7, "W": 3}, {"batch": 1, "H": 64, "W": 64},
        {"batch": 3, "H": 225, "W": 97}]


@pytest.fixture(scope="module")
def transformer():
    """The generic transformer's program as a backend without fused attention plans it (its
    seq**2 scores make the whole-range layout 1.14x the peak: the plan is split by seq)."""
    from onnxcc.compiler import CompileOptions, graph_stage, load_module
    from onnxcc.kernel.fuse import fuse
    from onnxcc.passes.lower import lower_function
    from onnxcc.testing import MODELS_DIR

    module = load_module(MODELS_DIR / "transformer.onnx")
    graph_stage(module, CompileOptions(divisible=0, target="cuda"))
    (vname,) = module.dispatch["main"]
    prog = lower_function(module, module.functions[vname], "t")
    fuse(prog, module.symbols)
    return prog, module.symbols


def _clock(monkeypatch, step: float) -> None:
    """Every read of the plan's CPU clock `step` seconds after the last: 0 is a machine
    infinitely fast, 100 one infinitely slow (past any budget in seconds). The backstop for
    single proofs that cost seconds (PROOF_SECONDS) is set out of reach."""
    ticks = itertools.count(0.0, step)
    monkeypatch.setattr(pm.time, "process_time", lambda: next(ticks))
    monkeypatch.setattr(pm, "PROOF_SECONDS", 1e12)


@pytest.mark.parametrize("budget", [None, 40], ids=["default-budget", "budget-binds"])
def test_plan_is_the_same_at_any_machine_speed(transformer, budget, monkeypatch):
    # (a budget in seconds kept the whole-range layout on the slow machine: no Piecewise)
    if budget is not None:
        monkeypatch.setattr(pm, "PLAN_PROOFS", budget)
    cases = [(*transformer, [{"batch": b, "seq": s} for b in (1, 4) for s in (17, 64, 200, 512)]),
             (_net("a", CHANS, 3), _table(), ENVS)]
    for prog, table, envs in cases:
        plans = []
        for step in (0.0, 100.0):
            _clock(monkeypatch, step)
            plans.append(plan(prog, table))
        fast, slow = plans
        assert fast.describe() == slow.describe(), prog.name
        # split by a symbol: range layouts made (the budget binding: their placements cut)
        assert budget or sympy.sympify(fast.workspace_bytes).atoms(sympy.Piecewise), fast.workspace_bytes
        assert not fast.proofs_cut
        check_plan(prog, fast, envs)


def _logged_plan(monkeypatch, prog, table, budget: float):
    """The plan under PLAN_PROOFS = budget, with the proofs made before each layout and each
    placement starts, and the plan's total."""
    events: list[tuple[str, int]] = []
    place, best_layout, inner = pm._place, pm._best_layout, pm._plan

    def logged_place(*args):
        events.append(("place", pm._proofs[0]))
        return place(*args)

    def logged_layout(*args):
        events.append(("layout", pm._proofs[0]))
        return best_layout(*args)

    def logged_plan(*args):
        out = inner(*args)
        events.append(("end", pm._proofs[0]))
        return out

    monkeypatch.setattr(pm, "PLAN_PROOFS", budget)
    monkeypatch.setattr(pm, "_place", logged_place)
    monkeypatch.setattr(pm, "_best_layout", logged_layout)
    monkeypatch.setattr(pm, "_plan", logged_plan)
    mp = plan(prog, table)
    monkeypatch.undo()
    return mp, events


@pytest.mark.parametrize("budget", [40, 100])
def test_optional_work_starts_only_within_the_proof_budget(budget, monkeypatch):
    # 40: the whole-range layout stops after some of its 12 placements, no range layout;
    # 100: all 12, then one range layout, not a second
    prog = _net("a", CHANS, 3)
    full, full_events = _logged_plan(monkeypatch, prog, _table(), math.inf)
    mp, events = _logged_plan(monkeypatch, prog, _table(), budget)
    total = events[-1][1]
    assert full_events[-1][1] > max(total, budget)  # the budget binds: less work than the full search
    layouts = [k for k, (what, _) in enumerate(events) if what == "layout"]
    whole = [n for what, n in events[layouts[0] + 1:(layouts + [len(events)])[1]] if what == "place"]
    assert all(n < budget for n in whole[1:])  # the first placement is always made
    assert len(whole) == 12 if budget == 100 else 1 < len(whole) < 12
    ends = [events[k][1] for k in layouts[1:]] + [total]
    for k in range(1, len(layouts)):
        # a range layout starts where the proofs so far plus the last range layout's stay
        # within the budget
        last = ends[k - 1] - events[layouts[k - 1]][1] if k > 1 else 0
        assert events[layouts[k]][1] + last <= budget
    assert len(layouts) == (2 if budget == 100 else 1)
    assert not mp.proofs_cut
    check_plan(prog, mp, ENVS)
    check_plan(prog, full, ENVS)


def test_range_layout_not_started_where_the_budget_cannot_hold_it(transformer, monkeypatch):
    """Proofs made, counted: the whole-range layout 10, the first range layout 6, budget 20:
    a second one (expected 6 more, 22 > 20) is not started; the plan stays valid."""
    prog, table = transformer
    layouts = []
    real = pm._best_layout

    def counted(*args, **kw):
        before = pm._proofs[0]
        out = real(*args, **kw)
        pm._proofs[0] = before + (10 if not layouts else 6)  # in place of the proofs it made
        layouts.append(out)
        return out

    monkeypatch.setattr(pm, "_best_layout", counted)
    monkeypatch.setattr(pm, "PLAN_PROOFS", 20)
    mp = plan(prog, table)
    assert len(layouts) == 2
    assert not mp.proofs_cut
    check_plan(prog, mp, [{"batch": b, "seq": s} for b in (1, 4) for s in (17, 64, 200, 256, 257, 512)])


def test_no_proofs_to_spend_keeps_the_first_whole_range_placement(transformer, monkeypatch):
    """No proofs to spend: the whole-range layout's first placement (the first order at the
    first point) and no range layout, so no Piecewise; a valid plan, 1.28x the peak at seq
    200 (the full search's split one is at the peak)."""
    from onnxcc.ir import evaluate

    prog, table = transformer
    monkeypatch.setattr(pm, "PLAN_PROOFS", 0)
    mp = plan(prog, table)
    assert not sympy.sympify(mp.workspace_bytes).atoms(sympy.Piecewise), mp.workspace_bytes
    assert not mp.proofs_cut
    envs = [{"batch": b, "seq": s} for b in (1, 4) for s in (17, 64, 200, 512)]
    check_plan(prog, mp, envs)
    for env in envs:
        ws, peak = evaluate(mp.workspace_bytes, env), evaluate(mp.peak_live_bytes, env)
        assert peak <= ws <= 1.3 * peak, (env, ws, peak)


@pytest.mark.parametrize("queries", [0, 30])
def test_stacked_plan_past_the_proof_queries(queries, monkeypatch):
    # the count spent mid-plan, at any clock speed: the stacked plan, the same both times
    monkeypatch.setattr(pm, "PROOF_QUERIES", queries)
    prog = _net("a", CHANS, 3)
    plans = []
    for step in (0.0, 100.0):
        _clock(monkeypatch, step)
        plans.append(plan(prog, _table()))
    assert plans[0].proofs_cut and plans[0].describe() == plans[1].describe()
    check_plan(prog, plans[0], ENVS)
