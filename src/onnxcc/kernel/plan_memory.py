"""Workspace planning: where each temp buffer lives inside the one workspace of a call.

    mp = plan(program, symbols)      # after fusion: only the temps that are left get slots
    mp.offsets, mp.workspace_bytes, mp.peak_live_bytes, mp.total_bytes

Liveness is taken over the statement order: a temp (with all its views) is live from the
first statement that touches it to the last one. Buffers whose lifetimes overlap get
disjoint 64-byte aligned slots; others may share memory:

- in place: an elementwise compute writes its output over an input temp that dies there
  when both have the same shape and dtype and every load of that input reads exactly the
  element being written (identity index map), so each element is read before it is
  overwritten, by the same iteration;
- best fit: slots are placed biggest first, each at the offset (0 or the end of an
  overlapping slot) that leaves the smallest gap below an overlapping slot, else on top.

Offsets and sizes are Dims. With concrete sizes (a version whose symbols are fixed) the
plan is a static best fit. With symbolic sizes every placement is checked by `prove_le`
over the symbols' ranges (polynomials in positive symbols, `ceiling` bounds, `Max`): a slot
reuses a gap only when it provably fits, else it is stacked on top (`Max` of the ends when
no end provably dominates), so offsets are expressions the codegen evaluates once per
call. `peak_live_bytes` is the lower bound (the most aligned bytes live at one statement;
a `Max` when symbolic), `total_bytes` the sum of all temps (aligned). Temps no statement
touches still get slots, stacked after the others.
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
    scratch_offset: Dim | None = None
    """where the scratch region that scheduled computes share (GEMM packing) starts; None
    when no compute needs one (see `reserve_scratch`)"""
    peak_live_bytes: Dim = 0
    """the most (64-byte aligned) bytes of temps live at any one statement: the lower bound"""
    total_bytes: Dim = 0
    """the sum of all temps' aligned sizes (what a plan without reuse would need)"""

    def describe(self) -> str:
        lines = [f"workspace: {self.workspace_bytes} bytes (peak live {self.peak_live_bytes}, "
                 f"sum of buffers {self.total_bytes})"]
        for name, off in self.offsets.items():
            lines.append(f"  {name}: offset {off}, {self.sizes.get(name, '?')} bytes")
        return "\n".join(lines)


def align_up(x: Dim, a: int = ALIGN) -> Dim:
    """The least multiple of `a` that is >= x (exact for symbolic x)."""
    if isinstance(x, int):
        return -(-x // a) * a
    return canon(sympy.ceiling(sympy.sympify(x) / a) * a)


PLAN_PLACEHOLDER


def reserve_scratch(mplan: MemoryPlan, program: KernelProgram) -> MemoryPlan:
    """`mplan` grown by the scratch region the program's schedules ask for (a no-op when
    none does, or when it is already reserved): it starts 64-byte aligned after the rest."""
    from dataclasses import replace

    from .schedule import scratch_bytes

    need = scratch_bytes(program)
    if mplan.scratch_offset is not None or need == 0:
        return mplan
    off = align_up(mplan.workspace_bytes)
    return replace(mplan, scratch_offset=off, workspace_bytes=canon(off + align_up(need)))
