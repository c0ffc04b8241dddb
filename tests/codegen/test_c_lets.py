"""c_int_checked_lets (the dispatcher's workspace size, each repeated subexpression once as a
C local) computes what the nested c_int_checked form does, value and overflow flag, at
every point tried; a Piecewise piece that is not chosen raises no flag (its locals are inside
its branch of an if / else chain); and the repeated
nested floors of a conv net's sizes are emitted once each."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import sympy

from onnxcc.codegen.c.exprs import C_HELPERS, c_int_checked, c_int_checked_lets
from onnxcc.ir import sym

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")

H, W, B = sym("H"), sym("W"), sym("batch")
NAMES = {"H": "s[0]", "W": "s[1]", "batch": "s[2]"}


def _halve(x, k: int):
    for _ in range(k):
        x = sympy.floor((x - 1) / 2) + 1
    return x


EXPRS = [
    # a conv net's arena: the same floor chains again and again
    64 * sympy.ceiling(sympy.Max(576 * B * _halve(H, 4) * _halve(W, 4), 1024 * B,
                                 64 * B * _halve(H, 3) * _halve(W, 3) + 576 * B * _halve(H, 4) * _halve(W, 4)) / 64)
    + 128 * B * _halve(H, 1) * _halve(W, 1),
    16 * B * H**2 + 1024 * B * H,
    # a per-range plan: the big piece overflows at the points where it is not chosen
    sympy.Piecewise((2**62 * H, H <= 1), (B * W + 7, True)),
    sympy.Max(B, W) * sympy.floor(H / 3) + sympy.Mod(W, 5),
]
POINTS = [(1, 1, 1), (7, 9, 2), (224, 224, 4), (1000, 17, 3), (2**31 - 1, 2**31 - 1, 2**31 - 1)]


def test_lets_match_the_nested_form(tmp_path):
    body = []
    for k, e in enumerate(EXPRS):
        lets, res = c_int_checked_lets(e, NAMES, "o2", f"t{k}_")
        body += ["  {", "    int o1 = 0, o2 = 0;",
                 f"    int64_t a = {c_int_checked(e, NAMES, 'o1')};",
                 *(f"    {x}" for x in lets),
                 f"    int64_t b = {res};",
                 f'    printf("%d %d %d %lld %lld\\n", {k}, o1, o2, (long long)a, (long long)b);', "  }"]
    src = "\n".join(["#include <stdint.h>", "#include <stdio.h>", "#include <stdlib.h>", C_HELPERS,
                     "int main(int argc, char **argv) {", "  int64_t s[3];",
                     "  for (int k = 0; k < 3; k++) s[k] = strtoll(argv[k + 1], NULL, 10);",
                     *body, "  return 0;", "}"])
    (tmp_path / "m.c").write_text(src)
    exe = tmp_path / "m"
    subprocess.run(["cc", "-O1", "-o", str(exe), str(tmp_path / "m.c")], check=True, capture_output=True, text=True)
    seen_flag = False
    for pt in POINTS:
        out = subprocess.run([str(exe), *map(str, pt)], capture_output=True, text=True, check=True).stdout.split("\n")
        rows = [r.split() for r in out if r]
        assert len(rows) == len(EXPRS)
        for k, o1, o2, a, b in rows:
            assert (o1, a) == (o2, b), (pt, k, o1, o2, a, b)
            seen_flag |= o1 == "1"
            if o1 == "0":  # where nothing overflowed, both are the exact value
                env = {H: pt[0], W: pt[1], B: pt[2]}
                assert int(a) == int(EXPRS[int(k)].xreplace(env)), (pt, k)
    assert seen_flag  # the points reach an overflow, so the flags were compared too


def test_piecewise_piece_not_chosen_raises_no_flag():
    e = sympy.Piecewise((2**62 * H * W, H <= 1), (B + 1, True))
    lets, res = c_int_checked_lets(e, NAMES, "ovf", "w")
    # the big piece is computed only inside its own branch (evaluated when chosen), never in
    # a statement at the top level, which runs whatever the condition
    big = [k for k, x in enumerate(lets) if "4611686018427387904" in x]
    assert big and all(lets[k].startswith("  ") for k in big)
    assert lets[big[0] - 1].startswith("if (") and lets[-1] == "}"
    assert res == lets[0].split()[1].rstrip(";")  # the chain's result local


def test_repeated_floors_are_emitted_once():
    e = EXPRS[0]
    lets, _ = c_int_checked_lets(e, NAMES, "ovf", "w")
    nested = c_int_checked(e, NAMES, "ovf")
    floors = [x for x in lets if "onnxcc_floordiv(" in x]
    assert len(floors) == len(set(x.split(" = ", 1)[1] for x in floors))  # no subexpression twice
    assert sum(x.count("onnxcc_floordiv(") for x in lets) == len(floors) < nested.count("onnxcc_floordiv(")
