"""CUDA backend: kernel programs -> PTX kernels through llvmlite's NVPTX target.

Every `Compute` of a program becomes one kernel entry (a `ptx_kernel` function) with the
same parameters for all kernels of the artifact's versions:

    void PREFIX_kJ(int64_t sym_0, ..., void *in_0, ..., void *out_0, ..., void *workspace,
                   int32_t *status)

Symbols come in `program.symbols` order, buffers in `program.inputs` / `program.outputs`
order; temps live at `workspace + offset` (the `MemoryPlan`); const buffers are
`.visible .global` arrays of the PTX module, left zero here and filled by the host runtime
after loading the module (`CudaModule.consts` has their bytes), so the PTX stays small.

The compute's domain is flattened (row-major, so neighbouring threads touch neighbouring
elements of the output) and run as a grid-stride loop over `[0, numel)`: thread `t` of
the grid takes `t, t + gridsize, ...`. The host launches `KernelLaunch.work` = numel
threads' worth of work (blocks of `BLOCK` threads, the grid capped by the runtime) and
never launches an empty domain. Reductions run per thread. A compute with a reduction
that does not depend on its innermost var (softmax, normalisations: a row statistic)
runs row-wise instead: the grid strides over the outer vars, and each thread computes the
row's reductions once and loops over the row, rather than every element recomputing them.
A failing check stores its
error code into `*status` and leaves; every kernel starts by leaving when `*status` is
already nonzero, and the host reads `*status` after the version's last kernel.

Expressions are emitted by `ExprEmitter` (shared with the CPU backend); the float
functions NVPTX has no instruction for come from `vmath` (the libm the CPU backend uses too).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np
import sympy
from llvmlite import ir

from onnxcc.errors import CompileError
from onnxcc.ir import Dim, canon
from onnxcc.kernel.expr import Reduce, free_vars, walk
from onnxcc.kernel.plan_memory import MemoryPlan
from onnxcc.kernel.program import Buffer, Compute, KernelProgram

from ..c.abi import KernelLaunch
from ..llvm.exprs import AccessMetadata, ExprEmitter
from ..llvm.function_context import ProgramContext
from ..llvm.helpers import I32, I64, PTR, VOID, for_range, i32, move_to_end, name_unnamed
from ..llvm.target import optimized, target_machine

TRIPLE = "nvptx64-nvidia-cuda"
DEFAULT_ARCH = "sm_80"
BLOCK = 256
"""threads per block of every launch (also each kernel's `.maxntid`)"""

_ARCH = re.compile(r"^sm_(\d+)([af]?)$")
_SREGS = ("tid.x", "ntid.x", "ctaid.x", "nctaid.x")


def parse_arch(arch: str) -> tuple[int, bool]:
    """("sm_90a") -> (90, True): the compute capability x 10, and whether the PTX only runs
    on exactly that capability (arch-specific `a` / `f` targets)."""
    m = _ARCH.match(arch)
    if m is None or int(m.group(1)) < 50:
        raise CompileError(f"CUDA arch {arch!r}: expected sm_XY with XY >= 50, e.g. sm_80 or sm_90")
    return int(m.group(1)), bool(m.group(2))


def const_symbol(data: np.ndarray) -> str:
    """The PTX global holding a const buffer's bytes (named by content, so versions share)."""
    raw = data.tobytes()
    return f"onnxcc_c_{hashlib.sha1(raw).hexdigest()[:20]}_{len(raw)}"


class CudaModule:
    """One NVPTX LLVM module holding the kernels of every version of an artifact."""

    def __init__(self, name: str, arch: str = DEFAULT_ARCH, *, emulate: bool = False):
        parse_arch(arch)
        self.arch = arch
        self.emulate = emulate
        """host emulation (tests): plain functions taking the special registers (tid.x, ntid.x,
        ctaid.x, nctaid.x) as four trailing i32 parameters, consts in address space 0; the
        same kernels, JIT-compiled for the host and run one "thread" per call"""
        self.ir = ir.Module(name=name)
        if not emulate:
            self.ir.triple = TRIPLE
        self.kernels: list[str] = []
        """kernel entry names, in emission order (the host refers to them by index)"""
        self.consts: dict[str, bytes] = {}
        """PTX global name -> the bytes the host copies into it after loading"""

    def add_program(self, program: KernelProgram, plan: MemoryPlan, prefix: str) -> list[KernelLaunch]:
        """Emit one kernel per compute of `program`; returns the launches, in order."""
        program.verify()
        if getattr(program, "run_dims", None):
            raise CompileError(f"cuda codegen: kernel {program.name} has run-determined dims "
                               f"({', '.join(program.run_dims)}): control flow and data-dependent counts "
                               "(NonZero, Compress, Unique, NonMaxSuppression) are not supported on CUDA yet")
        launches = []
        for j, stmt in enumerate(program.body):
            if not isinstance(stmt, Compute):
                raise CompileError(f"cuda codegen: {type(stmt).__name__} statements (control flow) are not "
                                   "supported on CUDA yet")
            work = _numel(stmt.extents)
            if isinstance(work, int) and work == 0:
                continue
            work = grid_work(stmt)
            name = f"{prefix}_k{j}"
            if name in self.ir.globals:
                raise CompileError(f"cuda codegen: kernel {name} already exists in module {self.ir.name}")
            _KernelBuilder(self, program, plan, stmt, name).run()
            self.kernels.append(name)
            launches.append(KernelLaunch(name, work))
        return launches

    def const_global(self, data: np.ndarray) -> ir.GlobalVariable:
        name = const_symbol(data)
        g = self.ir.globals.get(name)
        if g is None:
            raw = data.tobytes()
            ty = ir.ArrayType(ir.IntType(8), max(1, len(raw)))
            g = ir.GlobalVariable(self.ir, ty, name=name, addrspace=0 if self.emulate else 1)
            g.initializer = ir.Constant(ty, None)  # zeros: the host writes the data at load time
            g.align = 64
            self.consts[name] = raw
        return g

    def ptx(self, opt: int = 3, features: str = "") -> str:
        return emit_ptx(self.ir, self.arch, opt, features)


def emit_ptx(modules, arch: str = DEFAULT_ARCH, opt: int = 3, features: str = "") -> str:
    """Verify, optimize and assemble NVPTX LLVM modules (ir.Module or text) to PTX text.
    `features` "" lets LLVM pick the lowest PTX ISA version the arch needs."""
    parse_arch(arch)
    tm = target_machine(TRIPLE, arch, features, opt)
    return tm.emit_assembly(optimized(modules, tm, opt, "NVPTX LLVM IR"))


def row_wise(c: Compute) -> bool:
    """Whether `c` runs a row per thread: rank >= 2 and some reduction depends on no var
    but the outer ones (so computing it once per row saves a factor of the row length)."""
    if len(c.vars) < 2:
        return False
    outer = set(c.var_names[:-1])
    return any(isinstance(n, Reduce) and free_vars(n) <= outer for n in walk(c.body))


def grid_work(c: Compute) -> Dim:
    """The iterations of the kernel's grid-stride loop: the domain's size, or for a row-wise
    compute the number of rows (0 when the rows are empty)."""
    if not row_wise(c):
        return _numel(c.extents)
    return canon(_numel(c.extents[:-1]) * sympy.Min(c.extents[-1], 1))


def _numel(extents: Sequence[Dim]) -> Dim:
    n: Dim = 1
    for d in extents:
        n = canon(n * d)
    return n


# ---- one kernel -----------------------------------------------------------------------------


class _KernelBuilder(ProgramContext):
    """Builds one kernel entry for one compute (implements llvm.function_context.FunctionContext)."""

    def __init__(self, owner: CudaModule, program: KernelProgram, plan: MemoryPlan, c: Compute, name: str):
        self.owner, self.program, self.plan, self.c = owner, program, plan, c
        self.module = owner.ir
        nsym, nin, nout = len(program.symbols), len(program.inputs), len(program.outputs)
        nsreg = len(_SREGS) if owner.emulate else 0
        fnty = ir.FunctionType(VOID, [I64] * nsym + [PTR] * (nin + nout + 2) + [I32] * nsreg)
        fn = ir.Function(self.module, fnty, name=name)
        if not owner.emulate:
            fn.calling_convention = "ptx_kernel"
        fn.attributes.add("nounwind")
        args = list(fn.args)
        for a, s in zip(args, program.symbols):
            a.name = f"sym.{s}"
        for a, n in zip(args[nsym:], program.inputs):
            a.name = n
            for attr in ("noalias", "noundef"):
                a.add_attribute(attr)
        for a, n in zip(args[nsym + nin:], program.outputs):
            a.name = n
            a.add_attribute("noalias")
            a.add_attribute("noundef")
        self.sregs = dict(zip(_SREGS, args[len(args) - nsreg:])) if nsreg else {}
        args = args[:len(args) - nsreg]
        self.ws, self.status = args[-2], args[-1]
        self.ws.name, self.status.name = "workspace", "status"
        for a in (self.ws, self.status):
            a.add_attribute("noalias")
        self.fn, self.args = fn, args
        self.eb = ir.IRBuilder(fn.append_basic_block("entry"))
        self.start = fn.append_basic_block("start")
        self.b = ir.IRBuilder(self.start)
        self.entry_em = ExprEmitter(self, self.eb, check_div=False)
        self._ptrs: dict[str, ir.Value] = {}
        self._strides: dict[str, list[ir.Value]] = {}
        self._fails: dict[int, ir.Block] = {}

    # ---- FunctionContext ---------------------------------------------------------------
    def sym(self, name: str) -> ir.Value:
        try:
            return self.args[self.program.symbols.index(name)]
        except ValueError:
            raise CompileError(f"kernel {self.program.name}: unknown symbol {name}") from None

    def sym_lower(self, name: str) -> int | None:
        """None: a symbol arrives as a plain kernel parameter, with no range promised to LLVM."""
        return None

    def _root_ptr(self, name: str, buf: Buffer) -> ir.Value:
        """A kernel parameter, the workspace, a constant's global (through the generic
        address space)."""
        prog = self.program
        nsym, nin = len(prog.symbols), len(prog.inputs)
        if buf.kind == "input":
            return self.args[nsym + prog.inputs.index(name)]
        if buf.kind == "output":
            return self.args[nsym + nin + prog.outputs.index(name)]
        if buf.kind == "temp":
            return self.temp_ptr(name, self.plan, self.ws)
        g = self.owner.const_global(buf.data)  # type: ignore[arg-type]
        return g if self.owner.emulate else self.eb.addrspacecast(g, PTR, name=f"{name}.data")


    def fail_block(self, code: int) -> ir.Block:
        blk = self._fails.get(code)
        if blk is None:
            blk = self.fn.append_basic_block(f"fail.{code}")
            b = ir.IRBuilder(blk)
            b.store(i32(code), self.status, align=4)
            b.ret_void()
            self._fails[code] = blk
        return blk

    def alloca(self, ty: ir.Type, name: str) -> ir.Value:
        return self.eb.alloca(ty, name=name)

    # ---- the kernel ------------------------------------------------------------------------
    def access_md(self) -> AccessMetadata:
        """Scoped-noalias metadata: the compute's loads never alias its store."""
        return AccessMetadata.scoped_noalias(self.module, f"onnxcc.{self.fn.name}")

    def sreg(self, name: str) -> ir.Value:
        if self.sregs:
            return self.b.zext(self.sregs[name], I64, name=name.replace(".", "_"))
        fn = self.module.globals.get(f"llvm.nvvm.read.ptx.sreg.{name}")
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(I32, []), name=f"llvm.nvvm.read.ptx.sreg.{name}")
        return self.b.zext(self.b.call(fn, [], name=name.replace(".", "_")), I64, name=name.replace(".", "_"))

    def run(self) -> None:
        c, b = self.c, self.b
        fn = self.fn
        done = fn.append_basic_block("done")
        # a kernel before this one failed: nothing left to do
        st = b.load(self.status, name="status.in", align=4, typ=I32)
        go = fn.append_basic_block("go")
        b.cbranch(b.icmp_signed("==", st, i32(0), name="ok"), go, done)
        b.position_at_end(go)
        tid, ntid, ctaid, nctaid = (self.sreg(r) for r in _SREGS)
        first = b.add(b.mul(ctaid, ntid, name="block.base", flags=("nuw", "nsw")), tid, name="gid",
                      flags=("nuw", "nsw"))
        step = b.mul(nctaid, ntid, name="grid.size", flags=("nuw", "nsw"))
        total = self.dim(grid_work(c))
        rows = row_wise(c)
        em = ExprEmitter(self, b, access_md=self.access_md())
        em.hoist(c.body)
        pre = b.block
        loop = fn.append_basic_block("grid.loop")
        b.cbranch(b.icmp_signed("<", first, total, name="grid.nonempty"), loop, done)
        b.position_at_end(loop)
        p = b.phi(I64, name="flat")
        p.add_incoming(first, pre)
        names, exts = c.var_names, c.extents
        grid = names[:-1] if rows else names
        vals: dict[str, ir.Value] = {}
        rest: ir.Value = p
        for k in range(len(grid) - 1, 0, -1):
            e = self.dim(exts[k])
            vals[names[k]] = b.urem(rest, e, name=names[k])
            rest = b.udiv(rest, e, name=f"flat.{names[k]}")
        if grid:
            vals[names[0]] = rest
        em.push(dict(vals), dict(zip(grid, exts)))
        if rows:
            em.hoist(c.body)  # the row's reductions, once
            with for_range(b, self.dim(exts[-1]), names[-1], guard=False) as j:
                vals[names[-1]] = j
                em.push({names[-1]: j}, {names[-1]: exts[-1]})
                em.store(c.out, [vals[n] for n in names], em.emit(c.body))
                em.pop()
        else:
            em.store(c.out, [vals[n] for n in names], em.emit(c.body))
        em.pop()
        latch = b.block
        nxt = b.add(p, step, name="flat.next", flags=("nuw", "nsw"))
        p.add_incoming(nxt, latch)
        b.cbranch(b.icmp_signed("<", nxt, total, name="grid.more"), loop, done)
        move_to_end(done)
        ir.IRBuilder(done).ret_void()
        self.eb.branch(self.start)
        for blk in self._fails.values():
            move_to_end(blk)
        name_unnamed(fn)

