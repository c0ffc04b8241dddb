"""plan-memory: a workspace layout per version (kernel/plan_memory.py); reserve-scratch: the
scratch region the schedules ask for (GEMM packing), after the rest of the layout."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ...errors import CompileError
from ...ir import print_dim
from ..fuse import count_kernels
from ..module import KernelModule
from ..plan_memory import PlanMemos, plan, reserve_scratch


@dataclass(frozen=True)
class PlanMemoryPass:
    name: ClassVar[str] = "plan-memory"
    keeps_ir: ClassVar[bool] = True  # the programs are read, the plans set beside them

    def run(self, module: KernelModule, ctx) -> bool:
        memos = PlanMemos()  # shared by the versions' plans (the same ranges: the same answers)
        for v in module.versions:
            mplan = plan(v.program, module.graph.symbols, memos)
            v.plan = mplan
            v.stats.update({"kernels_after": count_kernels(v.program.body),
                            "arena_bytes": print_dim(mplan.workspace_bytes),
                            "peak_live_bytes": print_dim(mplan.peak_live_bytes),
                            "total_bytes": print_dim(mplan.total_bytes),
                            # NAME.json: this version's arena may be above what a full search gives
                            **({"plan_proofs_cut": True} if mplan.proofs_cut else {})})
        return bool(module.versions)


@dataclass(frozen=True)
class ReserveScratchPass:
    name: ClassVar[str] = "reserve-scratch"
    keeps_ir: ClassVar[bool] = True

    def run(self, module: KernelModule, ctx) -> bool:
        changed = False
        for v in module.versions:
            if v.plan is None:
                raise CompileError(f"reserve-scratch: version {v.program.name} has no memory plan "
                                 "(run plan-memory first)")
            new = reserve_scratch(v.plan, v.program)
            changed |= new is not v.plan
            v.plan = new
        return changed
