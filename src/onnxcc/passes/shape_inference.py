"""shape-inference: recompute every op's result types from its shape rule, in order.

Also propagates the values of small integer tensors (shape chains such as
Shape -> Gather -> Concat -> Reshape), so a Reshape whose target is computed at run time
still gets a symbolic shape. What cannot be proved becomes a module constraint.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..ir import Module
from ..ops.infer import MAX_TRACKED, infer_block, infer_op, infer_shapes
from .base import ModulePass, PassContext, register_pass

__all__ = ["MAX_TRACKED", "ShapeInferencePass", "infer_block", "infer_function_constraints", "infer_op",
           "infer_shapes"]


@register_pass
@dataclass(frozen=True)
class ShapeInferencePass(ModulePass):
    """Recompute symbolic result types for every op; record constraints."""

    name: ClassVar[str] = "shape-inference"

    def run(self, module: Module, ctx: PassContext) -> bool:
        before = _typing(module)
        values = infer_shapes(module)
        ctx.options["known_values"] = values
        return _typing(module) != before


def _typing(module: Module) -> tuple:
    """What inference may change: every value's type, the functions' result types, the
    constraints and the symbols (a count symbol is declared by its op's rule). Compared
    instead of the printed module, whose dims sympy prints slowly (a conv net's two
    printings were a tenth of its compile's Python time)."""
    types: list = []
    for f in module.functions.values():
        types += [a.type for a in f.params] + list(f.result_types)
        for op in f.walk():
            types += [r.type for r in op.results]
            types += [a.type for reg in op.regions for b in reg.blocks for a in b.args]
    syms = [(i.name, i.lo, i.hi, i.multiple_of) for i in module.symbols.infos.values()]
    return types, [c.expr for c in module.constraints], syms


def infer_function_constraints(module: Module, f) -> list:
    """Re-infer one function and return the constraints it needs, leaving the module's own
    constraint list untouched (a version's constraints become part of its guard)."""
    saved = module.constraints
    module.constraints = []
    try:
        infer_block(f.body, module, {})
        f.result_types = [v.type for v in f.return_op.operands]
        return module.constraints
    finally:
        module.constraints = saved
