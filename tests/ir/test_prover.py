"""The one prover of dims (`onnxcc.ir.Prover`): the graph passes, fusion and memory planning
all ask it, so it must decide what each of the three provers it replaced decided, and never
answer wrongly.

`prover_cases.txt` holds questions the old provers decided (`SymbolTable.prove_le` /
`prove_eq`, `kernel.plan_memory.Prover`, `kernel.fuse._Prover`), recorded from them on
random pairs before the merge: `op | a | b | answer | which old provers decided it`. The
random test checks every answer against numeric evaluation at sample points of the
symbols' ranges (True: holds at all of them; False: holds at none).
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import sympy

from onnxcc.ir import Prover, SymbolTable, canon, evaluate, parse_dim, sym

SYMBOLS = {"a": (1, 8), "b": (3, 100), "c": (1, 1), "d": (1, 2**20)}
CASES = Path(__file__).with_name("prover_cases.txt")


def _table() -> SymbolTable:
    t = SymbolTable()
    for name, (lo, hi) in SYMBOLS.items():
        t.declare(name, lo, hi)
    return t


def _cases() -> list[tuple[str, str, str, bool, str]]:
    out = []
    for line in CASES.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            op, a, b, want, who = (x.strip() for x in line.split("|"))
            out.append((op, a, b, want == "True", who))
    return out


def test_the_recorded_questions_cover_each_old_prover():
    who = {w for *_, ws in _cases() for w in ws.split(",")}
    assert who == {"table", "kernel", "fuse"}
    assert any(ws == "kernel" for *_, ws in _cases())  # only the memory planner's decided it


@pytest.mark.parametrize("op, a, b, want, who", _cases(), ids=lambda x: str(x)[:40])
def test_decides_what_the_old_provers_decided(op, a, b, want, who):
    pr, x, y = Prover(_table()), parse_dim(a), parse_dim(b)
    got = pr.prove_le(x, y) if op == "le" else pr.prove_eq(x, y)
    assert got is want, f"{a} {op} {b}: {got}, the old provers ({who}) said {want}"
    if want:  # the kernel passes' question: proved or not
        assert (pr.le(x, y) if op == "le" else pr.eq(x, y)) is True


def test_the_symbol_table_asks_the_same_prover():
    t = _table()
    a, b, d = sym("a"), sym("b"), sym("d")
    assert t.prove_le(4 * d, sympy.ceiling(4 * d / 64) * 64) is True  # the planner's ceiling rule
    assert t.prove_le(sympy.Max(a, b) + 1, sympy.Max(a + 1, b + 1)) is True  # Max on both sides
    assert t.prove_eq(sym("c"), 1) is True and t.prove_eq(a, a + 1) is False
    assert t.prove_le(a, b) is None and t.prove_eq(None, a) is None


def test_unknown_dims_and_plain_ints():
    pr = Prover()
    assert pr.prove_le(None, 3) is None and pr.eq(None, None) is False
    assert pr.prove_le(3, 4) is True and pr.prove_eq(3, 4) is False and pr.one(1)
    assert pr.le(sym("n"), sym("n") * sym("m"))  # default ranges start at 1


# ---- random cross-check against evaluation ---------------------------------------------------


def _expr(rng: random.Random, depth: int):
    if depth == 0 or rng.random() < 0.3:
        return sym(rng.choice(sorted(SYMBOLS))) if rng.random() < 0.7 else sympy.Integer(rng.randint(-5, 9))
    x, y, k = _expr(rng, depth - 1), _expr(rng, depth - 1), rng.randint(1, 5)
    return [x + y, x - y, x * y, sympy.floor(x / k), sympy.ceiling(x / k), sympy.Mod(x, k),
            sympy.Max(x, y), sympy.Min(x, y), x * k, sympy.ceiling(x / 64) * 64][rng.randrange(10)]


def _pair(rng: random.Random):
    """Pairs shaped like the questions the passes ask (a sum, an aligned size, a Max)."""
    a, r, k = _expr(rng, rng.randint(0, 3)), _expr(rng, rng.randint(0, 2)), rng.randint(1, 8)
    b = [r, a + r, a * k, sympy.Max(a, r), sympy.ceiling(a / k) * k, a - k, a + k, a + r * r,
         sympy.Max(a + k, r), sympy.Min(a, r), a + sympy.Mod(r, k)][rng.randrange(11)]
    return (canon(b), canon(a)) if rng.random() < 0.5 else (canon(a), canon(b))


def _points(rng: random.Random) -> list[dict[str, int]]:
    corners = [{n: (lo if (m >> i) & 1 else hi) for i, (n, (lo, hi)) in enumerate(SYMBOLS.items())}
               for m in range(16)]
    return corners + [{n: rng.randint(lo, hi) for n, (lo, hi) in SYMBOLS.items()} for _ in range(16)]


@pytest.mark.parametrize("seed", range(4))
def test_never_answers_wrongly(seed):
    rng = random.Random(seed)
    pr, points, decided = Prover(_table()), _points(rng), 0
    for _ in range(40):
        a, b = _pair(rng)
        vals = [(evaluate(a, env), evaluate(b, env)) for env in points]
        for op, answer, holds in (("<=", pr.prove_le(a, b), [x <= y for x, y in vals]),
                                  ("==", pr.prove_eq(a, b), [x == y for x, y in vals])):
            if answer is not None:
                decided += 1
                assert all(h == answer for h in holds), f"{a} {op} {b} answered {answer}"
    assert decided >= 20  # the check is not vacuous
