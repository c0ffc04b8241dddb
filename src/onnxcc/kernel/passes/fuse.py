"""fuse: inline injective producers and attach epilogues (kernel/fuse.py), in every version,
control-flow bodies included (innermost first)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..control import has_control, optimize_nested
from ..fuse import count_kernels, fuse
from ..module import KernelModule


@dataclass(frozen=True)
class FusePass:
    name: ClassVar[str] = "fuse"

    def run(self, module: KernelModule, ctx) -> bool:
        changed = False
        symbols = module.graph.symbols
        for v in module.versions:
            before = count_kernels(v.program.body)
            fuse(v.program, symbols)
            if has_control(v.program):  # the same fusion inside If / Loop / Scan bodies
                optimize_nested(v.program, symbols, fuse=True, target=None)
            changed |= count_kernels(v.program.body) != before
        return changed
