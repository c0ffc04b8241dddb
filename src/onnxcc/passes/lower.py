"""Lower one IR function (a version) to a kernel program via each op's `OpDef.lower`.

Buffers: parameters become program inputs, returned values program outputs (a result
that is returned is written straight into the output buffer), every other result a
workspace temp. `cc.const` becomes a const buffer, `cc.dims` a tiny i64 compute over the
symbols, and results a lowering declared as views (Reshape...) take no memory at all.

Ops with regions (If, Loop, Scan) lower their bodies through `lower_region` into nested
statement lists (kernel/control.py); a value a body yields can be written straight into
the buffer the op wants it in, as returned values are. A result dim that only the run
determines (a Loop's data-dependent trip count, a branch-dependent If extent) is allowed
when the op's lowering declares it with `declare_run_dim` (its upper bound, used for
allocation) and reports the true value with `set_symbol`; such results may only be
returned (or passed through Identity), never computed with. A run-time symbol bound with
`bind_symbol` (NonZero's count...) is bound mid-run instead, and later ops compute on it;
Loop and Scan bodies may bind one too (`lower_region(..., rebinds=True)`: a count in the
body, a carried dim re-bound every iteration), If branches may not.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import sympy

from ..errors import CompileError, UnsupportedOp
from ..ir import DType, Function, Module, Op, Value, canon, sym
from ..kernel import ERR_ASSERT, Buffer, Compute, KernelProgram, SetSymbol, Stmt, SymRef, Var, check, dim_to_expr
from ..kernel.expr import condition_to_expr, transform
from ..kernel.fuse import count_kernels
from ..kernel.module import KernelModule, KernelVersion
from ..ops import require_opdef
from ..ops.cc import const_array
from ..ops.control_flow import captured_value
from ..ops.conv_concat import convs_into_concats
from ..ops.lowering import LowerCtx
from .base import ModulePass, PassContext, register_pass


class _Lowerer:
    def __init__(self, module: Module, f: Function, name: str, values: dict | None, fused_attention: bool = False,
                 int8_dot: bool = False, f32_conv_call: bool = False):
        self.module, self.f = module, f
        self.fused_attention, self.int8_dot = fused_attention, int8_dot
        self.f32_conv_call = f32_conv_call
        self.values = values or {}
        self.program = KernelProgram.new(name, [s.name for s in module.symbols])
        self.buf: dict[int, object] = {}  # id(Value) -> Buffer
        self.counter = 0
        #: id(Value) -> the buffer its producer writes directly (an output, an If result)
        self.target: dict[int, Buffer] = {}
        self.depth = 0  # region nesting
        #: per open region, whether it may re-bind run-time symbols (a Loop body: its code runs
        #: as its own function per iteration, which re-reads them; kernel/control.py)
        self.rebinding: list[bool] = []
        #: constraints a lowering checks itself (over a loop's carried dims: ops/loop_carried.py)
        self.checked: set[int] = set()
        self.set_syms: dict[str, SetSymbol] = {}  # run-determined symbol -> its report, emitted last
        self.bound = ({s.name for a in f.params for s in a.type.symbols()} | {str(k) for k in f.subs}
                      | {item.partition("=")[0] for item in f.attrs.get("value_symbols", [])})

    def fresh(self, hint: str) -> str:
        self.counter += 1
        safe = "".join(c if c.isalnum() else "_" for c in hint)[:24] or "t"
        return f"{safe}_{self.counter}"

    def run(self) -> KernelProgram:
        p, f = self.program, self.f
        for k, a in enumerate(f.params):
            self.buf[id(a)] = p.input(f"in{k}", a.type.dtype, a.type.shape)
        ret = f.return_op
        outs = [p.output(f"out{k}", v.type.dtype, v.type.shape) for k, v in enumerate(ret.operands)]
        self.set_targets(ret.operands, outs)
        self.lower_ops(f.body.ops)
        if self.f32_conv_call:  # squeezenet's expand convs write their Concat's slices
            convs_into_concats(p)
        # outputs not written by their producer: params, consts, repeats, views
        for k, v in enumerate(ret.operands):
            if self.buf[id(v)] is outs[k]:
                continue
            src = self.buf[id(v)]
            p.compute(outs[k], lambda *ix, src=src: src[ix] if ix else src[()])
        self.check_late_constraints()
        p.body.extend(self.set_syms.values())
        p.verify()
        return p

    def check_late_constraints(self) -> None:
        """The model's constraints on run-time symbols cannot be checked by the dispatcher
        before the run (it only knows their bound): each is checked where the last of its
        symbols is bound, on the value being bound (the kernel fails with ERR_ASSERT)."""
        p = self.program
        late = p.late_dims
        if not late:
            return
        where = {s.symbol: k for k, s in enumerate(p.body) if isinstance(s, SetSymbol) and s.bind}
        nested = {s.symbol for _, _, s in _bind_sites(p.body, nested=False)}
        for c in self.module.constraints:
            names = {s.name for s in c.expr.free_symbols} & late
            if not names or id(c) in self.checked:
                continue
            if names & nested:  # re-bound in a loop body: checked at every binding
                if len(names) > 1:
                    raise CompileError(f"constraint {c.expr} ({c.origin}) relates symbols {', '.join(sorted(names))}"
                                       ", some of which a loop re-binds every iteration; not checked at run time yet")
                for body, k, st in _bind_sites(p.body, nested=True):
                    if st.symbol in names:
                        body[k] = _checked(st, c.expr)
                continue
            k = max(where[n] for n in names)
            p.body[k] = _checked(p.body[k], c.expr)

    def set_targets(self, values, buffers) -> None:
        """Let the producer of each value write straight into its buffer (first use wins;
        block args, consts and values defined elsewhere are copied by the caller)."""
        for v, b in zip(values, buffers):
            if b is not None and isinstance(v.owner, Op) and id(v) not in self.target \
                    and v.owner.name != "cc.const" and id(v) not in self.buf:
                self.target[id(v)] = b

    def lower_ops(self, ops) -> None:
        for op in ops:
            if op.name in ("return", "yield"):
                break
            first = len(self.program.body)
            self.lower_op(op)
            _label(self.program.body, first, op.loc or op.name)

    # ---- regions (used by the control-flow lowerings through LowerCtx) --------------------
    @contextmanager
    def into(self, stmts: list[Stmt]):
        """Statements the lowering appends go to `stmts` inside the with-block."""
        p = self.program
        saved, p.body = p.body, stmts
        try:
            yield stmts
        finally:
            p.body = saved

    def lower_region(self, block, args, targets, rebinds: bool = False) -> tuple[list[Stmt], list[Buffer]]:
        """Lower `block` into a new statement list: its args read the buffers `args`; a
        yielded value the block computes is written straight into its entry of `targets`
        (None: anywhere). With `rebinds` (a Loop body) ops in it may bind run-time symbols.
        Returns the statements and the buffer of each yielded value."""
        for a, b in zip(block.args, args):
            self.buf[id(a)] = b
        ys = list(block.terminator.operands) if block.terminator is not None else []
        self.set_targets(ys, targets)
        self.depth += 1
        self.rebinding.append(rebinds)
        try:
            with self.into([]) as stmts:
                self.lower_ops(block.ops)
        finally:
            self.depth -= 1
            self.rebinding.pop()
        return stmts, [self.buf[id(v)] for v in ys]

    def is_run_dim(self, d) -> bool:
        """A result dim that is a symbol no input binds (the run determines it)."""
        return isinstance(d, sympy.Symbol) and d.name not in self.bound

    def declare_run_dim(self, op: Op, name: str, bound, late: bool = False) -> None:
        """`name` is determined by the run; buffers are allocated for `bound` (a Dim over
        the input symbols, at least 1). `late`: it is bound mid-run (`bind_symbol`), which
        loop bodies allow too."""
        where = f'node "{op.loc}" ({op.name})'
        if self.depth and not (late and all(self.rebinding)):
            raise UnsupportedOp(op.opname, op.dialect, op.loc, f"result dim {name} is known only at run time "
                                "inside a loop or branch body")
        extra = sorted(s.name for s in sympy.sympify(bound).free_symbols if s.name not in self.bound) \
            if bound is not None else ["?"]
        if extra:
            raise CompileError(f"{where}: result dim {name} is known only at run time and has no upper bound "
                               f"over the input dims; narrow its range (--dim {name}=1:N)")
        self.program.run_dims[name] = canon(sympy.Max(1, sympy.sympify(bound)))

    def set_symbol(self, name: str, value) -> None:
        """Report the true value of run-determined symbol `name` (an i64 Expr) at the end."""
        self.set_syms[name] = SetSymbol(name, value)

    def bind_symbol(self, op: Op, name: str, bound, value) -> None:
        """Bind run-time symbol `name` to `value` (an i64 Expr the op computed) right here:
        the statements after it see the true value, buffers with the dim are allocated for
        `bound` (kernel/control.py). Used by ops whose result size is a count of the data
        (NonZero, Compress, Unique, NonMaxSuppression)."""
        # a count over values that are themselves run-time sized: bounded by their bounds
        # late_dims walks the whole body: once per binding, not once per run dim (a detector's
        # 180 NonZero each bound over every earlier one spent minutes here)
        late_names = self.program.late_dims
        late = {sym(k): sympy.sympify(v) for k, v in self.program.run_dims.items() if k in late_names}
        if late and bound is not None:
            bound = canon(sympy.sympify(bound).xreplace(late))
        self.declare_run_dim(op, name, bound, late=True)
        self.program.bound_mid_run.add(name)
        self.program.body.append(SetSymbol(name, value, bind=True))

    def lower_op(self, op: Op) -> None:
        self.check_operands(op)
        if op.name == "cc.const":
            arr = const_array(op, self.module)
            data = np.ascontiguousarray(arr).reshape(np.shape(arr))  # NOTE: keeps 0-d arrays 0-d
            self.buf[id(op.result)] = self.program.const(self.fresh(op.loc or "const"), data)
            return
        targets = [self.target.get(id(r)) for r in op.results]
        if op.name == "cc.dims":
            dims = list(op.attrs["dims"])
            out = targets[0] or self.program.temp(self.fresh("dims"), DType.i64, op.result.type.shape)
            if op.result.type.rank == 0:
                self.program.compute(out, dim_to_expr(dims[0]))
            else:
                i = Var("i")
                expr = dim_to_expr(dims[-1])
                for j in range(len(dims) - 2, -1, -1):
                    expr = _select_eq(i, j, dim_to_expr(dims[j]), expr)
                self.program.compute(out, lambda i: expr if len(dims) > 1 else dim_to_expr(dims[0]))
            self.buf[id(op.result)] = out
            return
        d = require_opdef(op)
        results = [t or self.program.temp(self.fresh(op.loc or op.opname), r.type.dtype, r.type.shape)
                   for t, r in zip(targets, op.results)]
        ins = [self.buf[id(v)] for v in op.operands]
        consts = [_const_of(v, self.module) for v in op.operands]
        known = [self.values.get(v) for v in op.operands]
        ctx = LowerCtx(op, self.program, ins, results, consts, known, self.fresh)
        ctx.lowerer = self
        ctx.fused_attention, ctx.int8_dot = self.fused_attention, self.int8_dot
        ctx.f32_conv_call = self.f32_conv_call
        d.lower(ctx)
        small = sorted({v.type.dtype.value for v in [*op.operands, *op.results] if v.type.dtype.is_small})
        if small and not d.small_types and len(ctx.aliases) < len(op.results):
            raise UnsupportedOp(op.opname, op.dialect, op.loc,
                                f"{', '.join(small)} values are not supported by this op in the native backend "
                                "(Cast, CastLike, QuantizeLinear, DequantizeLinear and views take them)")
        if (not d.strings and len(ctx.aliases) < len(op.results)
                and any(v.type.dtype is DType.string for v in [*op.operands, *op.results])):
            raise UnsupportedOp(op.opname, op.dialect, op.loc,
                                "string values are not supported by this op in the native backend (the string "
                                "ops and ops that only move elements take them)")
        for ri, oi in ctx.aliases.items():
            r = op.results[ri]
            src = ins[oi]
            if targets[ri] is not None:  # an output must own its memory: copy
                shape = r.type.shape
                self.program.compute(targets[ri], _copy_reshaped(src, shape))
                results[ri] = targets[ri]
            else:  # the temp made for this result is unused: drop it so it takes no workspace
                self.program.buffers.pop(results[ri].name, None)
                results[ri] = self.program.view(self.fresh(op.loc or "view"), src, r.type.shape)
        for r, b in zip(op.results, results):
            self.buf[id(r)] = b
        for r in op.results:  # after the lowering: it may have bound a run-time symbol
            self.check_bound(op, r)

    def check_operands(self, op: Op) -> None:
        """Values with run-determined dims are allocated for the bound and only partly valid:
        they can be returned, not computed with."""
        if op.name == "onnx.Identity":
            return
        late: set[str] | None = None  # bound mid-run: computed on like any other symbol
        for v in op.operands:
            run = [s.name for s in v.type.symbols() if s.name in self.program.run_dims]
            if not run:
                continue
            if late is None:  # walks the whole body: only for operands with run-time dims
                late = self.program.late_dims
            run = sorted(n for n in run if n not in late)
            if run:
                raise UnsupportedOp(op.opname, op.dialect, op.loc,
                                    f"reads a value of type {v.type} whose dim {', '.join(run)} is known "
                                    "only after the run (such results can only be returned)")

    def check_bound(self, op: Op, r: Value) -> None:
        bound = self.bound | set(self.program.run_dims)
        extra = sorted(s.name for s in r.type.symbols() if s.name not in bound)
        if extra:
            raise CompileError(f'node "{op.loc}" ({op.name}): result shape {r.type} depends on data '
                               f"({', '.join(extra)} known only at run time); not compiled yet")


def _bind_sites(body: list[Stmt], nested: bool, depth: int = 0):
    """(list, index, stmt) of each binding `SetSymbol`: all of them (`nested`), or only
    those inside control-statement bodies."""
    for k, st in enumerate(body):
        if isinstance(st, SetSymbol) and st.bind and (nested or depth):
            yield body, k, st
        for b in st.bodies():
            yield from _bind_sites(b, nested, depth + 1)


def _checked(st: SetSymbol, constraint) -> SetSymbol:
    """`st` with its value checked against the model constraint (ERR_ASSERT when false)."""
    value = st.value
    cond = transform(condition_to_expr(constraint),
                     lambda e, n=st.symbol, v=value: v if isinstance(e, SymRef) and e.name == n else None)
    return SetSymbol(st.symbol, check(cond, value, ERR_ASSERT), bind=True)


def _label(body: list[Stmt], first: int, label: str) -> None:
    """Tag the computes one op lowered to with its name (`Compute.origin`; fusion reports
    it), in nested bodies too (a loop's carried copies take the loop's name)."""
    import dataclasses

    for k in range(first, len(body)):
        s = body[k]
        if isinstance(s, Compute) and not s.origin:
            body[k] = dataclasses.replace(s, origin=(label,))
        for b in s.bodies():
            _label(b, 0, label)


def _select_eq(i, j, a, b):
    from ..kernel import select

    return select(i.eq(j), a, b)


def _copy_reshaped(src, shape):
    """A compute body copying `src` into a buffer of `shape` with the same element count."""
    from ..kernel import flatten_index, unflatten_index

    def body(*ix):
        if tuple(src.shape) == tuple(shape):
            return src[ix] if ix else src[()]
        flat = flatten_index(list(ix), shape)
        return src[tuple(unflatten_index(flat, src.shape))] if src.shape else src[()]

    return body


def _const_of(v: Value, module: Module):
    v = captured_value(v)  # a constant captured into a branch or loop body is still one
    if isinstance(v.owner, Op) and v.owner.name == "cc.const":
        return const_array(v.owner, module)
    return None


def lower_function(module: Module, f: Function, name: str, values: dict | None = None, *,
                   fused_attention: bool = False, int8_dot: bool = False,
                   f32_conv_call: bool = False) -> KernelProgram:
    """The kernel program of one function (usually one version of @main); `fused_attention`:
    the target runs attention fused over key blocks, `int8_dot`: it runs the 8-bit GEMM calls
    (see `LowerToKernelPass`), `f32_conv_call`: the implicit-GEMM conv call."""
    return _Lowerer(module, f, name, values, fused_attention, int8_dot, f32_conv_call).run()


@register_pass
@dataclass(frozen=True)
class LowerToKernelPass(ModulePass):
    """The versioned graph module -> a KernelModule: version k of @main becomes the kernel
    program `PREFIX_vK` (the artifact's kernel symbols)."""

    name: ClassVar[str] = "lower-to-kernel"
    converts: ClassVar[bool] = True
    prefix: str = "model"
    fused_attention: bool = False
    """the backend runs attention fused over key blocks (kernel/flash.py): attention ops
    may lower to that form instead of materialising their scores"""
    int8_dot: bool = False
    """the backend runs the 8-bit GEMM calls of kernel/i8gemm.py (a CPU with AVX-512 VNNI):
    the quantized contractions with constant weights may lower to them"""
    f32_conv_call: bool = False
    """the backend runs the f32 implicit-GEMM conv call of kernel/conv_call.py (a CPU with
    AVX-512F): dense channels-last convs may lower to it"""

    def run(self, module: Module, ctx: PassContext) -> KernelModule:  # type: ignore[override]
        kmod = KernelModule(module)
        order = module.dispatch["main"]
        # beside value versions, one that cannot be built (its shapes need the value) is dropped
        has_values = any(module.functions[n].attrs.get("kind") == "value" for n in order)
        kept = []
        for fname in order:
            f = module.functions[fname]
            try:
                prog = lower_function(module, f, f"{self.prefix}_v{len(kept)}",
                                      fused_attention=self.fused_attention, int8_dot=self.int8_dot,
                                      f32_conv_call=self.f32_conv_call)
            except (CompileError, UnsupportedOp) as e:
                if not has_values or f.attrs.get("kind") == "value":
                    raise
                module.attrs.setdefault("dropped_versions", []).append(f"{fname.removeprefix('main.')}: {e}")
                continue
            kept.append(fname)
            kmod.versions.append(KernelVersion(f, prog, stats={"kernels_before": count_kernels(prog.body)}))
        module.dispatch["main"] = kept
        return kmod
