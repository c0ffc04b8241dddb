"""Broadcast between independent symbols: the model needs `a == b or a == 1 or b == 1`.

Shape inference types `x[a] + y[b]` as `f32[a]` and records the constraint `a == b`: the
generic body is compiled for equal extents (plain indexing, no per-element clamp). ONNX
broadcasting also accepts a call with `a == 1` or `b == 1`, and the 0/1 rule of specialize
already builds a version for each of those (`main.a1`, `main.b1`), re-inferred with the 1
substituted, so their bodies broadcast correctly. What stood in the way was the module
constraint, checked before any version is chosen.

`relax_broadcast_constraints` runs after specialize built its versions: a constraint
`x == y` becomes `x == y | s == 1` for each side `s` that is a plain symbol whose 1-version
exists and needs nothing beyond the model's other constraints (with `s = 1`): then every call
`s == 1` the relaxed constraint admits is served by that version. The equality the generic
body assumes moves into the generic version's guard, so the dispatcher never runs it on
unequal extents. A side without such a version keeps the call refused by the constraint,
naming it, as before: an Eq from MatMul's inner dims, say, stays strict, since its
1-version would need the other side to be 1 too.

Versions made before this step carry the equality in their guards already (each version's
guard holds the constraints its own re-inferred shapes need), and versions made after it
(specialize-value, bucketize) re-infer theirs the same way.
"""

from __future__ import annotations

import sympy

from ..ir import Constraint, Function, Module


def _norm(e) -> object:
    """A comparison key for a constraint: `Eq(a, b)` and `Eq(b, a)` (and `Eq(a - b, 0)`) meet."""
    e = sympy.sympify(e)
    if isinstance(e, sympy.Eq):
        d = sympy.expand(e.lhs - e.rhs)
        return ("eq", frozenset((d, sympy.expand(-d))))
    return e


def _served_by_one(module: Module, c: Constraint, s: sympy.Symbol, needs: list[Constraint]) -> bool:
    """Whether the `s == 1` version serves every call with `s == 1` that meets the model's
    other constraints: its own needs are among them (with 1 put for `s`)."""
    others = {_norm(o.expr.subs(s, 1)) for o in module.constraints if o is not c}
    return all(_norm(n.expr) in others or sympy.sympify(n.expr) is sympy.true for n in needs)


def relax_broadcast_constraints(module: Module, typed_equal: list[Function],
                                ones: dict[str, list[Constraint]]) -> list[Constraint]:
    """Relax each `x == y` constraint that a 1-version serves (see the module docstring);
    `ones` maps a symbol to the needs of its built `SYM == 1` version. Adds the equalities to
    the guards of `typed_equal` (the generic function, and split-if's functions typed the
    same way) and returns the relaxed constraints."""
    relaxed = []
    for c in module.constraints:
        e = c.expr
        if not isinstance(e, sympy.Eq):
            continue
        sides = [s for s in (e.lhs, e.rhs) if isinstance(s, sympy.Symbol) and s.name in ones]
        served = [s for s in sides if _served_by_one(module, c, s, ones[s.name])]
        if not served:
            continue
        relaxed.append((c, sympy.Or(e, *[sympy.Eq(s, 1) for s in served])))
    for c, weaker in relaxed:
        # these bodies were typed for the equality: they run only where it holds
        for f in typed_equal:
            f.guard = sympy.And(f.guard, c.expr)
        c.expr = weaker
    return [c for c, _ in relaxed]
