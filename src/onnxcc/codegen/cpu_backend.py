"""The CPU backend: every version's kernel function in one LLVM module (cpu.py), one object
for the host (or `--triple` / `--cpu` / `--features`), linked with the dispatcher."""

from __future__ import annotations

import time
from pathlib import Path
from typing import ClassVar

from .backend import Emitted, StepClock
from .link import CPU_LINK, LinkTarget, build_library
from .llvm_target import host_cpu


class CpuBackend:
    name: ClassVar[str] = "cpu"
    emit_stages: ClassVar[tuple[str, ...]] = ("llvm", "asm", "lib")
    schedules: ClassVar[bool] = True
    link: ClassVar[LinkTarget] = CPU_LINK

    def __init__(self, triple: str | None = None, cpu: str | None = None, features: str | None = None,
                 opt: int = 3, parallel: bool = True):
        self.triple, self.cpu, self.features, self.opt, self.parallel = triple, cpu, features, opt, parallel

    @classmethod
    def from_options(cls, options) -> CpuBackend:
        return cls(options.triple, options.cpu, options.features, options.opt, options.parallel)

    def target_features(self) -> str:
        """The feature string schedules read: the host's unless told (or cross-compiling)."""
        feats = self.features
        if feats is None and self.triple is None:
            feats = host_cpu()[1]
        return feats or ""

    def vector_width(self) -> int:
        feats = self.target_features()
        if "+avx512f" in feats:
            return 16
        if "+avx" in feats:
            return 8
        return 4

    def target_info(self):
        from onnxcc.kernel.schedule import TargetInfo

        return TargetInfo.from_features(self.target_features(), parallel=self.parallel)

    def emit(self, module, name: str, stop: str, step: StepClock) -> Emitted:
        import llvmlite.binding as llvm
        from llvmlite import ir as llir

        from .cpu import emit_assembly, emit_llvm, emit_object

        t0 = time.perf_counter()
        llmod = llir.Module(name=name)
        llmod.triple = self.triple or llvm.get_process_triple()  # so --emit llvm output is self-describing
        for v in module.versions:
            emit_llvm(v.program, v.plan, v.program.name, llmod, parallel=self.parallel)
        step("llvm", time.perf_counter() - t0)
        if stop == "llvm":
            return Emitted(text=str(llmod))
        if stop == "asm":
            return Emitted(text=emit_assembly(llmod, self.triple, self.cpu, self.features, self.opt))
        t0 = time.perf_counter()
        obj = emit_object(llmod, self.triple, self.cpu, self.features, self.opt)
        step("codegen", time.perf_counter() - t0)
        return Emitted(objects=[obj])

    def metadata(self) -> dict:
        return {"cpu": self.cpu or host_cpu()[0]}

    def describe(self, spec, emitted: Emitted) -> None:
        import llvmlite.binding as llvm

        spec.target, spec.triple = self.name, self.triple or llvm.get_process_triple()

    def link_artifact(self, spec, emitted: Emitted, out: Path, cc: str) -> Path:
        out.mkdir(parents=True, exist_ok=True)
        paths = []
        for k, obj in enumerate(emitted.objects):
            path = out / (f"{spec.name}.o" if k == 0 else f"{spec.name}_{k}.o")
            path.write_bytes(obj)
            paths.append(path)
        lib = build_library(spec, paths, out, cc=cc)
        for path in paths:
            path.unlink()
        return lib
