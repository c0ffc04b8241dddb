"""Row staging (kernel/rowstage.py, codegen/cpu/rowstage.py): a costly activation fused into
the LayerNormalization after it is evaluated once per element, by staging each row in the
output. Which computes match, the emitted code (one sigmoid per element instead of three),
the numbers on odd sizes, serial and parallel, and the user path on the chains exporters
write (tanh-GELU, SiLU, Mish, with a residual add, f64) against onnxruntime."""

from __future__ import annotations

import math
import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxcc
from onnxcc.codegen.cpu.jit import JitKernel
from onnxcc.ir import DType, sym
from onnxcc.kernel import KernelProgram, Var, cast, rsum, select, sigmoid
from onnxcc.kernel.rowstage import match_row_stage
from onnxcc.kernel.schedule import TargetInfo, schedule_program
from onnxcc.testing import ort_run

F32, F16 = DType.f32, DType.f16
N, R = sym("N"), sym("R")
rng = np.random.default_rng(5)


def _ln_silu_program(out_dtype: DType = F32, lazy_stat: bool = False) -> KernelProgram:
    """Z[r, j] = LayerNorm(X * sigmoid(X))[r, j], as fusion leaves it (the activation inlined
    at the element and in both row sums)."""
    p = KernelProgram.new("ln", ["R", "N"])
    X = p.input("X", F32, (R, N))
    Z = p.output("Z", out_dtype, (R, N))
    d, e = Var("d"), Var("e")

    def a(r, j):
        return X[r, j] * sigmoid(X[r, j])

    def body(r, j):
        mean = rsum([(d, N)], a(r, d)) / cast(N, F32)
        var = rsum([(e, N)], (a(r, e) - mean) * (a(r, e) - mean)) / cast(N, F32)
        rstd = 1.0 / (var + 1e-5) ** 0.5
        if lazy_stat:  # a statistic inside a select arm is not hoisted: must not match
            rstd = select(X[r, j] > 100.0, rstd, 1.0)
        return cast((a(r, j) - mean) * rstd, out_dtype)

    p.compute(Z, body)
    return p


def _ref(x: np.ndarray) -> np.ndarray:
    a = x.astype(np.float64) / (1 + np.exp(-x.astype(np.float64)))
    m = a.mean(1, keepdims=True)
    return (a - m) / np.sqrt(((a - m) ** 2).mean(1, keepdims=True) + 1e-5)


def test_match_row_stage_shapes():
    (c,) = _ln_silu_program().computes()
    rs = match_row_stage(c, F32)
    assert rs is not None and "sigmoid" in str(rs.stage) and "sigmoid" not in str(rs.body)
    (c,) = _ln_silu_program(F16).computes()  # an f16 store would round the staged value
    assert match_row_stage(c, F16) is None
    (c,) = _ln_silu_program(lazy_stat=True).computes()
    assert match_row_stage(c, F32) is None


def _sigmoid_calls(kern: JitKernel) -> int:
    return len(re.findall(r"call [^\n]*@\"?onnxcc\.math\.sigmoid", kern.llvm_ir))


@pytest.mark.parametrize("parallel", [False, True])
def test_one_activation_per_element_and_numbers(parallel):
    p = _ln_silu_program()
    schedule_program(p, TargetInfo(parallel=parallel, min_parallel_work=64))
    (c,) = p.computes()
    assert c.schedule.row_stage is not None and "row-stage" in c.schedule.describe()
    kern = JitKernel(p, parallel=parallel, parallel_min_work=64)
    assert _sigmoid_calls(kern) == 1
    for rows, n in ((1, 1), (3, 7), (5, 17), (2, 100), (64, 33)):
        x = (rng.standard_normal((rows, n)) * 3).astype(np.float32)
        (z,) = kern(x)
        np.testing.assert_allclose(z, _ref(x), rtol=1e-4, atol=2e-4 if n == 1 else 2e-5)


def test_row_mean_summed_in_the_staging_pass():
    """The mean's row sum (over `d`) is accumulated while the row is staged; the variance's
    (over `e`, after the mean) still re-reads the row. Numbers on odd rows, one element, rows
    past and short of a vector."""
    p = _ln_silu_program()
    schedule_program(p, TargetInfo(parallel=False))
    kern = JitKernel(p, parallel=False)
    ir_text = kern.llvm_ir
    assert "rowstage.rowsum" in ir_text
    assert not re.search(r'"?d\.loop"?:', ir_text) and re.search(r'"?e\.loop"?:', ir_text)
    for rows, n in ((1, 1), (1, 15), (4, 16), (3, 31), (2, 769)):
        x = (rng.standard_normal((rows, n)) * 4 + 1).astype(np.float32)
        (z,) = kern(x)
        np.testing.assert_allclose(z, _ref(x), rtol=1e-4, atol=2e-4 if n == 1 else 2e-5)


def test_unscheduled_keeps_the_plain_nest():
    """Without a schedule (the CUDA backend's view) the same compute evaluates it per read."""
    kern = JitKernel(_ln_silu_program())
    assert _sigmoid_calls(kern) == 3
    x = rng.standard_normal((3, 9)).astype(np.float32)
    (z,) = kern(x)
    np.testing.assert_allclose(z, _ref(x), rtol=1e-4, atol=2e-5)


# ---- the user path against onnxruntime ---------------------------------------------------------


def _chain(act: str, width: int, residual: bool, elem: int) -> onnx.ModelProto:
    dt = np.float32 if elem == TensorProto.FLOAT else np.float64
    r = np.random.default_rng(width)
    n = helper.make_node

    def c(name, v):
        return numpy_helper.from_array(np.asarray(v, dt), name)

    inits = [c("g", 1 + 0.1 * r.standard_normal(width)), c("b", 0.1 * r.standard_normal(width))]
    if act == "gelu_tanh":
        inits += [c("three", 3.0), c("k", 0.044715), c("s", math.sqrt(2 / math.pi)), c("one", 1.0), c("half", 0.5)]
        nodes = [n("Pow", ["x", "three"], ["x3"]), n("Mul", ["x3", "k"], ["kx3"]), n("Add", ["x", "kx3"], ["i"]),
                 n("Mul", ["i", "s"], ["u"]), n("Tanh", ["u"], ["t"]), n("Add", ["t", "one"], ["t1"]),
                 n("Mul", ["x", "t1"], ["xt"]), n("Mul", ["xt", "half"], ["a"])]
    elif act == "silu":
        nodes = [n("Sigmoid", ["x"], ["sg"]), n("Mul", ["x", "sg"], ["a"])]
    else:
        nodes = [n("Softplus", ["x"], ["sp"]), n("Tanh", ["sp"], ["t"]), n("Mul", ["x", "t"], ["a"])]
    nodes.append(n("LayerNormalization", ["a", "g", "b"], ["ln"], axis=-1, epsilon=1e-5))
    nodes.append(n("Add", ["ln", "x"], ["y"]) if residual else n("Identity", ["ln"], ["y"]))
    shape = ["batch", "seq", width]
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", elem, shape)],
                          [helper.make_tensor_value_info("y", elem, shape)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("act,width,residual,elem", [
    ("silu", 768, False, TensorProto.FLOAT), ("gelu_tanh", 37, True, TensorProto.FLOAT),
    ("mish", 96, False, TensorProto.FLOAT), ("silu", 50, True, TensorProto.DOUBLE)])
def test_chains_match_onnxruntime(tmp_path, act, width, residual, elem):
    model = _chain(act, width, residual, elem)
    text = onnxcc.compile(model, tmp_path / "k", name="chain", emit="kernel").text
    assert re.search(r"kernels \d+ -> 1, arena 0", text), text  # the activation is not a temp
    onnxcc.compile(model, tmp_path / "lib", name="chain")
    lib = onnxcc.load(tmp_path / "lib")
    dt = np.float32 if elem == TensorProto.FLOAT else np.float64
    # f64 too: LayerNormalization's default stash_type computes the statistics in f32 (onnxcc
    # follows the spec; onnxruntime computes them in f64)
    tol = dict(rtol=1e-5, atol=2e-5)
    for b, s in ((1, 1), (2, 5), (3, 33)):
        x = (rng.standard_normal((b, s, width)) * 2).astype(dt)
        got = np.asarray(lib.run({"x": x})["y"])
        want = ort_run(model, {"x": x})["y"]
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, **tol)


@pytest.mark.parametrize("norm", ["Softmax", "LogSoftmax"])
def test_row_statistics_consumers_after_a_costly_activation(tmp_path, norm):
    """Softmax runs as a row norm (its row max would evaluate the activation again), so the
    activation stays a temp there; LogSoftmax's max, sum and element read the staged row."""
    n = helper.make_node
    nodes = [n("Sigmoid", ["x"], ["s"]), n("Mul", ["x", "s"], ["a"]), n(norm, ["a"], ["y"], axis=-1)]
    g = helper.make_graph(nodes, "sm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", 40])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", 40])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    text = onnxcc.compile(model, tmp_path / "k", name="sm", emit="kernel").text
    fused = re.search(r"kernels \d+ -> 1, arena 0", text) is not None
    assert fused == (norm == "LogSoftmax"), text
    if fused:  # and staged: one sigmoid per element
        ll = onnxcc.compile(model, tmp_path / "ll", name="sm", emit="llvm").text
        assert len(re.findall(r"call [^\n]*onnxcc\.math\.sigmoid", ll)) == 1
    onnxcc.compile(model, tmp_path / "lib", name="sm")
    lib = onnxcc.load(tmp_path / "lib")
    for rows in (1, 7):
        x = (rng.standard_normal((rows, 40)) * 4).astype(np.float32)
        np.testing.assert_allclose(np.asarray(lib.run({"x": x})["y"]), ort_run(model, {"x": x})["y"],
                                   rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("width,interleaved", [(768, True), (1000, True), (96, False)])
def test_variance_sum_interleaved_on_static_rows(tmp_path, width, interleaved):
    """The variance's row sum runs on STAT_INTERLEAVE vector accumulators where the row is
    static and long enough (one FMA chain per row was ~190 cycles of latency on 768), its
    loop not unrolled (fully unrolled, x86's combiner folded the accumulators' fmas back
    into one chain); short rows keep LLVM's defaults. Numbers against onnxruntime on rows
    with a large mean (the variance's cancellation), widths with and without a remainder."""
    model = _chain("silu", width, False, TensorProto.FLOAT)
    ll = onnxcc.compile(model, tmp_path / "ll", name="chain", emit="llvm").text
    assert ('"llvm.loop.interleave.count", i32 4' in ll) == interleaved
    assert ('"llvm.loop.unroll.disable"' in ll) == interleaved
    onnxcc.compile(model, tmp_path / "lib", name="chain")
    lib = onnxcc.load(tmp_path / "lib")
    for b, s in ((1, 1), (2, 7)):
        x = (rng.standard_normal((b, s, width)) * 2 + 6).astype(np.float32)
        np.testing.assert_allclose(np.asarray(lib.run({"x": x})["y"]), ort_run(model, {"x": x})["y"],
                                   rtol=1e-5, atol=3e-5)


def _hinted_loops(ll: str) -> int:
    """Loops whose `!llvm.loop` ID carries the statistics' unroll.disable hint."""
    (off,) = re.findall(r'^!(\d+) = !\{ !"llvm\.loop\.unroll\.disable" \}$', ll, re.M) or ["none"]
    ids = re.findall(rf"^!(\d+) = !\{{ !\1,[^\n]*!{off}\b", ll, re.M)
    return sum(len(re.findall(rf"!llvm\.loop !{i}$", ll, re.M)) for i in ids)


def test_f32_statistics_of_an_f64_row_each_hinted(tmp_path):
    """LayerNormalization's f32 statistics of an f64 activation: the mean is no plain sum of
    the staged row (a cast in between), so it re-reads the row like the variance, whose sum
    reads it; each of the two loops gets its own interleaved, non-unrolled loop ID (the mean,
    emitted inside the variance's, as well). Numbers against onnxruntime."""
    model = _chain("silu", 1024, False, TensorProto.DOUBLE)
    ll = onnxcc.compile(model, tmp_path / "ll", name="chain", emit="llvm").text
    assert _hinted_loops(ll) == 2
    assert _hinted_loops(onnxcc.compile(_chain("silu", 768, False, TensorProto.FLOAT), tmp_path / "f32",
                                        name="chain", emit="llvm").text) == 1  # the mean summed while staging
    onnxcc.compile(model, tmp_path / "lib", name="chain")
    lib = onnxcc.load(tmp_path / "lib")
    x = rng.standard_normal((2, 3, 1024)) * 2 + 6
    np.testing.assert_allclose(np.asarray(lib.run({"x": x})["y"]), ort_run(model, {"x": x})["y"],
                               rtol=1e-5, atol=3e-5)
