"""The compile driver's CUDA stages: kernel programs -> PTX -> libNAME.so (`--target cuda`).

`compile_model` runs the shared stages (import, graph passes, versions, lowering, fusion,
memory planning) and hands the kernel programs here. Stop points: `llvm` (the NVPTX LLVM
module), `asm` / `ptx` (the PTX text), `lib` (NAME.h, NAME.json, NAME.ptx, libNAME.so).
"""

from __future__ import annotations

import time

from .errors import CompileError


def finish_cuda(art, module, programs, options, emit: str):
    from .codegen.abi import DeviceCode
    from .codegen.cuda import BLOCK, TRIPLE, CudaModule
    from .codegen.link import build_library
    from .driver import _record_timings, artifact_spec

    t = art.timings
    t0 = time.perf_counter()
    cm = CudaModule(art.name, options.cuda_arch)
    launches = []
    symbols = [s.name for s in module.symbols]
    for f, prog, mplan in programs:
        if prog.symbols != symbols:
            raise CompileError(f"cuda: version {prog.name} takes symbols {prog.symbols}, "
                               f"the module has {symbols}")
        launches.append(cm.add_program(prog, mplan, prog.name))
    t["llvm"] = time.perf_counter() - t0
    if emit == "llvm":
        art.text = str(cm.ir)
        return art
    t0 = time.perf_counter()
    ptx = cm.ptx(options.opt, options.features or "")
    t["codegen"] = time.perf_counter() - t0
    if emit in ("asm", "ptx"):
        art.text = ptx
        return art

    t0 = time.perf_counter()
    spec = artifact_spec(module, art.name, programs, options)
    spec.target, spec.triple = "cuda", TRIPLE
    spec.metadata.pop("cpu", None)
    spec.metadata["cuda_arch"] = options.cuda_arch
    for v, la in zip(spec.versions, launches):
        v.launches = la
        v.info["kernels"] = len(la)
    spec.device = DeviceCode(options.cuda_arch, ptx, list(cm.kernels), dict(cm.consts), BLOCK)
    out = art.out_dir
    out.mkdir(parents=True, exist_ok=True)
    lib = build_library(spec, [], out, cc=options.cc)
    t["link"] = time.perf_counter() - t0
    art.library, art.header, art.metadata = lib, out / f"{art.name}.h", out / f"{art.name}.json"
    _record_timings(art)
    return art
