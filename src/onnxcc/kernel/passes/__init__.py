"""The kernel passes: fold-consts, fuse, schedule, plan-memory, reserve-scratch over a `KernelModule`.

They follow the pass protocol of `onnxcc.passes` (a frozen dataclass with a kebab-case
`name` and `run(module, ctx) -> changed`) without importing it: the kernel layer imports
only `ir`. `onnxcc.passes.registry_all` registers `KERNEL_PASSES` beside the graph passes,
so one pass manager runs both and `--print-ir-after=fuse` works like `=canonicalize`.
"""

from .fold_consts import FoldConstsPass
from .fuse import FusePass
from .plan_memory import PlanMemoryPass, ReserveScratchPass
from .schedule import SchedulePass

KERNEL_PASSES = (FoldConstsPass, FusePass, SchedulePass, PlanMemoryPass, ReserveScratchPass)

__all__ = ["KERNEL_PASSES", "FoldConstsPass", "FusePass", "PlanMemoryPass", "ReserveScratchPass", "SchedulePass"]
