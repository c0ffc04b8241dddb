"""The compile driver: model -> graph passes -> versions -> kernels -> objects -> libNAME.so.

    import onnxcc
    art = onnxcc.compile("models/transformer.onnx", "out/transformer", specialize={"batch": [1]})
    model = onnxcc.load(art.out_dir)

Stages, in order (each a named stop point for `emit`):
  ir      graph pipeline + specialize: the versioned module (printed IR)
  kernel  each version lowered to a kernel program (printed)
  llvm    one LLVM module holding every version's kernel function
  asm     target assembly (ptx: the same, for target cuda)
  lib     NAME.h, NAME.json, libNAME.so (the default)
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .errors import OnnxccError
from .ir import Module, identifier
from .ir.printer import print_bool

EMIT_STAGES = ("ir", "kernel", "llvm", "asm", "ptx", "lib")
TARGETS = ("cpu", "cuda")


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
    cc: str = "cc"
    #: kernel-level fusion (kernel/fuse.py); False keeps one compute per lowered op
    fuse: bool = True
    #: bucket versions (pad up to the next bound, exact masks): {"seq": [64, 128, 512]}
    buckets: dict[str, list[int]] = field(default_factory=dict)

    def cache_key(self) -> dict:
        d = asdict(self)
        d["dims"] = {k: list(v) for k, v in sorted(self.dims.items())}
        d["specialize"] = {k: sorted(v) for k, v in sorted(self.specialize.items())}
        d["buckets"] = {k: sorted(set(v)) for k, v in sorted(self.buckets.items())}
        return d


@dataclass
class Artifact:
    out_dir: Path
    name: str
    module: Module
    library: Path | None = None
    header: Path | None = None
    metadata: Path | None = None
    #: seconds per stage
    timings: dict[str, float] = field(default_factory=dict)
    #: the text a non-lib `emit` stage produced
    text: str = ""


def load_module(model) -> Module:
    """An .onnx / .onnxir path, ONNX bytes or ModelProto, or a Module."""
    if isinstance(model, Module):
        return model
    if isinstance(model, (str, Path)):
        from . import load_model

        return load_model(model)
    from .frontend import load_onnx

    return load_onnx(model)


def vector_width(options: CompileOptions) -> int:
    """f32 lanes of the target's widest vector unit (the divisibility versions' k)."""
    if options.target == "cuda":
        return 32
    feats = options.features
    if feats is None and options.triple is None:
        from .codegen.cpu import host_cpu

        feats = host_cpu()[1]
    feats = feats or ""
    if "+avx512f" in feats:
        return 16
    if "+avx" in feats:
        return 8
    return 4


def target_info(options: CompileOptions):
    """The schedules' view of the target (vector width, threads on or off)."""
    from .kernel.schedule import TargetInfo

    feats = options.features
    if feats is None and options.triple is None:
        from .codegen.cpu import host_cpu

        feats = host_cpu()[1]
    return TargetInfo.from_features(feats or "", parallel=options.parallel)


def narrow_dims(module: Module, dims: dict[str, tuple[int, int]]) -> None:
    for name, (lo, hi) in dims.items():
        if name not in module.symbols:
            known = ", ".join(s.name for s in module.symbols) or "none"
            raise OnnxccError(f"--dim {name}: the model has no symbol {name!r} (symbols: {known})")
        if lo < 1 or hi < lo:
            raise OnnxccError(f"--dim {name}={lo}:{hi}: need 1 <= lo <= hi")
        info = module.symbols[name]
        info.lo, info.hi = max(info.lo, lo), min(info.hi, hi)


def graph_stage(module: Module, options: CompileOptions, ctx=None) -> Module:
    """Graph passes and versioning, in place."""
    from .passes import PassContext, run_pipeline
    from .passes.pipelines import DEFAULT_GRAPH_PIPELINE
    from .passes.prune_symbols import prune_stale_symbols
    from .passes.specialize import SpecializePass

    narrow_dims(module, options.dims)
    ctx = ctx or PassContext()
    run_pipeline(module, DEFAULT_GRAPH_PIPELINE, ctx)
    prune_stale_symbols(module)  # symbols only an earlier inference round of a region body used
    k = options.divisible if options.divisible is not None else vector_width(options)
    exact = "|".join(f"{s}:{':'.join(str(v) for v in vals)}" for s, vals in options.specialize.items())
    spec = SpecializePass(exact=exact, one=options.specialize_one, divisible=k, max_versions=options.max_versions)
    run_pipeline(module, [spec], ctx)
    if options.buckets:
        from .passes.bucketize import BucketizePass, format_buckets

        run_pipeline(module, [BucketizePass(buckets=format_buckets(options.buckets))], ctx)
    return module


def kernel_stage(module: Module, f, kname: str, options: CompileOptions):
    """One version: lower to a kernel program, fuse, schedule, plan memory.
    Returns (function, program, memory plan, stats for the artifact's metadata)."""
    from .kernel.control import has_control, optimize_nested
    from .kernel.fuse import count_kernels, fuse
    from .kernel.plan_memory import plan as plan_memory, reserve_scratch
    from .kernel.schedule import facts_from_attrs, schedule_program
    from .passes.lower import lower_function

    target = target_info(options)
    facts = facts_from_attrs(f.attrs.get("multiple_of", []), module.symbols)
    prog = lower_function(module, f, kname)
    before = count_kernels(prog.body)
    if options.fuse:
        fuse(prog, module.symbols)
    # schedules (vector width, tails the version's divisibility facts remove, parallel axis,
    # the GEMM path) come before memory planning: GEMM packing needs scratch
    if options.target == "cpu":  # CUDA kernels map the domain to the grid themselves
        schedule_program(prog, target, facts)
    if has_control(prog):  # the same fusion and schedules inside If / Loop / Scan bodies
        optimize_nested(prog, module.symbols, fuse=options.fuse,
                        target=target if options.target == "cpu" else None, facts=facts)
    mplan = plan_memory(prog, module.symbols)
    stats = {"kernels_before": before, "kernels_after": count_kernels(prog.body),
             "arena_bytes": str(mplan.workspace_bytes), "peak_live_bytes": str(mplan.peak_live_bytes),
             "total_bytes": str(mplan.total_bytes)}
    return f, prog, reserve_scratch(mplan, prog), stats


def compile_model(model, out_dir, options: CompileOptions | None = None, emit: str = "lib",
                  pass_ctx=None) -> Artifact:
    options = options or CompileOptions()
    if emit not in EMIT_STAGES:
        raise OnnxccError(f"unknown emit stage {emit!r} (one of {', '.join(EMIT_STAGES)})")
    if options.target not in TARGETS:
        raise OnnxccError(f"unknown target {options.target!r} (one of {', '.join(TARGETS)})")
    if emit == "ptx" and options.target != "cuda":
        raise OnnxccError("--emit ptx needs --target cuda")
    t = {}
    t0 = time.perf_counter()
    module = load_module(model)
    name = identifier(options.name or _default_name(model, module))
    t["import"] = time.perf_counter() - t0
    out = Path(out_dir)
    art = Artifact(out, name, module, timings=t)

    t0 = time.perf_counter()
    graph_stage(module, options, pass_ctx)
    t["graph"] = time.perf_counter() - t0
    if emit == "ir":
        art.text = str(module)
        return art

    t0 = time.perf_counter()
    programs = []
    stats: dict[str, dict] = {}  # per version: kernel counts and memory figures (VersionSpec.info)
    for k, fname in enumerate(module.dispatch["main"]):
        f, prog, mplan, stats[f"{name}_v{k}"] = kernel_stage(module, module.functions[fname], f"{name}_v{k}", options)
        programs.append((f, prog, mplan))
    t["lower"] = time.perf_counter() - t0
    if emit == "kernel":
        art.text = "\n\n".join(f"// version {k}: @{f.name} guard {print_bool(f.guard)}\n"
                               f"// kernels {stats[p.name]['kernels_before']} -> {stats[p.name]['kernels_after']}, "
                               f"arena {stats[p.name]['arena_bytes']}, peak {stats[p.name]['peak_live_bytes']}\n{p}"
                               for k, (f, p, _) in enumerate(programs))
        return art
    if options.target == "cuda":
        from .driver_cuda import finish_cuda

        return finish_cuda(art, module, programs, options, emit)

    from llvmlite import ir as llir

    from .codegen.cpu import emit_assembly, emit_llvm, emit_object

    t0 = time.perf_counter()
    llmod = llir.Module(name=name)
    llmod.triple = options.triple or _host_triple()  # so --emit llvm output is self-describing
    for f, prog, mplan in programs:
        emit_llvm(prog, mplan, prog.name, llmod, parallel=options.parallel)
    t["llvm"] = time.perf_counter() - t0
    if emit == "llvm":
        art.text = str(llmod)
        return art
    if emit == "asm":
        art.text = emit_assembly(llmod, options.triple, options.cpu, options.features, options.opt)
        return art

    t0 = time.perf_counter()
    obj = emit_object(llmod, options.triple, options.cpu, options.features, options.opt)
    t["codegen"] = time.perf_counter() - t0
    out.mkdir(parents=True, exist_ok=True)
    obj_path = out / f"{name}.o"
    obj_path.write_bytes(obj)

    from .codegen.link import build_library

    t0 = time.perf_counter()
    spec = artifact_spec(module, name, programs, options, stats)
    lib = build_library(spec, [obj_path], out, cc=options.cc)
    obj_path.unlink()
    t["link"] = time.perf_counter() - t0
    art.library, art.header, art.metadata = lib, out / f"{name}.h", out / f"{name}.json"
    _record_timings(art)
    return art


def artifact_spec(module: Module, name: str, programs, options: CompileOptions, stats: dict | None = None):
    from .codegen.abi import ArtifactSpec, TensorSig, VersionSpec
    from .codegen.cpu import host_cpu

    generic = programs[-1][0]
    out_names = list(generic.attrs.get("outputs", [])) or [f"output{k}" for k in range(len(generic.result_types))]
    inputs = [TensorSig(a.name or f"input{k}", a.type.dtype, a.type.shape) for k, a in enumerate(generic.params)]
    outputs = [TensorSig(n, t.dtype, t.shape) for n, t in zip(out_names, generic.result_types)]
    versions = []
    for f, prog, mplan in programs:
        kind = f.attrs.get("kind", "generic")
        versions.append(VersionSpec(
            symbol=prog.name, guard=f.guard, guard_text=print_bool(f.guard),
            subs={str(k): int(v) for k, v in f.subs.items() if isinstance(v, int) or getattr(v, "is_Integer", False)},
            workspace_bytes=mplan.workspace_bytes, kind=kind,
            info={"function": f.name, "kernels": sum(1 for _ in prog.computes()),
                  "workspace_bytes": str(mplan.workspace_bytes),
                  "multiple_of": list(f.attrs.get("multiple_of", [])),
                  **(stats or {}).get(prog.name, {}),
                  **({"bucket": f.attrs["bucket"], "symbol": f.attrs["symbol"]} if kind == "bucket" else {})}))
    constraints = [(c.expr, c.origin) for c in module.constraints]
    triple = options.triple or __import__("llvmlite.binding", fromlist=["x"]).get_process_triple()
    cpu = options.cpu or host_cpu()[0]
    meta = {"options": options.cache_key(), "cpu": cpu,
            "dropped_versions": list(module.attrs.get("dropped_versions", []))}
    spec = ArtifactSpec(name, inputs, outputs, list(module.symbols), constraints, versions, "cpu", triple, meta)
    spec.run_dims = dict(programs[-1][1].run_dims)  # run-determined dims (control flow): the generic bounds
    return spec


def _record_timings(art: Artifact) -> None:
    import json

    if art.metadata and art.metadata.exists():
        meta = json.loads(art.metadata.read_text())
        meta["compile_seconds"] = {k: round(v, 4) for k, v in art.timings.items()}
        art.metadata.write_text(json.dumps(meta, indent=2))


def _default_name(model, module: Module) -> str:
    if isinstance(model, (str, Path)):
        return Path(model).stem
    return module.name



def cache_document(model, options: CompileOptions, extra: dict | None = None) -> dict:
    """Everything that changes the build: the cache key is the sha256 of this document."""
    from . import __version__
    from .cache_key import model_digest, source_digest
    from .codegen.cpu import host_cpu

    cpu, feats = host_cpu()
    return {"model": model_digest(model), "onnxcc": __version__, "source": source_digest(),
            "options": options.cache_key(),
            "triple": options.triple or "host", "cpu": options.cpu or cpu,
            "features": options.features or feats, "extra": extra or {}}


def compile_cached(model, options: CompileOptions | None = None, cache=None, extra: dict | None = None):
    """The artifact directory for (model, options), compiled only on a cache miss.
    Returns (path, hit: bool)."""
    from .runtime.cache import ArtifactCache, make_key

    options = options or CompileOptions()
    cache = cache if cache is not None else ArtifactCache()
    doc = cache_document(model, options, extra)
    key = make_key(doc)
    hit = cache.lookup(key, doc)
    if hit is not None:
        return hit, True
    if options.name is None and isinstance(model, (str, Path)):
        options = CompileOptions(**{**options.__dict__, "name": Path(model).stem})
    path = cache.store(key, doc, lambda d: compile_model(model, d, options))
    return path, False


def _host_triple() -> str:
    import llvmlite.binding as llvm

    return llvm.get_process_triple()
