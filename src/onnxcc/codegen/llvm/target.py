"""LLVM target tooling both backends share: target initialisation, the host CPU, target
machines, parsing and linking llvmlite modules, the -O pipeline, objects and assembly.

The CPU backend emits objects for the host (or `--triple`); the CUDA backend runs the same
parse / optimize steps on an NVPTX target machine and prints PTX.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import sys
import tempfile

from onnxcc.errors import CompileError

# LLVM's "missed transformation" remark: a loop carries a vectorize / unroll hint (the
# schedules ask for widths on every candidate loop) that LLVM could not honour, e.g. a
# reduction it cannot reorder. The loop still runs correctly (scalar); the user cannot act
# on it, so it is dropped; so is the analysis remark that comes with a failed forced
# vectorisation ("remark: ...: loop not vectorized: value that could not be identified as
# reduction is used outside the loop", e.g. a masked-tail hint, cpu/emit.py). Every other
# line LLVM writes goes through unchanged.
_MISSED_HINT = re.compile(rb"^(?:warning: [^\n]*: loop not "
                          rb"(?:vectorized|unrolled|interleaved|unroll-and-jammed|distributed): "
                          rb"the optimizer was unable to perform the requested transformation"
                          rb"|remark: [^\n]*: loop not vectorized: )[^\n]*\n?",
                          re.MULTILINE)


@functools.cache
def _init_llvm() -> None:
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    for name in ("initialize_all_targets", "initialize_all_asmprinters"):
        fn = getattr(llvm, name, None)
        if fn is not None:
            try:
                fn()
            except RuntimeError:  # pragma: no cover - builds without extra targets
                pass


def host_cpu() -> tuple[str, str]:
    """(cpu name, feature string) of the machine we run on."""
    import llvmlite.binding as llvm

    _init_llvm()
    try:
        features = llvm.get_host_cpu_features().flatten()
    except RuntimeError:  # pragma: no cover - hosts without feature detection
        features = ""
    return llvm.get_host_cpu_name(), features


def target_machine(triple: str | None = None, cpu: str | None = None, features: str | None = None,
                   opt: int = 3, *, jit: bool = False):
    """A TargetMachine (PIC); the host CPU and its features unless told otherwise."""
    import llvmlite.binding as llvm

    triple, cpu, features = resolve_target(triple, cpu, features)
    target = llvm.Target.from_triple(triple)
    return target.create_target_machine(cpu=cpu, features=features, opt=max(0, min(opt, 3)),
                                        reloc="pic", codemodel="jitdefault" if jit else "default")


def resolve_target(triple: str | None, cpu: str | None, features: str | None) -> tuple[str, str, str]:
    """(triple, cpu, features) as the target machine gets them: the process's triple unless
    told, and for it the host CPU and its features unless told."""
    import llvmlite.binding as llvm

    _init_llvm()
    host = llvm.get_process_triple()
    triple = triple or host
    if triple == host and cpu is None:
        cpu, host_features = host_cpu()
        features = host_features if features is None else features
    return triple, cpu or "", features or ""


def parse_modules(modules) -> object:
    """Parse llvmlite ir.Modules or IR text (one or a list) into one verified ModuleRef."""
    import llvmlite.binding as llvm

    _init_llvm()
    if not isinstance(modules, (list, tuple)):
        modules = [modules]
    if not modules:
        raise CompileError("emit_object: no modules given")
    refs = []
    for m in modules:
        try:
            ref = llvm.parse_assembly(str(m))
            ref.verify()
        except RuntimeError as exc:
            raise CompileError(f"invalid LLVM IR: {exc}") from exc
        refs.append(ref)
    main = refs[0]
    for other in refs[1:]:
        main.link_in(other)
    return main


LIGHT = -1
"""an IR optimisation level between -O0 (no passes) and -O1: the few cheap clean-up passes (`_LIGHT_PASSES`)
for control code that runs once per call (the CPU backend's version entries): constants
propagated, instructions combined, dead code and empty blocks gone (0.02 s where -O1's passes took
0.2 s, on squeezenet's entry)"""

_LIGHT_PASSES = ("add_sroa_pass", "add_simplify_cfg_pass", "add_sccp_pass", "add_instruction_combine_pass",
                 "add_aggressive_dce_pass", "add_simplify_cfg_pass")


KERNEL = -2
"""the IR optimisation level of hand-written vector code (the CPU backend's GEMM micro-kernels,
cpu/gemm_ukr.py): only `_KERNEL_PASSES`, which take it to the shape -O3 gave it (accumulators
out of their allocas, the address arithmetic folded, LLVM's own unroll of a short k loop):
the kernels' inner loops came out instruction for instruction as at -O3 (all 71 of
mobilenet_v3_small's, convnet's, bert's and the transformer's) in a seventh of -O3's time
(0.14 s against 0.98 s on mobilenet_v3_small's 72 kernels). The code generator still runs
at the build's -O level"""

_KERNEL_PASSES = ("add_sroa_pass", "add_instruction_combine_pass", "add_simplify_cfg_pass", "add_loop_unroll_pass",
                  "add_instruction_combine_pass", "add_simplify_cfg_pass")


def optimize(mod, tm, opt: int = 3) -> None:
    """Run LLVM's new-pass-manager pipeline at -O`opt` (vectorizers on from -O2; `LIGHT`:
    only `_LIGHT_PASSES`; `KERNEL`: only `_KERNEL_PASSES`)."""
    import llvmlite.binding as llvm

    mod.triple = tm.triple
    mod.data_layout = str(tm.target_data)
    if opt in (LIGHT, KERNEL):
        mpm = llvm.create_new_module_pass_manager()
        for add in _LIGHT_PASSES if opt == LIGHT else _KERNEL_PASSES:
            getattr(mpm, add)()
        mpm.run(mod, llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=1)))
        return
    if opt <= 0:
        return
    pto = llvm.create_pipeline_tuning_options(speed_level=min(opt, 3))
    pto.loop_vectorization = opt >= 2
    pto.slp_vectorization = opt >= 2
    pto.loop_unrolling = opt >= 2
    pb = llvm.create_pass_builder(tm, pto)
    with _quiet_missed_hints():
        pb.getModulePassManager().run(mod, pb)


@contextlib.contextmanager
def captured_fd2(into: list[bytes]):
    """Run the body with fd 2 sent to a temp file, then append what was written there to
    `into`. LLVM writes its warnings and remarks to the C stream, which Python's sys.stderr
    cannot catch. Without an fd 2 (embedded interpreters) the body runs uncaptured."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # pragma: no cover - no fd 2
        yield
        return
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            into.append(tmp.read())


@contextlib.contextmanager
def _quiet_missed_hints():
    """Run the body with fd 2 captured, then write back what LLVM printed there, less the
    missed-transformation remarks (`_MISSED_HINT`)."""
    printed: list[bytes] = []
    try:
        with captured_fd2(printed):
            yield
    finally:
        rest = _MISSED_HINT.sub(b"", b"".join(printed))
        if rest:
            os.write(2, rest)


def emit_object(modules, triple: str | None = None, cpu: str | None = None, features: str | None = None,
                opt: int = 3, codegen_opt: int | None = None, lsr: bool = True) -> bytes:
    """Parse, link, verify and optimize LLVM modules (ir.Module or text) and return an ELF
    (or the triple's native format) relocatable object, position independent. The code
    generator runs at -O`codegen_opt` (default: `opt`), the IR optimiser at -O`opt`; without
    `lsr`, without its loop strength reduction (see `_no_lsr`)."""
    tm = target_machine(triple, cpu, features, max(opt, 0) if codegen_opt is None else codegen_opt)
    mod = optimized(modules, tm, opt)
    if lsr:
        return tm.emit_object(mod)
    with _no_lsr():
        return tm.emit_object(mod)


@contextlib.contextmanager
def _no_lsr():
    """The code generator without Loop Strength Reduction, for the body: LSR took a quarter
    of the code generator's time on a conv net's kernels (0.28 s of an average pool's
    0.32 s, 650 instructions; -0.3 to -0.45 s per module of squeezenet, convnet, bert) and
    their run time did not move without it, while the GEMM micro-kernels ran 2.4x slower
    without it: the CPU backend keeps it for the shared helpers' module only. LLVM's option
    is process-wide: set for the one emission and set back (llvmlite serialises LLVM calls;
    a concurrent build in another thread may only see a different LSR choice, never
    different results)."""
    import llvmlite.binding as llvm

    llvm.set_option("onnxcc", "-disable-lsr=true")
    try:
        yield
    finally:
        llvm.set_option("onnxcc", "-disable-lsr=false")


def optimized(modules, tm, opt: int, what: str = "LLVM IR"):
    """Parse and link `modules`, optimize them for `tm` at -O`opt` and verify the result (the
    CPU and NVPTX targets share this; only the final emission differs)."""
    mod = parse_modules(modules)
    optimize(mod, tm, opt)
    try:
        mod.verify()
    except RuntimeError as exc:  # pragma: no cover - would be an LLVM bug
        raise CompileError(f"{what} invalid after optimization: {exc}") from exc
    return mod


def emit_assembly(modules, triple: str | None = None, cpu: str | None = None, features: str | None = None,
                  opt: int = 3) -> str:
    """Like `emit_object` but returns assembly text (for inspection and tests)."""
    tm = target_machine(triple, cpu, features, opt)
    mod = parse_modules(modules)
    optimize(mod, tm, opt)
    return tm.emit_assembly(mod)
