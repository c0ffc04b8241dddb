"""The CPU backend: every version's kernel function in LLVM (emit.py), compiled for the host
(or `--triple` / `--cpu` / `--features`) and linked with the dispatcher. `--emit llvm` / `asm`
print one module holding every version; a library gets one module and object per version (or
per part of a version), built in parallel where there are several CPUs (`_emit_parallel`),
plus one object holding the weight constants."""

from __future__ import annotations

import functools
import hashlib
import os
import threading
import time
from pathlib import Path
from typing import ClassVar

import numpy as np

from ..backend import Emitted, StepClock
from ..c.build import build_library
from ..c.link import CPU_LINK, LinkTarget
from ..gc_quiet import gc_frozen, refreeze
from ..llvm import object_cache
from ..llvm.target import KERNEL, LIGHT, host_cpu, resolve_target
from .dedup import forward_duplicates, forward_version
from .features import check_cpu, required_features
from .shared_helpers import HelpersOnce, kernel_family, shared_modules
from .split import calls_direct_micro_kernels, control_only, size, split_by_level


@functools.lru_cache(maxsize=16)
def _checked_target(triple: str | None, cpu: str | None, features: str | None) -> str:
    return check_cpu(triple, cpu, features)


class CpuBackend:
    name: ClassVar[str] = "cpu"
    emit_stages: ClassVar[tuple[str, ...]] = ("llvm", "asm", "lib")
    schedules: ClassVar[bool] = True
    fused_attention: ClassVar[bool] = True  # the schedule's Flash, cpu/flash.py
    link: ClassVar[LinkTarget] = CPU_LINK

    def __init__(self, triple: str | None = None, cpu: str | None = None, features: str | None = None,
                 opt: int = 3, parallel: bool = True):
        self.triple, self.cpu, self.features, self.opt, self.parallel = triple, cpu, features, opt, parallel

    #: `--cpu-versions`: one library may hold versions for several CPU levels
    cpu_levels: ClassVar[bool] = True

    @classmethod
    def check_options(cls, options) -> str:
        """"" when LLVM knows the --triple, --cpu (each of --cpu-versions) and --features, else
        the problem with a hint (LLVM itself would only warn and ignore the name, or abort)."""
        for cpu in options.cpu_versions or [options.cpu]:
            if options.triple or cpu or options.features:
                problem = _checked_target(options.triple, cpu, options.features)
                if problem:
                    return problem.replace("--cpu ", "--cpu-versions ") if options.cpu_versions else problem
        return ""

    @classmethod
    def from_options(cls, options) -> CpuBackend:
        problem = cls.check_options(options)
        if problem:
            from onnxcc.errors import OnnxccError

            raise OnnxccError(problem)
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

    def int8_dot(self) -> bool:
        """AVX-512 VNNI (vpdpbusd, gemm_int8.py) among the features the library is built for:
        the host's, or those of --cpu / --features (each level of --cpu-versions on its own),
        so a library for a CPU without it never contains the instruction."""
        triple, cpu, features = resolve_target(self.triple, self.cpu, self.features)
        return "avx512vnni" in required_features(triple, cpu, features)

    def f32_conv_call(self) -> bool:
        """AVX-512F among the features the library is built for (gemm_implicit.py's micro-kernel
        holds 24 zmm accumulators; on 16 ymm registers it would spill)."""
        triple, cpu, features = resolve_target(self.triple, self.cpu, self.features)
        return "avx512f" in required_features(triple, cpu, features)

    def target_info(self):
        from onnxcc.kernel.schedule import TargetInfo

        return TargetInfo.from_features(self.target_features(), parallel=self.parallel)

    def emit(self, module, name: str, stop: str, step: StepClock) -> Emitted:
        import llvmlite.binding as llvm
        from llvmlite import ir as llir

        from .emit import KERNEL_FNTY, emit_assembly, emit_llvm

        if stop == "lib":
            with gc_frozen():  # the passes' survivors too (nested in the driver's)
                return self._emit_parallel(module, name, step)
        t0 = time.perf_counter()
        llmod = llir.Module(name=name)
        llmod.triple = self.triple or llvm.get_process_triple()  # so --emit llvm output is self-describing
        twins = _twins(module)
        slots: dict = {}  # the hoisted dims' slots, one numbering for all versions (cpu/hoist_dims.py)
        for k, v in enumerate(module.versions):
            if k in twins:  # the same program as an earlier version: its entry calls that one's
                forward_version(llmod, v.program.name, twins[k], KERNEL_FNTY)
                continue
            emit_llvm(v.program, v.plan, v.program.name, llmod, parallel=self.parallel, hoist_slots=slots)
        step("llvm", time.perf_counter() - t0)
        if stop == "llvm":
            return Emitted(text=str(llmod))
        return Emitted(text=emit_assembly(llmod, self.triple, self.cpu, self.features, self.opt))

    def _emit_parallel(self, module, name: str, step: StepClock) -> Emitted:
        """One LLVM module (and object) per version, optimised and compiled in forked worker
        processes (llvmlite serialises every LLVM call behind one lock, so threads would not
        overlap; one job: in this process). The weight constants all versions share are defined once, in their own
        object; each version module sees them `available_externally` (the optimiser still
        reads their values, nothing is emitted twice). A version whose program and plan
        equal an earlier one's is not emitted: its entry, in a module of stubs, calls the
        earlier entry (`_twins`); a function identical to another
        one, of its version or another, is compiled once (`forward_duplicates`); with fewer versions than workers
        each version's module is cut into parts (`split_by_level`) so every worker has work,
        and functions compiled at a lower -O level (`_LOW_OPT`) go to parts of their own. The
        never-inlined helpers go to modules of their own, compiled once for every version and
        part (`shared_modules`): the GEMM micro-kernels one module per tile family (their row
        variants together) through the short pipeline (`KERNEL`), the rest in one at -O1 (`_helper_opt`)."""
        import llvmlite.binding as llvm
        from llvmlite import ir as llir

        from .emit import KERNEL_FNTY, emit_llvm

        t0 = time.perf_counter()
        triple = self.triple or llvm.get_process_triple()
        versions, consts = [], {}
        jobs = _jobs()
        twins = _twins(module)
        stubs = llir.Module(name=f"{name}.twins")  # the entries of versions that another one's code serves
        stubs.triple = triple
        for k, target in twins.items():
            forward_version(stubs, module.versions[k].program.name, target, KERNEL_FNTY)
        # fewer versions than workers: split them
        parts = -(-jobs // max(1, len(module.versions) - len(twins)))
        # the hoisted dims' slots, one numbering for all versions, so that bodies two versions
        # emit alike print alike and `forward_duplicates` compiles them once (cpu/hoist_dims.py)
        slots: dict = {}
        once = HelpersOnce()  # the micro-kernels built in the first module that calls them only
        for k, v in enumerate(module.versions):
            if k in twins:
                continue
            m = llir.Module(name=f"{name}.{v.program.name}")
            m.triple = triple
            with once:
                emit_llvm(v.program, v.plan, v.program.name, m, parallel=self.parallel, hoist_slots=slots)
            for gname, gv in m.globals.items():
                if gname.startswith(_CONST_PREFIX) and isinstance(gv, llir.GlobalVariable):
                    if gname not in consts:  # printed once, the text shared by every module
                        consts[gname] = (gv, _bytes_text(gv.initializer))
                    gv.initializer = consts[gname][1]
                    if _nbytes(gv.value_type) > _INLINE_CONST_BYTES:
                        gv.initializer, gv.linkage = None, "external"  # not re-printed, not re-parsed
                        gv.storage_class = "hidden"  # printed after the linkage: addressed without the GOT
                    else:
                        gv.linkage = "available_externally hidden"
            versions.append((m, v.program.name))
            refreeze()  # this version's IR objects live until the objects come back
        # the micro-kernels, once for all versions and parts; their names depend on the target
        # only, so the object cache serves their modules to any library (`_kernel_prefix`)
        shared = shared_modules(versions, name, kernel_family, _kernel_prefix(self.triple, self.cpu, self.features),
                                once)
        if versions:  # before the split: a stub's target may be in any part
            forward_duplicates(versions)
        mods = [(part, lv) for m, prefix in versions
                for part, lv in split_by_level(m, prefix, parts, functools.partial(_fn_opt, prefix, self.opt))]
        cmod = llir.Module(name=f"{name}.consts")
        cmod.triple = triple
        for gname, (gv, init) in consts.items():
            c = llir.GlobalVariable(cmod, gv.value_type, gname)
            c.initializer, c.global_constant, c.align = init, gv.global_constant, gv.align
            # weak: a multi-ISA library links several levels' objects, whose weights share names
            c.unnamed_addr, c.linkage = gv.unnamed_addr, "weak_odr hidden"
        step("llvm", time.perf_counter() - t0)
        t0 = time.perf_counter()
        target = (self.triple, self.cpu, self.features)
        # loop strength reduction only for the micro-kernels (llvm/target.py `_no_lsr`); the
        # GEMM micro-kernels (a module per tile family) only through the short pipeline
        helpers = [(text, (*target, _helper_opt(self.opt, family))) for text, family in shared]
        pieces = [(m, (*target, (*(lv if isinstance(lv, tuple) else (lv, lv)), False))) for m, lv in mods]
        if twins:
            pieces.append((stubs, (*target, (self.opt, self.opt, False))))
        # (the constants' module holds data only: nothing for the optimiser to do)
        refreeze()  # the split parts and stubs too: no full collection walks them again
        objs = compile_in_workers([(cmod, (*target, 0)), *helpers, *pieces], jobs)
        object_cache.prune()
        step("codegen", time.perf_counter() - t0)
        return Emitted(objects=objs)

    def metadata(self) -> dict:
        return {"cpu": self.cpu or host_cpu()[0]}

    def describe(self, spec, emitted: Emitted) -> None:
        import llvmlite.binding as llvm

        spec.target, spec.triple = self.name, self.triple or llvm.get_process_triple()
        spec.cpu_features = self.required_features(spec.triple)

    def required_features(self, triple: str) -> list[str]:
        """What the kernels may use (the dispatcher checks them at the first call)."""
        cpu, feats = self.cpu or "", self.features or ""
        if self.triple is None and self.cpu is None:  # the build host's CPU
            host_name, host_feats = host_cpu()
            cpu, feats = host_name, feats or host_feats
        return required_features(triple, cpu, feats)

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


#: version functions LLVM compiles at a lower -O level than the build's: (name part, least
#: size in instructions as emitted, level). A conv's B packer (`gemm.packb.*`, its im2col copy
#: into scratch, 300-700 instructions of index arithmetic) costs -O3 three to ten times -O2's
#: LLVM time (0.3-1.5 s each on squeezenet / mobilenet_v3) and measured no slower at -O2
#: (-O1, without the vectorisers, was 3-14% slower); a plain matmul's packer (under 200) is
#: cheap at -O3 and measured 3-7% faster there on the transformer's attention
_LOW_OPT = ((".gemm.packb.", 256, 2),)


#: a version's entry function that is control only (`control_only`: sizes, the calls of the
#: parallel bodies and GEMMs, no compute loop of its own) runs once per call, so LLVM's full
#: IR optimiser buys it little: it took 0.35 s of -O3 per version on squeezenet (3,400
#: instructions of size arithmetic), 0.15 s with only the clean-up passes (`LIGHT`) and the
#: code generator at -O1, whose object is smaller (24.9 KB against 25.7 KB). Only from
#: CONTROL_MIN instructions (as emitted): a small entry costs little at -O3, and there the
#: optimiser may inline a body it calls directly (small work: not through the thread pool)
#: into it, 80 of a tiny model's 420 instructions per call
CONTROL_OPT = (LIGHT, 1)
CONTROL_MIN = 512


#: a GEMM task body whose micro-kernels read A in place (`gemm.*` calling only `.direct`
#: micro-kernels: a conv's 1x1 / implicit rows; its hot loop is that call, whose module has
#: its own pipeline, `KERNEL`; around it tile loops and the epilogue's runs, which carry
#: forced `llvm.loop.vectorize` hints, vectorised at -O1 too) at -O1: a third less LLVM time
#: than -O3 (ppocr_det_v4's 70: 3.46 -> 2.32 s, mobilenet_v3_small's 35: 1.50 -> 1.04 s),
#: outputs bit-identical and run time within noise on the zoo's conv nets, bert, the
#: transformer and the 512x2048 MLP. A body that packs A itself (`.aMR` micro-kernels, one
#: of the transformer's) stays at -O3: its A packing loops were not measured apart. Measured
#: and not taken: the clean-up passes only (`LIGHT`, 1.1 s
#: on ppocr) ran mobilenet_v3_small 4-8% slower, -O1 with the unroller 10-14% slower on
#: ppocr; the parallel bodies (depthwise taps, elementwise, copies) need -O3's SLP vectoriser
#: and unroller: at -O1 mobilenet_v3_small ran 1.2x, bert 1.3x slower
GEMM_TASK_OPT = (1, 1)


#: the shared helpers' module but the GEMM micro-kernels' (the conv and channel pool calls:
#: entries, task bodies, border and grid code, gemm_implicit.py's micro-kernel; the GEMV and
#: int8 kernels where a model has them) at -O1: 0.45-0.65 s less LLVM time on squeezenet1_1
#: (1.58 -> 1.12 s) and ppocr_det_v4 (1.78 -> 1.13 s), outputs bit-identical, run time within
#: noise on both, mobilenet_v3_small and the transformer
HELPER_OPT = (1, 1)


def _helper_opt(opt: int, family: str | None) -> tuple[int, int, bool]:
    """(IR optimiser level, code generator level, loop strength reduction) of a shared
    helpers' module in an -O`opt` build: a GEMM micro-kernel family's through the short
    pipeline (`KERNEL`), the other helpers' at `HELPER_OPT` (the build's level when lower);
    both keep LSR (llvm/target.py `_no_lsr`)."""
    if family is not None:
        return (KERNEL if opt > 0 else opt), opt, True
    return (*(HELPER_OPT if opt > HELPER_OPT[0] else (opt, opt)), True)


def _kernel_prefix(triple: str | None, cpu: str | None, features: str | None) -> str:
    """The name prefix of the GEMM micro-kernels (`shared_modules`' `group_name`): one per
    resolved target (a multi-ISA library's levels differ), none per library, so a tile family's
    module, and its object in the cache, is the same for every model built for the target (the
    name says everything else the code depends on: rows, tile width, modes, epilogue)."""
    tag = hashlib.sha1("|".join(resolve_target(triple, cpu, features)).encode()).hexdigest()[:12]
    return f"onnxcc_ukr_{tag}"


def _fn_opt(prefix: str, opt: int, fn) -> tuple[int, int]:
    """The -O levels (IR optimiser, code generator) of version function `fn` (of version
    `prefix`) in an -O`opt` build."""
    if fn.name == prefix and opt > 0 and size(fn) >= CONTROL_MIN and control_only(fn):
        return CONTROL_OPT
    rest = fn.name[len(prefix):]
    if opt > GEMM_TASK_OPT[0] and rest.startswith(".gemm.") and not rest.startswith(".gemm.packb.") \
            and calls_direct_micro_kernels(fn):
        return GEMM_TASK_OPT
    lv = min([opt, *(lv for part, least, lv in _LOW_OPT if rest.startswith(part) and size(fn) >= least)])
    return lv, lv


_CONST_PREFIX = "onnxcc.const."
#: constants up to this size stay visible to each version's optimiser (available_externally:
#: a small table it may fold); larger ones (weights, only ever indexed by loops) are plain
#: hidden declarations there, so their bytes are printed and parsed once
_INLINE_CONST_BYTES = 4096


_HEX = np.frombuffer(b"0123456789abcdef", np.uint8)


def _bytes_text(init):
    """A byte-array constant (a weight) as an already printed `c"\\XX..."` constant: llvmlite
    escapes byte by byte in Python (0.15 s of a build's printing for 3 MB of weights, again for
    every part that sees a small table); here every byte is escaped in one numpy step. LLVM
    reads back the same bytes. Any other initializer is returned as it is."""
    from llvmlite import ir as llir

    raw = getattr(init, "constant", None)
    if not isinstance(raw, (bytes, bytearray)) or init.type != llir.ArrayType(llir.IntType(8), len(raw)):
        return init
    a = np.frombuffer(bytes(raw), np.uint8)
    text = np.empty((a.size, 3), np.uint8)
    text[:, 0], text[:, 1], text[:, 2] = ord("\\"), _HEX[a >> 4], _HEX[a & 15]
    return llir.FormattedConstant(init.type, 'c"' + text.tobytes().decode("ascii") + '"')


def _nbytes(ty) -> int:
    count = getattr(ty, "count", None)
    if count is not None:
        return count * _nbytes(ty.element)
    return max(1, getattr(ty, "width", 64) // 8)
_WORK: list = []  # the modules a forked worker reads (inherited, not pickled)


def _jobs() -> int:
    """Worker processes for codegen: ONNXCC_JOBS, else the CPUs this process may use."""
    env = os.environ.get("ONNXCC_JOBS")
    if env:
        return max(1, int(env))
    if not hasattr(os, "fork") or threading.active_count() > 1:
        # forking while another thread may hold a lock (llvmlite's among them) could
        # leave the child waiting on it forever: a threaded host compiles serially
        return 1
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return os.cpu_count() or 1


def _compile_one(k: int) -> bytes:
    """The object of work item `k`: from the object cache (`llvm/object_cache.py`, keyed by the
    module's text and the resolved target) or compiled now and kept there."""
    from ..llvm.target import emit_object, resolve_target

    mod, target = _WORK[k]
    triple, cpu, features, opt = target
    ir_opt, cg_opt, lsr = (*opt, True)[:3] if isinstance(opt, tuple) else (opt, opt, True)
    if not object_cache.enabled():
        return emit_object(mod, triple, cpu, features, ir_opt, cg_opt, lsr)
    text = str(mod)
    key = object_cache.object_key(text, *resolve_target(triple, cpu, features), ir_opt, cg_opt, lsr)
    obj = object_cache.load(key)
    if obj is None:
        obj = emit_object(text, triple, cpu, features, ir_opt, cg_opt, lsr)
        object_cache.store(key, obj)
    return obj


def _twins(module) -> dict[int, str]:
    """Versions of kernel module `module` whose program and plan equal an earlier version's
    (`kernel/fingerprint.py`): index -> the entry name of the earlier version, whose code
    serves both."""
    from onnxcc.kernel.fingerprint import version_twins

    return {k: module.versions[j].program.name for k, j in version_twins(module.versions).items()}


def _weight(mod) -> int:
    """What compiling `mod` costs, roughly: its defined functions' instructions (a module
    given as text: its indented lines)."""
    if isinstance(mod, str):
        return mod.count("\n  ")
    return sum(size(f) for f in getattr(mod, "functions", ()) if f.blocks)


def compile_in_workers(work, jobs: int) -> list[bytes]:
    """emit_object for each (module, (triple, cpu, features, opt)) of `work`, `jobs` forked
    processes at a time (in this process with one job); objects come back in `work`'s order.
    `opt` is one -O level, or a pair (the IR optimiser's, the code generator's), or a triple
    (those and whether the code generator runs loop strength reduction)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    _WORK[:] = list(work)
    try:
        if jobs <= 1 or len(_WORK) <= 1:
            return [_compile_one(k) for k in range(len(_WORK))]
        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=min(jobs, len(_WORK)), mp_context=ctx) as pool:
            # biggest first (the pool hands work out in submission order): the last part to
            # finish is a small one, so the workers end together
            order = sorted(range(len(_WORK)), key=lambda k: -_weight(_WORK[k][0]))
            futs = {k: pool.submit(_compile_one, k) for k in order}
            return [futs[k].result() for k in range(len(_WORK))]
    finally:
        _WORK.clear()
