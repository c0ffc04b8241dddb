"""The trip count of a counting while loop.

Exporters write `for i in range(n)` over a symbolic n as a while loop: a carried counter i
(starting at a known x0), the body yields `i + k` (k a positive constant) and the condition
`i + k < n` with n the same every iteration, and the Loop's first condition is `x0 < n`
(torch.onnx's dynamo export of EmbeddingBag; its body's condition is data as far as the
Loop's shape rule can see). Such a loop runs exactly max(0, ceil((n - x0) / k)) times, a
dim over the input symbols, so its scan outputs get that extent instead of a run-time
trip-count symbol with no bound.

The match is structural and exact: the counter's yield must be that very Add of the
carried arg (nothing else changes it), n and x0 must have known values (Dims: fixed for
the whole loop) and the first condition must be known or be the same comparison of x0
and n. Anything else answers None (the Loop keeps its data-dependent trip count).
"""

from __future__ import annotations

import sympy

from ..ir import Block, Dim, canon
from .shape_util import simplify

_LESS = {"onnx.Less": False, "onnx.Greater": True}  # op -> operands swapped (n > i)


def _through(v):
    """v seen through Identity (the exporters' pass-throughs)."""
    while getattr(v, "op", None) is not None and v.op.name == "onnx.Identity":
        v = v.op.operands[0]
    return v


def _known_dim(ctx, v) -> Dim | None:
    k = ctx.value_of(v)
    if k is None or k.size != 1:
        return None
    return canon(k.reshape(-1)[0])


def _compare(v):
    """(left, right) of `left < right` when v is a Less / Greater, else None."""
    op = getattr(v, "op", None)
    if op is None or op.name not in _LESS or len(op.operands) != 2:
        return None
    a, b = op.operands
    return (b, a) if _LESS[op.name] else (a, b)


def counter_trips(ctx, lay, body: Block) -> Dim | None:
    """The exact trip count of a Loop that counts a carried integer up to a fixed bound
    (see the module doc), or None. `lay`: control_flow.loop_layout of ctx.op."""
    if lay.cond is None:
        return None
    ys = list(body.terminator.operands) if body.terminator is not None else []
    cmp = _compare(_through(ys[0])) if ys else None
    if cmp is None:
        return None
    nxt, bound = _through(cmp[0]), cmp[1]
    n = _known_dim(ctx, bound)
    add = getattr(nxt, "op", None)
    if n is None or add is None or add.name != "onnx.Add":
        return None
    carried = body.args[2:2 + len(lay.carried)]
    for k, arg in enumerate(carried):
        if _through(ys[1 + k]) is not nxt or not arg.type.dtype.is_int:
            continue
        others = [o for o in add.operands if o is not arg]
        if len(others) != 1 or len(add.operands) != 2:
            continue
        step = _known_dim(ctx, others[0])
        x0 = ctx.known(lay.carried[k])
        x0 = canon(x0.reshape(-1)[0]) if x0 is not None and x0.size == 1 else None
        if not isinstance(step, int) or step <= 0 or x0 is None:
            return None
        return _first_trips(ctx, lay, x0, n, step)
    return None


def _first_trips(ctx, lay, x0: Dim, n: Dim, step: int) -> Dim | None:
    first = ctx.known(lay.cond)
    first = canon(first.reshape(-1)[0]) if first is not None and first.size == 1 else None
    runs = sympy.Max(0, sympy.ceiling(sympy.sympify(n - x0) / step))
    if isinstance(first, int):  # the first condition is known: 0 trips, or at least 1
        runs = sympy.Max(1, runs) if first else sympy.Integer(0)
    else:  # it must be the same comparison, x0 < n, for the count to hold from the start
        cmp = _compare(_through(ctx.op.operands[lay.cond]))
        if cmp is None or _known_dim(ctx, cmp[0]) != x0 or _known_dim(ctx, cmp[1]) != n:
            return None
    if lay.m is not None:
        m = ctx.known(lay.m)
        m = canon(m.reshape(-1)[0]) if m is not None and m.size == 1 else None
        if m is None:
            return None
        runs = sympy.Min(sympy.Max(0, m), runs)
    return simplify(ctx.symbols, runs)


__all__ = ["counter_trips"]
