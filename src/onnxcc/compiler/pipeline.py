"""THE recipe: every pass of a build, graph and kernel alike, in order, from the options.

One pass manager (passes/base.py) runs this list with the caller's instruments, so
`--print-ir-after`, `--dump-dir`, `--verify-each` and `--time-passes` see every step.
The backend's emit and the link come after it (compile.py). Each step is tagged with the
`--emit` stop point it belongs to: `ir` (the versioned graph module) or `kernel` (the
kernel module, one program per version).
"""

from __future__ import annotations

import dataclasses

from ..codegen.backend import Backend
from ..codegen.c.layout import reads_host
from ..kernel.passes import FoldConstsPass, FusePass, PlanMemoryPass, ReserveScratchPass, SchedulePass
from ..passes import ModulePass, parse_pipeline
from ..passes.attention_chain import AttentionChainPass
from ..passes.base import sym_values
from ..passes.broadcast_relax import BroadcastVersionsPass
from ..passes.bucketize import BucketizePass
from ..passes.lower import LowerToKernelPass
from ..passes.nhwc_region import NhwcRegionPass
from ..passes.pipelines import DEFAULT_GRAPH_PIPELINE
from ..passes.prune_symbols import PruneSymbolsPass
from ..passes.qnhwc_region import QnhwcRegionPass
from ..passes.specialize import SpecializePass
from ..passes.specialize_value import SpecializeValuePass, value_specs
from ..passes.split_if import SplitIfPass
from ..passes.value_symbols import ValueSymbolsPass
from .options import PIPELINE_STAGES, CompileOptions


def recipe(options: CompileOptions, backend: Backend, name: str) -> list[tuple[str, ModulePass]]:
    """(stop point, pass) for every step of compiling a model called `name`."""
    k = options.divisible if options.divisible is not None else backend.vector_width()
    steps: list[tuple[str, ModulePass]] = [
        # ---- graph passes ----
        # an If whose result ranks depend on a condition over input dims: one function per
        # value of the condition (guarded by it), the If folded into the taken branch
        # (a condition computed from small int64 inputs: their values become symbols first)
        ("ir", SplitIfPass(skip=tuple(options.specialize_value),
                           read_inputs=reads_host(backend.link.devices, backend.link.shape_devices))),
        # x[a] + y[b] holds at a == b, a == 1 or b == 1: `a == 1` / `b == 1` versions where they
        # serve, made before canonicalize folds with a == b (specialize relaxes the constraint)
        *((("ir", BroadcastVersionsPass(max_versions=max(0, options.max_versions // 2))),)
          if options.specialize_one else ()),
        # the clean-graph pipeline `onnxcc ir` runs too (passes/pipelines.py): shape-inference
        # (symbolic result types, shape-chain values, constraints), canonicalize (fold, simplify)
        # (nhwc-region takes dense convs only where the backend runs their implicit GEMM call,
        # qnhwc-region quantized ones only where it runs the VNNI GEMM)
        *(("ir", _for_backend(p, backend)) for p in parse_pipeline(DEFAULT_GRAPH_PIPELINE)),
        # --value-symbols: size-only int64 inputs become symbols read from their data at dispatch
        # (without it, only a kept Loop's trip count M given as an input: one build for every M)
        ("ir", ValueSymbolsPass(skip=tuple(options.specialize_value), trips_only=not options.value_symbols)),
        # drop symbols only an earlier inference round of a region body used (before versioning:
        # the dispatcher could not bind them)
        ("ir", PruneSymbolsPass()),
        # ---- version passes ----
        # exact, 0/1 and divisibility versions of @main, the generic one last
        ("ir", SpecializePass(exact=sym_values(options.specialize), one=options.specialize_one, divisible=k,
                              max_versions=options.max_versions)),
    ]
    if options.specialize_value:
        # value versions (an input folded to a given value) ahead of the others; the dispatcher
        # compares the input's data before it picks one
        steps.append(("ir", SpecializeValuePass(values=value_specs(options.specialize_value))))
    if options.buckets:
        # padded bucket versions with exact masks
        steps.append(("ir", BucketizePass(buckets=sym_values(options.buckets))))
    if backend.fused_attention:
        # exporters' MatMul -> [scale, mask] -> Softmax -> MatMul chains into one attention op
        # the backend runs fused over key blocks, per version (each on its own extents)
        steps.append(("ir", AttentionChainPass()))
    # graph module -> kernel module: version k becomes the kernel program NAME_vK
    # (attention fused over key blocks where the backend runs that form: kernel/flash.py)
    steps.append(("kernel", LowerToKernelPass(prefix=name,
                                              fused_attention=backend.fused_attention,
                                              int8_dot=backend.int8_dot(),
                                              f32_conv_call=backend.f32_conv_call())))
    # ---- kernel passes: every decision below depends on the version's extents ----
    if options.fuse:
        # weights sliced / concatenated / transposed by graph ops: consts at compile time
        steps.append(("kernel", FoldConstsPass()))
        # inline injective producers, attach epilogues; control-flow bodies too
        steps.append(("kernel", FusePass()))
    if backend.schedules:
        # loop order, vector width (tails the divisibility facts remove), parallel axis, the
        # GEMM path; before memory planning, since GEMM packing needs scratch
        steps.append(("kernel", SchedulePass(target=backend.target_info())))
    # liveness over the scheduled order: a static layout per concrete version, expressions
    # for the generic one
    steps.append(("kernel", PlanMemoryPass()))
    # the scratch region the schedules ask for, after the rest
    steps.append(("kernel", ReserveScratchPass()))
    return steps


def build_pipeline(options: CompileOptions, backend: Backend, name: str,
                   stop: str = "lib") -> list[ModulePass]:
    """The passes to run for `--emit stop`: those of its stop point and before (all of them
    for the backend's stop points)."""
    last = PIPELINE_STAGES.index(stop) if stop in PIPELINE_STAGES else len(PIPELINE_STAGES)
    return [p for stage, p in recipe(options, backend, name) if PIPELINE_STAGES.index(stage) <= last]


def _for_backend(p: ModulePass, backend: Backend) -> ModulePass:
    """nhwc-region's dense convs join a region only on a backend with the implicit-GEMM conv
    call (without it a channels-last dense conv packs its A per call: 3-4x slower measured on
    squeezenet than the NCHW window GEMM)."""
    if isinstance(p, NhwcRegionPass) and p.dense and not backend.f32_conv_call():
        return dataclasses.replace(p, dense=False)
    if isinstance(p, QnhwcRegionPass) and p.dense and not backend.int8_dot():
        return dataclasses.replace(p, dense=False)  # qnhwc-region's one-group convs: on the VNNI GEMM only
    return p


def graph_pipeline(options: CompileOptions, backend: Backend) -> list[ModulePass]:
    """The graph and version passes alone (the `ir` stop point)."""
    return build_pipeline(options, backend, "model", "ir")
