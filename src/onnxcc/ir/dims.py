"""Dims and symbols: a dim is an int or a sympy integer expression over named symbols.

Symbols are created through a `SymbolTable`, which records each one's range, divisibility
and origin. Dims are compared with `prove_eq` / `prove_le`, which answer True, False or
None ("cannot tell at compile time"); None is the caller's cue to record a constraint
and let it become a run-time guard. Never compare dims with a bare `==`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import sympy

Dim = int | sympy.Expr

INT_MAX = 2**31 - 1


def sym(name: str) -> sympy.Symbol:
    """The canonical sympy symbol for a dim name (integer, positive)."""
    return sympy.Symbol(name, integer=True, positive=True)


def canon(d) -> Any:
    """Normalise a dim: python ints stay ints, integer-valued sympy numbers become ints
    (None stays None: an unknown dim)."""
    if d is None:
        return None
    if isinstance(d, bool):
        return int(d)
    if isinstance(d, int):
        return d
    if hasattr(d, "item") and not isinstance(d, sympy.Basic):  # numpy scalar
        return int(d)
    e = cast(sympy.Expr, sympy.sympify(d))
    if e.is_Integer:
        return int(cast(sympy.Integer, e))
    return e


def is_static(d: Dim) -> bool:
    return isinstance(d, int)


def free_symbols(d: Dim) -> set[sympy.Symbol]:
    return set() if isinstance(d, int) or d is None else cast(set[sympy.Symbol], set(d.free_symbols))


@dataclass
class SymbolInfo:
    """What the module knows about one symbol."""

    name: str
    lo: int = 1
    hi: int = INT_MAX
    multiple_of: int = 1
    origin: str = ""  # e.g. 'input "x" dim 1'

    @property
    def symbol(self) -> sympy.Symbol:
        return sym(self.name)


@dataclass
class SymbolTable:
    """Ordered table of the module's symbols, keyed by name."""

    infos: dict[str, SymbolInfo] = field(default_factory=dict)

    def declare(self, name: str, lo: int = 1, hi: int = INT_MAX, multiple_of: int = 1,
                origin: str = "") -> sympy.Symbol:
        if name not in self.infos:
            self.infos[name] = SymbolInfo(name, lo, hi, multiple_of, origin)
        return sym(name)

    def fresh(self, hint: str = "d", origin: str = "") -> sympy.Symbol:
        """A new symbol whose name does not clash with any declared one."""
        base = _identifier(hint) or "d"
        name, k = base, 0
        while name in self.infos:
            k += 1
            name = f"{base}_{k}"
        return self.declare(name, origin=origin)

    def __contains__(self, name: str) -> bool:
        return name in self.infos

    def __getitem__(self, name: str) -> SymbolInfo:
        return self.infos[name]

    def __iter__(self):
        return iter(self.infos.values())

    def __len__(self) -> int:
        return len(self.infos)

    def copy(self) -> SymbolTable:
        return SymbolTable({k: SymbolInfo(**vars(v)) for k, v in self.infos.items()})

    # ---- bounds -------------------------------------------------------------------------
    def bounds(self, d: Dim) -> tuple[Any, Any]:
        """Interval bounds of a dim over the symbols' ranges (sound, maybe loose)."""
        if isinstance(d, int):
            return d, d
        e = sympy.sympify(d)
        if e.is_Number:
            return int(e), int(e)
        # Substitute ranges by interval arithmetic on monotone pieces where possible.
        try:
            lo, hi = _interval(e, self)
            return lo, hi
        except _NoBound:
            return -sympy.oo, sympy.oo

    def prove_eq(self, a: Dim, b: Dim) -> bool | None:
        if a is None or b is None:
            return None
        diff = sympy.simplify(sympy.sympify(a) - sympy.sympify(b))
        if diff == 0:
            return True
        lo, hi = self.bounds(diff)
        if lo == hi == 0:  # e.g. a symbol whose range is [1, 1]
            return True
        if lo > 0 or hi < 0:
            return False
        if diff.is_Number:
            return False
        return None

    def prove_le(self, a: Dim, b: Dim) -> bool | None:
        if a is None or b is None:
            return None
        diff = sympy.sympify(b) - sympy.sympify(a)
        lo, hi = self.bounds(diff)
        if lo >= 0:
            return True
        if hi < 0:
            return False
        return None

    def substitute(self, d: Dim, subs: dict) -> Dim:
        if isinstance(d, int) or d is None:
            return d
        return canon(subs_dim(d, subs))


class _NoBound(Exception):
    pass


def _interval(e: Any, table: SymbolTable) -> tuple:
    """Interval arithmetic over Add/Mul/floor/ceiling/Max/Min/Mod with symbol ranges."""
    if e.is_Integer:
        return int(e), int(e)
    if e.is_Rational:
        return e, e
    if e.is_Symbol:
        info = table.infos.get(e.name)
        if info is None:
            return 1, INT_MAX
        return info.lo, info.hi
    if e.is_Add:
        lo, hi = 0, 0
        for a in e.args:
            l2, h2 = _interval(a, table)
            lo, hi = lo + l2, hi + h2
        return lo, hi
    if e.is_Mul:
        lo, hi = 1, 1
        for a in e.args:
            l2, h2 = _interval(a, table)
            cands = [x * y for x in (lo, hi) for y in (l2, h2)]
            lo, hi = min(cands), max(cands)
        return lo, hi
    if e.is_Pow and e.exp.is_Integer and e.exp > 0:
        lo, hi = _interval(e.base, table)
        if lo >= 0:
            return lo ** e.exp, hi ** e.exp
        raise _NoBound
    if isinstance(e, sympy.floor):
        lo, hi = _interval(e.args[0], table)
        return sympy.floor(lo), sympy.floor(hi)
    if isinstance(e, sympy.ceiling):
        lo, hi = _interval(e.args[0], table)
        return sympy.ceiling(lo), sympy.ceiling(hi)
    if isinstance(e, sympy.Max):
        ivs = [_interval(a, table) for a in e.args]
        return max(i[0] for i in ivs), max(i[1] for i in ivs)
    if isinstance(e, sympy.Min):
        ivs = [_interval(a, table) for a in e.args]
        return min(i[0] for i in ivs), min(i[1] for i in ivs)
    if isinstance(e, sympy.Mod):
        m: Any = e.args[1]
        if m.is_Integer and m > 0:
            return 0, int(m) - 1
    raise _NoBound


def _identifier(s: str) -> str:
    out = "".join(c if (c.isalnum() or c == "_") else "_" for c in s)
    if out and out[0].isdigit():
        out = "d" + out
    return out


def identifier(s: str) -> str:
    """Make a string into a legal symbol / C identifier."""
    return _identifier(s) or "d"


def subs_dim(e, subs: dict):
    """Substitute symbols in a dim or boolean expression.

    NOTE: `Expr.subs` can leave `Min(6, 10000)` unevaluated; `xreplace` rebuilds the tree
    bottom-up and evaluates it, so it is used whenever every key is a symbol.
    """
    e = sympy.sympify(e)
    if subs and all(isinstance(k, sympy.Symbol) for k in subs):
        return e.xreplace({k: sympy.sympify(v) for k, v in subs.items()})
    return e.subs(subs)


def evaluate(d: Dim, env: dict[str, int]) -> int:
    """Evaluate a dim given integer values for its symbols."""
    if isinstance(d, int):
        return d
    e = sympy.sympify(d)
    val = subs_dim(e, {sym(k): v for k, v in env.items()})
    if not val.is_Integer:
        raise ValueError(f"dim {d} does not evaluate to an integer under {env}")
    return int(val)
