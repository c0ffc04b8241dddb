"""CUDA kernels without a GPU: the same kernel IR the PTX comes from, built in host-emulation
mode (`CudaModule(emulate=True)`: the special registers are parameters), JIT-compiled for
the host and run one "thread" per call over a small grid, so the grid-stride loop, index
unflattening, workspace offsets, const globals and the status word are all exercised.
Whole sample models are compared with onnxruntime this way, every version kind included."""

from __future__ import annotations

import ctypes
import functools

import llvmlite.binding as llvm
import numpy as np
import pytest
import sympy

from onnxcc.codegen.cuda.emit import CudaModule
from onnxcc.codegen.llvm.target import optimize as optimize_module
from onnxcc.codegen.llvm.target import parse_modules, target_machine
from onnxcc.ir import DType, evaluate, sym
from onnxcc.kernel import (
    ERR_INDEX,
    KernelProgram,
    Var,
    argmax,
    cast,
    erf,
    exp,
    plan,
    rmax,
    rsum,
    select,
    tanh,
    wrap_index,
)
from onnxcc.testing import MODELS_DIR, SAMPLE_MODELS, ort_run, random_inputs

F32 = DType.f32
N = sym("N")
GRID, BLOCK = 3, 4  # 12 emulated threads: every kernel strides


class Emulated:
    """The kernels of some programs, JIT-compiled for the host in emulation mode."""

    def __init__(self, programs):
        self.cm = CudaModule("emu", emulate=True)
        self.versions = []
        for prog, mplan in programs:
            self.versions.append((prog, mplan, self.cm.add_program(prog, mplan, prog.name)))
        tm = target_machine(jit=True)
        mod = parse_modules(self.cm.ir)
        optimize_module(mod, tm, 2)
        self.ee = llvm.create_mcjit_compiler(mod, tm)
        self.ee.finalize_object()
        for name, raw in self.cm.consts.items():  # what the runtime does after loading the PTX
            ctypes.memmove(self.ee.get_global_value_address(name), raw, len(raw))

    def run(self, k: int, inputs: list[np.ndarray], syms: dict[str, int]) -> tuple[list[np.ndarray], int]:
        prog, mplan, launches = self.versions[k]
        outs = [np.zeros([evaluate(d, syms) for d in prog.buffers[o].shape], prog.buffers[o].dtype.np)
                for o in prog.outputs]
        ws_bytes = evaluate(mplan.workspace_bytes, syms)
        ws_raw = np.full(ws_bytes + 128, 0xCD, np.uint8)  # garbage, as cuMemAlloc gives
        ws = ws_raw.ctypes.data + (-ws_raw.ctypes.data) % 64
        status = np.zeros(1, np.int32)
        ins = [np.ascontiguousarray(a) for a in inputs]
        args = [ctypes.c_int64(syms[s]) for s in prog.symbols]
        args += [ctypes.c_void_p(a.ctypes.data) for a in ins + outs]
        args += [ctypes.c_void_p(ws), ctypes.c_void_p(status.ctypes.data)]
        nargs = len(args)
        for la in launches:
            if evaluate(la.work, syms) <= 0:  # the runtime launches nothing then
                continue
            nsym = len(prog.symbols)
            fnty = ctypes.CFUNCTYPE(None, *([ctypes.c_int64] * nsym), *([ctypes.c_void_p] * (nargs - nsym)),
                                    *([ctypes.c_int32] * 4))
            fn = fnty(self.ee.get_function_address(la.kernel))
            for ctaid in range(GRID):
                for tid in range(BLOCK):
                    fn(*args, tid, BLOCK, ctaid, GRID)
        return outs, int(status[0])


# ---- hand-built programs ----------------------------------------------------------------------


def test_emulated_kernels_match_numpy():
    p = KernelProgram.new("t", ["N"])
    X = p.input("X", F32, (N, 7))
    b = p.input("b", F32, (7,))
    w = p.const("w", np.linspace(-1, 1, 7).astype(np.float32))
    T = p.temp("T", F32, (N, 7))
    Y = p.output("Y", F32, (N, 7))
    Z = p.output("Z", DType.i64, (N,))
    k = Var("k")
    p.compute(T, lambda n, c: tanh(X[n, c]) * w[c] + erf(X[n, c]) + b[c])
    mx = rmax([(k, 7)], T[Var("n"), k])
    p.compute(Y, lambda n, c: exp(T[n, c] - mx) / rsum([(Var("d"), 7)], exp(T[n, Var("d")] - mx)))
    p.compute(Z, lambda n: argmax(k, 7, Y[n, k]))
    emu = Emulated([(p, plan(p))])
    rng = np.random.default_rng(0)
    for n in (1, 5, 13):
        x, bb = rng.standard_normal((n, 7)).astype(np.float32), rng.standard_normal(7).astype(np.float32)
        (y, z), status = emu.run(0, [x, bb], {"N": n})
        assert status == 0
        from math import erf as merf

        t = np.tanh(x) * np.linspace(-1, 1, 7).astype(np.float32) + np.vectorize(merf)(x) + bb
        want = np.exp(t - t.max(1, keepdims=True))
        want /= want.sum(1, keepdims=True)
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(z, want.argmax(1))


def test_emulated_index_check_sets_status():
    p = KernelProgram.new("g", ["N"])
    D = p.input("D", F32, (N,))
    idx = p.input("idx", DType.i64, (3,))
    Y = p.output("Y", F32, (3,))
    p.compute(Y, lambda i: D[wrap_index(idx[i], N)] + select(i > 0, D[0], D[1]))
    emu = Emulated([(p, plan(p))])
    d = np.arange(5, dtype=np.float32)
    (y,), status = emu.run(0, [d, np.array([0, -1, 2])], {"N": 5})
    assert status == 0
    np.testing.assert_array_equal(y, [1, 4, 2])
    _, status = emu.run(0, [d, np.array([0, 9, 2])], {"N": 5})
    assert status == ERR_INDEX


def test_emulated_casts_and_ints():
    p = KernelProgram.new("c", ["N"])
    X = p.input("X", F32, (N,))
    Y = p.output("Y", DType.i32, (N,))
    H = p.output("H", DType.f16, (N,))
    p.compute(Y, lambda i: cast(X[i] * 100.0, DType.i32) // 7 + cast(i, DType.i32) % 3)
    p.compute(H, lambda i: cast(X[i], DType.f16))
    emu = Emulated([(p, plan(p))])
    x = np.random.default_rng(1).standard_normal(11).astype(np.float32)
    (y, h), status = emu.run(0, [x], {"N": 11})
    assert status == 0
    np.testing.assert_array_equal(y, (x * 100).astype(np.int32) // 7 + np.arange(11, dtype=np.int32) % 3)
    np.testing.assert_array_equal(h, x.astype(np.float16))


# ---- the sample models, every version ------------------------------------------------------

NATIVE_MODELS = [m for m in SAMPLE_MODELS if m not in ("if_model", "loop_model", "scan_model")]


def version_options(model: str):
    """Options giving every version kind: exact (batch=1), bucket (seq), divisible (default)."""
    from onnxcc.compiler import CompileOptions

    buckets = {"seq": [8, 64]} if "seq" in SAMPLE_MODELS[model][0] else {}
    return CompileOptions(target="cuda", specialize={"batch": [1]}, buckets=buckets)


@functools.cache
def _build(model: str):
    """Versions (function, program, plan) of a sample model as the driver builds them for
    target cuda (exact batch=1 versions included)."""
    from onnxcc.compiler import graph_stage, load_module
    from onnxcc.kernel.fuse import fuse
    from onnxcc.kernel.plan_memory import plan as plan_memory
    from onnxcc.passes.lower import lower_function

    options = version_options(model)
    module = load_module(MODELS_DIR / f"{model}.onnx")
    graph_stage(module, options)
    out = []
    for k, name in enumerate(module.dispatch["main"]):
        f = module.functions[name]
        prog = lower_function(module, f, f"{model}_v{k}")
        if options.fuse:
            fuse(prog, module.symbols)
        out.append((f, prog, plan_memory(prog, module.symbols)))
    return module, out, Emulated([(p, m) for _, p, m in out])


def _holds(guard, dims: dict[str, int]) -> bool:
    return bool(sympy.sympify(guard).subs({sym(k): v for k, v in dims.items()}))


@pytest.mark.parametrize("model", NATIVE_MODELS)
def test_emulated_sample_model_matches_onnxruntime(model):
    module, versions, emu = _build(model)
    path = MODELS_DIR / f"{model}.onnx"
    ran = set()
    for j, dims in enumerate(SAMPLE_MODELS[model]):
        feeds = random_inputs(path, dims, seed=j)
        want = ort_run(path, feeds)
        generic = versions[-1][0]
        ins = [feeds[a.name] for a in generic.params]
        syms = {s.name: dims[s.name] for s in module.symbols}
        for k, (f, _prog, _) in enumerate(versions):
            if not _holds(f.guard, dims):
                continue
            ran.add(f.attrs.get("kind", "generic"))
            outs, status = emu.run(k, ins, syms)
            assert status == 0, f"version {k} failed with status {status}"
            for (name, w), g in zip(want.items(), outs):
                np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-4,
                                           err_msg=f"{model} v{k} {name} at {dims}")
    assert {"generic", "exact"} <= ran
    if "seq" in SAMPLE_MODELS[model][0]:
        assert "bucket" in ran


def test_emulated_float8_casts():
    """f32 -> each 8-bit float (nearest even, not saturating) and back, as ml_dtypes casts."""
    import ml_dtypes

    p = KernelProgram.new("f8", ["N"])
    X = p.input("X", F32, (N,))
    kinds = [DType.f8e4m3fn, DType.f8e4m3fnuz, DType.f8e5m2, DType.f8e5m2fnuz]
    outs = []
    for dt in kinds:
        Q = p.output(f"Q_{dt.value}", dt, (N,))
        B = p.output(f"B_{dt.value}", F32, (N,))
        p.compute(Q, lambda i: cast(X[i], dt))
        p.compute(B, lambda i, Q=Q: cast(Q[i], F32))
        outs.append(dt)
    emu = Emulated([(p, plan(p))])
    x = np.concatenate([np.random.default_rng(2).standard_normal(200).astype(np.float32) * 100,
                        np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-6, 300.0, 1e5], np.float32)])
    got, status = emu.run(0, [x], {"N": x.size})
    assert status == 0
    for k, dt in enumerate(outs):
        want = x.astype(dt.np)
        q, back = got[2 * k], got[2 * k + 1]
        np.testing.assert_array_equal(back, want.astype(np.float32), err_msg=dt.value)
        assert q.dtype == np.dtype(getattr(ml_dtypes, want.dtype.name))
        np.testing.assert_array_equal(q.astype(np.float32), want.astype(np.float32), err_msg=dt.value)


def test_cuda_refuses_sub_byte_types(tmp_path):
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h

    import onnxcc
    from onnxcc.errors import CompileError

    nodes = [h.make_node("Cast", ["x"], ["q"], to=T.INT4)]
    m = h.make_model(h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [4])],
                                  [h.make_tensor_value_info("q", T.INT4, [4])]), opset_imports=[h.make_opsetid("", 25)])
    m.ir_version = 11
    onnx.checker.check_model(m)
    with pytest.raises(CompileError, match=r"sub-byte types \(i4\)"):
        onnxcc.compile(m, tmp_path, name="cs", target="cuda")
