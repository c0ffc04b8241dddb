"""The prover's shortcut before `simplify` (ir/dims.py `_signs_differ`): a difference seen
with two signs at points in range is "cannot tell" at once; the answers are the ones the
full proof gives, and the conv-net dims that used to cost a simplify each no longer do."""

from __future__ import annotations

import random

import pytest
import sympy

import onnxcc.ir.dims as dims_mod
from onnxcc.ir.dims import Prover, SymbolTable, sym

H, W, N = sym("H"), sym("W"), sym("n")


def _table() -> SymbolTable:
    t = SymbolTable()
    t.declare("H")
    t.declare("W", 1, 4096, 16)  # a multiple of 16 up to 4096
    t.declare("n", 0, 100)  # a run-time count: may be 0
    return t


def _conv_out(x, k: int, s: int, p: int):
    return sympy.floor((x + 2 * p - k) / s) + 1


def _cases() -> list[tuple]:
    half = sympy.Rational(1, 2)
    chain = _conv_out(_conv_out(_conv_out(H, 3, 2, 0), 3, 2, 1), 3, 2, 0)
    cases = [
        (chain, 1), (chain, 2), (_conv_out(H, 3, 2, 1), 1), (_conv_out(W, 3, 1, 1), W),
        (sympy.floor(H / 2) * 2 + sympy.Mod(H, 2), H),  # an identity simplify may not see
        (sympy.floor(H / 2) + sympy.ceiling(H / 2), H), (sympy.ceiling(W / 16), W / 16),
        (sympy.floor((W - 1) / 16) + 1, W / 16), (sympy.Max(N, 1), N), (sympy.Min(H, 7), 7),
        (sympy.floor(H * half + half) + 5, 1), (sympy.floor((H + 3) / 4) * 4, H),
        (sympy.ceiling(sympy.ceiling(sympy.floor(H / 2 - 3 * half) / 2) / 2 - 3 * half), 1),
        (sympy.floor(N / 3), 0), (sympy.Mod(W, 16), 0), (sympy.Mod(H, 16), 0),
    ]
    rng = random.Random(7)
    atoms = [H, W, N, sympy.Integer(1), sympy.Integer(3)]
    for _ in range(60):  # random floors / ceilings of small linear forms, against each other
        def term():
            x = rng.choice(atoms) * rng.randint(1, 3) + rng.randint(-2, 2)
            return rng.choice([sympy.floor, sympy.ceiling])(x / rng.randint(1, 4))
        cases.append((term() + rng.randint(-1, 1), term()))
    return cases


def test_same_answers_as_the_full_proof(monkeypatch):
    cases = _cases()
    fast = [Prover(_table()).prove_eq(a, b) for a, b in cases]
    monkeypatch.setattr(dims_mod, "_signs_differ", lambda d, table: False)
    full = [Prover(_table()).prove_eq(a, b) for a, b in cases]
    assert len(fast) == len(full) == len(cases)
    for (a, b), x, y in zip(cases, fast, full, strict=True):
        assert x == y, f"{a} == {b}: {x} with the shortcut, {y} without"


@pytest.mark.parametrize(("d", "differ"), [
    (_conv_out(H, 3, 2, 1) - 1, True),  # 0 at H = 1, 1 at H = 3
    (sympy.floor(H / 2) * 2 + sympy.Mod(H, 2) - H, False),  # identically 0
    (sympy.ceiling(W / 16) - W / 16, False),  # 0 at every multiple of 16: divisibility kept
    (sympy.floor(N / 3) - 0, True),  # 0 at n = 0 (the run-time range), 1 at n = 3
    (sympy.floor(H / 2) + 1, False),  # positive everywhere
])
def test_signs_differ(d, differ):
    assert dims_mod._signs_differ(d, _table()) is differ


def test_nested_conv_dims_need_no_simplify(monkeypatch):
    def boom(e):
        raise AssertionError(f"simplify called on {e}")

    chain = _conv_out(_conv_out(_conv_out(H, 3, 2, 0), 3, 2, 1), 3, 2, 0)
    p = Prover(_table())
    monkeypatch.setattr(dims_mod.sympy, "simplify", boom)
    assert p.prove_eq(chain, 1) is None
    assert p.one(_conv_out(H, 3, 2, 1)) is False
