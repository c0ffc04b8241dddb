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
        before = str(module)
        values = infer_shapes(module)
        ctx.options["known_values"] = values
        return str(module) != before


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
