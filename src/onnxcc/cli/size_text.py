"""Sizes for people: NAME.json's symbolic byte counts as short formulas, one line per range of a
piecewise plan, and their values at given shapes (`onnxcc inspect --at batch=1,seq=128`).

NAME.json writes sizes as sympy text (`Piecewise((64*ceiling(Max(...)/64), seq <= 65), ...)`);
they are parsed back here (after checking that the text holds nothing but arithmetic over the
artifact's symbols: the metadata is data, never code) and printed with the IR printer's
spelling of dims (`Max`, `Min`, `%`: `ir.printer.DimPrinter`, so a size reads like the guards
beside it), plus two shorthands for people: `ceil` / `floor` and
`round_up(x, 64)` for `64*ceiling(x/64)`.
"""

from __future__ import annotations

import re

import sympy
from sympy.printing.precedence import PRECEDENCE

from ..ir.printer import DimPrinter

#: a formula longer than this is shown by its leading terms
MAX_FORMULA = 90

_FUNCS = {"Piecewise": sympy.Piecewise, "Max": sympy.Max, "max": sympy.Max, "Min": sympy.Min,
          "min": sympy.Min, "ceiling": sympy.ceiling, "ceil": sympy.ceiling, "floor": sympy.floor,
          "Mod": sympy.Mod, "True": sympy.true, "true": sympy.true, "False": sympy.false, "false": sympy.false}
_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z0-9_]*)|(\*\*|<=|>=|==|!=|[-+*/%(),<>]))")


def parse_size(text: str, symbols: dict[str, sympy.Symbol]):
    """The sympy expression of a size in NAME.json, or None when it is not plain arithmetic
    over known symbols (then it is shown as it is)."""
    text = str(text)
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            return None
        name = m.group(2)
        if name is not None and name not in _FUNCS and name not in symbols:
            return None
        pos = m.end()
    try:
        return sympy.sympify(text, locals={**_FUNCS, **symbols})
    except (sympy.SympifyError, TypeError, SyntaxError, ValueError):
        return None


class _Printer(DimPrinter):
    def _print_ceiling(self, e):
        return f"ceil({self._print(e.args[0])})"

    def _print_floor(self, e):
        return f"floor({self._print(e.args[0])})"

    def _print_Mul(self, e):
        k, rest = e.as_coeff_Mul()
        if k.is_Integer and k > 1 and isinstance(rest, sympy.ceiling):
            inner = sympy.expand(rest.args[0] * k)
            if all(t.as_coeff_Mul()[0].is_Integer for t in sympy.Add.make_args(inner)):
                return f"round_up({self._print(inner)}, {k})"
        return super()._print_Mul(e)

    def _print_Relational(self, e):
        p = PRECEDENCE["Relational"]
        return f"{self.parenthesize(e.lhs, p)} {e.rel_op} {self.parenthesize(e.rhs, p)}"

    def _print_BooleanTrue(self, e):
        return "true"

    def _print_BooleanFalse(self, e):
        return "false"


_P = _Printer()


def formula(e) -> str:
    return _P.doprint(e)


def _smooth(e, probe: dict):
    """e without ceil/floor rounding, each max/min replaced by its argument that is largest /
    smallest at the probe point (a shape inside the range the formula serves)."""
    if isinstance(e, (sympy.ceiling, sympy.floor)):
        return _smooth(e.args[0], probe)
    if isinstance(e, (sympy.Max, sympy.Min)):
        args = [_smooth(a, probe) for a in e.args]
        vals = [evaluate(a, probe) for a in args]
        if any(v is None for v in vals):
            return e
        pick = max if isinstance(e, sympy.Max) else min
        return args[vals.index(pick(vals))]
    if e.args and not e.is_Atom:
        return e.func(*(_smooth(a, probe) for a in e.args))
    return e


def short(e, probe: dict | None = None) -> str:
    """The formula if short enough, else `~ POLYNOMIAL`: the formula without its rounding,
    each max / min resolved at `probe` (default: every symbol 128)."""
    s = formula(e)
    if len(s) <= MAX_FORMULA or not e.free_symbols:
        return s
    probe = {**{x: 128 for x in e.free_symbols}, **(probe or {})}
    approx = formula(sympy.expand(_smooth(e, probe)))
    return f"~ {approx}" if len(approx) <= MAX_FORMULA else s[:MAX_FORMULA] + "..."


def lines(e) -> list[str]:
    """One line per range of a piecewise size (`seq <= 65: ...`), else one line."""
    e = sympy.piecewise_fold(e)
    if not isinstance(e, sympy.Piecewise):
        return [short(e)]
    out, prev, probe = [], None, {}
    for k, (expr, cond) in enumerate(e.args):
        if isinstance(cond, sympy.core.relational.Relational) and cond.lhs.is_Symbol and cond.rhs.is_Integer:
            probe = {cond.lhs: int(cond.rhs)}  # resolve max / min at the range's upper end
        elif cond is sympy.true and probe:
            probe = {x: 4 * v for x, v in probe.items()}
        if cond is sympy.true:
            where = "otherwise" if k else ""
        else:
            where = formula(cond)
            if (prev is not None and isinstance(cond, sympy.core.relational.Relational)
                    and isinstance(prev, sympy.core.relational.Relational) and cond.lhs == prev.lhs
                    and cond.rel_op in ("<=", "<") and prev.rel_op == "<="):
                where = f"{formula(prev.rhs)} < {formula(cond)}"
        prev = cond
        out.append(f"{where}: {short(expr, probe)}" if where else short(expr, probe))
    return out


def evaluate(e, env: dict[sympy.Symbol, int]) -> int | None:
    try:
        v = e.subs(env)
        return int(v) if v.is_number else None
    except (TypeError, ValueError):
        return None


def human_bytes(n: int | None) -> str:
    if n is None:
        return "?"
    for unit in ("B", "K", "M", "G", "T"):
        if abs(n) < 1024 or unit == "T":
            return f"{n}B" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024
    return str(n)
