"""CompileOptions: every flag that changes what gets built, and the `--emit` stop points."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field

from ..codegen.backend import BACKENDS

#: the stop points of the pipeline (after the graph and version passes, after the kernel
#: passes), then every backend's own (in their order; `lib`, the whole artifact, last)
PIPELINE_STAGES = ("ir", "kernel")
EMIT_STAGES = ("ir", "kernel", "llvm", "asm", "ptx", "lib")
TARGETS = tuple(BACKENDS)


@dataclass
class CompileOptions:
    """Every flag that changes what gets built (all of it goes into the cache key)."""

    name: str | None = None
    #: narrowed symbol ranges: {"seq": (1, 2048)}
    dims: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: exact versions: {"batch": [1], "seq": [128, 512]}
    specialize: dict[str, list[int]] = field(default_factory=dict)
    #: the 0/1 rule (a symbol meeting a broadcast gets its own `== 1` version)
    specialize_one: bool = True
    #: divisibility versions `SYM % k == 0`; None picks k from the target's vector width
    divisible: int | None = None
    max_versions: int = 8
    target: str = "cpu"
    #: target cuda: the PTX target (the device's compute capability must be at least this)
    cuda_arch: str = "sm_80"
    triple: str | None = None
    cpu: str | None = None
    features: str | None = None
    opt: int = 3
    parallel: bool = True
    #: the C compiler (and flags) that builds the dispatcher and links the library: $CC, else cc
    cc: str = field(default_factory=lambda: os.environ.get("CC") or "cc")
    #: kernel-level fusion (kernel/fuse.py); False keeps one compute per lowered op
    fuse: bool = True
    #: bucket versions (pad up to the next bound, exact masks): {"seq": [64, 128, 512]}
    buckets: dict[str, list[int]] = field(default_factory=dict)
    #: multi-ISA: the versions are built once per LLVM CPU listed (e.g. x86-64-v3, znver4) into one
    #: library; the dispatcher picks by the running CPU's features (compiler/multi_isa.py)
    cpu_versions: list[str] = field(default_factory=list)

    def cache_key(self) -> dict:
        d = asdict(self)
        d["dims"] = {k: list(v) for k, v in sorted(self.dims.items())}
        d["specialize"] = {k: sorted(v) for k, v in sorted(self.specialize.items())}
        d["buckets"] = {k: sorted(set(v)) for k, v in sorted(self.buckets.items())}
        return d
