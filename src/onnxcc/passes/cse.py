"""cse: merge pure ops with the same name, operands, attributes and result types.

Scope is one block at a time: an op is replaced by an identical op earlier in the same
block. Regions are isolated from above (captures come in as block arguments), so a region
starts with an empty table and never reuses ops of the enclosing block. Ops with regions
are never merged.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import sympy

from ..ir import Block, Module, Op, TensorType, WeightRef
from .base import ModulePass, PassContext, register_pass
from .dce import is_pure


def attr_key(v):
    """A hashable key that is equal exactly when two attribute values are the same.

    Type tags keep 1, 1.0 and True apart; floats compare by bits (so nan equals nan and
    0.0 differs from -0.0); arrays by dtype, shape and bytes.
    """
    if isinstance(v, np.ndarray):
        return ("nd", v.dtype.str, v.shape, np.ascontiguousarray(v).tobytes())
    if isinstance(v, bool):
        return ("b", v)
    if isinstance(v, int):
        return ("i", v)
    if isinstance(v, float):
        return ("f", struct.pack("<d", v))
    if isinstance(v, (list, tuple)):
        return ("l", tuple(attr_key(x) for x in v))
    if isinstance(v, (str, WeightRef, TensorType, sympy.Basic)):
        return (type(v).__name__, v)
    if isinstance(v, dict):
        return ("d", tuple(sorted((k, attr_key(x)) for k, x in v.items())))
    if isinstance(v, np.generic):
        return attr_key(v.item())
    return (type(v).__name__, v)  # enums (DType) and other hashable values


def op_key(op: Op):
    return (op.name, tuple(id(v) for v in op.operands),
            tuple(sorted((k, attr_key(v)) for k, v in op.attrs.items())),
            tuple(r.type for r in op.results))


def cse_block(block: Block) -> int:
    """Merge duplicates in `block` and, separately, inside each nested region."""
    seen: dict = {}
    merged = 0
    for op in list(block.ops):
        for r in op.regions:
            for b in r.blocks:
                merged += cse_block(b)
        if op.regions or not op.results or not is_pure(op):
            continue
        key = op_key(op)
        first = seen.get(key)
        if first is None:
            seen[key] = op
            continue
        for old, new in zip(op.results, first.results):
            old.replace_all_uses_with(new)
        op.erase()
        merged += 1
    return merged


def cse(module: Module) -> int:
    """Run CSE over every function; returns the number of ops merged away."""
    return sum(cse_block(f.body) for f in module.functions.values())


@register_pass
@dataclass(frozen=True)
class CsePass(ModulePass):
    """Replace a pure op by an identical one earlier in the same block."""

    name: ClassVar[str] = "cse"

    def run(self, module: Module, ctx: PassContext) -> bool:
        return cse(module) > 0
