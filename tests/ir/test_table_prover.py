"""ir/dims.py: `SymbolTable.prover()` keeps one prover (and its memos) while the table is
unchanged, and a new one as soon as a symbol is added or a range / divisibility changes, so
a memoised answer never outlives the ranges it was proved under."""

from __future__ import annotations

import pickle

import sympy

from onnxcc.ir.dims import SymbolTable, sym


def _table() -> SymbolTable:
    t = SymbolTable()
    t.declare("H", lo=1, hi=1000)
    return t


def test_same_prover_while_the_table_is_unchanged():
    t = _table()
    p = t.prover()
    assert t.prove_le(1, sym("H")) is True
    assert t.prover() is p


def test_a_changed_range_gets_a_new_prover_and_a_new_answer():
    t, h = _table(), sym("H")
    assert t.prove_le(5, h) is None  # H may be below 5
    p = t.prover()
    t["H"].lo = 5  # SymbolInfo is mutable: the table must notice
    assert t.prover() is not p
    assert t.prove_le(5, h) is True
    t["H"].hi = 4 + 1
    assert t.prove_eq(h, 5) is True
    t["H"].lo, t["H"].hi = 1, 1000
    assert t.prove_le(5, h) is None  # back to the first answer, not the narrowed one


def test_a_new_symbol_or_divisibility_gets_a_new_prover():
    t = _table()
    p = t.prover()
    t.declare("W", lo=3)
    q = t.prover()
    assert q is not p
    assert t.prove_le(3, sym("W")) is True
    t["W"].multiple_of = 4
    assert t.prover() is not q


def test_nested_floor_chain_answers_match_a_fresh_table():
    # the importer's question at every conv of a chain: each output extent >= 1
    t, h = _table(), sym("H")
    d = h
    answers = []
    for _ in range(6):
        d = sympy.floor((d - 3) / 2) + 1
        answers.append(t.prove_le(1, d))
    fresh = []
    d = h
    for _ in range(6):
        d = sympy.floor((d - 3) / 2) + 1
        fresh.append(_table().prove_le(1, d))
    assert answers == fresh
    assert answers[0] is None  # H = 1 gives floor(-1) + 1 = 0


def test_copy_and_pickle_do_not_carry_the_prover():
    t = _table()
    t.prove_le(1, sym("H"))
    assert t.copy().prover() is not t.prover()
    u = pickle.loads(pickle.dumps(t))
    assert u == t and u.prover() is not t.prover()
    assert u.prove_le(1, sym("H")) is True
