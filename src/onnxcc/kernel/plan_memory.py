"""Workspace planning: where each temp buffer lives inside the one workspace of a call.

For now the plan is naive: every temp that owns memory (views take none) gets its own
64-byte aligned slot, in declaration order. Offsets and the total are Dims, i.e. sympy
expressions over the program's symbols when shapes are symbolic; codegen evaluates them
once per call. Liveness-based reuse will keep this interface.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import sympy

from onnxcc.ir import Dim, canon

from .program import KernelProgram

ALIGN = 64


@dataclass(frozen=True)
class MemoryPlan:
    """Byte offsets of temp buffers in the workspace (views resolve to their root buffer's
    offset) and the workspace size the caller must provide (64-byte aligned pointer)."""

    offsets: dict[str, Dim]
    workspace_bytes: Dim
    sizes: dict[str, Dim] = field(default_factory=dict)
    """bytes each planned buffer needs (unaligned)"""

    def describe(self) -> str:
        lines = [f"workspace: {self.workspace_bytes} bytes"]
        for name, off in self.offsets.items():
            lines.append(f"  {name}: offset {off}, {self.sizes.get(name, '?')} bytes")
        return "\n".join(lines)


def align_up(x: Dim, a: int = ALIGN) -> Dim:
    """The least multiple of `a` that is >= x (exact for symbolic x)."""
    if isinstance(x, int):
        return -(-x // a) * a
    return canon(sympy.ceiling(sympy.sympify(x) / a) * a)


def plan(program: KernelProgram) -> MemoryPlan:
    offsets: dict[str, Dim] = {}
    sizes: dict[str, Dim] = {}
    cursor: Dim = 0
    for buf in program.temps():
        offsets[buf.name] = cursor
        sizes[buf.name] = buf.nbytes()
        cursor = canon(cursor + align_up(buf.nbytes()))
    return MemoryPlan(offsets, canon(cursor), sizes)
