"""Drop symbols no type, guard, substitution or attribute of the module mentions any more,
and the constraints over them.

Region bodies are inferred more than once (at import, before their captures' values are
known, then again by shape inference): the first round may mint symbols for dims it could
not tell yet (`Unsqueeze` axes from a captured constant) and record constraints over them.
Once every type is concrete those symbols are stale, but the dispatcher would still have
to bind them from the inputs and could not. The pipeline prunes them before versioning
(`prune-symbols`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import sympy

from ..ir import Module
from .base import ModulePass, PassContext, register_pass


def _collect(x, used: set[str]) -> None:
    if isinstance(x, sympy.Basic):
        used.update(s.name for s in x.free_symbols)
    elif isinstance(x, (list, tuple, set)):
        for y in x:
            _collect(y, used)
    elif isinstance(x, dict):
        for k, v in x.items():
            _collect(k, used)
            _collect(v, used)
    elif isinstance(x, np.ndarray) and x.dtype == object:
        for y in x.flat:
            _collect(y, used)


def used_symbols(module: Module) -> set[str]:
    used: set[str] = set()
    for f in module.functions.values():
        _collect([a.type.shape for a in f.params], used)
        _collect([t.shape for t in f.result_types], used)
        _collect([f.guard, f.subs, f.attrs], used)
        for op in f.walk():
            _collect([r.type.shape for r in op.results], used)
            _collect(op.attrs, used)
            for reg in op.regions:
                for b in reg.blocks:
                    _collect([a.type.shape for a in b.args], used)
    return used


def prune_stale_symbols(module: Module) -> list[str]:
    """Remove the stale symbols (and constraints over them) in place; returns their names."""
    used = used_symbols(module)
    stale = [s.name for s in module.symbols if s.name not in used]
    if stale:
        gone = set(stale)
        module.constraints = [c for c in module.constraints
                              if not {s.name for s in sympy.sympify(c.expr).free_symbols} & gone]
        for name in stale:
            del module.symbols.infos[name]
    return stale


@register_pass
@dataclass(frozen=True)
class PruneSymbolsPass(ModulePass):
    name: ClassVar[str] = "prune-symbols"

    def run(self, module: Module, ctx: PassContext) -> bool:
        return bool(prune_stale_symbols(module))
