"""Interior / border split of a guarded expression along one loop var.

A convolution's im2col operand reads `select(p >= 0 & p < H, X[..., p], 0)` with
`p = o*s + k*d - pad`: away from the padding every guard holds. `interior_split(e, t)`
returns `(interior, guard)`: `interior` is `e` with every such select replaced by its
taken arm, `guard` the conjunction of their conditions. When every condition is a
conjunction of comparisons whose two sides are affine in `t` (every other var held
fixed), each comparison holds on a half-line of `t` and `guard` holds on an interval:
a loop over `t` may evaluate `e` at its two ends until `guard` holds and `interior`
(no selects, no branches, contiguous loads) everywhere between.
"""

from __future__ import annotations

from .expr import Binary, Const, Expr, Select, SymRef, Unary, Var, free_vars, transform, walk

_CMP = frozenset({"lt", "le", "gt", "ge"})


def _affine_in(e: Expr, t: str) -> bool:
    """Whether `e` is an affine integer function of var `t` (other vars are constants)."""
    if t not in free_vars(e):
        return True
    if isinstance(e, (Var, Const, SymRef)):
        return True
    if isinstance(e, Binary) and e.op in ("add", "sub"):
        return _affine_in(e.a, t) and _affine_in(e.b, t)
    if isinstance(e, Binary) and e.op == "mul":
        return ((t not in free_vars(e.a) and _affine_in(e.b, t))
                or (t not in free_vars(e.b) and _affine_in(e.a, t)))
    if isinstance(e, Unary) and e.op == "neg":
        return _affine_in(e.a, t)
    return False


def _interval_cond(c: Expr, t: str) -> bool:
    """Whether `c` holds on an interval of `t`: a conjunction of affine integer comparisons."""
    if isinstance(c, Binary) and c.op == "and":
        return _interval_cond(c.a, t) and _interval_cond(c.b, t)
    return (isinstance(c, Binary) and c.op in _CMP and c.a.dtype.is_int
            and _affine_in(c.a, t) and _affine_in(c.b, t))


def interior_split(e: Expr, t: str) -> tuple[Expr, Expr] | None:
    """`(interior, guard)` of `e` along var `t` (see the module doc), or None when `e` has
    no select that depends on `t` or one of them has a condition that is not an interval
    of `t`. Selects whose condition does not use `t` are taken too (their condition is
    the same all along the loop)."""
    conds: list[Expr] = []
    uses_t = False
    for n in walk(e):
        if isinstance(n, Select):
            # a condition without t is constant along the loop: all or nothing
            if t in free_vars(n.cond):
                if not _interval_cond(n.cond, t):
                    return None
                uses_t = True
            if n.cond not in conds:
                conds.append(n.cond)
    if not uses_t:
        return None
    take = set(conds)
    interior = transform(e, lambda n: n.a if isinstance(n, Select) and n.cond in take else None)
    guard = conds[0]
    for c in conds[1:]:
        guard = guard & c
    return interior, guard
