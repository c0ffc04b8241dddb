"""dce: remove pure ops whose results are unused (nested regions too) and unreferenced weights."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..ir import Block, Module, Op, WeightRef
from ..ops import get_opdef
from .base import ModulePass, PassContext, register_pass


def is_pure(op: Op) -> bool:
    """Whether `op` may be removed or merged: no side effects, nested ops included.

    Registered ops say so in their OpDef. Unregistered ops are assumed to have effects,
    except `test.*` ops (the dialect unit tests are written in), which are pure unless
    they carry an `effects` attribute.
    """
    if op.name in ("return", "yield"):
        return False
    d = get_opdef(op.name)
    if d is not None:
        pure = bool(d.pure)
    else:
        pure = op.dialect == "test" and "effects" not in op.attrs
    if not pure:
        return False
    return all(is_pure(o) for r in op.regions for b in r.blocks for o in b.ops
               if o.name not in ("return", "yield"))


def dce_block(block: Block) -> int:
    """Erase dead pure ops in `block` and its nested regions; returns how many."""
    removed = 0
    # Users follow producers in a block, so one backward sweep frees whole dead chains.
    for op in reversed(list(block.ops)):
        for r in op.regions:
            for b in r.blocks:
                removed += dce_block(b)
        if op.name not in ("return", "yield") and not any(r.uses for r in op.results) and is_pure(op):
            op.erase()
            removed += 1
    return removed


def referenced_weights(module: Module) -> set[str]:
    names: set[str] = set()

    def visit(v) -> None:
        if isinstance(v, WeightRef):
            names.add(v.name)
        elif isinstance(v, (list, tuple)):
            for x in v:
                visit(x)

    for op in module.walk():
        for v in op.attrs.values():
            visit(v)
    return names


def dce(module: Module) -> int:
    """Run dead-code elimination over every function; returns ops + weights removed."""
    removed = sum(dce_block(f.body) for f in module.functions.values())
    live = referenced_weights(module)
    for name in [n for n in module.weights if n not in live]:
        del module.weights[name]
        removed += 1
    return removed


@register_pass
@dataclass(frozen=True)
class DcePass(ModulePass):
    """Remove pure ops with unused results, recursively, and weights no op references."""

    name: ClassVar[str] = "dce"

    def run(self, module: Module, ctx: PassContext) -> bool:
        return dce(module) > 0
