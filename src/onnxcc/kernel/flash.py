"""Attention fused over key blocks: `softmax(scores) @ V` as one compute, scores never stored.

Attention written as three computes (scores, softmax, P @ V) stores a `[batch, heads, q, kv]`
score tensor and reads it three times: at long sequences that is most of the memory traffic
and the arena. Written as ONE compute it is, for each output element `y[..., w]` of a query
row (`w` the innermost var, the value head dim):

    M    = safe_max(t < L: X(t))                   0 where every score is -inf
    D    = sum(u < L: exp(X(u) - M))
    core = sum(t < L: exp(X(t) - M) * V(t, w)) / select(D == 0, 1, D)

(`flash_core` builds it; `X(t)` is the score of key `t` with its scale, softcap and bias,
`V(t, w)` the value.) As plain loops that is correct on every backend but slow: the
numerator recomputes every score once per `w`. A compute holding such a core gets a
`Flash` on its CPU schedule, and the emitter (codegen/cpu/flash.py) runs each query row the
way FlashAttention does: over blocks of keys it computes the block's scores once, keeps a
running max `m` and sum `l`, rescales the accumulated row `acc[w]` by `exp(m_old - m_new)`
when the max grows, and adds `p(t) * V(t, w)`; at the end every `y[..., w]` is the rest of
the compute's body with the core replaced by `acc[w] / select(l == 0, 1, l)`.

Same answer as the three computes (up to the order of additions): `m` only ever holds a
score that occurred, a block whose running max is still -inf adds nothing (its `p` would
all be exp(-inf) = 0), and a row whose scores are all -inf ends with `l == 0` and `acc == 0`,
so its core is 0 as the safe max makes it in the plain form.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from onnxcc.ir import Dim, DType

from .expr import (
    Binary,
    Const,
    Expr,
    Load,
    Reduce,
    Select,
    Unary,
    Var,
    free_vars,
    rmax,
    rsum,
    select,
    substitute,
    transform,
    walk,
)
from .program import Compute

MAX_ROW = 1024
"""the largest static value head size the fused emitter takes (its accumulator row lives
on the stack); a larger or symbolic one keeps the plain loops"""

LANES_MAX_HEAD = 16
"""the widest query and value heads the CPU runs with the query rows in vector lanes
(codegen/cpu/flash_lanes.py: one FMA per key per head element per vector of rows); wider
heads keep the row-at-a-time form, whose dots fill whole vectors (measured at 32: the
lanes form spills its accumulators and runs 1.8x slower than the chain), or, at multiples
of 16 up to 128, codegen/cpu/flash_tiles.py's register tiles of 32 rows in lanes"""

ROWS_PER_ITEM = 64
"""query rows per parallel item of a fused compute that runs its rows several at a time
and not in lanes (`rows_per_item`): the (batch, head) items alone are 4 for a batch of 4
heads, 2 per thread on 2 threads, and one late item on a shared core was a quarter of the
attention's time; 64 rows at 512 keys is still ~0.2 ms of work per item, and consecutive
items of one head share its K and V in L2"""

_KEY_VARS = ("kt", "ku")
"""the key vars of the numerator / max and of the denominator"""


def flash_core(score: Callable[[Expr], Expr], value: Callable[[Expr], Expr], kv_len: Dim, acc: DType, *,
               guarded: bool = True) -> Expr:
    """`softmax(score) @ value` at one output element (module doc): `score(t)` the score of
    key `t` (free of the output's innermost var), `value(t)` the value at key `t` and the
    output's innermost var, both in `acc` (f32 or f64). `guarded=False`: plain softmax, a
    row of -inf scores gives NaN (`max` and the divisor unguarded), as softmax itself does."""
    t, u = Var(_KEY_VARS[0]), Var(_KEY_VARS[1])
    neg_inf, zero, one = Const(float("-inf"), acc), Const(0.0, acc), Const(1.0, acc)
    mx = rmax([(t, kv_len)], score(t))
    m = select(mx.eq(neg_inf), zero, mx) if guarded else mx
    denom = rsum([(u, kv_len)], Unary("exp", score(u) - m))
    numer = rsum([(t, kv_len)], Unary("exp", score(t) - m) * value(t))
    return numer / select(denom.eq(zero), one, denom) if guarded else numer / denom


@dataclass(frozen=True)
class Flash:
    """A fused-attention core found in a compute body (see the module doc)."""

    core: Expr
    """the whole `numer / select(D == 0, 1, D)` node, replaced per element by the result"""
    key: Var
    """the numerator's key var, bound in `score` and `value`"""
    kv_len: Expr
    """the number of keys (an i64 expression over symbols and outer vars)"""
    score: Expr
    """X(key): the score of one key, free of the innermost var"""
    value: Expr
    """V(key, w): the value, reading the innermost var"""
    row: int
    """the static extent of the innermost var (the accumulator row)"""
    guarded: bool = True
    """the divisor is `select(D == 0, 1, D)` (an all -inf row gives 0), else `D` (NaN)"""
    dot: Reduce | None = None
    """the score's dot product `sum(e < D: query(e) * key_part(e, key))`, when it has one:
    the emitter then computes several keys' dots in one loop over `e`, sharing the query
    loads (None: each score is emitted as it stands)"""
    query: Expr | None = None
    """the dot's factor free of the key"""
    keyed: Expr | None = None
    """the dot's factor that reads the key"""
    rows_var: str | None = None
    """the second-innermost var (the query row) when neither the keys nor the values read
    it: the emitter then runs several rows at once over each key block, sharing every key
    and value load among them (None: one row at a time)"""
    causal: Expr | None = None
    """the last key a row attends when the score is `select(key > R, masked, x)` with R the
    row var plus an offset free of the key and the row (causal attention) and `masked` the
    constant m or `dot * a + m`, m < 0: keys after R add nothing where their scores and
    values are finite and the row's max is far above m (codegen/cpu/flash_guard.py checks
    that at run time), so the emitter stops each block of rows at its last row's R there
    (None: every key)"""
    masked: tuple[float, float] = (0.0, float("-inf"))
    """(a, m) of a causal score's masked keys: `dot * a + m`, or m alone where a == 0"""

    def without_core(self, body: Expr) -> Expr:
        """`body` with the core replaced by a constant: what may be hoisted above the row
        (the core's own reductions must not be: they are what the fused loop computes)."""
        zero = Const(0.0, self.core.dtype)
        return transform(body, lambda n: zero if n == self.core else None)


def lanes_fit(fl: Flash) -> bool:
    """Whether a fused core runs with its query rows in vector lanes (codegen/cpu/
    flash_lanes.py): rows that share keys (`rows_var`), a dot product of a static head of
    at most LANES_MAX_HEAD, and a value row of at most that."""
    if fl.rows_var is None or fl.dot is None or fl.query is None or fl.keyed is None:
        return False
    (_, ext), = fl.dot.vars
    return isinstance(ext, Const) and 0 < int(ext.value) <= LANES_MAX_HEAD and fl.row <= LANES_MAX_HEAD


def rows_per_item(fl: Flash) -> int | None:
    """The schedule's `rows_per_item` for a fused compute: ROWS_PER_ITEM where its rows run
    several at a time (codegen/cpu/flash.py, and flash_tiles.py's blocks of 32 rows inside
    each item's rows), None for one row at a time and for the narrow-head lanes form (whose
    row blocks start at row 0)."""
    return ROWS_PER_ITEM if fl.rows_var is not None and not lanes_fit(fl) else None


def match_flash(c: Compute) -> Flash | None:
    """The fused-attention core of `c` over its innermost var, or None."""
    if not c.vars:
        return None
    inner, ext = c.vars[-1]
    if not isinstance(ext, int) or not 0 < ext <= MAX_ROW:
        return None
    found = [n for n in walk(c.body) if _is_core(n)]
    if len(found) != 1:
        return None
    core = found[0]
    assert isinstance(core, Binary) and isinstance(core.a, Reduce)
    numer = core.a
    (key, kv_len), = numer.vars
    prod = numer.body
    assert isinstance(prod, Binary) and isinstance(prod.a, Unary) and isinstance(prod.a.a, Binary)
    score, value = prod.a.a.a, prod.b
    if inner.name in free_vars(score) or inner.name not in free_vars(value):
        return None
    if any(isinstance(n, Load) and n.buffer == c.out for n in walk(c.body)):
        return None  # the row's stores come after all its reads only if no read is of the output
    guarded = isinstance(core.b, Select)
    dot = _split_dot(score, key.name)
    causal = _causal_limit(score, key.name, c.vars[-2][0].name) if len(c.vars) >= 2 else None
    masked = _masked(score, dot[0] if dot is not None else None) if causal is not None else None
    if masked is None:
        causal, masked = None, (0.0, float("-inf"))
    if dot is None:
        return Flash(core, key, kv_len, score, value, ext, guarded, causal=causal, masked=masked)
    rows = c.vars[-2][0].name if len(c.vars) >= 3 else None
    if rows is not None and rows in free_vars(value) | free_vars(kv_len) | free_vars(dot[2]):
        rows = None
    return Flash(core, key, kv_len, score, value, ext, guarded, *dot, rows_var=rows, causal=causal,
                 masked=masked)


def _masked(score: Expr, dot: Reduce | None) -> tuple[float, float] | None:
    """(a, m) when the causal select's masked score is the constant m (a = 0) or `dot * a +
    m` (`dot` the score's dot product), m < 0, else None (the keys are then never skipped)."""
    fill = score.a  # type: ignore[attr-defined]
    if isinstance(fill, Const):
        return (0.0, float(fill.value)) if float(fill.value) < 0 else None
    if dot is None or not (isinstance(fill, Binary) and fill.op == "add" and isinstance(fill.b, Const)):
        return None
    m, lin = float(fill.b.value), fill.a
    if lin == dot:
        a = 1.0
    elif isinstance(lin, Binary) and lin.op == "mul" and lin.a == dot and isinstance(lin.b, Const):
        a = float(lin.b.value)
    else:
        return None
    return (a, m) if m < 0 and a == a and abs(a) != float("inf") else None


def _causal_limit(score: Expr, key: str, row: str) -> Expr | None:
    """R when `score` is `select(key > R, masked, x)` and R is the row var, or the row var
    plus what neither the key nor the row changes (so the last row of a block has the
    largest R), else None (`_masked` reads `masked`)."""
    if not isinstance(score, Select):
        return None
    cond = score.cond
    if not (isinstance(cond, Binary) and cond.op == "gt" and cond.a == Var(key)):
        return None
    r = cond.b
    if r == Var(row):
        return r
    if isinstance(r, Binary) and r.op == "add" and r.a == Var(row) and not {key, row} & free_vars(r.b):
        return r
    return None


def _split_dot(score: Expr, key: str) -> tuple[Reduce, Expr, Expr] | None:
    """The one reduction of `score` that reads the key, when it is a dot product over one
    var whose extent no key changes: (the reduce, its key-free factor, its keyed factor)."""
    dots = [n for n in walk(score) if isinstance(n, Reduce) and key in free_vars(n)]
    if len(dots) != 1:
        return None
    d = dots[0]
    if not (_sum1(d) and isinstance(d.body, Binary) and d.body.op == "mul"):
        return None
    (_, ext), = d.vars
    a, b = d.body.a, d.body.b
    if key in free_vars(a):
        a, b = b, a
    if key in free_vars(a) or key not in free_vars(b) or key in free_vars(ext):
        return None
    return d, a, b


def _is_core(n: Expr) -> bool:
    """Whether `n` is exactly what `flash_core` builds (any key vars, any score and value)."""
    if not (isinstance(n, Binary) and n.op == "div" and n.dtype in (DType.f32, DType.f64)):
        return False
    numer, guard = n.a, n.b
    if not _sum1(numer):
        return False
    assert isinstance(numer, Reduce)
    (t, length), = numer.vars
    prod = numer.body
    if not (isinstance(prod, Binary) and prod.op == "mul" and _exp_minus(prod.a)):
        return False
    score, m = prod.a.a.a, prod.a.a.b  # type: ignore[attr-defined]
    guarded = isinstance(guard, Select)
    # the max: select(max(t' < L: X(t')) == -inf, 0, max(...)), or the max alone (unguarded)
    mx = m.b if guarded and isinstance(m, Select) else m
    if not (isinstance(mx, Reduce) and mx.op == "max" and len(mx.vars) == 1 and mx.init is None):
        return False
    if guarded and not (isinstance(m, Select) and m.cond == mx.eq(Const(float("-inf"), n.dtype))
                        and m.a == Const(0.0, n.dtype)):
        return False
    (tm, lm), = mx.vars
    if lm != length or not _alpha_eq(substitute(score, {t.name: tm}), mx.body):
        return False
    # the divisor: select(D == 0, 1, D) or D, D = sum(u < L: exp(X(u) - M))
    denom = guard.b if isinstance(guard, Select) else guard
    if isinstance(guard, Select) and not (guard.cond == denom.eq(Const(0.0, n.dtype))
                                          and guard.a == Const(1.0, n.dtype)):
        return False
    if not _sum1(denom):
        return False
    assert isinstance(denom, Reduce)
    (u, ld), = denom.vars
    return ld == length and _alpha_eq(denom.body, Unary("exp", substitute(score, {t.name: u}) - m))


def _alpha_eq(a: Expr, b: Expr) -> bool:
    """`a == b` up to the names of bound reduce vars: fusion names each reduction after its
    structure (fuse.py `canon_bound`), so the score's dot product over keys `t` and the
    divisor's over keys `u` get different names for their own var (a causal Attention with a
    permute fused in was left as plain loops, 15x onnxruntime's time at 100 tokens)."""
    return a == b or _bound_renamed(a) == _bound_renamed(b)


def _bound_renamed(e: Expr) -> Expr:
    """`e` with every reduce var renamed in walk order (bottom-up, so inner names are fresh)."""
    names = iter(range(1 << 30))

    def fn(n: Expr) -> Expr | None:
        if not isinstance(n, Reduce):
            return None
        mapping: dict[str, Expr] = {}
        vs = []
        for v, x in n.vars:
            nv = Var(f"_bound{next(names)}")
            vs.append((nv, substitute(x, mapping)))
            mapping[v.name] = nv
        init = n.init
        return Reduce(n.op, tuple(vs), substitute(n.body, mapping), init)

    return transform(e, fn)


def _sum1(e: Expr) -> bool:
    return isinstance(e, Reduce) and e.op == "sum" and e.init is None and len(e.vars) == 1


def _exp_minus(e: Expr) -> bool:
    return isinstance(e, Unary) and e.op == "exp" and isinstance(e.a, Binary) and e.a.op == "sub"

