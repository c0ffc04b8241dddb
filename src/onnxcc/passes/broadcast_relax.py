"""Broadcast between independent symbols: the model needs `a == b or a == 1 or b == 1`.

Shape inference types `x[a] + y[b]` as `f32[a]` and records the constraint `a == b`: the
generic body is compiled for equal extents (plain indexing, no per-element clamp). ONNX
broadcasting also accepts a call with `a == 1` or `b == 1`; each is served by a version of
its own, typed with the 1 substituted.

Two steps, because canonicalize may use `a == b` (typed into every shape) to fold: an Expand
of x[a] to y's shape [b] is typed f32[a] and dropped as an identity, a Shape of x + y becomes
the constant [a]. A version made from the folded graph would be wrong at a == 1 != b.

1. `broadcast-versions`, before canonicalize: for each input-bound symbol `s` that may be 1
   and is a side of a constraint `s == t` (t another such symbol), clone @main with s = 1
   and re-infer it. The clone is kept (kind "one", guard `s == 1` and what its shapes need)
   where it serves every `s == 1` call the relaxed constraint would admit: its needs are
   among the model's other constraints with 1 put for s. (MatMul's inner `k == k2` is not
   served: the k1 clone needs `k2 == 1`; such a clone is dropped.) The served pairs are
   recorded in the module attribute `broadcast_ones` ("s:t").
2. `relax_broadcast_constraints`, in specialize (after every inference round, which records
   `s == t` again): `s == t` becomes `s == t | s == 1` (both sides where both are served),
   and the functions typed for the equality (the generic one, split-if's) take it as guard.
   The 0/1 rule of specialize makes no second `s == 1` version from the folded graph.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import sympy

from ..errors import ShapeError
from ..ir import Constraint, Function, Module
from ..ir.clone import clone_function
from .base import ModulePass, PassContext, register_pass
from .shape_inference import infer_function_constraints
from .value_symbols import value_symbols_of


def _norm(e) -> object:
    """A comparison key for a constraint: `Eq(a, b)` and `Eq(b, a)` (and `Eq(a - b, 0)`) meet."""
    e = sympy.sympify(e)
    if isinstance(e, sympy.Eq):
        d = sympy.expand(e.lhs - e.rhs)  # type: ignore[operator]
        return ("eq", frozenset((d, sympy.expand(-d))))
    return e


def _pairs(module: Module, f: Function) -> list[tuple[Constraint, sympy.Symbol, sympy.Symbol]]:
    """(constraint, s, t) for each constraint `s == t` between two symbols the call binds,
    with s able to be 1."""
    bound = {s.name for p in f.params for s in p.type.symbols()} | set(value_symbols_of(f))
    out = []
    for c in module.constraints:
        e = c.expr
        if not isinstance(e, sympy.Eq):
            continue
        x, y = e.lhs, e.rhs
        if not (isinstance(x, sympy.Symbol) and isinstance(y, sympy.Symbol)):
            continue
        if x.name not in bound or y.name not in bound:
            continue
        for s, t in ((x, y), (y, x)):
            if module.symbols[s.name].lo <= 1:
                out.append((c, s, t))
    return out


def _served(module: Module, c: Constraint, s: sympy.Symbol, needs: list[Constraint]) -> bool:
    """Whether the `s == 1` version serves every call with `s == 1` that meets the model's
    other constraints: its own needs are among them (with 1 put for `s`)."""
    others = {_norm(o.expr.subs(s, 1)) for o in module.constraints if o is not c}
    return all(_norm(n.expr) in others or sympy.sympify(n.expr) is sympy.true for n in needs)


@register_pass
@dataclass(frozen=True)
class BroadcastVersionsPass(ModulePass):
    """`s == 1` versions of @main for symbols a constraint `s == t` ties to another, made
    before canonicalize folds with `s == t` (see the module docstring)."""

    name: ClassVar[str] = "broadcast-versions"
    #: at most this many versions (each is a copy of the model to compile); the rest keep
    #: their strict constraint
    max_versions: int = 4

    def run(self, module: Module, ctx: PassContext) -> bool:
        main = module.functions.get("main")
        if main is None:
            return False
        pairs = _pairs(module, main)
        made, served_pairs = [], []
        for s in sorted({s for _, s, _ in pairs}, key=lambda x: x.name):
            if main.guard.subs(s, 1) is sympy.false:
                continue
            if len(made) >= self.max_versions:
                module.attrs.setdefault("dropped_versions", []).append(
                    f"{s.name}1: over broadcast-versions' max-versions={self.max_versions}")
                continue
            v = clone_function(main, f"main.{s.name}1", {s: 1})
            module.add_function(v)
            try:
                needs = infer_function_constraints(module, v)
            except ShapeError:  # s == 1 cannot hold (a 2x2 pool over it): no version
                module.functions.pop(v.name)
                continue
            served = [f"{s.name}:{t.name}" for c, s2, t in pairs if s2 == s and _served(module, c, s, needs)]
            if not served:
                module.functions.pop(v.name)
                continue
            v.guard = sympy.And(sympy.Eq(s, 1), main.guard, *[n.expr for n in needs])
            v.attrs["kind"] = "one"
            made.append(v.name)
            served_pairs += served
        if not made:
            return False
        module.attrs["broadcast_ones"] = served_pairs
        module.dispatch["main"] = module.dispatch.get("main", []) + made
        return True


def relax_broadcast_constraints(module: Module, typed_equal: list[Function]) -> list[Constraint]:
    """Relax each `s == t` constraint the `broadcast_ones` versions serve (module docstring);
    the equality goes into the guards of `typed_equal` (the generic function, split-if's).
    Returns the relaxed constraints."""
    served = {tuple(p.split(":")) for p in module.attrs.get("broadcast_ones", [])}
    relaxed = []
    for c in module.constraints:
        e = c.expr
        if not (isinstance(e, sympy.Eq) and isinstance(e.lhs, sympy.Symbol) and isinstance(e.rhs, sympy.Symbol)):
            continue
        sides = [s for s, t in ((e.lhs, e.rhs), (e.rhs, e.lhs)) if (s.name, t.name) in served]
        if sides:
            relaxed.append((c, sympy.Or(e, *[sympy.Eq(s, 1) for s in sides])))
    for c, weaker in relaxed:
        for f in typed_equal:  # these bodies were typed for the equality: they run only where it holds
            f.guard = sympy.And(f.guard, c.expr)
        c.expr = weaker
    return [c for c, _ in relaxed]
