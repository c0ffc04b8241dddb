"""specialize: split @main into guarded versions (exact, 0/1, divisibility) plus the generic one.

Each version is a clone of the generic function with a symbol substitution applied to every
type, re-inferred, and a guard = (its defining predicate) & (the constraints its own shapes
need). The dispatch table lists versions most specialised first; the generic version comes
last and is guarded only by the model's constraints (module level).

Options (CLI: `specialize{exact=seq:128|batch:1,one=true,divisible=16,max-versions=8}`):
  exact       values per symbol (`SymValues`; `SYM:V[:V2...]` groups joined by `|` in the
              text): one version per value
  one         the 0/1 rule: a symbol that may be 1 and meets a broadcast gets a `SYM == 1` version
              (not where it meets only a literal 1 at the outermost axis: `broadcast_symbols`)
  divisible   k > 1: a `SYM % k == 0` version per symbol that is the innermost dim of a tensor;
              the version records the fact (attr multiple_of) so schedules drop tail code
  max_versions bound on the number of versions (generic included); the rest are dropped, and
               the reason is recorded in the module attribute `dropped_versions`
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import sympy

from ..errors import OnnxccError, ShapeError
from ..ir import Divisible, Function, Module, Op, sym
from ..ir.clone import clone_function
from ..ops import get_opdef
from .base import ModulePass, PassContext, SymValues, parse_sym_values, register_pass
from .broadcast_relax import relax_broadcast_constraints
from .shape_inference import infer_function_constraints


@dataclass
class Candidate:
    tag: str                 # version suffix: "seq128", "batch1", "seq_mod16"
    kind: str                # exact | one | divisible
    subs: dict               # {Symbol: int | Expr}
    pred: sympy.Basic        # the defining predicate over the ORIGINAL symbols
    rank: int                # sort key: lower runs first
    multiple_of: dict = None  # {name: k}: divisibility facts the version may rely on


def parse_exact(text: str) -> SymValues:
    return parse_sym_values(text, "specialize: exact")


def broadcast_symbols(f: Function, inner_only: bool = False) -> set[str]:
    """Symbols that sit, in an op whose operands broadcast numpy-style, opposite a different
    dim (so a value of 1 would broadcast).

    inner_only: leave out a symbol whose only such place is the outermost axis opposite a
    literal 1 (batch against a weight's leading 1). There `s == 1` takes away a stride-0 step
    of the outermost loop, which runs once a batch either way; the inner loops are the same
    code, so the version costs a compile (its offsets differ everywhere: little is shared)
    and saves nothing measurable (benchmarks: batch-1 versions within noise on ppocr, vit,
    the transformer families). A symbol opposite another symbol or a dim > 1 is kept."""
    found: set[str] = set()
    for op in f.walk():
        d = get_opdef(op.name)
        if d is None or len(op.operands) < 2 or not (d.numpy_broadcast or d.broadcast_shape_operands):
            continue
        if d.numpy_broadcast:
            shapes = [v.type.shape for v in op.operands]
        else:  # Expand: its input's shape against the target's known value
            known = [_shape_value(op.operands[i]) for i in d.broadcast_shape_operands if i < len(op.operands)]
            shapes = [op.operands[0].type.shape, *(k for k in known if k is not None)]
        rank = max(len(s) for s in shapes)
        padded = [(None,) * (rank - len(s)) + tuple(s) for s in shapes]
        for i in range(rank):
            col = [p[i] for p in padded if p[i] is not None]
            for dim in col:
                others = [o for o in col if o != dim]
                if not isinstance(dim, sympy.Symbol) or not others:
                    continue
                if inner_only and i == 0 and all(o == 1 for o in others):
                    continue
                found.add(dim.name)
    return found


def _shape_value(v) -> tuple | None:
    """The dims a shape operand holds when its producer says them (`cc.dims`, `cc.const`)."""
    op = getattr(v, "owner", None)
    if not isinstance(op, Op) or v.type.rank != 1:
        return None
    if op.name == "cc.dims":
        return tuple(op.attrs["dims"])
    if op.name == "cc.const" and isinstance(op.attrs.get("value"), np.ndarray):
        return tuple(int(x) for x in op.attrs["value"].reshape(-1))
    return None


def innermost_symbols(f: Function) -> set[str]:
    found: set[str] = set()
    for op in f.walk():
        for r in op.results:
            if r.type.rank and isinstance(r.type.shape[-1], sympy.Symbol):
                found.add(r.type.shape[-1].name)
    return found


@register_pass
@dataclass(frozen=True)
class SpecializePass(ModulePass):
    """Clone @main into guarded versions, most specialised first, generic last."""

    name: ClassVar[str] = "specialize"
    exact: SymValues = field(default=(), metadata={"parse": parse_exact})
    one: bool = True
    divisible: int = 0
    max_versions: int = 8

    def candidates(self, module: Module, f: Function) -> list[Candidate]:
        out: list[Candidate] = []
        table = module.symbols
        for name, values in self.exact:
            if name not in table:
                raise OnnxccError(f"specialize: unknown symbol {name!r} (known: {', '.join(s.name for s in table)})")
            info = table[name]
            for v in values:
                if not info.lo <= v <= info.hi:
                    raise OnnxccError(f"specialize: {name} = {v} is outside its range [{info.lo}, {info.hi}]")
                out.append(Candidate(f"{name}{v}", "exact", {sym(name): v}, sympy.Eq(sym(name), v), 0))
        exact_names = {c.tag for c in out}
        # 0/1 and divisibility versions only for symbols the input shapes bind (a dim known
        # only from data, e.g. a Reshape target read from an input, cannot be guarded on)
        bound = ({s.name for p in f.params for s in p.type.symbols()}
                 | {item.partition("=")[0] for item in f.attrs.get("value_symbols", [])})
        # symbols broadcast-versions made a 1-version for already (from the unfolded graph)
        have = {str(k) for fn in module.functions.values() if fn.attrs.get("kind") == "one" for k in fn.subs}
        if self.one:
            for name in sorted(broadcast_symbols(f, inner_only=True) & bound - have):
                if table[name].lo <= 1 and f"{name}1" not in exact_names:
                    out.append(Candidate(f"{name}1", "one", {sym(name): 1}, sympy.Eq(sym(name), 1), 1))
        k = self.divisible
        if k > 1:
            for name in sorted(innermost_symbols(f) & bound):
                info = table[name]
                if info.multiple_of % k == 0 or info.hi < k:
                    continue
                out.append(Candidate(f"{name}_mod{k}", "divisible", {},
                                     sympy.Eq(sympy.Mod(sym(name), k), 0), 2, {name: k}))
        out.sort(key=lambda c: c.rank)
        return out

    def run(self, module: Module, ctx: PassContext) -> bool:
        if "main" not in module.functions:
            return False
        generic = module.functions.pop("main")
        generic.name = "main.generic"
        # a == b from a broadcast also admits a == 1 or b == 1 where broadcast-versions made
        # versions for them; the generic function (and split-if's, typed alike) keep a == b in
        # their guards, and so does every version made below from the generic (canonicalize
        # may have folded with a == b)
        earlier = [module.functions[n] for n in module.dispatch.get("main", [])]
        relax_broadcast_constraints(module, [generic, *(f for f in earlier if f.attrs.get("kind") != "one")])
        cands = self.candidates(module, generic)
        keep = cands[: max(0, self.max_versions - 1)]
        dropped = cands[len(keep):]
        if dropped:
            module.attrs.setdefault("dropped_versions", []).extend(
                f"{c.tag}: over max-versions={self.max_versions}" for c in dropped)
        versions = []
        for c in keep:
            if generic.guard.subs(c.subs) is sympy.false or f"main.{c.tag}" in module.functions:
                continue  # excluded by the function's own guard (split-if), or made already
            v = clone_function(generic, f"main.{c.tag}", c.subs)
            module.add_function(v)
            try:
                needs = infer_function_constraints(module, v)
            except ShapeError as e:
                if c.kind == "exact":
                    raise  # asked for by the user: say why it cannot be built
                # a version of our own choosing that can never run (W == 1 before a 2x2
                # pool leaves an empty dim): drop it rather than fail the compile
                module.functions.pop(v.name, None)
                module.attrs.setdefault("dropped_versions", []).append(f"{c.tag}: {e}")
                continue
            v.guard = sympy.And(c.pred, generic.guard, *[n.expr for n in needs])
            v.attrs["kind"] = c.kind
            if c.multiple_of:
                v.attrs["multiple_of"] = [Divisible(k, m) for k, m in sorted(c.multiple_of.items())]
            versions.append(v.name)
        module.add_function(generic)
        generic.attrs["kind"] = "generic"
        module.dispatch["main"] = module.dispatch.get("main", []) + versions + [generic.name]
        return True

