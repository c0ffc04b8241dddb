"""Run a `KernelProgram` in-process through llvmlite's MCJIT: for tests and for checking
op lowerings against numpy without building a shared library.

    k = JitKernel(program)                  # verify, plan, emit, optimize, JIT
    (c,) = k(a, b)                          # symbols inferred from input shapes
    (c,) = k(a, b, syms={"M": 7})           # or given

`onnxcc_parallel_for` is provided by a Python callback that runs chunks on a thread pool
(ctypes releases the GIL around each chunk), so `parallel=True` kernels run here too.
"""

from __future__ import annotations

import ctypes
import itertools
import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import sympy

from onnxcc.errors import CompileError, RuntimeCallError
from onnxcc.ir import DType, evaluate
from onnxcc.kernel.expr import ERROR_MESSAGES
from onnxcc.kernel.plan_memory import MemoryPlan, reserve_scratch
from onnxcc.kernel.plan_memory import plan as plan_memory
from onnxcc.kernel.program import KernelProgram

from ..llvm.target import optimize, parse_modules, target_machine
from .emit import PARALLEL_FOR, emit_llvm

_KERNEL_CFUNC = ctypes.CFUNCTYPE(ctypes.c_int32, *[ctypes.c_void_p] * 4)
_BODY_CFUNC = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p)
_PAR_FOR_CFUNC = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p)

_POOL: ThreadPoolExecutor | None = None
_PAR_FOR_KEEPALIVE: list = []
PARALLEL_CALLS = [0]
"""how many times the JIT's onnxcc_parallel_for ran (tests check parallel paths ran)"""


def _parallel_for(n: int, body_addr: int, ctx: int) -> None:
    global _POOL
    PARALLEL_CALLS[0] += 1
    if n <= 0:
        return
    body = _BODY_CFUNC(body_addr)
    workers = _num_threads()
    chunks = min(n, workers * 4)
    bounds = [n * k // chunks for k in range(chunks + 1)]
    if _POOL is None:
        _POOL = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="onnxcc-jit")
    futures = [_POOL.submit(body, lo, hi, ctx) for lo, hi in itertools.pairwise(bounds) if lo < hi]
    for f in futures:
        f.result()


def _num_threads() -> int:
    return max(1, min(8, os.cpu_count() or 1))


def _install_parallel_for() -> None:
    import llvmlite.binding as llvm

    if not _PAR_FOR_KEEPALIVE:
        cb = _PAR_FOR_CFUNC(_parallel_for)
        _PAR_FOR_KEEPALIVE.append(cb)
        llvm.add_symbol(PARALLEL_FOR, ctypes.cast(cb, ctypes.c_void_p).value)
        nt = ctypes.CFUNCTYPE(ctypes.c_int32)(_num_threads)  # onnxcc_num_threads (GEMM blocking)
        _PAR_FOR_KEEPALIVE.append(nt)
        llvm.add_symbol("onnxcc_num_threads", ctypes.cast(nt, ctypes.c_void_p).value)


def _np_dtype(dt: DType) -> np.dtype:
    return np.dtype(np.uint16) if dt is DType.bf16 else dt.np


class JitKernel:
    """A KernelProgram compiled in-process; call it with numpy arrays."""

    def __init__(self, program: KernelProgram, plan: MemoryPlan | None = None, *, parallel: bool = False,
                 parallel_min_work: int = 1 << 15, opt: int = 3, fn_name: str | None = None):
        import llvmlite.binding as llvm

        if any(b.dtype is DType.string for b in program.buffers.values()):
            # string elements are C pointers made from numpy objects, and their ops call the
            # C runtime, which only a built library links in
            raise CompileError(f"kernel {program.name}: the in-process JIT does not run string tensors; "
                               "build a library (onnxcc.compile) to run them")
        self.program = program
        self.plan = reserve_scratch(plan if plan is not None else plan_memory(program), program)
        self.fn_name = fn_name or program.name
        module = emit_llvm(program, self.plan, self.fn_name, parallel=parallel,
                           parallel_min_work=parallel_min_work)
        self.llvm_ir = str(module)
        tm = target_machine(opt=opt, jit=True)
        mod = parse_modules(module)
        optimize(mod, tm, opt)
        self.optimized_ir = str(mod)
        _install_parallel_for()
        self._engine = llvm.create_mcjit_compiler(mod, tm)
        self._engine.finalize_object()
        self._fn = _KERNEL_CFUNC(self._engine.get_function_address(self.fn_name))

    def bind_symbols(self, arrays: Sequence[np.ndarray], syms: Mapping[str, int] | None) -> dict[str, int]:
        """Symbol values: given ones, plus those read off input dims that are a bare symbol."""
        env = dict(syms or {})
        for name, arr in zip(self.program.inputs, arrays):
            for d, n in zip(self.program.buffers[name].shape, arr.shape):
                if isinstance(d, sympy.Symbol) and d.name not in env:
                    env[d.name] = int(n)
        missing = [s for s in self.program.symbols if s not in env]
        if missing:
            raise ValueError(f"kernel {self.program.name}: no value for symbols {missing}")
        return env


    def __call__(self, *arrays: np.ndarray, syms: Mapping[str, int] | None = None) -> list[np.ndarray]:
        prog = self.program
        if len(arrays) != len(prog.inputs):
            raise ValueError(f"kernel {prog.name} takes {len(prog.inputs)} inputs, got {len(arrays)}")
        env = self.bind_symbols(arrays, syms)
        ins = []
        for name, arr in zip(prog.inputs, arrays):
            buf = prog.buffers[name]
            # NOTE: ascontiguousarray turns a 0-d array into shape (1,); keep the rank
            a = np.ascontiguousarray(arr, dtype=_np_dtype(buf.dtype)).reshape(np.shape(arr))
            want = tuple(evaluate(d, env) for d in buf.shape)
            if a.shape != want:
                raise ValueError(f"input {name}: shape {a.shape}, expected {want} under {env}")
            ins.append(a)
        outs = [np.empty(tuple(evaluate(d, env) for d in prog.buffers[n].shape),
                         _np_dtype(prog.buffers[n].dtype)) for n in prog.outputs]
        ws_bytes = evaluate(self.plan.workspace_bytes, env)
        ws = np.empty(ws_bytes + 64, np.uint8)
        ws_ptr = ws.ctypes.data + (-ws.ctypes.data) % 64
        sym_arr = (ctypes.c_int64 * max(1, len(prog.symbols)))(*[env[s] for s in prog.symbols])
        in_arr = (ctypes.c_void_p * max(1, len(ins)))(*[a.ctypes.data for a in ins])
        out_arr = (ctypes.c_void_p * max(1, len(outs)))(*[a.ctypes.data for a in outs])
        code = self._fn(ctypes.addressof(sym_arr), ctypes.addressof(in_arr), ctypes.addressof(out_arr),
                        ws_ptr)
        if code != 0:
            what = ERROR_MESSAGES.get(code, f"error {code}")
            raise RuntimeCallError(f"kernel {prog.name} failed: {what}", code)
        return outs
