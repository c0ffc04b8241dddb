"""Kernel-level fusion (kernel/fuse.py): which producers are inlined into their consumers,
which are kept and why, with numerics checked before and after fusion through the JIT, on
hand-built programs, on primitive-op Softmax / LayerNorm chains imported from ONNX, and on
the sample models against onnxruntime."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import onnxcc
from onnxcc.codegen.cpu.jit import JitKernel
from onnxcc.frontend import load_onnx
from onnxcc.ir import DType, SymbolTable, sym
from onnxcc.kernel import KernelProgram, Reduce, Var, exp, relu, rmax, rsum, select, sqrt, walk, wrap_index
from onnxcc.kernel.fuse import classify, element_cost, fuse
from onnxcc.passes import run_pipeline
from onnxcc.passes.lower import lower_function
from onnxcc.testing import MODELS_DIR, SAMPLE_MODELS, op_model, ort_run, random_inputs

F32 = DType.f32
N, M = sym("N"), sym("M")
k, c, d = Var("k"), Var("c"), Var("d")
_RNG = np.random.default_rng(5)


def _computes(p: KernelProgram) -> list:
    return list(p.computes())


def _same_numerics(before: KernelProgram, after: KernelProgram, *arrays, syms=None):
    want = JitKernel(before)(*arrays, syms=syms)
    got = JitKernel(after)(*arrays, syms=syms)
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def _rand(*shape):
    return _RNG.standard_normal(shape).astype(np.float32)


def _fused(p: KernelProgram, symbols=None):
    before = copy.deepcopy(p)
    rep = fuse(p, symbols)
    return before, rep


# ---- hand-built programs -----------------------------------------------------------------


def test_elementwise_chain_fuses_into_one_compute():
    p = KernelProgram.new("chain", ["N"])
    x = p.input("x", F32, (N, 5))
    b = p.input("b", F32, (5,))
    t1 = p.temp("t1", F32, (N, 5))
    t2 = p.temp("t2", F32, (N, 5))
    t3 = p.temp("t3", F32, (N, 5))
    y = p.output("y", F32, (N, 5))
    p.compute(t1, lambda i, j: x[i, j] + b[j])
    p.compute(t2, lambda i, j: t1[i, j] * 2.0)
    p.compute(t3, lambda i, j: relu(t2[i, j]) - t1[i, j])
    p.compute(y, lambda i, j: t3[i, j] * t3[i, j])
    before, rep = _fused(p)
    assert (rep.kernels_before, rep.kernels_after) == (4, 1)
    (only,) = _computes(p)
    assert only.out == "y" and set(only.origin) == {"t1", "t2", "t3", "y"}
    assert "// fused: t1, t2, t3, y" in str(p)
    assert set(p.buffers) == {"x", "b", "y"}  # dead temps removed
    assert rep.groups[0].kind == "broadcast" and rep.groups[0].members == ("t1", "t2", "t3", "y")
    for n in (1, 7):
        _same_numerics(before, p, _rand(n, 5), _rand(5))


def test_transpose_feeding_a_matmul_is_inlined():
    p = KernelProgram.new("tmm", ["N"])
    a = p.input("a", F32, (N, 6))
    w = p.input("w", F32, (4, 6))
    wt = p.temp("wt", F32, (6, 4))
    y = p.output("y", F32, (N, 4))
    p.compute(wt, lambda i, j: w[j, i])
    p.compute(y, lambda i, j: rsum([(k, 6)], a[i, k] * wt[k, j]))
    before, rep = _fused(p)
    assert rep.kernels_after == 1 and rep.inlined[0][2] == "index remap"
    assert "w[j, k]" in str(p) and classify(_computes(p)[0]) == "matmul"
    _same_numerics(before, p, _rand(3, 6), _rand(4, 6))


def test_matmul_bias_relu_epilogue_is_one_compute():
    p = KernelProgram.new("epi", ["N"])
    x = p.input("x", F32, (N, 8))
    w = p.input("w", F32, (8, 3))
    b = p.input("b", F32, (3,))
    mm = p.temp("mm", F32, (N, 3))
    z = p.temp("z", F32, (N, 3))
    y = p.output("y", F32, (N, 3))
    p.compute(mm, lambda i, j: rsum([(k, 8)], x[i, k] * w[k, j]))
    p.compute(z, lambda i, j: mm[i, j] + b[j])
    p.compute(y, lambda i, j: relu(z[i, j]))
    before, _rep = _fused(p)
    (only,) = _computes(p)
    assert only.out == "y" and classify(only) == "matmul"
    assert sum(isinstance(n, Reduce) for n in walk(only.body)) == 1
    for n in (1, 5):
        _same_numerics(before, p, _rand(n, 8), _rand(8, 3), _rand(3))


def test_matmul_read_twice_per_element_is_not_duplicated():
    """A matmul result feeding a row max and a subtraction stays a buffer."""
    p = KernelProgram.new("mm2", ["N"])
    x = p.input("x", F32, (N, 8))
    w = p.input("w", F32, (8, 4))
    mm = p.temp("mm", F32, (N, 4))
    y = p.output("y", F32, (N, 4))
    p.compute(mm, lambda i, j: rsum([(k, 8)], x[i, k] * w[k, j]))
    p.compute(y, lambda i, j: mm[i, j] - rmax([(c, 4)], mm[i, c]))
    before, rep = _fused(p)
    assert rep.kernels_after == 2 and "mm" in p.buffers
    assert any(t == "mm" for t, _ in rep.kept)
    _same_numerics(before, p, _rand(3, 8), _rand(8, 4))


def test_reduction_temp_with_two_consumers_and_different_index_maps_is_kept():
    """e = exp(x - rowmax(x)) read as e[i, j] by one compute and e[i, d] inside a sum by
    another: inlining would compute the row max and the exp once per consumer."""
    p = KernelProgram.new("sm", ["N"])
    x = p.input("x", F32, (N, 6))
    e = p.temp("e", F32, (N, 6))
    s = p.temp("s", F32, (N, 1))
    y = p.output("y", F32, (N, 6))
    p.compute(e, lambda i, j: x[i, j] - rmax([(c, 6)], x[i, c]))
    p.compute(s, lambda i, j: rsum([(d, 6)], e[i, d]))
    p.compute(y, lambda i, j: e[i, j] / s[i, 0])
    before, rep = _fused(p)
    assert "e" in p.buffers and any(t == "e" and "reduction producer" in why for t, why in rep.kept)
    assert rep.kernels_after == 2  # s still folds into y
    _same_numerics(before, p, _rand(4, 6))


def test_row_reduction_shared_by_identity_reads_is_inlined():
    """LayerNorm's `d = x - mean(x)` read at the same element by the variance term and the
    output: recomputing the (hoisted) mean per consumer beats a full temp."""
    p = KernelProgram.new("ln", ["N"])
    x = p.input("x", F32, (N, 8))
    dd = p.temp("dd", F32, (N, 8))
    sq = p.temp("sq", F32, (N, 8))
    var = p.temp("var", F32, (N, 1))
    y = p.output("y", F32, (N, 8))
    p.compute(dd, lambda i, j: x[i, j] - rsum([(c, 8)], x[i, c]) / 8.0)
    p.compute(sq, lambda i, j: dd[i, j] * dd[i, j])
    p.compute(var, lambda i, j: rsum([(d, 8)], sq[i, d]) / 8.0)
    p.compute(y, lambda i, j: dd[i, j] / sqrt(var[i, 0] + 1e-5))
    before, rep = _fused(p)
    assert rep.kernels_after == 1
    _same_numerics(before, p, _rand(5, 8))


def test_unprovable_symbolic_extents_block_fusion():
    """The consumer runs over M rows, the producer wrote N: neither a matmul nor an
    expensive producer is inlined unless the extents are provably equal."""
    def build(rows):
        p = KernelProgram.new("ext", ["N", "M"])
        x = p.input("x", F32, (N, 8))
        w = p.input("w", F32, (8, 4))
        mm = p.temp("mm", F32, (N, 4))
        ex = p.temp("ex", F32, (N, 4))
        y = p.output("y", F32, (rows, 4))
        z = p.output("z", F32, (rows, 4))
        p.compute(mm, lambda i, j: rsum([(k, 8)], x[i, k] * w[k, j]))
        p.compute(ex, lambda i, j: exp(x[i, j]) * exp(x[i, j + 4]))
        p.compute(y, lambda i, j: mm[i, j] + 1.0)
        p.compute(z, lambda i, j: ex[i, j] + 1.0)
        return p

    p = build(M)
    rep = fuse(p)
    assert rep.kernels_after == 4 and {"mm", "ex"} <= set(p.buffers)
    q = build(N)
    assert fuse(q).kernels_after == 2
    # a symbol table that pins M to N's only value proves them equal
    tab = SymbolTable()
    tab.declare("N", 3, 3)
    tab.declare("M", 3, 3)
    assert fuse(build(M), tab).kernels_after == 2


def test_checked_gather_is_inlined_only_into_identity_reads():
    p = KernelProgram.new("g", ["N"])
    table = p.input("table", F32, (10, 4))
    idx = p.input("idx", DType.i64, (N,))
    g = p.temp("g", F32, (N, 4))
    y = p.output("y", F32, (N, 4))
    p.compute(g, lambda i, j: table[wrap_index(idx[i], 10), j])
    p.compute(y, lambda i, j: select(j < 2, g[i, j], 0.0))  # read in a select arm
    rep = fuse(p)
    assert "g" in p.buffers and rep.kernels_after == 2
    q = KernelProgram.new("g2", ["N"])
    table = q.input("table", F32, (10, 4))
    idx = q.input("idx", DType.i64, (N,))
    g = q.temp("g", F32, (N, 4))
    y = q.output("y", F32, (N, 4))
    q.compute(g, lambda i, j: table[wrap_index(idx[i], 10), j])
    q.compute(y, lambda i, j: g[i, j] * 2.0)
    before, rep = _fused(q)
    assert rep.kernels_after == 1
    _same_numerics(before, q, _rand(10, 4), np.array([3, -1, 9], np.int64))


def test_outputs_are_always_written_and_views_are_followed():
    p = KernelProgram.new("outs", ["N"])
    x = p.input("x", F32, (N, 6))
    y1 = p.output("y1", F32, (N, 6))
    t = p.temp("t", F32, (N, 6))
    v = p.view("v", t, (N, 2, 3))
    y2 = p.output("y2", F32, (N, 2, 3))
    p.compute(y1, lambda i, j: x[i, j] + 1.0)
    p.compute(t, lambda i, j: y1[i, j] * 3.0)
    p.compute(y2, lambda i, a, b: v[i, a, b] - y1[i, a * 3 + b])
    before, _rep = _fused(p)
    assert [s.out for s in _computes(p)] == ["y1", "y2"]  # y1 kept, t inlined through the view
    assert "t" not in p.buffers and "v" not in p.buffers
    _same_numerics(before, p, _rand(4, 6))


def test_reshape_index_splits_only_merged_dims():
    p = KernelProgram.new("rs", ["N"])
    x = p.input("x", F32, (N, 4, 1, 6))
    t = p.temp("t", F32, (N, 4, 1, 6))
    v = p.view("v", t, (N * 4, 6))
    y = p.output("y", F32, (N * 4, 6))
    p.compute(t, lambda a, b, e, f: exp(x[a, b, e, f]))
    p.compute(y, lambda i, j: v[i, j] + 1.0)
    before, rep = _fused(p)
    text = str(p)
    assert rep.kernels_after == 1 and "x[i // 4, i % 4, 0, j]" in text
    _same_numerics(before, p, _rand(3, 4, 1, 6))


def test_reshape_index_with_symbolic_merged_dims():
    b, s = sym("B"), sym("S")
    p = KernelProgram.new("rs2", ["B", "S"])
    x = p.input("x", F32, (b, s, 8))
    t = p.temp("t", F32, (b, s, 8))
    v = p.view("v", t, (b * s, 2, 4))
    y = p.output("y", F32, (b * s, 2, 4))
    p.compute(t, lambda a, e, f: exp(x[a, e, f]))
    p.compute(y, lambda i, j, q: v[i, j, q] + 1.0)
    before, _rep = _fused(p)
    assert "x[i // S, i % S, j * 4 + q]" in str(p)
    _same_numerics(before, p, _rand(2, 3, 8))


def test_row_reduction_read_through_a_reshape_view_is_inlined():
    s = sym("S")
    p = KernelProgram.new("rv", ["N", "S"])
    x = p.input("x", F32, (N, s, 8))
    z = p.input("z", F32, (N * s, 8))
    m = p.temp("m", F32, (N, s, 1))
    v = p.view("v", m, (N * s,))
    y = p.output("y", F32, (N * s, 8))
    p.compute(m, lambda a, b, e: rsum([(k, 8)], x[a, b, k]))
    p.compute(y, lambda i, j: z[i, j] - v[i])
    before, rep = _fused(p)
    assert rep.kernels_after == 1 and "m" not in p.buffers
    _same_numerics(before, p, _rand(2, 3, 8), _rand(6, 8))


def test_costs_and_classes():
    p = KernelProgram.new("cls", ["N"])
    x = p.input("x", F32, (N, 4))
    a = p.output("a", F32, (N, 4))
    p.compute(a, lambda i, j: exp(x[i, j]) + 1.0)
    assert element_cost(_computes(p)[0].body) == 17
    assert classify(_computes(p)[0]) == "elementwise"
    b = p.output("b", F32, (4, N))
    p.compute(b, lambda i, j: x[j, i])
    assert classify(_computes(p)[1]) == "injective"
    cs = p.output("cs", F32, (N, 4))
    p.compute(cs, lambda i, j: rsum([(k, j + 1)], x[i, k]))
    assert classify(_computes(p)[2]) == "opaque"


# ---- from ONNX ops -------------------------------------------------------------------------


def _onnx_model(nodes, inputs, outputs, inits):
    return op_model(nodes, [(n, T.FLOAT, s) for n, s in inputs], outputs, inits)


def _layernorm_softmax_model():
    """LayerNorm and Softmax written with primitive ops, as exporters without fused ops do."""
    inits = {"two": np.float32(2.0), "eps": np.float32(1e-5), "g": _rand(12), "b": _rand(12)}
    nodes = [
        h.make_node("ReduceMean", ["x"], ["mu"], axes=[-1], keepdims=1),
        h.make_node("Sub", ["x", "mu"], ["d"]),
        h.make_node("Pow", ["d", "two"], ["d2"]),
        h.make_node("ReduceMean", ["d2"], ["var"], axes=[-1], keepdims=1),
        h.make_node("Add", ["var", "eps"], ["ve"]),
        h.make_node("Sqrt", ["ve"], ["sd"]),
        h.make_node("Div", ["d", "sd"], ["q"]),
        h.make_node("Mul", ["q", "g"], ["r"]),
        h.make_node("Add", ["r", "b"], ["ln"]),
        h.make_node("ReduceMax", ["x"], ["mx"], axes=[-1], keepdims=1),
        h.make_node("Sub", ["x", "mx"], ["s"]),
        h.make_node("Exp", ["s"], ["e"]),
        h.make_node("ReduceSum", ["e", "ax"], ["z"], keepdims=1),
        h.make_node("Div", ["e", "z"], ["sm"]),
    ]
    inits["ax"] = np.array([-1], np.int64)
    return _onnx_model(nodes, [("x", ["N", "S", 12])], ["ln", "sm"], inits)


def test_layernorm_and_softmax_chains_collapse():
    m = _layernorm_softmax_model()
    mod = load_onnx(m)
    run_pipeline(mod, "shape-inference,canonicalize")
    prog = lower_function(mod, mod.main, "chains")
    before = copy.deepcopy(prog)
    rep = fuse(prog, mod.symbols)
    by_out = {g.out: g for g in rep.groups}
    assert rep.kernels_before == 14 and rep.kernels_after == 3, rep.describe()
    # the LayerNorm chain is one compute (written straight into output 0), the Softmax two:
    # exp(x - rowmax) is read at two index maps by the normalising compute, so it is kept
    assert [o.split("_")[0] for o in by_out["out0"].origin] == [
        "ReduceMean", "Sub", "Pow", "ReduceMean", "Add", "Sqrt", "Div", "Mul", "Add"]
    assert [o.split("_")[0] for o in by_out["out1"].origin] == ["ReduceSum", "Div"]
    (kept,) = [g for g in rep.groups if g.out not in ("out0", "out1")]
    assert [o.split("_")[0] for o in kept.origin] == ["ReduceMax", "Sub", "Exp"]
    k_before, k_after = JitKernel(before), JitKernel(prog)
    for seed, dims in enumerate([{"N": 1, "S": 1}, {"N": 2, "S": 7}]):
        feeds = random_inputs(m, dims, seed=seed)
        want = ort_run(m, feeds)
        got = k_after(feeds["x"])
        ref = k_before(feeds["x"])
        for (name, w), g, r in zip(want.items(), got, ref):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=name)
            np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-6, err_msg=name)


# ---- the sample models ---------------------------------------------------------------------

NATIVE = ["mlp", "gelu_layernorm", "transformer", "convnet"]


@pytest.mark.parametrize("name", NATIVE)
def test_sample_model_numerics_unchanged_by_fusion(name):
    from onnxcc.compiler import CompileOptions, graph_stage, load_module

    path = MODELS_DIR / f"{name}.onnx"
    module = load_module(path)
    graph_stage(module, CompileOptions())
    f = module.functions[module.dispatch["main"][-1]]  # the generic version
    prog = lower_function(module, f, f"{name}_fused")
    rep = fuse(prog, module.symbols)
    assert rep.kernels_after < rep.kernels_before
    kern = JitKernel(prog)
    for seed, dims in enumerate(SAMPLE_MODELS[name]):
        feeds = random_inputs(path, dims, seed=seed)
        want = ort_run(path, feeds)
        got = kern(*[feeds[a.name] for a in f.params])
        for (out, w), g in zip(want.items(), got):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=f"{name} {out} at {dims}")


def test_driver_records_fusion_and_memory_per_version(tmp_path):
    art = onnxcc.compile(MODELS_DIR / "mlp.onnx", tmp_path / "k", emit="kernel")
    assert "// fused: " in art.text and "// kernels " in art.text
    plain = onnxcc.compile(MODELS_DIR / "mlp.onnx", tmp_path / "k2", emit="kernel", fuse=False)
    assert "// fused: " not in plain.text
    onnxcc.compile(MODELS_DIR / "mlp.onnx", tmp_path / "lib")
    meta = __import__("json").loads((tmp_path / "lib" / "mlp.json").read_text())
    info = meta["versions"][-1]["info"]
    assert info["kernels_after"] < info["kernels_before"] == 8
    assert {"arena_bytes", "peak_live_bytes", "total_bytes"} <= set(info)
    model = onnxcc.load(tmp_path / "lib")
    feeds = random_inputs(MODELS_DIR / "mlp.onnx", {"batch": 5})
    np.testing.assert_allclose(model.run(feeds)["y"], ort_run(MODELS_DIR / "mlp.onnx", feeds)["y"],
                               rtol=1e-4, atol=1e-5)


def test_batch_one_version_fuses_like_the_generic_one():
    """Broadcast lowering reads a size-1 dim at index 0; a `batch == 1` version must still see
    the bias add as the projection's epilogue and the head split as a remap into the next
    matmul (it once kept 15 kernels against the generic 11, and ran slower than generic; 9
    since the attention chain runs fused, passes/attention_chain.py)."""
    from onnxcc.compiler import CompileOptions, graph_stage, load_module
    from onnxcc.kernel.fuse import count_kernels
    from onnxcc.kernel.schedule import schedule_program

    module = load_module(MODELS_DIR / "transformer.onnx")
    graph_stage(module, CompileOptions(divisible=0, specialize={"batch": [1]}))
    counts, direct = [], []
    for vname in module.dispatch["main"]:
        prog = lower_function(module, module.functions[vname], "t")
        fuse(prog, module.symbols)
        schedule_program(prog)
        counts.append(count_kernels(prog.body))
        direct.append(sum(c.schedule.gemm is not None and c.schedule.gemm.a_direct for c in prog.computes()))
    assert module.dispatch["main"][0].endswith("batch1")
    assert counts[0] == counts[-1] == 9, counts
    # A read in place despite the 0 index: the five projections, and the output projection
    # that reads the heads through their transpose run by run (kernel/a_runs.py)
    assert direct[0] == direct[-1] == 6, direct
