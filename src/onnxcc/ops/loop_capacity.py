"""A capacity for a loop-carried dim that nothing bounds: a while loop on a data condition
that appends to its state (a greedy decode) with no trip count, no count the shape rules can
prove and no `--dim` range.

Such a dim gets a second symbol, `NAME__cap` (the capacity), that the dispatcher sets before
the run like an input's dim: the state's buffers are allocated for `initial + capacity` rows,
so memory planning, the workspace size and `NAME_output_shape` read it like any other symbol.
The loop checks every new extent against that bound before the state is written (ERR_CAPACITY,
never a write past the end); on that code the dispatcher re-runs the call with the capacity
doubled (codegen/c/capacity.py), up to a limit that stops with an error naming the loop node,
the value and the capacity reached. Loops whose bound is known keep their bound and no such
symbol: the static and symbolic paths are unchanged.
"""

from __future__ import annotations

import sympy

from ..ir import INT_MAX, canon
from ..ir.dims import sym

#: NAME.json / the ArtifactSpec key under the module's attrs: capacity symbol -> where it is from
CAPACITY_ATTR = "loop_capacity"


def capacity_name(s: sympy.Symbol) -> str:
    return f"{s.name}__cap"


def capacity_bound(ctx, k: int, j: int, s: sympy.Symbol, init_b) -> sympy.Expr:
    """The allocation bound of carried dim `s` (value k, dim j) with no bound known at compile
    time: its initial extent's bound plus a capacity symbol the dispatcher sets per call."""
    cap = declare_capacity(ctx, s, f"loop-carried value {k} dim {j} ({s.name})")
    return canon(sympy.sympify(init_b) + cap)


def trips_capacity(ctx, name: str) -> sympy.Symbol:
    """The bound of a Loop's iteration count `name` (its scan outputs' leading dim) when
    nothing bounds it: a capacity; the loop fails with ERR_CAPACITY rather than run past it."""
    return declare_capacity(ctx, sym(name), f"scan outputs' iteration count ({name})")


def declare_capacity(ctx, s: sympy.Symbol, what: str) -> sympy.Symbol:
    L, op = ctx.lowerer, ctx.op
    name = capacity_name(s)
    L.module.symbols.declare(name, 1, INT_MAX, origin=f'capacity of node "{op.loc}" {what}')
    if name not in L.program.symbols:  # the syms slot the dispatcher fills (module order: last)
        L.program.symbols.append(name)
    L.bound.add(name)  # read like an input dim: the dispatcher sets it before any kernel runs
    L.module.attrs.setdefault(CAPACITY_ATTR, {})[name] = {"node": op.loc or op.name, "what": what}
    return sym(name)


def is_capacity(bound, caps: dict) -> bool:
    """Whether an allocation bound reads a capacity symbol (its checks say ERR_CAPACITY)."""
    return any(x.name in caps for x in sympy.sympify(bound).free_symbols)


__all__ = ["CAPACITY_ATTR", "capacity_bound", "capacity_name", "declare_capacity", "is_capacity", "trips_capacity"]
