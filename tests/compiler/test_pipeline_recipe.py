"""compiler/pipeline.py: the one recipe, its stop points, and the kernel module it ends with."""

from __future__ import annotations

import pytest

from onnxcc.codegen.backend import BACKENDS, backend_class, make_backend
from onnxcc.compiler import EMIT_STAGES, PIPELINE_STAGES, CompileOptions, build_pipeline, load_module, recipe
from onnxcc.errors import OnnxccError, PassError
from onnxcc.kernel.module import KernelModule
from onnxcc.kernel.passes import SchedulePass
from onnxcc.passes import PASSES, PassContext, TimePasses, get_pass, run_pipeline
from onnxcc.testing import MODELS_DIR


def _names(options: CompileOptions, stop: str = "lib") -> list[str]:
    return [p.name for p in build_pipeline(options, make_backend(options), "m", stop)]


def test_recipe_order_follows_the_options_and_the_backend():
    # value-symbols always runs: without --value-symbols it binds only a kept Loop's trip-count input
    graph = ["split-if", "broadcast-versions", "shape-inference", "qdq-fuse", "canonicalize", "fold-conv-affine",
             "nhwc-region", "qnhwc-region", "value-symbols", "prune-symbols", "specialize"]
    # attention-chain only where the backend runs attention fused over key blocks (the CPU)
    base = [*graph, "attention-chain", "lower-to-kernel"]
    kernel = ["plan-memory", "reserve-scratch"]
    assert _names(CompileOptions()) == [*base, "fold-consts", "fuse", "schedule", *kernel]
    assert _names(CompileOptions(fuse=False)) == [*base, "schedule", *kernel]
    # the grid, not schedules
    assert _names(CompileOptions(target="cuda")) == [*graph, "lower-to-kernel", "fold-consts", "fuse", *kernel]
    # without the 0/1 rule no broadcast 1-versions either
    assert "broadcast-versions" not in _names(CompileOptions(specialize_one=False))
    with_buckets = _names(CompileOptions(buckets={"seq": [64]}))
    assert with_buckets.index("bucketize") == with_buckets.index("specialize") + 1
    assert with_buckets.index("attention-chain") == with_buckets.index("bucketize") + 1  # after every version
    # every step is a registered pass, so `--print-ir-after NAME` can name it
    get_pass("fuse")  # loads the registry
    assert set(with_buckets) <= set(PASSES)


def test_stop_points_cut_the_same_list():
    full = _names(CompileOptions())
    assert _names(CompileOptions(), "ir") == full[:full.index("lower-to-kernel")]
    assert _names(CompileOptions(), "kernel") == full == _names(CompileOptions(), "llvm")
    # EMIT_STAGES: the pipeline's stop points, then the backends' (lib, the whole artifact, last)
    stages = set(PIPELINE_STAGES)
    for name in BACKENDS:
        assert backend_class(name).emit_stages[-1] == "lib"
        stages |= set(backend_class(name).emit_stages)
    assert stages == set(EMIT_STAGES) and EMIT_STAGES[:2] == PIPELINE_STAGES and EMIT_STAGES[-1] == "lib"


def test_recipe_takes_vector_width_and_schedule_target_from_the_backend():
    opts = CompileOptions(features="+avx2,+avx", parallel=False)
    steps = dict((p.name, p) for _, p in recipe(opts, make_backend(opts), "m"))
    assert steps["specialize"].divisible == 8
    sched = steps["schedule"]
    assert isinstance(sched, SchedulePass) and sched.target.vector_width == 8 and not sched.target.parallel
    cuda = CompileOptions(target="cuda")
    assert dict((p.name, p) for _, p in recipe(cuda, make_backend(cuda), "m"))["specialize"].divisible == 32
    with pytest.raises(OnnxccError, match="unknown target 'tpu'"):
        make_backend(CompileOptions(target="tpu"))


def test_one_run_converts_the_graph_into_a_kernel_module_and_times_each_step():
    opts = CompileOptions(specialize={"batch": [1]})
    module = load_module(MODELS_DIR / "mlp.onnx")
    timer = TimePasses()
    passes = build_pipeline(opts, make_backend(opts), "mlp")
    kmod = run_pipeline(module, passes, PassContext(instruments=[timer]))
    assert isinstance(kmod, KernelModule) and kmod.graph is module
    assert [v.program.name for v in kmod.versions] == ["mlp_v0", "mlp_v1"]
    assert [v.function.name for v in kmod.versions] == module.dispatch["main"]
    kmod.verify()
    for v in kmod.versions:
        assert v.plan is not None and v.stats["kernels_after"] < v.stats["kernels_before"]
        assert all(c.schedule is not None for c in v.program.computes())
    assert [n for n, _ in timer.times][-6:] == ["lower-to-kernel", "fold-consts", "fuse", "schedule",
                                                "plan-memory", "reserve-scratch"]
    text = str(kmod)
    assert text.count("// version ") == 2 and "guard batch == 1" in text


def test_kernel_pass_on_a_graph_module_fails_naming_the_pass():
    module = load_module(MODELS_DIR / "mlp.onnx")
    with pytest.raises(PassError, match="fuse"):
        run_pipeline(module, "fuse", PassContext())
