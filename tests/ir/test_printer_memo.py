"""ir/printer.py: DimPrinter memoises the text of compound subexpressions across prints; the
text must be exactly what sympy's printer (with `%` for Mod) writes without the memo."""

from __future__ import annotations

import sympy
from sympy.printing.str import StrPrinter

from onnxcc.ir import printer
from onnxcc.ir.printer import DimPrinter, print_bool, print_dim


class _Plain(StrPrinter):
    """The same printer without the memo."""

    _print_Mod = DimPrinter._print_Mod


_plain = _Plain({"order": None})


def _conv_size(depth: int):
    h, w, b = (sympy.Symbol(n, integer=True, positive=True) for n in ("H", "W", "batch"))
    fh, fw = h, w
    terms = []
    for k in range(depth):
        fh, fw = sympy.floor((fh - 1) / 2) + 1, sympy.floor((fw - 1) / 2) + 1
        terms.append(64 * sympy.ceiling((2 ** k) * b * fh * fw / 16))
    return sympy.Max(sum(terms), 128 * b * fh * fw) + sympy.Mod(h + 3, 8)


def test_memoised_text_is_sympys_text_for_the_whole_and_every_part():
    e = _conv_size(5)
    want = _plain.doprint(e)
    assert print_dim(e) == want
    assert print_dim(e) == want  # served from the memo
    for sub in sympy.preorder_traversal(e):
        assert print_dim(sub) == _plain.doprint(sub), sub


def test_floats_print_as_without_the_memo_at_the_top_and_nested():
    x = sympy.Symbol("x", integer=True, positive=True)
    for e in (sympy.Float(2.0), sympy.Float(2.5), sympy.Float(2.0) * x, x + sympy.Float(0.5)):
        assert print_dim(e) == _plain.doprint(e)
    assert print_bool(sympy.Le(x, 3)) == "x <= 3"


def test_memo_is_bounded(monkeypatch):
    monkeypatch.setattr(printer, "_PRINT_MEMO_MAX", 4)
    p = DimPrinter({"order": None})
    x = sympy.Symbol("x", integer=True, positive=True)
    for k in range(20):
        assert p.doprint(x + k) == _plain.doprint(x + k)
    assert len(p._memo) <= 4
