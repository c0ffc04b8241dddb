"""The Backend protocol: a target is an object, never an `if target == ...` in shared code.

A backend says what it can do through attributes (`schedules`: whether kernel schedules
apply; `emit_stages`: its `--emit` stop points; `link`: its part of the dispatcher and the
link) and does its part of the build through methods: the target's vector width and
schedule view, `emit` (kernel module -> objects / device code, or a stop point's text),
`describe` (its fields of the artifact spec) and `link_artifact` (-> libNAME.so).

Backends register by name in `BACKENDS` (imported lazily: the CUDA backend costs nothing
to a CPU build); `compiler` builds one from the options with `make_backend`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Protocol

if TYPE_CHECKING:
    from onnxcc.kernel.module import KernelModule
    from onnxcc.kernel.schedule import TargetInfo

    from .c.abi import ArtifactSpec, DeviceCode, KernelLaunch
    from .c.link import LinkTarget

#: name -> "module:class" of every backend
BACKENDS = {
    "cpu": "onnxcc.codegen.cpu.backend:CpuBackend",
    "cuda": "onnxcc.codegen.cuda.backend:CudaBackend",
}

#: `step(name, seconds)`: how a backend reports the time of its steps
StepClock = Callable[[str, float], None]


@dataclass
class Emitted:
    """What `Backend.emit` produced."""

    text: str = ""
    """the stop point's text (`--emit llvm / asm / ptx`), empty for `lib`"""
    objects: list[bytes] = field(default_factory=list)
    """native relocatable objects to link"""
    device: DeviceCode | None = None
    """device code the library carries and loads at run time"""
    launches: list[list[KernelLaunch]] = field(default_factory=list)
    """per version: the kernel launches that run it (device targets)"""


class Backend(Protocol):
    name: ClassVar[str]
    """the target's name (`--target`, NAME.json's "target")"""
    emit_stages: ClassVar[tuple[str, ...]]
    """its `--emit` stop points after the kernel IR, `lib` last"""
    schedules: ClassVar[bool]
    """whether kernel schedules (loop order, vector width, GEMM tiles) apply: False where
    the backend maps each compute's domain onto a grid itself"""
    fused_attention: ClassVar[bool]
    """whether it runs a fused-attention compute (kernel/flash.py) over key blocks: attention
    ops lower to that form only then (as plain loops it would recompute every score)"""
    link: ClassVar[LinkTarget]
    """its part of the dispatcher, the header and the link"""

    def vector_width(self) -> int:
        """f32 lanes of the widest vector unit (the divisibility versions' default k)."""
        ...

    def target_info(self) -> TargetInfo:
        """The schedules' view of the machine."""
        ...

    def int8_dot(self) -> bool:
        """Whether it runs the 8-bit GEMM calls of kernel/i8gemm.py (the quantized ops lower
        their contractions with constant weights to them only then)."""
        ...

    def f32_conv_call(self) -> bool:
        """Whether it runs the f32 implicit-GEMM conv call of kernel/conv_call.py (dense
        channels-last convs lower to it only then)."""
        ...

    def emit(self, module: KernelModule, name: str, stop: str, step: StepClock) -> Emitted:
        """Code for every version of `module`, stopping after `stop`."""
        ...

    def describe(self, spec: ArtifactSpec, emitted: Emitted) -> None:
        """Fill in the spec's target fields (target, triple, device code, launches)."""
        ...

    def metadata(self) -> dict:
        """The target's entries of NAME.json's "metadata" (cpu name, CUDA arch)."""
        ...

    def link_artifact(self, spec: ArtifactSpec, emitted: Emitted, out: Path, cc: str) -> Path:
        """NAME.h, NAME.json and libNAME.so (plus the target's files) in `out`."""
        ...


def backend_class(name: str) -> type:
    module, _, cls = BACKENDS[name].partition(":")
    return getattr(importlib.import_module(module), cls)


def make_backend(options) -> Backend:
    """The backend `options.target` names, configured from the options (CompileOptions or
    anything with its fields)."""
    from onnxcc.errors import OnnxccError

    if options.target not in BACKENDS:
        raise OnnxccError(f"unknown target {options.target!r} (one of {', '.join(BACKENDS)})")
    return backend_class(options.target).from_options(options)
