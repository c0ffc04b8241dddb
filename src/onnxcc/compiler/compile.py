"""compile_model: import -> the pipeline (compiler/pipeline.py) -> backend.emit -> link.

    import onnxcc
    art = onnxcc.compile("models/transformer.onnx", "out/transformer", specialize={"batch": [1]})
    model = onnxcc.load(art.out_dir)

`emit` stops early: `ir` (the versioned graph module, printed), `kernel` (the kernel module:
one program per version), or one of the backend's stop points (`llvm`, `asm`, `ptx`); the
default `lib` writes NAME.h, NAME.json and libNAME.so.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import sympy

from ..codegen.backend import BACKENDS, Backend, backend_class, make_backend
from ..codegen.gc_quiet import gc_frozen, refreeze
from ..errors import CompileError, OnnxccError, UnsupportedOp
from ..ir import DType, Module, identifier, print_bool, print_dim
from ..passes import Instrument, PassContext, run_pipeline
from . import artifact_dir
from .options import EMIT_STAGES, PIPELINE_STAGES, CompileOptions


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


def load_module(model, structure: dict[str, str] | None = None, values: dict[str, list] | None = None,
                dims: dict[str, int] | None = None) -> Module:
    """An .onnx / .onnxir path, ONNX bytes or ModelProto, or a Module; `structure`: the
    sequence / optional inputs' specs (io_structure.py); `values`: inputs' values a
    sequence's structure may depend on (frontend/sequences.py)."""
    if isinstance(model, Module):
        return model
    if isinstance(model, (str, Path)):
        from ..frontend.model_file import load_model

        return load_model(model, structure=structure, values=values, dims=dims)
    from ..frontend import load_onnx

    return load_onnx(model, structure=structure, values=values, dims=dims)


def import_values(options: CompileOptions) -> dict[str, list]:
    """The value versions' values the importer may fold into a sequence's structure: inputs
    given exactly one value (with several, each would need an import of its own)."""
    return {n: v[0] for n, v in options.specialize_value.items() if len(v) == 1}


def import_dims(options: CompileOptions) -> dict[str, int]:
    """The exact versions' values the importer may fix a sequence's length with: symbols
    given exactly one value."""
    return {n: v[0] for n, v in options.specialize.items() if len(v) == 1}


def without_baked(options: CompileOptions, module: Module) -> CompileOptions:
    """`options` less the value versions and exact dims the importer already made @main (its
    value_guard, its guard): specialize-value / specialize would build the same version twice."""
    from dataclasses import replace

    main = module.functions.get("main")
    if main is None:
        return options
    baked = {g.partition(":")[0] for g in main.attrs.get("value_guard", [])}
    fixed = {str(s) for s in main.guard.free_symbols} if main.guard is not sympy.true else set()
    if not baked and not fixed:
        return options
    return replace(options, specialize_value={n: v for n, v in options.specialize_value.items() if n not in baked},
                   specialize={n: v for n, v in options.specialize.items() if n not in fixed})


def narrow_dims(module: Module, dims: dict[str, tuple[int, int]]) -> None:
    for name, (lo, hi) in dims.items():
        if name not in module.symbols:
            known = ", ".join(s.name for s in module.symbols) or "none"
            raise OnnxccError(f"--dim {name}: the model has no symbol {name!r} (symbols: {known})")
        if lo < 1 or hi < lo:
            raise OnnxccError(f"--dim {name}={lo}:{hi}: need 1 <= lo <= hi")
        info = module.symbols[name]
        info.lo, info.hi = max(info.lo, lo), min(info.hi, hi)


def graph_stage(module: Module, options: CompileOptions, ctx: PassContext | None = None) -> Module:
    """The recipe's graph and version passes on `module`, in place (the `ir` stop point)."""
    from .pipeline import graph_pipeline

    narrow_dims(module, options.dims)
    return run_pipeline(module, graph_pipeline(options, make_backend(options)), ctx)


class _StageClock(Instrument):
    """NAME.json's compile seconds: `graph` (the passes before lower-to-kernel) and `lower`
    (it and the kernel passes)."""

    def __init__(self, timings: dict[str, float]):
        self.timings, self.stage, self._t0 = timings, "graph", 0.0

    def before(self, pass_, module, index):
        if getattr(pass_, "converts", False):
            self.stage = "lower"
        self._t0 = time.perf_counter()

    def after(self, pass_, module, index, changed):
        self.timings[self.stage] = self.timings.get(self.stage, 0.0) + time.perf_counter() - self._t0
        refreeze()  # what the pass left alive (sympy's caches, the module): walked no more


def compile_model(model, out_dir, options: CompileOptions | None = None, emit: str = "lib",
                  pass_ctx: PassContext | None = None) -> Artifact:
    """Build `model` into `out_dir`, with the objects alive before each build step kept out of
    Python's cyclic collector (codegen/gc_quiet.py: the passes' sympy and graph objects made
    by the million, re-walked by every full collection), its state restored on return."""
    with gc_frozen():
        return _compile_model(model, out_dir, options, emit, pass_ctx)


def _compile_model(model, out_dir, options: CompileOptions | None, emit: str,
                   pass_ctx: PassContext | None) -> Artifact:
    from .pipeline import build_pipeline  # the passes and ops: loaded when a build starts

    options = options or CompileOptions()
    if options.cpu_versions:
        from .multi_isa import compile_levels

        return compile_levels(model, out_dir, options, emit, pass_ctx)
    if emit not in EMIT_STAGES:
        raise OnnxccError(f"unknown emit stage {emit!r} (one of {', '.join(EMIT_STAGES)})")
    backend = make_backend(options)
    if emit not in PIPELINE_STAGES and emit not in backend.emit_stages:
        owners = [n for n in BACKENDS if emit in backend_class(n).emit_stages]
        raise OnnxccError(f"--emit {emit} needs --target {' or '.join(owners)}")
    ctx = pass_ctx or PassContext()
    t: dict[str, float] = {}

    def step(what: str, seconds: float) -> None:  # a build step outside the pass list
        t[what] = seconds
        for ins in ctx.instruments:
            getattr(ins, "step", lambda *_: None)(what, seconds)

    t0 = time.perf_counter()
    module = load_module(model, options.input_structure, import_values(options), import_dims(options))
    defaults = _take_input_defaults(module)
    name = identifier(options.name or default_name(model, module))
    step("import", time.perf_counter() - t0)
    out = Path(out_dir)
    art = Artifact(out, name, module, timings=t)

    narrow_dims(module, options.dims)
    run_ctx = PassContext(instruments=[_StageClock(t), *ctx.instruments], options=ctx.options)
    try:
        result = run_pipeline(module, build_pipeline(without_baked(options, module), backend, name, emit), run_ctx)
    except (CompileError, UnsupportedOp) as e:
        from .value_versions import refuse_value_dependent

        raise refuse_value_dependent(e, module) from None
    if emit in PIPELINE_STAGES:
        art.text = str(result)
        return art

    emitted = backend.emit(result, name, emit, step)
    if emit != "lib":
        art.text = emitted.text
        return art
    t0 = time.perf_counter()
    spec = artifact_spec(result, name, options, backend)
    backend.describe(spec, emitted)

    def link(tmp: Path) -> None:  # into a directory beside `out`, swapped in when complete
        lib = backend.link_artifact(spec, emitted, tmp, options.cc)
        step("link", time.perf_counter() - t0)
        _record_timings(tmp / f"{name}.json", t)
        _record_input_defaults(tmp, name, defaults)
        art.library = out / lib.name

    artifact_dir.build_in_place(out, link)
    art.header, art.metadata = out / f"{name}.h", out / f"{name}.json"
    return art


def _take_input_defaults(module: Module) -> dict:
    """The overridable inputs' defaults (the importer keeps them as weights no op reads),
    taken out of the module: they are data for the loader, not part of the build."""
    from ..frontend.onnx_import import DEFAULT_PREFIX

    out = {}
    for n in module.attrs.get("input_defaults", []):
        arr = module.weights.pop(DEFAULT_PREFIX + n, None)
        if arr is not None:
            out[n] = arr
    return out


def _record_input_defaults(out_dir: Path, name: str, defaults: dict) -> None:
    """NAME.defaults.npz beside the library, named (with its sha256) in NAME.json: an input
    named like an initializer (IR >= 4) takes it when the caller gives none (the loader)."""
    import json

    import numpy as np

    from ..digest import file_sha256

    metadata = out_dir / f"{name}.json"
    if not defaults or not metadata.exists():
        return
    f = out_dir / f"{name}.defaults.npz"
    np.savez(f, **defaults)
    meta = json.loads(metadata.read_text())
    meta["input_defaults"] = {"file": f.name, "sha256": file_sha256(f), "names": sorted(defaults)}
    metadata.write_text(json.dumps(meta, indent=2))


def artifact_spec(kmod, name: str, options: CompileOptions, backend: Backend):
    """The ArtifactSpec of a kernel module: signature, symbols, constraints, versions; the
    backend fills in its target fields (`Backend.describe`)."""
    from ..codegen.c.abi import ArtifactSpec, TensorSig, VersionSpec
    from ..io_structure import structure_of
    from ..kernel.in_place import in_place_pairs
    from ..passes.value_symbols import value_symbols_of
    from .value_versions import generic_function, output_signature, value_guards, version_guard_text

    module = kmod.graph
    generic = generic_function(module, kmod)
    out_names = (list(generic.attrs.get("outputs", []))
                 or [f"output{k}" for k in range(len(generic.result_types))])
    inputs = [TensorSig(a.name or f"input{k}", a.type.dtype, a.type.shape)
              for k, a in enumerate(generic.params)]
    shapes, extra_symbols, version_dims = output_signature(module, kmod, generic, out_names)
    outputs = [TensorSig(n, t.dtype, s)
               for n, t, s in zip(out_names, generic.result_types, shapes, strict=False)]
    versions = []
    for v in kmod.versions:
        f, prog, mplan = v.function, v.program, v.plan
        kind = f.attrs.get("kind", "generic")
        subs = {str(k): int(x) for k, x in f.subs.items()
                if isinstance(x, int) or getattr(x, "is_Integer", False)}
        bucket = {"bucket": f.attrs["bucket"], "symbol": f.attrs["symbol"]} if kind == "bucket" else {}
        versions.append(VersionSpec(
            symbol=prog.name, guard=f.guard, guard_text=version_guard_text(f), subs=subs,
            value_guards=value_guards(module, generic, f), in_place=in_place_pairs(prog),
            workspace_bytes=mplan.workspace_bytes, kind=kind,
            info={"function": f.name, "kernels": sum(1 for _ in prog.computes()),
                  "workspace_bytes": print_dim(mplan.workspace_bytes),
                  "multiple_of": [print_bool(d.predicate) for d in f.attrs.get("multiple_of", [])],
                  **v.stats, **bucket}))
    constraints = [(c.expr, c.origin) for c in module.constraints]
    meta = {"options": options.cache_key(), **backend.metadata(),
            "dropped_versions": list(module.attrs.get("dropped_versions", [])),
            # sequence / optional I/O: how the loader flattens and groups them (io_structure.py)
            **({"structure": structure_of(module.attrs)} if "input_structure" in module.attrs else {}),
            # string tensors inside: the link adds the string runtime (codegen/c/strings.py)
            **({"strings": True} if any(b.dtype is DType.string for v in kmod.versions
                                        for b in v.program.buffers.values()) else {})}
    spec = ArtifactSpec(name, inputs, outputs, list(module.symbols) + extra_symbols, constraints, versions,
                        backend.name, "", meta, version_dims=version_dims)
    names = [t.name for t in inputs]
    spec.data_dims = {s: (names.index(i), k) for s, (i, k) in value_symbols_of(generic).items()}
    # run-determined dims (control flow): the generic version's bounds
    spec.run_dims = dict(kmod.versions[-1].program.run_dims)
    spec.late_dims = sorted(kmod.versions[-1].program.late_dims)
    # loop capacities (ops/loop_capacity.py): set and grown by the dispatcher
    spec.cap_dims = {k: dict(v) for k, v in module.attrs.get("loop_capacity", {}).items()
                     if k in module.symbols}
    spec.cap_initial, spec.cap_limit = options.loop_capacity
    # constraints on run-time symbols are checked by the kernel where they are bound
    late = [(e, o) for e, o in spec.constraints
            if {s.name for s in sympy.sympify(e).free_symbols} & set(spec.late_dims)]
    spec.constraints = [c for c in spec.constraints if c not in late]
    checks = [{"text": print_bool(e), "origin": o} for e, o in late]
    # a loop's carried dim re-bound every iteration is checked against its allocation bound
    for name in spec.late_dims:
        info = module.symbols[name] if name in module.symbols else None
        if info is not None and ("loop-carried" in info.origin or "scan state" in info.origin):
            checks.append({"text": f"0 <= {name} <= {print_dim(spec.run_dims[name])}",
                           "origin": f"{info.origin}; its buffers are sized for that bound"})
    for name in spec.run_dims:  # a Loop's scan-output slices: every iteration the first's shape
        info = module.symbols[name] if name in module.symbols else None
        if info is not None and "the first iteration's extent" in info.origin:
            checks.append({"text": f"every iteration's slice has the first one's extent {name}",
                           "origin": f"{info.origin} (onnxruntime: inconsistent shape in loop output)"})
    if checks:  # NAME.json: what a kernel assertion (code 4) may mean
        spec.metadata["runtime_constraints"] = checks
    return spec


def _record_timings(metadata: Path, timings: dict[str, float]) -> None:
    import json

    if metadata.exists():
        meta = json.loads(metadata.read_text())
        meta["compile_seconds"] = {k: round(v, 4) for k, v in timings.items()}
        metadata.write_text(json.dumps(meta, indent=2))


def default_name(model, module: Module) -> str:
    if isinstance(model, (str, Path)):
        return Path(model).stem
    return module.name
