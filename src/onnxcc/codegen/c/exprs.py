"""Render sympy dims and guards to C (and, through the IR's printer, to text for people).

Integer expressions become int64_t arithmetic. Division never goes through floating point:
`floor(p/q)` and `ceiling(p/q)` become calls to exact integer helpers, `Mod` keeps Python's
sign rule (the result has the divisor's sign, as sympy defines it), and a sum with rational
coefficients (`seq/2 + 1/2`) is brought over one denominator first. `C_HELPERS` defines the
helpers; every C file using rendered expressions must include it once.

    >>> from onnxcc.ir import sym
    >>> import sympy
    >>> c_int(sympy.floor((sym("H") - 1) / 2) + 1, {"H": "s[0]"})
    '(onnxcc_floordiv((s[0] - 1), 2) + 1)'
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping

import sympy

from onnxcc.ir import print_expr

# NOTE: division by zero yields 0 instead of trapping; the dispatcher checks symbol ranges
# before it evaluates anything that divides, so a 0 here means a range of [0, ...].
C_HELPERS = r"""
static inline int64_t onnxcc_floordiv(int64_t a, int64_t b) {
  if (b == 0) return 0;
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) q -= 1;
  return q;
}
static inline int64_t onnxcc_ceildiv(int64_t a, int64_t b) {
  if (b == 0) return 0;
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) == (b < 0))) q += 1;
  return q;
}
static inline int64_t onnxcc_mod(int64_t a, int64_t b) {
  if (b == 0) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}
static inline int64_t onnxcc_max(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t onnxcc_min(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t onnxcc_abs(int64_t a) { return a < 0 ? -a : a; }
/* checked forms (c_int_checked): set *o instead of wrapping */
static inline int64_t onnxcc_add_ck(int64_t a, int64_t b, int *o) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) *o = 1;
  return r;
}
static inline int64_t onnxcc_sub_ck(int64_t a, int64_t b, int *o) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) *o = 1;
  return r;
}
static inline int64_t onnxcc_mul_ck(int64_t a, int64_t b, int *o) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) *o = 1;
  return r;
}
"""

MAX_POW = 8  # x**k is unrolled into k multiplications; bigger exponents are not dims

_REL_OPS = {"==": "==", "!=": "!=", "<=": "<=", "<": "<", ">=": ">=", ">": ">"}


class UnsupportedExpr(ValueError):
    """A sympy construct with no C rendering (e.g. a float, a big power)."""


Names = Mapping[str, str] | Callable[[str], str]


def c_int(expr, names: Names) -> str:
    """C int64_t expression for an integer-valued sympy expression.

    `names` maps a symbol name to the C expression holding its value.
    """
    return _IntRenderer(names).render(expr)


def c_int_checked(expr, names: Names, flag: str) -> str:
    """c_int with every sum, difference and product checked: on int64 overflow the C
    expression sets the int `flag` (a variable the caller declares, 0 before) to 1."""
    return _IntRenderer(names, flag).render(expr)


def c_int_checked_lets(expr, names: Names, flag: str, prefix: str) -> tuple[list[str], str]:
    """c_int_checked as C statements: each distinct subexpression is computed once, into an
    `int64_t PREFIXk` local (the statements, in order), and the result is the last one's
    name (or a literal / symbol). A MobileNet's workspace size repeats each nested floor
    chain dozens of times: one 16 KB expression took gcc half a second at -O2, its locals a
    tenth of that. The same operations are checked as in the nested form; a Piecewise
    becomes an if / else-if chain whose branches compute their own piece's locals (only the
    chosen piece is evaluated, so a piece that would overflow where it is not chosen raises
    no flag), reusing locals already computed; conditions stay inline. The statements of a
    branch are indented lines of the list, between `if (...) {` and `}` lines."""
    r = _LetRenderer(names, flag, prefix)
    result = r.render(expr)
    return r.lets, result


def c_bool(expr, names: Names) -> str:
    """C int (0/1) expression for a sympy boolean or relational."""
    return _IntRenderer(names).boolean(expr)


class _IntRenderer:
    def __init__(self, names: Names, flag: str | None = None):
        self._names = names
        self._flag = flag  # checked arithmetic: the overflow flag's C name

    def _op(self, op: str, a: str, b: str) -> str:
        if self._flag is None:
            return f"({a} {op} {b})"
        fn = {"+": "onnxcc_add_ck", "-": "onnxcc_sub_ck", "*": "onnxcc_mul_ck"}[op]
        return f"{fn}({a}, {b}, &{self._flag})"

    def _chain(self, op: str, parts: list[str]) -> str:
        if self._flag is None:
            return "(" + f" {op} ".join(parts) + ")"
        out = parts[0]
        for p in parts[1:]:
            out = self._op(op, out, p)
        return out

    def name(self, s: sympy.Symbol) -> str:
        if callable(self._names):
            return self._names(s.name)
        try:
            return self._names[s.name]
        except KeyError:
            raise UnsupportedExpr(f"symbol {s.name} has no C name") from None

    def render(self, e) -> str:
        if isinstance(e, bool):
            return "1" if e else "0"
        if isinstance(e, int):
            return _lit(e)
        e = sympy.sympify(e)
        if e.is_Integer:
            return _lit(int(e))
        if e.is_Symbol:
            return self.name(e)
        if e.is_Add or e.is_Mul or e.is_Pow or e.is_Rational:
            num, den = _fraction(e)
            if den != 1:
                # An integer-valued expression over one denominator (e.g. s**2/2 + s/2):
                # floor division is exact there and stays deterministic otherwise.
                return f"onnxcc_floordiv({self.render(num)}, {self.render(den)})"
            if e.is_Add:
                return self._add(e)
            if e.is_Mul:
                return self._chain("*", [self.render(a) for a in e.args])
            return self._pow(e)
        if isinstance(e, (sympy.floor, sympy.ceiling)):
            num, den = _fraction(e.args[0], whole=True)
            helper = "onnxcc_floordiv" if isinstance(e, sympy.floor) else "onnxcc_ceildiv"
            if den == 1:
                return self.render(num)
            return f"{helper}({self.render(num)}, {self.render(den)})"
        if isinstance(e, sympy.Mod):
            a, b = e.args
            for x in (a, b):
                if _fraction(x)[1] != 1:
                    raise UnsupportedExpr(f"Mod of a non-integer expression: {e}")
            return f"onnxcc_mod({self.render(a)}, {self.render(b)})"
        if isinstance(e, (sympy.Max, sympy.Min)):
            fn = "onnxcc_max" if isinstance(e, sympy.Max) else "onnxcc_min"
            args = [self.render(a) for a in e.args]
            out = args[-1]
            for a in reversed(args[:-1]):
                out = f"{fn}({a}, {out})"
            return out
        if isinstance(e, sympy.Abs):
            return f"onnxcc_abs({self.render(e.args[0])})"
        if isinstance(e, sympy.Piecewise):  # per-range memory plans
            *pieces, (last, cond) = e.args
            if cond is not sympy.true:
                raise UnsupportedExpr(f"Piecewise without a final True piece: {e}")
            out = self.render(last)
            for value, c in reversed(pieces):
                out = f"({self.boolean(c)} ? {self.render(value)} : {out})"
            return out
        raise UnsupportedExpr(f"cannot render {type(e).__name__} expression {e} as a C integer")

    def _add(self, e: sympy.Add) -> str:
        terms = list(e.as_ordered_terms())
        if self._flag is not None:
            out = self.render(terms[0])
            for t in terms[1:]:
                neg = t.as_coeff_Mul()[0].is_negative
                out = self._op("-" if neg else "+", out, self.render(-t if neg else t))
            return out
        out = self.render(terms[0])
        for t in terms[1:]:
            coeff, _ = t.as_coeff_Mul()
            if coeff.is_negative:
                out += f" - {self.render(-t)}"
            else:
                out += f" + {self.render(t)}"
        return f"({out})"

    def _pow(self, e: sympy.Pow) -> str:
        base, exp = e.args
        if not (exp.is_Integer and 0 <= int(exp) <= MAX_POW):
            raise UnsupportedExpr(f"power {e}: only small non-negative integer exponents are supported")
        if int(exp) == 0:
            return "1"
        b = self.render(base)
        return self._chain("*", [b] * int(exp))

    def boolean(self, e) -> str:
        if isinstance(e, bool) or e is sympy.true or e is sympy.false:
            return "1" if bool(e) else "0"
        if isinstance(e, sympy.And):
            return "(" + " && ".join(self.boolean(a) for a in e.args) + ")"
        if isinstance(e, sympy.Or):
            return "(" + " || ".join(self.boolean(a) for a in e.args) + ")"
        if isinstance(e, sympy.Not):
            return f"(!{self.boolean(e.args[0])})"
        if isinstance(e, sympy.core.relational.Relational):
            return self._relational(e)
        raise UnsupportedExpr(f"cannot render {type(e).__name__} {e} as a C condition")

    def _relational(self, e) -> str:
        op = e.rel_op
        if op not in _REL_OPS:
            raise UnsupportedExpr(f"relational {e}")
        lhs, rhs = e.lhs, e.rhs
        if _is_integral(lhs) and _is_integral(rhs):
            return f"({self.render(lhs)} {op} {self.render(rhs)})"
        # Rational sides (seq/2 <= 4): compare the numerator of lhs - rhs with 0, which is
        # exact when the denominator is positive (or for ==, != when it is nonzero).
        num, den = sympy.fraction(sympy.together(lhs - rhs))
        if op in ("==", "!=") or den.is_positive:
            return f"({self.render(num)} {op} 0)"
        raise UnsupportedExpr(f"relational {e}: cannot clear a denominator of unknown sign")


class _LetRenderer(_IntRenderer):
    def __init__(self, names: Names, flag: str, prefix: str):
        super().__init__(names, flag)
        self.prefix = prefix
        self.lets: list[str] = []
        self._memo: dict = {}
        self._count = 0  # locals named so far (branches' lets are in lists of their own)
        self._inline = 0  # > 0 inside a condition: nothing new is hoisted

    def _local(self) -> str:
        self._count += 1
        return f"{self.prefix}{self._count - 1}"

    def render(self, e) -> str:
        if isinstance(e, (bool, int)):
            return super().render(e)
        e = sympy.sympify(e)
        if e.is_Atom:
            return super().render(e)
        hit = self._memo.get(e)
        if hit is not None:
            return hit
        if isinstance(e, sympy.Piecewise) and not self._inline:
            return self._branches(e)
        out = super().render(e)
        if self._inline:
            return out
        name = self._local()
        self.lets.append(f"int64_t {name} = {out};")
        self._memo[e] = name
        return name

    def boolean(self, e) -> str:
        # a condition's parts are evaluated only when the conditions before it fail: inline
        self._inline += 1
        try:
            return super().boolean(e)
        finally:
            self._inline -= 1

    def _branches(self, e: sympy.Piecewise) -> str:
        """A Piecewise as an if / else-if chain into one local: each piece's subexpressions
        become locals inside its own branch, so only the chosen piece is evaluated (a piece
        that would overflow where it is not chosen raises no flag) and each is still computed
        once (an Inception's per-range workspace inline was one 280 KB C expression: seconds
        of the C compiler)."""
        *pieces, (last, cond) = e.args
        if cond is not sympy.true:
            raise UnsupportedExpr(f"Piecewise without a final True piece: {e}")
        name = self._local()
        self.lets.append(f"int64_t {name};")
        arms = [(self.boolean(c), v) for v, c in pieces] + [(None, last)]
        for k, (c, value) in enumerate(arms):
            outer, memo = self.lets, self._memo
            self.lets, self._memo = [], dict(memo)  # the branch sees the locals above it
            try:
                v = self.render(value)
                inner = self.lets
            finally:
                self.lets, self._memo = outer, memo
            head = "} else {" if c is None else (f"if ({c}) {{" if k == 0 else f"}} else if ({c}) {{")
            self.lets += [head, *(f"  {x}" for x in inner), f"  {name} = {v};"]
        self.lets.append("}")
        self._memo[e] = name
        return name


def _is_integral(e) -> bool:
    """No denominator at the top level (floor(s/2) counts as integral, s/2 does not)."""
    return isinstance(e, int) or _fraction(sympy.sympify(e))[1] == 1


@functools.lru_cache(maxsize=1 << 14)
def _fraction(e, whole: bool = False) -> tuple:
    """`sympy.fraction(sympy.together(e))`, memoised, and without `together` where `e` has
    no denominator outside function calls (a sum of integer multiples of products of
    symbols and floors / Max...): `together` then only factors the sum, which on a
    MobileNet's workspace size (nested floors, a dozen terms per sum, 3000 sums) took most
    of the link step. Callers that render the numerator itself (`whole`) get `together`'s
    form whenever it is called, so their C text is what it was."""
    if not whole and _no_denominator(e):
        return e, sympy.Integer(1)
    return sympy.fraction(sympy.together(e))


def _no_denominator(e) -> bool:
    """No rational coefficient and no negative power in `e`'s sums, products and powers
    (function calls are atoms to `together`, which does not look inside them either)."""
    if e.is_Number:
        return bool(e.is_Integer)
    if e.is_Add or e.is_Mul:
        return all(_no_denominator(a) for a in e.args)
    if e.is_Pow:
        return bool(e.exp.is_Integer and e.exp >= 0) and _no_denominator(e.base)
    return e.is_Symbol or isinstance(e, sympy.core.function.Application)


def _lit(v: int) -> str:
    # Plain literals read best; ones outside int range need the int64 suffix. One outside
    # int64 (a constraint `N <= 2**64`) has no C literal: refused here, never wrapped.
    if not -(2**63) < v < 2**63:
        raise UnsupportedExpr(f"integer constant {v} does not fit in int64")
    if -(2**31) < v < 2**31:
        return f"({v})" if v < 0 else str(v)
    return f"INT64_C({v})"


@functools.lru_cache(maxsize=1 << 12, typed=True)
def text(expr) -> str:
    """Readable text of a dim or guard for messages and NAME.h: the IR's one printer
    (`seq + 1`, `batch % 8 == 0`, `16 < seq & seq <= 64`)."""
    return print_expr(expr)
