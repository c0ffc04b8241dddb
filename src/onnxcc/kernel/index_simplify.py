"""Integer divisions of index expressions folded with the ranges of the loop vars.

Fusing through a Reshape indexes the producer with `unflatten(flatten(...))` (fuse.py
`reshape_index`): a GroupNorm written as Reshape (N, C, H, W) -> (N, G, C/G*H*W) -> back reads
its input at `((i1*H + i2)*W + i3) // (2*H*W)` and so on, several divisions by run-time values
per element, which also keep the loop scalar (schedule.py `vectorizable`). Most of them are
identities over the vars' ranges:

    (G*Q + R) // G == Q   and   (G*Q + R) % G == R          when 0 <= R < G
    N // (k*G) == (N // G) // k,  N % (k*G) == ((N // G) % k) * G + N % G   (k, G > 0)

with Q's terms those whose coefficient G divides (as polynomials over the symbols) and R the
rest, its range proved with the symbols' ranges (`ir.dims.Prover`). `c*k*(x // k) + c*(x % k)`
folds back to `c*x`. A division nothing proves is kept as it is.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

import sympy

from ..ir.dims import Dim, Prover, canon, sym
from .expr import (
    I64,
    Binary,
    Const,
    Expr,
    Reduce,
    SymRef,
    Var,
    binary,
    dim_to_expr,
    free_vars,
    substitute,
    transform,
    walk,
)

Terms = dict  # atom (Expr, or None for the constant) -> sympy coefficient
Range = tuple  # (lo, hi) sympy expressions, or None when unknown


def _dim(e: Expr) -> Dim | None:
    """A var-free i64 expression as a Dim (None when it reads memory or is not integer math)."""
    if isinstance(e, Const):
        return int(e.value) if e.dtype.is_int else None
    if isinstance(e, SymRef):
        return sym(e.name)
    if isinstance(e, Binary) and e.dtype.is_int:
        a, b = _dim(e.a), _dim(e.b)
        if a is None or b is None:
            return None
        x, y = sympy.sympify(a), sympy.sympify(b)
        ops = {"add": lambda: x + y, "sub": lambda: x - y, "mul": lambda: x * y,
               "floordiv": lambda: sympy.floor(x / y), "div": lambda: sympy.floor(x / y),
               "mod": lambda: sympy.Mod(x, y), "max": lambda: sympy.Max(x, y), "min": lambda: sympy.Min(x, y)}
        f = ops.get(e.op)
        return canon(f()) if f else None
    return None


class _Simplifier:
    def __init__(self, ranges: Mapping[str, Dim], prover: Prover):
        self.ext = dict(ranges)
        self.prove = prover
        self._lin: dict[Expr, Terms] = {}

    # ---- linear forms ------------------------------------------------------------------
    def lin(self, e: Expr) -> Terms:
        hit = self._lin.get(e)
        if hit is not None:
            return hit
        out: Terms
        d = None if free_vars(e) else _dim(e)
        if d is not None:
            out = {None: sympy.sympify(d)}
        elif isinstance(e, Binary) and e.op in ("add", "sub"):
            out = dict(self.lin(e.a))
            sign = 1 if e.op == "add" else -1
            for k, v in self.lin(e.b).items():
                out[k] = out.get(k, 0) + sign * v
        elif isinstance(e, Binary) and e.op == "mul":
            la, lb = self.lin(e.a), self.lin(e.b)
            if set(la) == {None}:
                out = {k: la[None] * v for k, v in lb.items()}
            elif set(lb) == {None}:
                out = {k: lb[None] * v for k, v in la.items()}
            else:
                out = {e: sympy.Integer(1)}
        else:
            out = {e: sympy.Integer(1)}
        out = _fold_pairs({k: sympy.expand(v) for k, v in out.items() if v != 0})
        self._lin[e] = out
        return out

    def build(self, terms: Terms) -> Expr:
        acc: Expr | None = None
        for atom, coef in sorted(terms.items(), key=lambda kv: "" if kv[0] is None else str(kv[0])):
            c = dim_to_expr(canon(coef))
            t = c if atom is None else (atom if coef == 1 else binary("mul", c, atom))
            acc = t if acc is None else binary("add", acc, t)
        return acc if acc is not None else Const(0, I64)

    # ---- ranges ------------------------------------------------------------------------
    def atom_range(self, a: Expr) -> Range | None:
        if isinstance(a, Var):
            d = self.ext.get(a.name)
            return None if d is None else (sympy.Integer(0), sympy.sympify(d) - 1)
        if isinstance(a, Binary) and a.op in ("floordiv", "div") and isinstance(a.b, Const) and a.b.value > 0:
            r = self.range(self.lin(a.a))
            k = a.b.value
            if r is None or not (r[0].is_Integer and r[1].is_Integer):
                return None  # sympy's floor of a symbolic bound costs a tenth of a second
            return sympy.Integer(int(r[0]) // k), sympy.Integer(int(r[1]) // k)
        if isinstance(a, Binary) and a.op == "mod" and not free_vars(a.b):
            d = _dim(a.b)
            if d is not None and self.prove.le(1, d):
                return (sympy.Integer(0), sympy.sympify(d) - 1)
        return None

    def range(self, terms: Terms) -> Range | None:
        lo, hi = sympy.Integer(0), sympy.Integer(0)
        for atom, coef in terms.items():
            if atom is None:
                lo, hi = lo + coef, hi + coef
                continue
            r = self.atom_range(atom)
            if r is None:
                return None
            if self.prove.le(0, coef):
                lo, hi = lo + coef * r[0], hi + coef * r[1]
            elif self.prove.le(coef, 0):
                lo, hi = lo + coef * r[1], hi + coef * r[0]
            else:
                return None
        return lo, hi

    # ---- the rewrite -------------------------------------------------------------------
    def split(self, terms: Terms, g) -> tuple[Terms, Terms] | None:
        """(Q, R) with terms == g*Q + R and 0 <= R < g proved, or None."""
        q: Terms = {}
        r: Terms = {}
        for atom, coef in terms.items():
            num, den = _quotient(coef, g)
            if den == 1 and _int_poly(num, sorted(num.free_symbols, key=str)):
                q[atom] = num
            else:
                r[atom] = coef
        rr = self.range(r)
        if rr is None or not (self.prove.le(0, canon(rr[0])) and self.prove.le(canon(rr[1]) + 1, canon(g))):
            return None
        return q, r

    def divmod(self, n: Expr, d: Expr, op: str) -> Expr | None:
        dd = _dim(d)
        if dd is None or not self.prove.le(1, dd):
            return None
        terms = self.lin(n)
        den = sympy.sympify(dd)
        k, rest = den.as_coeff_Mul()
        cands = [(sympy.Integer(1), den)]
        if isinstance(k, sympy.Integer) and k > 1 and rest != 1:
            cands.append((k, rest))
        for k, g in cands:
            qr = self.split(terms, g)
            if qr is None:
                continue
            q, r = qr
            qe, re_ = self.build(q), self.build(r)
            if k == 1:
                return qe if op != "mod" else re_
            kc = Const(int(k), I64)
            if op != "mod":
                return binary("floordiv", qe, kc)
            return binary("add", binary("mul", binary("mod", qe, kc), dim_to_expr(canon(g))), re_)
        return None

    def __call__(self, node: Expr) -> Expr | None:
        if not (isinstance(node, Binary) and node.dtype.is_int and node.op in ("floordiv", "div", "mod")):
            return None
        if not free_vars(node.a) or free_vars(node.b) or isinstance(node.b, Const):
            return None  # a division by a constant is a multiply and a shift: not worth sympy's time
        return self.divmod(node.a, node.b, node.op)


@functools.lru_cache(maxsize=1 << 12)
def _quotient(coef, g) -> tuple:
    """(numerator, denominator) of coef / g, expanded (cheaper than `cancel`; a quotient
    only a factorisation would show stays undivided, which is only a missed fold)."""
    return sympy.fraction(sympy.expand(coef / g))


def _int_poly(e, syms) -> bool:
    if e.is_Integer:
        return True
    if not syms or not e.is_polynomial(*syms):
        return False
    return all(c.is_Integer for c in sympy.Poly(e, *syms).coeffs())


def _fold_pairs(terms: Terms) -> Terms:
    """`c*k*(x // k) + c*(x % k)` -> `c*x` (k a positive constant)."""
    for atom in list(terms):
        if not (isinstance(atom, Binary) and atom.op == "mod" and isinstance(atom.b, Const) and atom.b.value > 0):
            continue
        x, k = atom.a, atom.b.value
        quot = Binary("floordiv", x, atom.b)
        c = terms.get(atom)
        if c is None or quot not in terms or sympy.expand(terms[quot] - c * k) != 0:
            continue
        del terms[atom], terms[quot]
        terms[x] = sympy.expand(terms.get(x, 0) + c)
        if terms[x] == 0:
            del terms[x]
    return terms


def _divisions_by_dims(e: Expr, var: str) -> list[Binary]:
    """The divisions by a non-constant that read `var`."""
    return [n for n in walk(e) if isinstance(n, Binary) and n.op in ("floordiv", "div", "mod")
            and n.dtype.is_int and not isinstance(n.b, Const) and var in free_vars(n.a)]


def _split_reduce(r: Reduce, ext: dict, prover: Prover) -> Reduce | None:
    """A sum over a flattened extent (a group's channels and pixels, reshaped) whose index
    divides its var: the var split as `a * D + b` (D one of those divisors, dividing the
    extent; the order of the terms is kept), while that leaves fewer divisions by run-time
    values, the parts split again. Each term of a GroupNorm's statistics otherwise paid
    several such divisions, in a scalar loop. None when nothing splits."""
    vs = list(r.vars)
    body = r.body

    def count(e: Expr) -> int:
        return sum(len(_divisions_by_dims(e, w.name)) for w, _ in vs)

    for _ in range(4):
        done = True
        env = {**ext, **{w.name: d for w, y in vs if (d := _dim(y)) is not None and not free_vars(y)}}
        for i, (v, x) in enumerate(vs):
            total = None if free_vars(x) else _dim(x)
            divs = _divisions_by_dims(body, v.name)
            if total is None or not divs:
                continue
            best, best_n = None, count(body)
            for den in dict.fromkeys(n.b for n in divs):
                d = None if free_vars(den) else _dim(den)
                if d is None or not prover.le(1, d):
                    continue
                num, dd = _quotient(sympy.sympify(total), sympy.sympify(d))
                if dd != 1 or not _int_poly(num, sorted(num.free_symbols, key=str)):
                    continue
                a, b = Var(f"{v.name}.a"), Var(f"{v.name}.b")
                sub = {**env, a.name: canon(num), b.name: d}
                nb = transform(substitute(body, {v.name: binary("add", binary("mul", a, den), b)}),
                               _Simplifier(sub, prover))
                trial = vs[:i] + [(a, dim_to_expr(canon(num))), (b, den)] + vs[i + 1:]
                n = sum(len(_divisions_by_dims(nb, w.name)) for w, _ in trial)
                if n < best_n:
                    best, best_n = (trial, nb), n
            if best is not None:
                vs, body = best
                done = False
                break
        if done:
            break
    if body is r.body:
        return None
    return Reduce(r.op, tuple(vs), body, r.init)


def simplify_indices(body: Expr, ranges: Mapping[str, Dim], prover: Prover) -> Expr:
    """`body` with the integer divisions its vars' ranges decide folded away, and its sums
    over flattened extents split where that removes divisions (`_split_reduce`). `ranges`:
    the extent of each free var; the extents of `body`'s reductions are added where they are
    var-free."""
    if not any(isinstance(n, Binary) and n.op in ("floordiv", "mod") for n in walk(body)):
        return body
    ext = dict(ranges)
    for n in walk(body):
        if isinstance(n, Reduce):
            for v, x in n.vars:
                d = None if free_vars(x) else _dim(x)
                if d is not None:
                    ext.setdefault(v.name, d)
    body = transform(body, _Simplifier(ext, prover))
    return transform(body, lambda n: _split_reduce(n, ext, prover) if isinstance(n, Reduce) else None)
