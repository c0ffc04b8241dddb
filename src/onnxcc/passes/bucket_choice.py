"""Choosing bucket bounds from traffic: a FLOP cost model read from the IR, and an exact choice.

The cost of one run is a polynomial in the bucketed symbol, computed symbolically from the
IR types, each op's cost read from its OpDef (`OpDef.flops`, set in its family file with
`traits.set_cost`): each MatMul / Gemm / Conv costs 2 * (result elements) * (contracted extent), so
the attention score and context MatMuls (the symbol on both sides) give the quadratic term
and the projections the linear one; elementwise ops cost one FLOP per element, reductions
one per input element, Softmax 4 and LayerNormalization 8 per element. Other symbols are
fixed (default 1: a constant factor that does not move the choice).

Given a trace of observed values (value, count), `optimal_buckets` picks at most k bounds
minimising the expected padded cost sum(count * cost(bucket(value))) exactly, by dynamic
programming over the sorted distinct values (a bucket's best bound is the largest value it
holds); `padding_waste` measures the share of executed FLOPs spent on padding.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import sympy

from ..errors import OnnxccError
from ..ir import Function, Op, sym
from ..ops import get_opdef


def op_flops(op: Op) -> sympy.Expr:
    """Floating-point work of one op as a dim expression (multiply-add = 2)."""
    d = get_opdef(op.name)
    if d is None or not op.results:
        return sympy.Integer(0)
    out = op.results[0].type.numel()
    if out is None:
        return sympy.Integer(0)
    return d.flops(op)  # the op's cost hook (ops/traits.py set_cost), else its kind's default


def flops_polynomial(f: Function) -> sympy.Expr:
    """The FLOPs of one run of f as a polynomial in the symbols (e.g. 4*seq**2*... + ...)."""
    return sympy.expand(sum((op_flops(op) for op in f.walk()), sympy.Integer(0)))


def cost_function(f: Function, symbol: str, fixed: dict[str, int] | None = None):
    """(cost(n) -> float, the polynomial in `symbol`), other symbols set from `fixed` (default 1)."""
    poly = flops_polynomial(f)
    subs = {s: (fixed or {}).get(s.name, 1) for s in poly.free_symbols if s.name != symbol}
    p = sympy.expand(poly.xreplace({k: sympy.Integer(v) for k, v in subs.items()}))
    fn = sympy.lambdify(sym(symbol), p, "math")
    return (lambda n: float(fn(n))), p


@dataclass
class BucketChoice:
    symbol: str
    buckets: list[int]
    waste: float               # fraction of executed FLOPs that are padding
    pow2: list[int]
    pow2_waste: float
    polynomial: sympy.Expr = field(default=None)

    def report(self) -> str:
        return (f"cost model: {self.polynomial} FLOPs per call\n"
                f"auto buckets {self.symbol} = {','.join(map(str, self.buckets))}: "
                f"expected padding waste {100 * self.waste:.2f}% of FLOPs\n"
                f"power-of-two buckets {','.join(map(str, self.pow2))} (same count): "
                f"waste {100 * self.pow2_waste:.2f}% of FLOPs")


def read_trace(path) -> list[tuple[int, int]]:
    """A trace file: one observed value per line, or `value,count`; '#' comments.
    Returns sorted distinct (value, count) pairs."""
    from collections import Counter
    from pathlib import Path

    counts: Counter = Counter()
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as e:
        raise OnnxccError(f"{path}: cannot read trace ({e})") from e
    for k, line in enumerate(lines, 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = [p.strip() for p in line.split(",")]
        try:
            v, c = int(parts[0]), (int(parts[1]) if len(parts) > 1 else 1)
            if v < 1 or c < 0 or len(parts) > 2:
                raise ValueError
        except ValueError:
            raise OnnxccError(f"{path}:{k}: expected VALUE or VALUE,COUNT (positive integers), "
                              f"got {line!r}") from None
        counts[v] += c
    if not counts:
        raise OnnxccError(f"{path}: the trace has no values")
    return sorted((v, c) for v, c in counts.items() if c > 0)


def optimal_buckets(trace: list[tuple[int, int]], cost, k: int) -> list[int]:
    """Boundaries (at most k, the last = the largest value) minimising sum(count * cost(bucket)).

    Exact: dynamic programming over the sorted distinct values (a bucket's best bound is the
    largest value it holds): best[j][i] = min over p < i of best[j-1][p] + cost(v_i) *
    (C_i - C_p), C the prefix sums of counts. O(k n^2) with the inner minimum vectorised."""
    if k < 1:
        raise OnnxccError("--max-buckets must be at least 1")
    vals = [v for v, _ in trace]
    n = len(vals)
    k = min(k, n)
    C = np.concatenate([[0.0], np.cumsum([c for _, c in trace], dtype=np.float64)])
    cv = np.array([cost(v) for v in vals], dtype=np.float64)
    best = np.full(n + 1, np.inf)
    best[0] = 0.0
    arg = np.zeros((k + 1, n + 1), dtype=np.int64)
    layers = [best]
    for j in range(1, k + 1):
        prev, cur = layers[-1], np.full(n + 1, np.inf)
        for i in range(1, n + 1):
            cand = prev[:i] + cv[i - 1] * (C[i] - C[:i])
            p = int(np.argmin(cand))
            cur[i], arg[j, i] = cand[p], p
        layers.append(cur)
    j = min(range(1, k + 1), key=lambda q: (layers[q][n], q))
    out, i = [], n
    while i > 0:
        out.append(vals[i - 1])
        i, j = int(arg[j, i]), j - 1
    return sorted(out)


def assign(value: int, buckets: list[int]) -> int | None:
    """The smallest bucket holding value, or None (above the last: the fallback version)."""
    for b in buckets:
        if value <= b:
            return b
    return None


def padding_waste(trace: list[tuple[int, int]], buckets: list[int], cost) -> tuple[float, float]:
    """(wasted FLOPs, executed FLOPs) over the trace; values above the last bucket run unpadded."""
    wasted = executed = 0.0
    for v, c in trace:
        b = assign(v, buckets) or v
        executed += c * cost(b)
        wasted += c * (cost(b) - cost(v))
    return wasted, executed


def pow2_buckets(max_value: int, k: int) -> list[int]:
    """k consecutive powers of two ending at the first one >= max_value."""
    top = 1 << max(0, (max_value - 1).bit_length())
    return sorted({max(1, top >> i) for i in range(k)})


def choose_buckets(f: Function, symbol: str, trace: list[tuple[int, int]], k: int,
                   fixed: dict[str, int] | None = None) -> BucketChoice:
    cost, poly = cost_function(f, symbol, fixed)
    chosen = optimal_buckets(trace, cost, k)
    w, e = padding_waste(trace, chosen, cost)
    p2 = pow2_buckets(trace[-1][0], len(chosen))
    w2, e2 = padding_waste(trace, p2, cost)
    return BucketChoice(symbol, chosen, w / e if e else 0.0, p2, w2 / e2 if e2 else 0.0, poly)
