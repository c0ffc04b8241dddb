"""schedule: attach a loop schedule (order, vector width, tails, parallel axis, the GEMM
path) to every compute of every version, control-flow bodies included.

The version's divisibility facts (`multiple_of`) remove vector tails. Only backends that
turn loops into loops themselves take schedules (CPU); the pipeline leaves this pass out
for one that maps domains onto a grid (CUDA).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..control import has_control, optimize_nested
from ..module import KernelModule
from ..schedule import TargetInfo, facts_from_attrs, schedule_program


@dataclass(frozen=True)
class SchedulePass:
    name: ClassVar[str] = "schedule"
    #: the machine (vector width, threads); None: the defaults of TargetInfo
    target: TargetInfo | None = None

    def run(self, module: KernelModule, ctx) -> bool:
        target = self.target or TargetInfo()
        symbols = module.graph.symbols
        for v in module.versions:
            facts = facts_from_attrs(v.function.attrs.get("multiple_of", []), symbols)
            schedule_program(v.program, target, facts)
            if has_control(v.program):
                optimize_nested(v.program, symbols, fuse=False, target=target, facts=facts)
        return bool(module.versions)
