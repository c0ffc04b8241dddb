"""Multi-ISA libraries: `--cpu-versions x86-64-v3,znver4` runs the pipeline once per LLVM CPU
(each level gets its own schedules: vector width, GEMM tiles) and links every level's
versions into one library. The levels go most capable first; each version of a level whose
features go beyond the shared ones gets a CPU test in front of its guard (codegen/c/cpu_check.py),
so the dispatcher picks by the running CPU like by any other guard, and the least capable
level's generic version is the last resort. `ONNXCC_CPU_LEVEL=NAME` forces a level.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from ..codegen.backend import Emitted, backend_class, make_backend
from ..codegen.cpu.features import required_features
from ..errors import OnnxccError
from ..ir import Module, identifier
from ..passes import PassContext, run_pipeline
from . import artifact_dir


def order_levels(triple: str, levels: list[str]) -> list[tuple[str, list[str]]]:
    """(cpu, features) most capable first; a level with the same features as an earlier one
    is an error (its versions could never run)."""
    if len(set(levels)) != len(levels):
        raise OnnxccError(f"--cpu-versions {','.join(levels)}: a CPU is listed twice")
    feats = {c: required_features(triple, c, "") for c in levels}
    ordered = sorted(levels, key=lambda c: -len(feats[c]))
    for k, c in enumerate(ordered):
        for d in ordered[:k]:
            if set(feats[d]) <= set(feats[c]):
                raise OnnxccError(f"--cpu-versions: {d} needs nothing {c} lacks, so {c}'s versions would never "
                                  "run; list CPU levels of increasing capability (e.g. x86-64-v3,x86-64-v4)")
    return [(c, feats[c]) for c in ordered]


def compile_levels(model, out_dir, options, emit: str = "lib", pass_ctx: PassContext | None = None):
    from .compile import Artifact, artifact_spec, default_name, import_dims, import_values, load_module, narrow_dims
    from .pipeline import build_pipeline

    if not getattr(backend_class(options.target), "cpu_levels", False):
        raise OnnxccError(f"--cpu-versions: target {options.target} has no CPU levels")
    if options.cpu or options.features:
        raise OnnxccError("--cpu-versions names the CPUs itself: give it without --cpu or --features")
    if emit != "lib":
        raise OnnxccError(f"--cpu-versions builds a library: --emit {emit} takes one --cpu")
    if isinstance(model, Module):
        raise OnnxccError("--cpu-versions needs the model as a file or bytes (each level imports it anew)")
    import llvmlite.binding as llvm

    triple = options.triple or llvm.get_process_triple()
    levels = order_levels(triple, list(options.cpu_versions))
    ctx = pass_ctx or PassContext()
    t: dict[str, float] = {}
    specs, objects = [], []
    name = ""

    def step(what: str, seconds: float) -> None:  # a build step outside the pass list
        t[what] = t.get(what, 0.0) + seconds
        for ins in ctx.instruments:
            getattr(ins, "step", lambda *_: None)(f"{what} ({cpu})", seconds)

    for cpu, feats in levels:
        opts = replace(options, cpu=cpu, cpu_versions=[])
        backend = make_backend(opts)
        t0 = time.perf_counter()
        module = load_module(model, options.input_structure, import_values(options), import_dims(options))
        name = identifier(options.name or default_name(model, module))
        t["import"] = t.get("import", 0.0) + time.perf_counter() - t0
        narrow_dims(module, opts.dims)
        prefix = identifier(f"{name}_{cpu}")
        result = run_pipeline(module, build_pipeline(opts, backend, prefix, "lib"), ctx)
        emitted = backend.emit(result, prefix, "lib", step)
        spec = artifact_spec(result, name, opts, backend)
        backend.describe(spec, emitted)
        for v in spec.versions:
            v.cpu = cpu
        if specs and [s.name for s in spec.symbols] != [s.name for s in specs[0][0].symbols]:
            raise OnnxccError(f"--cpu-versions: the {cpu} build binds other symbols than the {levels[0][0]} one")
        specs.append((spec, feats))
        objects += emitted.objects
    spec = specs[0][0]
    spec.versions = [v for s, _ in specs for v in s.versions]
    shared = set.intersection(*(set(f) for _, f in specs))
    spec.cpu_features = [f for f in specs[-1][1] if f in shared]
    spec.cpu_levels = {c: f for c, f in levels}
    spec.metadata["cpu"] = ",".join(c for c, _ in levels)
    spec.metadata["options"] = options.cache_key()
    backend = make_backend(replace(options, cpu=levels[-1][0], cpu_versions=[]))
    out = Path(out_dir)
    art = Artifact(out, name, module, timings=t)

    def link(tmp: Path) -> None:
        t0 = time.perf_counter()
        lib = backend.link_artifact(spec, Emitted(objects=objects), tmp, options.cc)
        t["link"] = time.perf_counter() - t0
        art.library = out / lib.name

    artifact_dir.build_in_place(out, link)
    art.header, art.metadata = out / f"{name}.h", out / f"{name}.json"
    return art
