"""Dims and symbols: a dim is an int or a sympy integer expression over named symbols.

Symbols are created through a `SymbolTable`, which records each one's range, divisibility
and origin. Dims are compared with `prove_eq` / `prove_le`, which answer True, False or
None ("cannot tell at compile time"); None is the caller's cue to record a constraint
and let it become a run-time guard. Never compare dims with a bare `==`.
"""

from __future__ import annotations

import functools
import math
import zlib
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, cast

import sympy

from . import intervals
from .periodic import zero_count, zero_verdict
from .poly_terms import add_terms, monomial, poly_terms
from .poly_terms import build as build_terms
from .rounding import ceiling_of, floor_of

Dim = int | sympy.Expr

INT_MAX = 2**31 - 1


def sym(name: str) -> sympy.Symbol:
    """The canonical sympy symbol for a dim name (integer, positive)."""
    return sympy.Symbol(name, integer=True, positive=True)


def canon(d) -> Any:
    """Normalise a dim: python ints stay ints, integer-valued sympy numbers become ints
    (None stays None: an unknown dim)."""
    if isinstance(d, sympy.Expr):  # first: the prover and the planner ask it ~10**6 times a plan
        return int(cast(sympy.Integer, d)) if d.is_Integer else d
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


def identical(a: Dim, b: Dim) -> bool:
    """Whether `a - b` is 0 for every value of the symbols (a view's element count against
    its buffer's, a loop's extent against its buffer's dim): True wherever
    `sympy.simplify(a - b) == 0` is, only faster: equal canonical forms, then the difference
    expanded, each floor expanded once (`_expanded`); a difference of one symbol decided
    exactly on one period of its floors (`periodic.zero_verdict`: also where simplify
    leaves floor((H + 3)/4) - floor((H - 1)/4) - 1); sympy's simplify, which takes up to a
    second on a pooled net's nested floors (poolformer: most of lower-to-kernel and fuse),
    only where those leave a nonzero difference. Memoised: a program's verify asks the same
    pairs after every kernel pass."""
    a, b = canon(a), canon(b)
    if a == b:
        return True
    if isinstance(a, int) and isinstance(b, int):
        return False
    return _identical(sympy.sympify(a), sympy.sympify(b))


@functools.lru_cache(maxsize=1 << 12)
def _identical(a: sympy.Expr, b: sympy.Expr) -> bool:
    diff = sympy.sympify(a - b)
    if diff == 0 or _expanded(diff) == 0:
        return True
    syms = diff.free_symbols
    if len(syms) == 1:
        # one symbol: decided exactly on one period of its floors (a positive symbol: n >= 1)
        verdict = zero_verdict(diff, next(iter(syms)), 1, None)
        if verdict is not None:
            return verdict
    if _nonzero_somewhere(diff):
        # a value of the symbols where the difference is not 0: simplify could not make it
        # 0 either (a voice model's view checks, Max / Min of nested floors: seconds each)
        return False
    return _simplified(diff) == 0


def _nonzero_somewhere(d: sympy.Expr) -> bool:
    """`d` is a number other than 0 at one of a few points (every symbol a positive integer,
    as the symbols are declared; a point where `d` divides by 0 tells nothing)."""
    syms: list[Any] = sorted(d.free_symbols, key=str)
    samples = [v for v in _SAMPLES if v >= 1]  # NOTE: 0 is no value of a positive symbol
    for shift in range(3):
        for j in range(len(samples)):
            point = {s: sympy.Integer(samples[(j + i * shift) % len(samples)]) for i, s in enumerate(syms)}
            val: Any = d.xreplace(point)
            if val.is_Rational and val != 0:
                return True
        if len(syms) <= 1:
            break
    return False


@functools.lru_cache(maxsize=1 << 12)
def _simplified(d: sympy.Expr) -> sympy.Expr:
    """`sympy.simplify(d)`, memoised: shape inference asks the same equalities once per
    constraint, each through a new prover (`SymbolTable.prove_eq`), and simplify takes a
    second and more on a voice model's Max / Min of nested floors."""
    return sympy.simplify(d)


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


@dataclass(frozen=True, order=True)
class Divisible:
    """A divisibility fact a version may rely on: `symbol % k == 0` holds for every call it
    runs (its guard says so). In the IR text: `#divisible<seq % 16 == 0>`."""

    symbol: str
    k: int

    @property
    def predicate(self) -> Any:
        """The fact as a guard: `Eq(Mod(symbol, k), 0)`."""
        return sympy.Eq(sympy.Mod(sym(self.symbol), self.k), 0)

    @staticmethod
    def from_predicate(e: Any) -> Divisible | None:
        """The fact a guard term `symbol % k == 0` states, else None."""
        if isinstance(e, sympy.Eq) and e.rhs == 0 and isinstance(e.lhs, sympy.Mod):
            s, k = cast(tuple[Any, Any], e.lhs.args)
            if isinstance(s, sympy.Symbol) and k.is_Integer and int(k) > 0:
                return Divisible(s.name, int(k))
        return None


@dataclass
class SymbolTable:
    """Ordered table of the module's symbols, keyed by name."""

    infos: dict[str, SymbolInfo] = field(default_factory=dict)
    # (the ranges it was made for, the prover): see `prover`
    _prover: Any = field(default=None, init=False, repr=False, compare=False)

    def __getstate__(self) -> dict:
        return {"infos": self.infos}  # the prover's memos are a cache: not copied along

    def __setstate__(self, state: dict) -> None:
        self.infos, self._prover = state["infos"], None

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
    def bounds(self, d: Dim, memo: dict | None = None) -> tuple[Any, Any]:
        """Interval bounds of a dim over the symbols' ranges (sound, maybe loose). `memo`
        keeps the intervals of subexpressions between calls (valid while the table is
        unchanged: the `Prover` passes its own)."""
        if isinstance(d, int):
            return d, d
        e = sympy.sympify(d)
        if e.is_Number:
            return int(e), int(e)
        # Substitute ranges by interval arithmetic on monotone pieces where possible.
        try:
            lo, hi = _interval(e, self, {} if memo is None else memo)
            return lo, hi
        except _NoBound:
            return -sympy.oo, sympy.oo

    def prover(self) -> Prover:
        """A prover over the table as it is now, the same one while no symbol is added and
        no range or divisibility changes (they are checked at every call: `SymbolInfo`s are
        mutable). Its memos then carry over from question to question: a new prover per
        question re-derived the intervals of a conv chain's nested floors at every conv
        (half of a SqueezeNet's import)."""
        key = tuple((i.name, i.lo, i.hi, i.multiple_of) for i in self.infos.values())
        if self._prover is None or self._prover[0] != key:
            self._prover = (key, Prover(self))
        return self._prover[1]

    def prove_eq(self, a: Dim, b: Dim) -> bool | None:
        """True / False / None ("cannot tell"): see `Prover.prove_eq`."""
        return self.prover().prove_eq(a, b)

    def prove_le(self, a: Dim, b: Dim) -> bool | None:
        """True / False / None ("cannot tell"): see `Prover.prove_le`."""
        return self.prover().prove_le(a, b)

    def substitute(self, d: Dim, subs: dict) -> Dim:
        if isinstance(d, int) or d is None:
            return d
        return canon(subs_dim(d, subs))


class _NoBound(Exception):
    pass


# ---- the prover ---------------------------------------------------------------------------


class Prover:
    """The one prover of dims over a symbol table's ranges (default: every symbol in
    [1, 2**31-1]). Answers are sound for every value of the symbols in range.

    `prove_le` / `prove_eq` answer True (holds for every value), False (holds for none) or
    None (cannot tell at compile time: the caller records a constraint or a guard). `le` /
    `eq` answer only "proved" (True) or not (False): the cheap question the kernel passes
    ask, which skips the work of disproving.

    How `a <= b` is proved, cheapest first: interval arithmetic over the ranges (`bounds`);
    then for every Max-free piece of `a` (a `Max` on the left is split into its arguments,
    sums distributed over it) some piece of `b` with `b - a` a polynomial in the symbols
    whose coefficients are all nonnegative once each symbol is shifted by its lower bound,
    after replacing each `ceiling` / `floor` by the bound that can only make `b - a`
    smaller; failing that, by the interval arithmetic of that pair. Equality is an
    identically zero difference (expanded, then `simplify` where the difference is not a
    plain polynomial), a difference whose interval is [0, 0], or `<=` both ways.

    The answers are cached per pair: a prover must not outlive a change to its table.
    """

    def __init__(self, symbols: SymbolTable | None = None):
        self.table = symbols if symbols is not None else SymbolTable()
        self._le: dict[tuple, bool] = {}
        self._eq: dict[tuple, bool | None] = {}
        self._iv: dict = {}  # subexpression -> interval over the table's ranges
        self._nn: dict = {}  # polynomial -> `_nonneg`
        self._li: dict = {}  # (x, y) -> `_le_interval`
        self._sb: dict = {}  # (sum, upper) -> `_sum_bounds`

    # ---- the two questions, three answers -------------------------------------------------
    def prove_le(self, a: Dim | None, b: Dim | None) -> bool | None:
        if a is None or b is None:
            return None
        x, y = canon(a), canon(b)
        if isinstance(x, int) and isinstance(y, int):
            return x <= y
        if self.le(x, y):
            return True
        if self.table.bounds(sympy.sympify(y) - sympy.sympify(x), self._iv)[1] < 0:
            return False
        return None

    def prove_eq(self, a: Dim | None, b: Dim | None) -> bool | None:
        if a is None or b is None:
            return None
        x, y = canon(a), canon(b)
        if isinstance(x, int) and isinstance(y, int):
            return x == y
        key = (x, y)
        if key not in self._eq:
            self._eq[key] = self._prove_eq(x, y)
        return self._eq[key]

    # ---- proved or not ---------------------------------------------------------------------
    def le(self, a: Dim, b: Dim) -> bool:
        """`a <= b` is proved for every value in range."""
        a, b = canon(a), canon(b)
        if isinstance(a, int) and isinstance(b, int):
            return a <= b
        key = (a, b)
        hit = self._le.get(key)
        if hit is None:
            hit = self._le_interval(a, b)
            if not hit:
                ys = max_alternatives(b)  # once, not once per alternative of `a`
                hit = all(any(self._poly_le(x, y) for y in ys) for x in max_alternatives(a))
            self._le[key] = hit
        return hit

    def eq(self, a: Dim | None, b: Dim | None) -> bool:
        """`a == b` is proved for every value in range (never for an unknown dim)."""
        return self.prove_eq(a, b) is True

    def one(self, d: Dim | None) -> bool:
        """`d == 1` is proved."""
        return self.eq(d, 1)

    # ---- the steps -------------------------------------------------------------------------
    def _prove_eq(self, a: Dim, b: Dim) -> bool | None:
        diff = _expanded(sympy.sympify(a) - sympy.sympify(b))
        if diff == 0:
            return True
        lo, hi = self.table.bounds(diff, self._iv)
        if lo == hi == 0:  # e.g. a symbol whose range is [1, 1]
            return True
        if lo > 0 or hi < 0:
            return False
        if self.le(a, b) and self.le(b, a):
            return True
        if not diff.is_polynomial(*diff.free_symbols):  # floor, Mod, Max...: ask sympy
            verdict = self._one_symbol_zeros(diff)
            if verdict is not None:
                return verdict
            if _signs_differ(diff, self.table):
                # of two signs (0 counted as one) at two points in range: neither identically 0
                # nor of one sign, so no step below could answer True or False, and simplify
                # takes a tenth of a second and more on a conv net's nested floors
                return None
            diff = _simplified(diff)
            if diff == 0:
                return True
            lo, hi = self.table.bounds(diff, self._iv)
            if lo > 0 or hi < 0 or diff.is_Number:
                return False
            if lo == hi == 0:
                return True
        return None

    def _one_symbol_zeros(self, diff: sympy.Expr) -> bool | None:
        """`_prove_eq`'s answer for a difference of one symbol decided on one period of its
        floors (`periodic.zero_count`): True where it is 0 at every value in range, False
        where at none, else None (also where that cannot tell)."""
        syms = diff.free_symbols
        if len(syms) != 1:
            return None
        (s,) = syms
        assert isinstance(s, sympy.Symbol)  # the only free symbols a Dim holds
        info = self.table.infos.get(s.name)
        lo, hi, k = (info.lo, info.hi, info.multiple_of) if info is not None else (1, INT_MAX, 1)
        return {"all": True, "none": False}.get(zero_count(diff, s, lo, hi, k) or "")

    def _le_interval(self, x: Dim, y: Dim) -> bool:
        """The interval of `y - x` starts at 0 or above. The difference is never built as a
        sympy sum (flattening and sorting two sums of nested floors took most of a conv
        net's memory planning): the terms of both sides are cancelled as sympy's Add would
        cancel them, and the intervals of the terms left are summed. Memoised per pair
        (`le` asks it of a Max-free pair, then `_poly_le` of the same pair again)."""
        sx, sy = sympy.sympify(x), sympy.sympify(y)
        hit = self._li.get((sx, sy))
        if hit is None:
            hit = self._li[(sx, sy)] = self._difference_nonneg(sx, sy)
        return hit

    def _difference_nonneg(self, x: sympy.Expr, y: sympy.Expr) -> bool:
        tx, hix, okx = self._sum_bounds(x, upper=True)
        ty, loy, oky = self._sum_bounds(y, upper=False)
        if not (okx and oky):  # a term without bounds: only the terms left after cancelling
            return self._difference_nonneg_whole(x, y)
        # each side's bound summed once per side (memoised), corrected for the terms both
        # hold: the same exact sum as over the cancelled terms, in the time of the shared
        # terms (a placement compares each end with dozens of offsets of hundreds of terms)
        lo: Any = loy - hix
        if len(tx) <= len(ty):
            shared = ((m, cx, ty[m]) for m, cx in tx.items() if m in ty)
        else:
            shared = ((m, tx[m], cy) for m, cy in ty.items() if m in tx)
        for m, cx, cy in shared:
            if cx and cy:
                ml, mh = _interval(m, self.table, self._iv)
                c = cy - cx
                lo += (c * (ml if c > 0 else mh)) - cy * (ml if cy > 0 else mh) + cx * (mh if cx > 0 else ml)
        return bool(lo >= 0)

    def _sum_bounds(self, e: sympy.Expr, upper: bool) -> tuple[dict, Any, bool]:
        """`e`'s terms {term: coefficient} and the lower (or upper) end of the interval of
        their sum, term by term; False where a term has no bound (or a term repeats)."""
        hit = self._sb.get((e, upper))
        if hit is None:
            pairs = _sum_terms(e)
            terms = dict(pairs)
            end: Any = 0
            ok = len(terms) == len(pairs)
            try:
                for m, c in terms.items():
                    if c:
                        ml, mh = _interval(m, self.table, self._iv)
                        end += c * ((mh if c > 0 else ml) if upper else (ml if c > 0 else mh))
            except _NoBound:
                ok = False
            hit = self._sb[(e, upper)] = (terms, end, ok)
        return hit

    def _difference_nonneg_whole(self, x: sympy.Expr, y: sympy.Expr) -> bool:
        diff = dict(_sum_terms(y))
        for m, c in _sum_terms(x):
            diff[m] = diff.get(m, 0) - c
        lo: Any = 0
        try:
            for m, c in diff.items():
                if c:
                    ml, mh = _interval(m, self.table, self._iv)
                    lo += c * (ml if c > 0 else mh)
        except _NoBound:
            return False
        return bool(lo >= 0)

    def _poly_le(self, x: sympy.Expr, y: sympy.Expr) -> bool:
        d, bounded = _difference(x, y)
        if d is not None:  # a number
            return bool(d >= 0)
        if bounded is not None and self._nonneg(bounded):
            return True
        return self._le_interval(x, y)

    def _nonneg(self, d: sympy.Expr) -> bool:
        hit = self._nn.get(d)
        if hit is None:
            lows = []
            syms: list[Any] = sorted(d.free_symbols, key=str)
            for s in syms:
                info = self.table.infos.get(s.name)
                lows.append((s, info.lo if info is not None else 1))
            hit = self._nn[d] = _nonneg_shifted(d, tuple(lows))
        return hit


# The symbolic steps of a proof that do not depend on the symbols' ranges are memoised
# across provers: the memory planner asks the same pairs again under every range it tries
# (one prover each), and expanding sums of nested floors is most of a conv net's planning.


@functools.lru_cache(maxsize=1 << 14)
def _expanded(e: sympy.Expr) -> sympy.Expr:
    """`sympy.expand(e)`, the same expression, built faster: each floor / ceiling / Max /
    Min is expanded once (`_expanded_floor`, memoised: a conv net's sizes repeat the same
    nested floor chains in every buffer) and held as a plain symbol while the polynomial
    around it expands. sympy's own deep expansion rebuilds every floor it passes through
    (its `eval` runs again, milliseconds each), in every expression: most of a MobileNet's
    memory planning; and every Max, whose `eval` compares each pair of its arguments
    (`factor_terms` on their differences): a stacked offset of an Inception's plan, a Max of
    sums of nested floors, took minutes to expand. A Max / Min keeps its (expanded)
    arguments unevaluated: the same value, maybe a few arguments sympy would have dropped."""
    # multiplied out on dicts (`poly_terms`: a detection net's offsets, sums of products of
    # nested-floor extents, took sympy's expand 25 CPU seconds), sympy's expand for the rest
    terms = _held_terms(e)
    if terms is not None:
        return build_terms(terms)
    floors = _outer_floors(e)
    if not floors:
        return sympy.expand(e)
    inner: Any = e.xreplace({a: _expanded_floor(a) for a in floors})
    # the floors now have expanded arguments (nothing below them changes any more)
    held = {a: sympy.Dummy() for a in _outer_floors(inner)}
    out: Any = sympy.expand(inner.xreplace(held))
    return out.xreplace({d: a for a, d in held.items()})


@functools.lru_cache(maxsize=1 << 14)
def _held_terms(e: sympy.Expr) -> dict | None:
    """`_expanded(e)` as `poly_terms` gives it, {monomial: coefficient}, before sympy sums
    it (sorting a sum's terms was half of what was left of a detection net's expansions);
    None where `poly_terms` leaves it to sympy."""
    if e.is_Add:
        # term by term, each memoised: a plan's ends and offsets are sums that share most of
        # their terms (each end is an offset plus a size), and rebuilding every sum whole
        # (xreplace) to multiply it out again was half of a detection net's proofs. A sum's
        # terms multiplied out and added are the sum multiplied out: the same canonical dict
        out: dict = {}
        for a in e.args:
            part = _held_term(a)
            if part is None:  # left to sympy, or cancelling only once rebuilt whole
                return _held_whole(e)
            add_terms(out, part)
        return out
    return _held_whole(e)


@functools.lru_cache(maxsize=1 << 16)
def _held_term(e: sympy.Expr) -> dict | None:
    return _held_whole(e)


def _held_whole(e: sympy.Expr) -> dict | None:
    # only the floors whose arguments expand to something else (xreplace walks the whole
    # tree even when every entry maps a floor to itself)
    moved = {a: x for a in _outer_floors(e) if (x := _expanded_floor(a)) is not a}
    return poly_terms(e.xreplace(moved) if moved else e)


_HELD = (sympy.floor, sympy.ceiling, sympy.Max, sympy.Min)
"""what `_expanded` holds as an atom while the polynomial around it expands"""


@functools.lru_cache(maxsize=1 << 14)
def _expanded_floor(a: sympy.Expr) -> sympy.Expr:
    """A floor / ceiling with its argument expanded, as sympy's deep expansion rebuilds it
    (its `eval` may pull integer terms out: ceiling(x + 3) is ceiling(x) + 3); a Max / Min
    with its arguments expanded, not evaluated again (see `_expanded`)."""
    args = tuple(_expanded(x) for x in a.args)
    if args == a.args:
        return a
    if isinstance(a, (sympy.Max, sympy.Min)):
        return unevaluated(a.func, args)
    if isinstance(a, sympy.floor):
        return floor_of(args[0])
    if isinstance(a, sympy.ceiling):
        return ceiling_of(args[0])
    return a.func(*args)


def _outer_floors(e: sympy.Expr) -> set[Any]:
    """The floors, ceilings, Maxes and Mins of `e` that no other one contains."""
    out: set[Any] = set()
    todo: list[Any] = [e]
    while todo:
        x = todo.pop()
        if isinstance(x, _HELD):
            out.add(x)
        else:
            todo.extend(x.args)
    return out


@functools.lru_cache(maxsize=1 << 16)
def _difference(x: sympy.Expr, y: sympy.Expr) -> tuple[sympy.Expr | None, sympy.Expr | None]:
    """`y - x` expanded when it is a number (else None), and `y - x` with its floors and
    ceilings bounded (`_bound_atoms`; None when it cannot be). Each side is expanded once
    (`_expanded`) and split into its terms once (`_terms`); the difference is taken on
    those (a placement compares each of a few dozen offsets with every other: expanding
    every pair's difference anew was most of a conv net's planning, mobilenet's 7.8 CPU
    seconds -> 1.7, and building it as a sympy sum most of what was left). A term holding
    two floors (nested ones: a strided conv's size) cannot be bounded, so a difference with
    one is answered before it is built."""
    ty, tx = _number_terms(y), _number_terms(x)
    if ty is None or tx is None:  # a coefficient that is no rational: in sympy's numbers
        ty, tx = _terms(y), _terms(x)
    elif _nested_terms(y) != _nested_terms(x):
        # a term of two floors or more that the other side does not cancel: known before
        # the difference is built (most pairs a placement asks about, of hundreds of terms)
        return None, None
    diff = dict(ty)
    for m, c in tx.items():
        v = diff.get(m, 0) - c
        if v == 0:
            diff.pop(m, None)
        else:
            diff[m] = v
    if all(m == 1 for m in diff):
        return sympy.sympify(_sympy_number(sum(diff.values(), 0))), None
    if any(_floor_count(m) > 1 for m in diff):
        return None, None
    return None, _bound_atoms(sympy.Add(*(_sympy_number(c) * m for m, c in diff.items())))


@functools.lru_cache(maxsize=1 << 14)
def _sum_terms(e: sympy.Expr) -> tuple[tuple[Any, Any], ...]:
    """`e` as the terms of its sum, each (the term without its number, that number as an
    int or Fraction), unexpanded: what sympy's Add collects like terms by."""
    out: list[tuple[Any, Any]] = []
    for t in sympy.Add.make_args(e):
        c, m = cast(Any, t.as_coeff_Mul())
        if c.is_Integer:
            k: Any = int(c)
        elif c.is_Rational:
            k = Fraction(int(c.p), int(c.q))
        else:  # a float or an infinity: the whole term, coefficient 1
            m, k = t, 1
        out.append((_one_object(m), k))
    return tuple(out)


_OBJECTS: dict = {}
"""one object per distinct term (`_one_object`)"""


def _one_object(m: Any) -> Any:
    """The one object equal to `m` that the proof steps key their dicts with: two sides'
    terms are built apart, and a dict lookup of an equal but distinct key compares the two
    trees node by node (a detection net's plan compared nested floors 1.4 million times),
    while the same object stops at identity. Bounded: emptied when it grows large."""
    if len(_OBJECTS) > 1 << 16:
        _OBJECTS.clear()
    return _OBJECTS.setdefault(m, m)


@functools.lru_cache(maxsize=1 << 14)
def _terms(e: sympy.Expr) -> dict:
    """`e` expanded, as {monomial: its numeric coefficient} (the constant under key 1)."""
    held = _held_terms(e)
    if held is not None:  # what the sum's `as_coefficients_dict` gives, without the sum
        if not held:
            return {sympy.S.One: sympy.S.Zero}  # as 0's `as_coefficients_dict`
        return {_monomial(m): c for m, c in held.items()}
    return dict(_expanded(e).as_coefficients_dict())


@functools.lru_cache(maxsize=1 << 16)
def _monomial(m: frozenset) -> Any:
    """`monomial(m)` as its one object (`_one_object`), built once per monomial: the plan's
    sums repeat the same products of floors in hundreds of ends."""
    return _one_object(monomial(m))


@functools.lru_cache(maxsize=1 << 14)
def _number_terms(e: sympy.Expr) -> dict | None:
    """`_terms(e)` with Python ints / Fractions as coefficients (None where one is not
    rational): `_difference` subtracts hundreds of coefficients per pair, and sympy's number
    arithmetic (its dispatch) was a third of that."""
    out: dict = {}
    for m, c in _terms(e).items():
        if not getattr(c, "is_Rational", False):
            return None
        out[m] = int(c.p) if c.q == 1 else Fraction(int(c.p), int(c.q))
    return out


def _sympy_number(v: Any) -> Any:
    """An int / Fraction as sympy's number (a sympy number as it is)."""
    if isinstance(v, int):
        return sympy.Integer(v)
    if isinstance(v, Fraction):
        return sympy.Rational(v.numerator, v.denominator)
    return v


@functools.lru_cache(maxsize=1 << 14)
def _nested_terms(e: sympy.Expr) -> dict:
    """The terms of `_number_terms(e)` (rational coefficients) that hold two floors or more."""
    return {m: c for m, c in (_number_terms(e) or {}).items() if _floor_count(m) > 1}


@functools.lru_cache(maxsize=1 << 14)
def _floor_count(m: sympy.Expr) -> int:
    """How many distinct floors and ceilings `m` holds, counted up to 2 (the callers ask
    whether there is more than one). Each distinct subtree is visited once: sympy's `atoms`
    walks every occurrence, and a stacked offset repeats the same nested floors hundreds of
    times."""
    seen: set[Any] = set()
    found: set[Any] = set()
    todo: list[Any] = [m]
    while todo:
        x = todo.pop()
        if x in seen:
            continue
        seen.add(x)
        if isinstance(x, (sympy.floor, sympy.ceiling)):
            found.add(x)
            if len(found) > 1:
                return 2
        todo.extend(x.args)
    return len(found)


@functools.lru_cache(maxsize=1 << 14)
def _nonneg_shifted(d: sympy.Expr, lows: tuple) -> bool:
    """`d` is a polynomial whose coefficients are all nonnegative once each symbol s is
    replaced by s + (its lower bound); `lows` pairs each symbol with that bound."""
    if not d.is_polynomial(*(s for s, _ in lows)):
        return False
    if all(lo >= 0 for _, lo in lows) and _nonneg_coeffs(d):
        # every monomial is >= 0 already: the shift only adds terms of the same sign (and
        # expanding a shifted polynomial of a dozen terms costs milliseconds)
        return True
    coeffs = _shifted_coeffs(d, lows)
    if coeffs is not None:
        return all(c >= 0 for c in coeffs)
    e = sympy.expand(d.xreplace({s: s + lo for s, lo in lows}))
    return all(c >= 0 for c in e.as_coefficients_dict().values())


def _shifted_coeffs(d: sympy.Expr, lows: tuple) -> list | None:
    """The coefficients of the sum of monomials `d` with each symbol s replaced by s + lo,
    expanded by the binomial theorem on exponent tuples (sympy's `expand` of the shifted
    tree took a millisecond and more per difference: a BERT's memory planning asks
    thousands); None when `d` is not such a sum with rational coefficients."""
    pos = {s: i for i, (s, _) in enumerate(lows)}
    out: dict[tuple, Any] = {}
    for m, c in cast(dict[Any, Any], d.as_coefficients_dict()).items():
        if not c.is_Rational:
            return None
        terms: dict[tuple, Any] = {(0,) * len(lows): Fraction(int(c.p), int(c.q))}
        for f in sympy.Mul.make_args(m):
            if f == 1:
                continue
            base, k = f.as_base_exp()
            if base not in pos or not k.is_Integer or k < 1:
                return None
            i, lo, k = pos[base], lows[pos[base]][1], int(k)
            # (s + lo)**k = sum over j of C(k, j) lo**(k - j) s**j
            nxt: dict[tuple, Any] = {}
            for e, v in terms.items():
                for j in range(k + 1):
                    key = e[:i] + (e[i] + j,) + e[i + 1:]
                    nxt[key] = nxt.get(key, 0) + v * math.comb(k, j) * lo ** (k - j)
            terms = nxt
        for e, v in terms.items():
            out[e] = out.get(e, 0) + v
    return list(out.values())


def _nonneg_coeffs(d: sympy.Expr) -> bool:
    """`d` is a sum of monomials (products of symbols' positive integer powers) with
    numeric coefficients >= 0 (an unexpanded factor such as `(a - b)*c` answers False)."""
    for m, c in d.as_coefficients_dict().items():
        if not (getattr(c, "is_Number", False) and c >= 0):
            return False
        for f in sympy.Mul.make_args(m):
            base, k = f.as_base_exp()
            if not (base.is_Symbol and k.is_Integer and k > 0) and f != 1:
                return False
    return True


_SAMPLES = (0, 1, 2, 3, 5, 8, 13, 64, 100, 1000, 12345)
"""values each symbol takes (lifted into its range) where `_signs_differ` evaluates a difference"""


def _signs_differ(d: sympy.Expr, table: SymbolTable) -> bool:
    """`d` has different signs (-1, 0, 1) at two points of the symbols' ranges (with their
    divisibility). A few points: every symbol at the same sample, or at samples shifted by
    its position."""
    syms: list[Any] = sorted(d.free_symbols, key=str)
    seen: set[int] = set()
    for shift in range(3):
        for j in range(len(_SAMPLES)):
            point = {}
            for i, s in enumerate(syms):
                info = table.infos.get(s.name)
                lo, hi, k = (info.lo, info.hi, info.multiple_of) if info is not None else (1, INT_MAX, 1)
                v = max(lo, _SAMPLES[(j + i * shift) % len(_SAMPLES)])
                v = -(-v // k) * k if k > 1 else v
                if v > hi:
                    break
                point[s] = sympy.Integer(v)
            else:
                val: Any = d.xreplace(point)
                if val.is_Rational:  # a finite number (not nan or zoo: a division by 0)
                    seen.add(1 if val > 0 else -1 if val < 0 else 0)
                    if len(seen) > 1:
                        return True
        if len(syms) <= 1:
            break
    return False


def _bound_atoms(d: sympy.Expr) -> sympy.Expr | None:
    """`d` with each ceiling / floor replaced by the bound that can only make it smaller."""
    if not d.has(sympy.ceiling, sympy.floor):
        return d
    out: list[sympy.Expr] = []
    for term in sympy.Add.make_args(d):
        # one walk of the term (not one `has` per atom of the whole difference per term)
        at = term.atoms(sympy.ceiling, sympy.floor)
        if not at:
            out.append(term)
            continue
        if len(at) > 1:
            return None
        (a,) = at
        # an expanded term is a product: its factors but `a` are the coefficient (cancel's
        # answer, without its polynomial algebra); anything else goes through cancel
        factors = sympy.Mul.make_args(term)
        c = sympy.Mul(*(f for f in factors if f != a)) if factors.count(a) == 1 else sympy.cancel(term / a)
        if c.has(a):
            return None
        sign = _sign(c)
        if sign is None:
            return None
        q = a.args[0]
        slack = _ceil_slack(q)
        lo, hi = (q, q + slack) if isinstance(a, sympy.ceiling) else (q - slack, q)
        out.append(c * (lo if sign >= 0 else hi))
    return _expanded(sympy.Add(*out))


def max_alternatives(d: Any) -> list[Any]:
    """Max-free expressions whose maximum is `d` (sums distributed over Max)."""
    return list(_max_alternatives(sympy.sympify(d)))


MAX_ALTERNATIVES = 64
"""a sum whose Maxes would distribute into more alternatives than this is kept whole"""


@functools.lru_cache(maxsize=1 << 14)
def _max_alternatives(e: Any) -> tuple[Any, ...]:
    # memoised, and a product of alternatives too big is refused before it is built: an
    # Inception's stacked offsets (Max of sums of Maxes) built hundreds of thousands of sums
    # per question, most thrown away past the limit
    if isinstance(e, sympy.Max):
        return tuple(x for a in e.args for x in _max_alternatives(a))
    if e.is_Add and _has_max(e):
        # the terms of each alternative collected first, each sum built once: adding them one
        # at a time flattened and sorted every partial sum again (a detection net's stacked
        # offsets: sums of hundreds of terms, most of the planner's time in sympy's Add)
        out: list[list[Any]] = [[]]
        for a in e.args:
            alts = _max_alternatives(a)
            if len(out) * len(alts) > MAX_ALTERNATIVES:
                return (e,)
            out = [[*x, y] for x in out for y in alts]
        return tuple(sympy.Add(*x) for x in out)
    if e.is_Mul and _has_max(e):
        coeff, rest = e.as_coeff_Mul()
        if coeff > 0 and isinstance(rest, sympy.Max):
            return tuple(coeff * x for x in _max_alternatives(rest))
    return (e,)


@functools.lru_cache(maxsize=1 << 16)
def _has_max(e: Any) -> bool:
    """`e.has(sympy.Max)`, memoised per subtree: sympy's `has` walks the whole tree each time,
    and the planner's sums share their nested floors (a detection net's plan asked it of
    thousands of sums of hundreds of terms, most of them with no Max)."""
    return isinstance(e, sympy.Max) or any(_has_max(a) for a in e.args)


def unevaluated(func: Any, args: Any) -> Any:
    """`func(*args)` for Max or Min, not evaluated, its arguments in the order of
    `_stable_key`: the same arguments give the same (equal) expression in any order they
    come, in every run. sympy's unevaluated form orders them canonically by counting the
    nodes of every argument and comparing their sort keys (tens of thousands of nodes in a
    conv net's stacked offsets; seconds per Max). One argument: itself."""
    args = tuple(sorted((sympy.sympify(a) for a in dict.fromkeys(args)), key=_stable_key))
    if len(args) == 1:
        return args[0]
    obj: Any = sympy.Expr.__new__(func, *args)
    obj._argset = frozenset(args)
    return obj


@functools.lru_cache(maxsize=1 << 16)
def _stable_key(e: Any) -> int:
    """A fingerprint of `e`'s structure that is the same in every process (sympy's hashes
    change with PYTHONHASHSEED): only an order for `unevaluated`'s arguments."""
    if e.is_Symbol:
        text = e.name
    elif e.is_Number:
        text = str(e)
    else:
        text = type(e).__name__ + repr(tuple(_stable_key(a) for a in e.args))
    return zlib.crc32(text.encode())


def _ceil_slack(q: sympy.Expr) -> sympy.Expr:
    """How much ceiling(q) can exceed q: (d - 1) / d when q is an integer polynomial over
    the integer d, else (up to) 1."""
    num, den = sympy.fraction(sympy.together(q))
    if den.is_Integer and int(den) > 0:
        coeffs = sympy.expand(num).as_coefficients_dict().values()
        if all(getattr(k, "is_Integer", False) for k in coeffs):
            return sympy.Rational(int(den) - 1, int(den))
    return sympy.Integer(1)


def _sign(c: sympy.Expr) -> int | None:
    """+1 / -1 when a polynomial in positive symbols is provably >= 0 / <= 0."""
    c = _expanded(c)
    if c.is_Number:
        return 1 if c >= 0 else -1
    coeffs = list(c.as_coefficients_dict().values())
    if not all(getattr(k, "is_Number", False) for k in coeffs):
        return None
    if all(k >= 0 for k in coeffs):
        return 1
    if all(k <= 0 for k in coeffs):
        return -1
    return None


def _interval(e: Any, table: SymbolTable, memo: dict) -> tuple:
    """Interval arithmetic over Add/Mul/floor/ceiling/Max/Min/Mod with symbol ranges, by the
    rules of `intervals.py` (which the backend's bounds of the lowered dims share).

    The ends are Python ints and Fractions, exact like sympy's numbers but without their
    dispatch, and each subexpression's interval is kept in `memo`: the memory planner asks
    for thousands of intervals of sums of the same nested floors."""
    hit = memo.get(e)
    if hit is None:
        hit = memo[e] = _interval_of(e, table, memo)
    return hit


def _interval_of(e: Any, table: SymbolTable, memo: dict) -> tuple:
    if e.is_Integer:
        return int(e), int(e)
    if e.is_Rational:
        return intervals.point(Fraction(int(e.p), int(e.q)))
    if e.is_Symbol:
        info = table.infos.get(e.name)
        if info is None:
            return 1, INT_MAX
        return info.lo, info.hi
    if e.is_Add:
        iv: Any = (0, 0)
        for a in e.args:
            iv = intervals.add(iv, _interval(a, table, memo))
        return iv
    if e.is_Mul:
        iv = (1, 1)
        for a in e.args:
            iv = intervals.mul(iv, _interval(a, table, memo))
        return iv
    bounded: Any = None
    if e.is_Pow and e.exp.is_Integer and e.exp > 0:
        bounded = intervals.power(_interval(e.base, table, memo), int(e.exp))
    elif isinstance(e, sympy.floor):
        bounded = intervals.floor(_interval(e.args[0], table, memo))
    elif isinstance(e, sympy.ceiling):
        bounded = intervals.ceiling(_interval(e.args[0], table, memo))
    elif isinstance(e, sympy.Max):
        bounded = intervals.maximum(_interval(a, table, memo) for a in e.args)
    elif isinstance(e, sympy.Min):
        bounded = intervals.minimum(_interval(a, table, memo) for a in e.args)
    elif isinstance(e, sympy.Mod):
        bounded = intervals.floor_mod(_interval(e.args[1], table, memo))
    if bounded is None:
        raise _NoBound
    return bounded


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
