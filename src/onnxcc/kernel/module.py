"""The kernel module: what the kernel passes transform, one kernel program per version.

`lower-to-kernel` turns the versioned graph module into one of these; fuse, schedule,
plan-memory and reserve-scratch work on it in place; the backend emits it. It prints (the
instruments' `--print-ir-after` / `--dump-dir` text, and `onnxcc compile --emit kernel`)
and verifies (every program's `verify`), like the graph module.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..ir import Function, Module, print_bool
from .plan_memory import MemoryPlan
from .program import KernelProgram


@dataclass
class KernelVersion:
    """One version: its graph function (guard, substitution, attrs) and its kernel program."""

    function: Function
    program: KernelProgram
    plan: MemoryPlan | None = None
    """the workspace layout, from plan-memory on"""
    stats: dict = field(default_factory=dict)
    """kernel counts and memory figures for the artifact's metadata (VersionSpec.info)"""


@dataclass
class KernelModule:
    graph: Module
    """the versioned graph module it was lowered from (symbols, constraints, signature)"""
    versions: list[KernelVersion] = field(default_factory=list)
    """in dispatch order: the most specialised first, the generic version last"""

    #: file suffix of a dump (the kernel IR prints; it does not parse back yet)
    dump_suffix = ".kir"

    @property
    def name(self) -> str:
        return self.graph.name

    def verify(self) -> None:
        for v in self.versions:
            v.program.verify()

    def __str__(self) -> str:
        return "\n\n".join(self.format_version(k, v) for k, v in enumerate(self.versions))

    @staticmethod
    def format_version(k: int, v: KernelVersion) -> str:
        f, st = v.function, v.stats
        head = f"// version {k}: @{f.name} guard {print_bool(f.guard)}\n"
        if "kernels_after" in st:  # memory planned
            head += (f"// kernels {st['kernels_before']} -> {st['kernels_after']}, "
                     f"arena {st['arena_bytes']}, peak {st['peak_live_bytes']}\n")
        return head + str(v.program)
