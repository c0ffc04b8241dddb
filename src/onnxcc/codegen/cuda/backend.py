"""The CUDA backend: every compute of every version a PTX kernel (cuda.py, llvmlite NVPTX),
the PTX and the const buffers embedded in libNAME.so beside a launch function per version
(cuda/host.py); loaded at run time through the driver API, so no build step needs a GPU.

Stop points: `llvm` (the NVPTX LLVM module), `asm` / `ptx` (the PTX text), `lib`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import ClassVar

from onnxcc.errors import CompileError
from onnxcc.ir import DType

from ..backend import Emitted, StepClock
from ..c.build import build_library
from ..c.link import LinkTarget
from .host import CUDA_LINK

#: threads of a warp: the divisibility versions' default k
WARP = 32


class CudaBackend:
    name: ClassVar[str] = "cuda"
    emit_stages: ClassVar[tuple[str, ...]] = ("llvm", "asm", "ptx", "lib")
    schedules: ClassVar[bool] = False  # kernels map each compute's domain onto the grid themselves
    fused_attention: ClassVar[bool] = False  # attention keeps its score buffer
    link: ClassVar[LinkTarget] = CUDA_LINK

    def __init__(self, arch: str = "sm_80", opt: int = 3, features: str | None = None):
        self.arch, self.opt, self.features = arch, opt, features

    @classmethod
    def from_options(cls, options) -> CudaBackend:
        return cls(options.cuda_arch, options.opt, options.features)

    def vector_width(self) -> int:
        return WARP

    def target_info(self):
        from onnxcc.kernel.schedule import TargetInfo

        return TargetInfo(vector_width=WARP)

    def int8_dot(self) -> bool:
        return False  # the 8-bit GEMM calls are CPU code (codegen/cpu/gemm_int8.py)

    def f32_conv_call(self) -> bool:
        return False  # the implicit-GEMM conv call is CPU code (codegen/cpu/gemm_implicit.py)

    def emit(self, module, name: str, stop: str, step: StepClock) -> Emitted:
        from ..c.abi import DeviceCode
        from .emit import BLOCK, CudaModule

        t0 = time.perf_counter()
        cm = CudaModule(name, self.arch)
        launches = []
        symbols = [s.name for s in module.graph.symbols]
        for v in module.versions:
            prog = v.program
            if prog.symbols != symbols:
                raise CompileError(f"cuda: version {prog.name} takes symbols {prog.symbols}, "
                                   f"the module has {symbols}")
            packed = sorted({b.dtype.value for b in prog.buffers.values() if b.dtype.bits < 8})
            if packed:  # the loader's device path moves unpacked arrays; stores would need byte atomics
                raise CompileError(f"cuda: sub-byte types ({', '.join(packed)}) are not supported by the CUDA "
                                   "backend; use the cpu target")
            if any(b.dtype is DType.string for b in prog.buffers.values()):  # host pointers, host runtime
                raise CompileError("cuda: string tensors are not supported by the CUDA backend; use the cpu target")
            launches.append(cm.add_program(prog, v.plan, prog.name))
        step("llvm", time.perf_counter() - t0)
        if stop == "llvm":
            return Emitted(text=str(cm.ir))
        t0 = time.perf_counter()
        ptx = cm.ptx(self.opt, self.features or "")
        step("codegen", time.perf_counter() - t0)
        if stop in ("asm", "ptx"):
            return Emitted(text=ptx)
        device = DeviceCode(self.arch, ptx, list(cm.kernels), dict(cm.consts), BLOCK)
        return Emitted(device=device, launches=launches)

    def metadata(self) -> dict:
        return {"cuda_arch": self.arch}

    def describe(self, spec, emitted: Emitted) -> None:
        from .emit import TRIPLE

        spec.target, spec.triple = self.name, TRIPLE
        for v, la in zip(spec.versions, emitted.launches, strict=True):
            v.launches = la
            v.info["kernels"] = len(la)
        spec.device = emitted.device

    def link_artifact(self, spec, emitted: Emitted, out: Path, cc: str) -> Path:
        out.mkdir(parents=True, exist_ok=True)
        return build_library(spec, [], out, cc=cc)
