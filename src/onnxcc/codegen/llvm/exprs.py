"""Kernel expressions -> LLVM IR values (shared by the CPU backend and, later, CUDA).

`ExprEmitter.emit(expr)` returns the LLVM value of an expression at the builder's
position. Values use a *compute type* per dtype (f16/bf16 compute in float, bool is i1);
loads and stores convert from and to the *storage type* (half, i16 bits, i8).

Loops are described by a stack of frames: the emitter's caller opens a loop, binds its
index var with `push`, and calls `hoist(body)` before opening the next one, which emits
every sub-expression that no deeper var affects right there, i.e. outside the inner loops
(loop-invariant code motion at the expression level, which LLVM's LICM cannot do for the
inner loops that reductions are). Values are cached per frame, which also gives CSE.

Safety rules: a `Select` whose arms touch memory or can fail is emitted as a branch and
nothing inside its arms is hoisted; sub-expressions that can fail (a `Check`, an integer
division by a value not known to be nonzero) are never hoisted out of a reduction loop
that may run zero times.

Op semantics live in tables (`FLOAT_BINARY`, `INT_BINARY`, `FLOAT_UNARY`, `INT_UNARY`),
one small function per op. Transcendental functions come from `vmath`, the branch-free
vector libm both backends share: never a scalar libm call, which would keep LLVM from
vectorizing the loop around it (`intr` maps the LLVM intrinsics that lower to libm calls,
`llvm.exp`, `llvm.log`, `llvm.sin`, ..., to it as well).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field

import numpy as np
from llvmlite import ir

from onnxcc.errors import CompileError
from onnxcc.ir import Dim, DType
from onnxcc.kernel.expr import (
    ERR_DIV_ZERO,
    Binary,
    Cast,
    Check,
    Const,
    Expr,
    Load,
    Reduce,
    Select,
    SymRef,
    Unary,
    Var,
    children,
    dim_to_expr,
    free_vars,
)

from . import small
from .function_context import FunctionContext
from .gelu_forms import emit_gelu_form, erf_of_constant_quotient
from .helpers import I1, I8, I16, I32, I64, for_range, intrinsic, move_to_end
from .int_bounds import LowerBounds
from .vmath import INTRINSIC_REPLACEMENTS, math_function

F32 = ir.FloatType()
F64 = ir.DoubleType()
F16 = ir.HalfType()

_INT_BITS = {DType.i8: 8, DType.i16: 16, DType.i32: 32, DType.i64: 64,
             DType.u8: 8, DType.u16: 16, DType.u32: 32, DType.u64: 64,
             DType.i4: 4, DType.u4: 4, DType.i2: 2, DType.u2: 2,
             DType.string: 64}  # a string element is its `const char *`, moved as 64 bits


# ---- types --------------------------------------------------------------------------------


def storage_type(dt: DType) -> ir.Type:
    """How a dtype is laid out in memory."""
    if dt is DType.f16:
        return F16
    if dt is DType.bf16:
        return I16
    if dt is DType.f32:
        return F32
    if dt is DType.f64:
        return F64
    if dt is DType.bool or dt.is_small:  # sub-byte types: the byte holding them
        return I8
    return ir.IntType(_INT_BITS[dt])


def compute_type(dt: DType) -> ir.Type:
    """How a dtype's values are held in registers."""
    if dt is DType.f64:
        return F64
    if dt.is_float:  # f16, bf16 and the small floats compute in f32
        return F32
    if dt is DType.bool:
        return I1
    return ir.IntType(max(8, _INT_BITS[dt]))


def round_const(value: float, dt: DType) -> float:
    """A float constant rounded to what `dt` can hold (computation is in f32/f64)."""
    if dt is DType.f16:
        return float(np.float16(value))
    if dt is DType.bf16:
        return float(_bf16_round_np(np.float32(value)))
    if dt is DType.f32:
        return float(np.float32(value))
    if dt.is_small:
        return float(np.float32(np.asarray(value, np.float32).astype(dt.np)))
    return value


def _bf16_round_np(x: np.float32) -> np.float32:
    bits = int(np.array(x, np.float32).view(np.uint32))
    if math.isnan(float(x)):
        return np.float32(x)
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return np.array(bits & 0xFFFFFFFF, np.uint32).view(np.float32)[()]


@dataclass
class _Frame:
    vars: tuple[str, ...]
    cache: dict[Expr, ir.Value] = field(default_factory=dict)


@dataclass
class AccessMetadata:
    """Metadata to attach to loads and stores (e.g. scoped noalias), as (kind, node) pairs."""

    load: list[tuple[str, ir.MDValue]] = field(default_factory=list)
    store: list[tuple[str, ir.MDValue]] = field(default_factory=list)

    @classmethod
    def scoped_noalias(cls, m: ir.Module, tag: str) -> AccessMetadata:
        """Fresh alias scopes `tag.reads` / `tag.writes` in a domain `tag`: the statement's
        loads never alias its stores."""
        dom = m.add_metadata([ir.MetaDataString(m, tag)])
        reads = m.add_metadata([m.add_metadata([ir.MetaDataString(m, f"{tag}.reads"), dom])])
        writes = m.add_metadata([m.add_metadata([ir.MetaDataString(m, f"{tag}.writes"), dom])])
        return cls(load=[("alias.scope", reads), ("noalias", writes)],
                   store=[("alias.scope", writes), ("noalias", reads)])


# ---- the emitter --------------------------------------------------------------------------


class ExprEmitter:
    """Emits expressions at `builder`'s position inside one function (see module doc)."""

    def __init__(self, ctx: FunctionContext, builder: ir.IRBuilder, *, check_div: bool = True,
                 access_md: AccessMetadata | None = None):
        self.ctx = ctx
        self.b = builder
        self.check_div = check_div
        self.md = access_md or AccessMetadata()
        self.frames: list[_Frame] = [_Frame(())]
        self.var_vals: dict[str, ir.Value] = {}
        self.var_level: dict[str, int] = {}
        self.var_ext: dict[str, Expr] = {}
        self._fails: dict[Expr, bool] = {}
        self.bounds = LowerBounds(ctx.sym_lower)
        """lower bounds of symbol arithmetic (int_bounds.py), from the lower bounds the context
        declares for its symbols"""

    # ---- frames --------------------------------------------------------------------------
    def push(self, bindings: dict[str, ir.Value], extents: dict[str, Expr | Dim] | None = None) -> None:
        """Enter a loop level binding `bindings` (var name -> i64 value); `extents` (var
        name -> trip count) let loads indexed by these vars be proven in bounds."""
        self.frames.append(_Frame(tuple(bindings)))
        lvl = len(self.frames) - 1
        for n, v in bindings.items():
            self.var_vals[n] = v
            self.var_level[n] = lvl
        for n, x in (extents or {}).items():
            self.var_ext[n] = x if isinstance(x, Expr) else dim_to_expr(x)

    def pop(self) -> None:
        fr = self.frames.pop()
        for n in fr.vars:
            del self.var_vals[n]
            del self.var_level[n]
            self.var_ext.pop(n, None)

    def _lookup(self, e: Expr) -> ir.Value | None:
        for fr in reversed(self.frames):
            v = fr.cache.get(e)
            if v is not None:
                return v
        return None

    def _level(self, e: Expr) -> int:
        lvl = 0
        for n in free_vars(e):
            # a var not bound yet (the var of a reduce about to open) is deeper than all
            lvl = max(lvl, self.var_level.get(n, 1 << 30))
        return lvl

    def can_fail(self, e: Expr) -> bool:
        """Whether evaluating `e` may make the kernel return an error."""
        hit = self._fails.get(e)
        if hit is None:
            if isinstance(e, Check):
                hit = True
            elif isinstance(e, Binary) and e.op in ("div", "floordiv", "mod", "truncdiv", "rem") \
                    and not e.dtype.is_float and self.check_div and not known_nonzero(e.b):
                hit = True
            else:
                hit = any(self.can_fail(c) for c in children(e))
            self._fails[e] = hit
        return hit

    def is_lazy(self, s: Select) -> bool:
        """Whether a select must branch: an arm still has to read memory that may be out
        of bounds, run a reduction loop, or can fail. Values already computed are free."""
        return any(self._needs_guard(a) for a in (s.a, s.b))

    def _needs_guard(self, e: Expr) -> bool:
        stack, seen = [e], set()
        while stack:
            n = stack.pop()
            if id(n) in seen or isinstance(n, (Var, Const, SymRef)):
                continue
            seen.add(id(n))
            if self._lookup(n) is not None:
                continue
            if isinstance(n, (Reduce, Check)) or (isinstance(n, Load) and not self.in_bounds(n)):
                return True
            if isinstance(n, Binary) and self.can_fail(n) and not (self.can_fail(n.a) or self.can_fail(n.b)):
                return True  # a division that may fail by itself
            stack.extend(children(n))
        return False

    def in_bounds(self, ld: Load) -> bool:
        """Whether a load is in bounds wherever its vars are (so it may be speculated):
        every index is a var whose extent is the buffer's dim, or a constant inside it."""
        shape = self.ctx.buffer_shape(ld.buffer)
        for i, d in zip(ld.indices, shape):
            if isinstance(i, Const):
                if not (i.value == 0 or (isinstance(d, int) and 0 <= i.value < d)):
                    return False
            elif isinstance(i, Var):
                ext = self.var_ext.get(i.name)
                if ext is None or ext != dim_to_expr(d):
                    return False
            elif not self._clamped_to(i, d):
                return False
        return True

    def _clamped_to(self, i: Expr, d) -> bool:
        """Whether index `i` is min(max(e, 0), d - 1) (either nesting) for the buffer's dim
        `d`, proved at least 1 (a depthwise conv's clamped taps, read and then dropped)."""
        if not (isinstance(i, Binary) and i.op in ("min", "max")):
            return False
        inner = i.a
        other = "max" if i.op == "min" else "min"
        if not (isinstance(inner, Binary) and inner.op == other):
            return False
        lo, hi = (inner.b, i.b) if i.op == "min" else (i.b, inner.b)
        if not (isinstance(lo, Const) and lo.value == 0):
            return False
        if isinstance(hi, Const):
            return isinstance(d, int) and 0 <= hi.value < d
        ext = dim_to_expr(d)
        low = self.bounds.lower(ext)
        return hi == ext - 1 and low is not None and low >= 1

    def hoist(self, body: Expr, *, guarded: bool = False) -> None:
        """Emit, at the current position, every non-trivial sub-expression of `body` that
        depends on no var deeper than the current frame. `guarded`: the code after this
        point may not run (a loop that may be empty), so failing expressions stay put."""
        top = len(self.frames) - 1
        seen: set[int] = set()
        stack: list[tuple[Expr, bool]] = [(body, guarded)]
        while stack:
            n, g = stack.pop()
            if id(n) in seen or isinstance(n, (Var, Const, SymRef)):
                continue
            seen.add(id(n))
            if self._lookup(n) is not None:
                continue
            if self._level(n) <= top and not (g and self.can_fail(n)):
                self.emit(n)
                continue
            if isinstance(n, Select) and self.is_lazy(n):
                stack.append((n.cond, g))
            elif isinstance(n, Reduce):
                stack.extend((x, g) for _, x in n.vars)
                stack.append((n.body, True))
                if n.init is not None:
                    stack.append((n.init, g))
            else:
                stack.extend((c, g) for c in children(n))

    # ---- entry point ---------------------------------------------------------------------
    def emit(self, e: Expr) -> ir.Value:
        if isinstance(e, Var):
            v = self.var_vals.get(e.name)
            if v is None:
                raise CompileError(f"index var {e.name} is not bound")
            return v
        v = self._lookup(e)
        if v is not None:
            return v
        fn = _EMIT.get(type(e))
        if fn is None:
            raise CompileError(f"cpu codegen: no emitter for {type(e).__name__}")
        v = fn(self, e)
        self.frames[-1].cache[e] = v
        return v

    def reduce(self, e: Reduce, *, loop_md: ir.MDValue | None = None) -> ir.Value:
        """`emit(e)` with `loop_md`, an `!llvm.loop` node, on the loop of the one-var reduction
        `e` (None: LLVM's defaults), for a caller that knows the loop's shape
        (codegen/cpu/rowstage.py: a row statistic's sum over a long static row)."""
        v = self._lookup(e)
        if v is None:
            v = self.frames[-1].cache[e] = _reduce(self, e, loop_md)
        return v

    # ---- memory --------------------------------------------------------------------------
    def address(self, buffer: str, idx: list[ir.Value]) -> ir.Value:
        """Pointer to `buffer[idx]` (row-major flat offset, strides hoisted to entry)."""
        dt = self.ctx.buffer_dtype(buffer)
        return self.b.gep(self.ctx.buffer_ptr(buffer), [self.flat_index(buffer, idx)], inbounds=True,
                          name=f"{buffer}.ptr", source_etype=storage_type(dt))

    def flat_index(self, buffer: str, idx: list[ir.Value]) -> ir.Value:
        """The element offset of `buffer[idx]` from the buffer's start."""
        b = self.b
        strides = self.ctx.strides(buffer)
        flat: ir.Value | None = None
        for k, (i, s) in enumerate(zip(idx, strides)):
            if isinstance(i, ir.Constant) and i.constant == 0:
                continue
            term = i if (isinstance(s, ir.Constant) and s.constant == 1) else \
                b.mul(i, s, name=f"{buffer}.off{k}", flags=("nsw",))
            flat = term if flat is None else b.add(flat, term, name=f"{buffer}.off", flags=("nsw",))
        return ir.Constant(I64, 0) if flat is None else flat

    def load(self, buffer: str, idx: list[ir.Value]) -> ir.Value:
        dt = self.ctx.buffer_dtype(buffer)
        if dt.bits < 8:
            return self._load_packed(buffer, idx, dt)
        ptr = self.address(buffer, idx)
        raw = self.b.load(ptr, name=f"{buffer}.raw" if dt in (DType.f16, DType.bf16, DType.bool) else buffer,
                          align=dt.itemsize, typ=storage_type(dt))
        for kind, md in self.md.load:
            raw.set_metadata(kind, md)
        return self.from_storage(raw, dt, buffer)

    def store(self, buffer: str, idx: list[ir.Value], value: ir.Value) -> None:
        dt = self.ctx.buffer_dtype(buffer)
        if dt.bits < 8:
            self._store_packed(buffer, idx, dt, value)
            return
        ptr = self.address(buffer, idx)
        st = self.b.store(self.to_storage(value, dt), ptr, align=dt.itemsize)
        for kind, md in self.md.store:
            st.set_metadata(kind, md)

    def _packed_slot(self, buffer: str, idx: list[ir.Value], dt: DType) -> tuple[ir.Value, ir.Value]:
        """(pointer to the byte, bit offset as i8) of a packed sub-byte element."""
        b = self.b
        k = self.flat_index(buffer, idx)
        per = 8 // dt.bits
        byte = b.lshr(k, ir.Constant(I64, per.bit_length() - 1), name=f"{buffer}.byte")
        shift = b.mul(b.trunc(b.and_(k, ir.Constant(I64, per - 1)), I8), ir.Constant(I8, dt.bits),
                      name=f"{buffer}.shift")
        ptr = b.gep(self.ctx.buffer_ptr(buffer), [byte], inbounds=True, name=f"{buffer}.bptr", source_etype=I8)
        return ptr, shift

    def _load_packed(self, buffer: str, idx: list[ir.Value], dt: DType) -> ir.Value:
        b = self.b
        ptr, shift = self._packed_slot(buffer, idx, dt)
        raw = b.load(ptr, name=f"{buffer}.raw", align=1, typ=I8)
        for kind, md in self.md.load:
            raw.set_metadata(kind, md)
        code = b.and_(b.lshr(raw, shift), ir.Constant(I8, (1 << dt.bits) - 1), name=f"{buffer}.code")
        return self.from_storage(code, dt, buffer)

    def _store_packed(self, buffer: str, idx: list[ir.Value], dt: DType, value: ir.Value) -> None:
        """Two atomic read-modify-writes (clear the element's bits, then set them), so
        threads writing neighbours in one byte never lose each other's bits."""
        b = self.b
        ptr, shift = self._packed_slot(buffer, idx, dt)
        mask = ir.Constant(I8, (1 << dt.bits) - 1)
        code = b.shl(b.and_(self.to_storage(value, dt), mask), shift, name=f"{buffer}.set")
        b.atomic_rmw("and", ptr, b.not_(b.shl(mask, shift)), "monotonic", name=f"{buffer}.clear")
        b.atomic_rmw("or", ptr, code, "monotonic", name=f"{buffer}.or")

    def from_storage(self, raw: ir.Value, dt: DType, name: str) -> ir.Value:
        b = self.b
        if small.is_small_float(dt):
            return small.decode(b, raw, dt)
        if dt.is_small:  # sub-byte integers: the code, sign-extended
            return small.wrap_int(b, raw, dt)
        if dt is DType.f16:
            return b.fpext(raw, F32, name=name)
        if dt is DType.bf16:
            wide = b.shl(b.zext(raw, I32, name=f"{name}.bits"), ir.Constant(I32, 16), name=f"{name}.bits")
            return b.bitcast(wide, F32, name=name)
        if dt is DType.bool:
            return b.icmp_unsigned("!=", raw, ir.Constant(I8, 0), name=name)
        return raw

    def to_storage(self, v: ir.Value, dt: DType) -> ir.Value:
        b = self.b
        if dt is DType.f16:
            return b.fptrunc(v, F16, name="to.f16")
        if dt is DType.bf16:
            return self._bf16_bits(v)
        if dt is DType.bool:
            return b.zext(v, I8, name="to.i8")
        if small.is_small_float(dt):
            return small.encode(b, v, dt)
        return v

    def _bf16_bits(self, v: ir.Value) -> ir.Value:
        """Round a float to bf16 (nearest even, NaN kept quiet) -> i16 bits."""
        b = self.b
        u = b.bitcast(v, I32, name="bf16.u")
        hi = b.lshr(u, ir.Constant(I32, 16), name="bf16.hi")
        lsb = b.and_(hi, ir.Constant(I32, 1), name="bf16.lsb")
        bias = b.add(lsb, ir.Constant(I32, 0x7FFF), name="bf16.bias")
        rounded = b.lshr(b.add(u, bias, name="bf16.sum"), ir.Constant(I32, 16), name="bf16.round")
        quiet = b.or_(hi, ir.Constant(I32, 0x40), name="bf16.qnan")
        isnan = b.fcmp_unordered("uno", v, v, name="bf16.isnan")
        return b.trunc(b.select(isnan, quiet, rounded, name="bf16.bits"), I16, name="to.bf16")

    def round_to(self, v: ir.Value, dt: DType) -> ir.Value:
        """Round a compute-type float to the precision of f16/bf16 (a no-op otherwise)."""
        b = self.b
        if dt is DType.f16:
            h = b.fptrunc(v, F16, name="half")
            return b.fpext(h, F32, name="f16")
        if dt is DType.bf16:
            if v.type == F64:
                v = b.fptrunc(v, F32, name="ftrunc")
            return self.from_storage(self._bf16_bits(v), DType.bf16, "bf16")
        if small.is_small_float(dt):
            return small.decode(b, small.encode(b, v, dt), dt)
        return v

    # ---- failure -------------------------------------------------------------------------
    def check(self, ok: ir.Value, code: int, name: str = "check") -> None:
        """Continue if `ok`, else leave the kernel with `code`."""
        cont = self.b.function.append_basic_block(f"{name}.ok")
        br = self.b.cbranch(ok, cont, self.ctx.fail_block(code))
        br.set_weights([1 << 20, 1])
        self.b.position_at_end(cont)

    def math(self, name: str, *args: ir.Value) -> ir.Value:
        """The vmath function `name` (exp, tanh, pow, ...) of float or double arguments."""
        return self.b.call(math_function(self.ctx.module, name, args[0].type), list(args), name=name)

    def intr(self, name: str, args: list[ir.Value], ret: ir.Type | None = None, *,
             overload: list[ir.Type] | None = None, label: str = "") -> ir.Value:
        repl = INTRINSIC_REPLACEMENTS.get(name)
        if repl is not None and args[0].type in (F32, F64):
            return self.math(repl, *args)
        ty = ret or args[0].type
        fn = intrinsic(self.ctx.module, name, ty, [a.type for a in args], overload)
        return self.b.call(fn, args, name=label or name.split(".")[-1])


# ---- leaves and structure -----------------------------------------------------------------


def known_nonzero(e: Expr) -> bool:
    """Whether an integer expression is provably nonzero (positive symbols, constants)."""
    return known_positive(e) or (isinstance(e, Const) and e.value != 0)


def known_positive(e: Expr) -> bool:
    if isinstance(e, Const):
        return e.value > 0
    if isinstance(e, SymRef):
        return True
    if isinstance(e, Binary) and e.op in ("add", "mul", "min"):
        return known_positive(e.a) and known_positive(e.b)
    if isinstance(e, Binary) and e.op == "max":
        return known_positive(e.a) or known_positive(e.b)
    return False


def _const(em: ExprEmitter, e: Const) -> ir.Value:
    ty = compute_type(e.dtype)
    if e.dtype.is_float:
        return ir.Constant(ty, round_const(e.value, e.dtype))
    if e.dtype is DType.bool:
        return ir.Constant(I1, int(e.value))
    bits = _INT_BITS[e.dtype]
    return ir.Constant(ty, e.value & ((1 << bits) - 1) if e.value < 0 and not e.dtype.is_signed else e.value)


def _symref(em: ExprEmitter, e: SymRef) -> ir.Value:
    return em.ctx.sym(e.name)


def _load(em: ExprEmitter, e: Load) -> ir.Value:
    idx = [em.emit(i) for i in e.indices]
    return em.load(e.buffer, idx)


def _check(em: ExprEmitter, e: Check) -> ir.Value:
    ok = em.emit(e.cond)
    em.check(ok, e.code, name="bounds")
    return em.emit(e.value)


def _select(em: ExprEmitter, e: Select) -> ir.Value:
    b = em.b
    c = em.emit(e.cond)
    if not em.is_lazy(e):
        return b.select(c, em.emit(e.a), em.emit(e.b), name="sel")
    fn = b.function
    then, other, merge = (fn.append_basic_block(n) for n in ("sel.then", "sel.else", "sel.end"))
    b.cbranch(c, then, other)
    arms = []
    for block, arm in ((then, e.a), (other, e.b)):
        b.position_at_end(block)
        em.frames.append(_Frame(()))  # values made in an arm do not dominate the merge
        v = em.emit(arm)
        em.frames.pop()
        arms.append((v, b.block))
        b.branch(merge)
    move_to_end(merge)
    b.position_at_end(merge)
    phi = b.phi(arms[0][0].type, name="sel")
    for v, blk in arms:
        phi.add_incoming(v, blk)
    return phi


_NARROW_INTS = (DType.i8, DType.u8, DType.i16, DType.u16, DType.i32)


def _clamped_in_i32(e) -> bool:
    """whether float `e` is min(max(x, lo), hi) (either nesting) with constant bounds inside
    the i32 range: its value is then NaN or in [lo, hi]"""
    if not (isinstance(e, Binary) and e.op in ("min", "max") and isinstance(e.b, Const)):
        return False
    inner = e.a
    other = "max" if e.op == "min" else "min"
    if not (isinstance(inner, Binary) and inner.op == other and isinstance(inner.b, Const)):
        return False
    return all(-(2.0**31) <= float(c.value) < 2.0**31 for c in (e.b, inner.b))


def _cast(em: ExprEmitter, e: Cast) -> ir.Value:
    v = em.emit(e.a)
    if e.a.dtype.is_float and e.dtype in _NARROW_INTS and _clamped_in_i32(e.a):
        # a clamped float (a quantizer's store) is NaN or in i32's range: fptosi with NaN
        # sent to 0 gives what the general saturate-to-i64-and-truncate gives, and
        # vectorizes (llvm.fptosi.sat is scalarized lane by lane on x86); the select never
        # picks fptosi's poison for a NaN
        b = em.b
        isnan = b.fcmp_unordered("uno", v, v, name="isnan")
        w = b.select(isnan, ir.Constant(I32, 0), b.fptosi(v, I32, name="toint"), name="toint")
        dty = compute_type(e.dtype)
        return w if dty == I32 else b.trunc(w, dty, name="toint")
    return cast_value(em, v, e.a.dtype, e.dtype)


def cast_value(em: ExprEmitter, v: ir.Value, src: DType, dst: DType) -> ir.Value:
    """Convert a compute-type value of dtype `src` to dtype `dst` (numpy astype rules;
    float -> int saturates and maps NaN to 0)."""
    b = em.b
    dty = compute_type(dst)
    if src is dst:
        return v
    if dst is DType.bool:
        if src.is_float:
            return b.fcmp_unordered("!=", v, ir.Constant(v.type, 0.0), name="tobool")
        return b.icmp_unsigned("!=", v, ir.Constant(v.type, 0), name="tobool")
    if src.is_float and dst.is_float:
        if small.is_small_float(dst):  # from f32 or f64 directly: one rounding
            return small.decode(b, small.encode(b, v, dst), dst)
        if dst is DType.f16 and v.type == F64:
            return b.fpext(b.fptrunc(v, F16, name="half"), F32, name="f16")
        if v.type != dty:
            v = b.fpext(v, dty, name="fext") if dty == F64 else b.fptrunc(v, dty, name="ftrunc")
        return em.round_to(v, dst)
    if src.is_float and dst.is_small:  # -> sub-byte integer
        return small.float_to_small_int(b, v, dst)
    if src.is_float:  # -> int
        if dst is DType.u64:
            return em.intr("llvm.fptoui.sat", [v], I64, overload=[I64, v.type], label="toint")
        wide = em.intr("llvm.fptosi.sat", [v], I64, overload=[I64, v.type], label="toint")
        return wide if dty == I64 else b.trunc(wide, dty, name="toint")
    if dst.is_float:  # int/bool -> float
        signed = src.is_signed and src is not DType.bool
        f = b.sitofp(v, dty, name="tofp") if signed else b.uitofp(v, dty, name="tofp")
        return em.round_to(f, dst)
    # int/bool -> int
    sb, db = v.type.width, dty.width
    if dst.is_small:  # wraps, as ml_dtypes does
        signed = src.is_signed and src is not DType.bool
        v = b.trunc(v, dty, name="icast") if db < sb else (v if db == sb else
                                                           (b.sext if signed else b.zext)(v, dty, name="icast"))
        return small.wrap_int(b, v, dst)
    if db < sb:
        return b.trunc(v, dty, name="icast")
    if db > sb:
        signed = src.is_signed and src is not DType.bool
        return b.sext(v, dty, name="icast") if signed else b.zext(v, dty, name="icast")
    return v


# ---- binary ops ---------------------------------------------------------------------------

BinFn = Callable[[ExprEmitter, ir.Value, ir.Value, Binary], ir.Value]
_FM = ("contract",)


def _f_floordiv(em, a, b, e):
    return em.intr("llvm.floor", [em.b.fdiv(a, b, name="q", flags=_FM)])


def _f_mod(em, a, b, e):
    bb = em.b
    r = bb.frem(a, b, name="r")
    zero = ir.Constant(a.type, 0.0)
    rneg = bb.fcmp_ordered("<", r, zero, name="r.neg")
    bneg = bb.fcmp_ordered("<", b, zero, name="b.neg")
    differs = bb.xor(rneg, bneg, name="sign.differs")
    fix = bb.and_(bb.fcmp_ordered("!=", r, zero, name="r.nz"), differs, name="fix")
    return bb.select(fix, bb.fadd(r, b, name="r.fixed"), r, name="mod")


FLOAT_BINARY: dict[str, BinFn] = {
    "add": lambda em, a, b, e: em.b.fadd(a, b, name="add", flags=_FM),
    "sub": lambda em, a, b, e: em.b.fsub(a, b, name="sub", flags=_FM),
    "mul": lambda em, a, b, e: em.b.fmul(a, b, name="mul", flags=_FM),
    "div": lambda em, a, b, e: em.b.fdiv(a, b, name="div"),
    "floordiv": _f_floordiv,
    "mod": _f_mod,
    "truncdiv": lambda em, a, b, e: em.intr("llvm.trunc", [em.b.fdiv(a, b, name="q")]),
    "rem": lambda em, a, b, e: em.b.frem(a, b, name="rem"),
    "max": lambda em, a, b, e: em.intr("llvm.maximum", [a, b], label="max"),
    "min": lambda em, a, b, e: em.intr("llvm.minimum", [a, b], label="min"),
    "pow": lambda em, a, b, e: em.math("pow", a, b),
    "lt": lambda em, a, b, e: em.b.fcmp_ordered("<", a, b, name="lt"),
    "le": lambda em, a, b, e: em.b.fcmp_ordered("<=", a, b, name="le"),
    "gt": lambda em, a, b, e: em.b.fcmp_ordered(">", a, b, name="gt"),
    "ge": lambda em, a, b, e: em.b.fcmp_ordered(">=", a, b, name="ge"),
    "eq": lambda em, a, b, e: em.b.fcmp_ordered("==", a, b, name="eq"),
    "ne": lambda em, a, b, e: em.b.fcmp_unordered("!=", a, b, name="ne"),
}


def _icmp(op: str) -> BinFn:
    def fn(em, a, b, e):
        signed = e.a.dtype.is_signed and e.a.dtype is not DType.bool
        cmp = em.b.icmp_signed if signed else em.b.icmp_unsigned
        return cmp(op, a, b, name="cmp")
    return fn


def _int_minmax(kind: str) -> BinFn:
    def fn(em, a, b, e):
        dt = e.dtype
        if dt is DType.bool:
            return em.b.or_(a, b, name=kind) if kind == "max" else em.b.and_(a, b, name=kind)
        pre = "s" if dt.is_signed else "u"
        return em.intr(f"llvm.{pre}{kind}", [a, b], label=kind)
    return fn


def _int_division(kind: str) -> BinFn:
    """Integer div/mod with floor (Python) or truncating (C) semantics; a zero divisor
    fails the kernel and INT_MIN / -1 gives a wrapped result instead of trapping."""
    def fn(em, a, b, e):
        bb = em.b
        ty = a.type
        zero, one, minus1 = (ir.Constant(ty, v) for v in (0, 1, -1))
        signed = e.dtype.is_signed
        divisor = e.b
        if em.check_div and not known_nonzero(divisor):
            em.check(bb.icmp_unsigned("!=", b, zero, name="divisor.ok"), ERR_DIV_ZERO, name="div")
        if not signed:
            if kind in ("floordiv", "truncdiv"):
                return bb.udiv(a, b, name="div")
            return bb.urem(a, b, name="rem")
        m1 = None
        if not known_positive(divisor):
            m1 = bb.icmp_signed("==", b, minus1, name="by.m1")
            b = bb.select(m1, one, b, name="divisor")
        lo = em.bounds.lower(e.a) if m1 is None and kind in ("floordiv", "mod") else None
        if lo is not None and lo >= 0:
            # a >= 0 < b: floor and truncation agree, signed and unsigned too (a conv's
            # output size; int_bounds.py)
            return bb.udiv(a, b, name="div") if kind == "floordiv" else bb.urem(a, b, name="rem")
        c = divisor.value if isinstance(divisor, Const) else None
        room = 1 << (ty.width - 2)  # a + 1 - c cannot wrap
        if kind == "floordiv" and lo is not None and c is not None and lo > -room and 0 < c < room:
            # symbol arithmetic that may be negative ((H - 3) // 2), bounded far from the
            # wrap: floor(a / c) == trunc((a < 0 ? a + 1 - c : a) / c), three instructions
            neg = bb.icmp_signed("<", a, zero, name="a.neg")
            shifted = bb.select(neg, bb.add(a, ir.Constant(ty, 1 - c), name="a.down"), a, name="a.floor")
            return bb.sdiv(shifted, b, name="floordiv")
        q = bb.sdiv(a, b, name="q")
        r = bb.srem(a, b, name="r")
        if kind in ("floordiv", "mod"):
            differs = bb.icmp_signed("<", bb.xor(r, b, name="signs"), zero, name="sign.differs")
            fix = bb.and_(bb.icmp_signed("!=", r, zero, name="r.nz"), differs, name="fix")
            if kind == "floordiv":
                q = bb.sub(q, bb.zext(fix, ty, name="fix.i"), name="floordiv")
            else:
                r = bb.select(fix, bb.add(r, b, name="r.fixed"), r, name="mod")
        if kind in ("floordiv", "truncdiv"):
            return q if m1 is None else bb.select(m1, bb.sub(zero, a, name="neg"), q, name="div")
        return r if m1 is None else bb.select(m1, zero, r, name="rem")
    return fn


def _shift(kind: str) -> BinFn:
    def fn(em, a, b, e):
        bb = em.b
        ty = a.type
        width = ir.Constant(ty, ty.width)
        big = bb.icmp_unsigned(">=", b, width, name="overshift")
        if kind == "shl":
            return bb.select(big, ir.Constant(ty, 0), bb.shl(a, b, name="shl.raw"), name="shl")
        if e.dtype.is_signed:
            amt = bb.select(big, ir.Constant(ty, ty.width - 1), b, name="amount")
            return bb.ashr(a, amt, name="shr")
        return bb.select(big, ir.Constant(ty, 0), bb.lshr(a, b, name="shr.raw"), name="shr")
    return fn


def _int_pow(em, a, b, e):
    # NOTE: via f64, exact for results below 2**53 (ONNX integer Pow is rare)
    src = e.dtype
    fa, fb = cast_value(em, a, src, DType.f64), cast_value(em, b, src, DType.f64)
    return cast_value(em, em.math("pow", fa, fb), DType.f64, src)


INT_BINARY: dict[str, BinFn] = {
    "add": lambda em, a, b, e: em.b.add(a, b, name="add"),
    "sub": lambda em, a, b, e: em.b.sub(a, b, name="sub"),
    "mul": lambda em, a, b, e: em.b.mul(a, b, name="mul"),
    "div": _int_division("floordiv"),
    "floordiv": _int_division("floordiv"),
    "mod": _int_division("mod"),
    "truncdiv": _int_division("truncdiv"),
    "rem": _int_division("rem"),
    "max": _int_minmax("max"),
    "min": _int_minmax("min"),
    "pow": _int_pow,
    "lt": _icmp("<"), "le": _icmp("<="), "gt": _icmp(">"), "ge": _icmp(">="),
    "eq": _icmp("=="), "ne": _icmp("!="),
    "and": lambda em, a, b, e: em.b.and_(a, b, name="and"),
    "or": lambda em, a, b, e: em.b.or_(a, b, name="or"),
    "xor": lambda em, a, b, e: em.b.xor(a, b, name="xor"),
    "shl": _shift("shl"),
    "shr": _shift("shr"),
}


def _binary(em: ExprEmitter, e: Binary) -> ir.Value:
    form = emit_gelu_form(em, e)  # the GELUs' cheaper forms (gelu_forms.py)
    if form is not None:
        return form
    a, b = em.emit(e.a), em.emit(e.b)
    table = FLOAT_BINARY if e.a.dtype.is_float else INT_BINARY
    fn = table.get(e.op)
    if fn is None:
        raise CompileError(f"cpu codegen: binary {e.op} not supported on {e.a.dtype.value}")
    return fn(em, a, b, e)


# ---- unary ops ----------------------------------------------------------------------------

UnFn = Callable[[ExprEmitter, ir.Value, Unary], ir.Value]


def _fconst(x: ir.Value, v: float) -> ir.Constant:
    return ir.Constant(x.type, v)


def _fsign(em, x, e):
    b = em.b
    z = _fconst(x, 0.0)
    neg = b.select(b.fcmp_ordered("<", x, z, name="isneg"), _fconst(x, -1.0), x, name="sign.neg")
    return b.select(b.fcmp_ordered(">", x, z, name="ispos"), _fconst(x, 1.0), neg, name="sign")


def _intrinsic1(name: str) -> UnFn:
    return lambda em, x, e: em.intr(name, [x], label=name.split(".")[-1])


def _math1(name: str) -> UnFn:
    return lambda em, x, e: em.math(name, x)


#: unary ops computed by the vmath function of the same name
MATH = ("exp", "log", "sin", "cos", "tan", "tanh", "sigmoid", "softplus", "erf", "asin", "acos", "atan",
        "sinh", "cosh", "asinh", "acosh", "atanh", "log1p", "expm1", "log2")

FLOAT_UNARY: dict[str, UnFn] = {
    "neg": lambda em, x, e: em.b.fneg(x, name="neg"),
    "abs": _intrinsic1("llvm.fabs"),
    "sqrt": _intrinsic1("llvm.sqrt"),
    "floor": _intrinsic1("llvm.floor"),
    "ceil": _intrinsic1("llvm.ceil"),
    "round": _intrinsic1("llvm.roundeven"),
    "trunc": _intrinsic1("llvm.trunc"),
    "recip": lambda em, x, e: em.b.fdiv(_fconst(x, 1.0), x, name="recip"),
    "sign": _fsign,
    "relu": lambda em, x, e: em.b.select(em.b.fcmp_ordered("<", x, _fconst(x, 0.0), name="isneg"),
                                         _fconst(x, 0.0), x, name="relu"),
    "isnan": lambda em, x, e: em.b.fcmp_unordered("uno", x, x, name="isnan"),
    "isinf": lambda em, x, e: em.b.fcmp_ordered("==", em.intr("llvm.fabs", [x], label="abs"),
                                                _fconst(x, math.inf), name="isinf"),
    **{n: _math1(n) for n in MATH},
}


def _isign(em, x, e):
    b = em.b
    zero = ir.Constant(x.type, 0)
    if not e.dtype.is_signed:
        return b.zext(b.icmp_unsigned("!=", x, zero, name="nz"), x.type, name="sign")
    pos = b.zext(b.icmp_signed(">", x, zero, name="ispos"), x.type, name="pos")
    neg = b.zext(b.icmp_signed("<", x, zero, name="isneg"), x.type, name="neg")
    return b.sub(pos, neg, name="sign")


def _identity(em, x, e):
    return x


INT_UNARY: dict[str, UnFn] = {
    "neg": lambda em, x, e: em.b.sub(ir.Constant(x.type, 0), x, name="neg"),
    "abs": lambda em, x, e: em.intr("llvm.abs", [x, ir.Constant(I1, 0)], label="abs")
    if e.dtype.is_signed else x,
    "floor": _identity, "ceil": _identity, "round": _identity, "trunc": _identity,
    "sign": _isign,
    "relu": lambda em, x, e: em.intr("llvm.smax", [x, ir.Constant(x.type, 0)], label="relu")
    if e.dtype.is_signed else x,
    "not": lambda em, x, e: em.b.not_(x, name="not"),
}


def _unary(em: ExprEmitter, e: Unary) -> ir.Value:
    if e.op == "tanh" and isinstance(e.a, Unary) and e.a.op == "softplus" and e.a.dtype.is_float:
        # Mish's tanh(softplus(x)) in one vmath function: one exp and one division instead of
        # two exps, a log and three divisions (measured 2x on a Mish + LayerNorm chain)
        return em.math("tanh_softplus", em.emit(e.a.a))
    quotient = erf_of_constant_quotient(e)
    if quotient is not None:
        # the exact GELU's erf(x / sqrt 2): vmath's erf_div multiplies by the reciprocal and
        # corrects with fmas instead of a vdivps per vector (8% of the GELU loop's time)
        return em.math("erf_div", em.emit(quotient[0]), em.emit(quotient[1]))
    x = em.emit(e.a)
    table = FLOAT_UNARY if e.a.dtype.is_float else INT_UNARY
    fn = table.get(e.op)
    if fn is None:
        raise CompileError(f"cpu codegen: unary {e.op} not supported on {e.a.dtype.value}")
    return fn(em, x, e)


# ---- reductions ---------------------------------------------------------------------------


def identity(op: str, dt: DType) -> ir.Constant:
    """The start value of reduction `op` over dtype `dt` (in compute type)."""
    ty = compute_type(dt)
    if op == "sum":
        return ir.Constant(ty, 0.0 if dt.is_float else 0)
    if op == "prod":
        return ir.Constant(ty, 1.0 if dt.is_float else 1)
    low = op in ("max", "argmax")
    if dt.is_float:
        return ir.Constant(ty, -math.inf if low else math.inf)
    if dt is DType.bool:
        return ir.Constant(ty, 0 if low else 1)
    bits = _INT_BITS[dt]
    if dt.is_signed:
        return ir.Constant(ty, -(1 << (bits - 1)) if low else (1 << (bits - 1)) - 1)
    return ir.Constant(ty, 0 if low else (1 << bits) - 1)


_RED_FM = ("reassoc", "contract", "nsz")

Combine = Callable[[ExprEmitter, ir.Value, ir.Value, DType], ir.Value]

REDUCE_COMBINE: dict[str, Combine] = {
    "sum": lambda em, acc, x, dt: em.b.fadd(acc, x, name="acc", flags=_RED_FM) if dt.is_float
    else em.b.add(acc, x, name="acc"),
    "prod": lambda em, acc, x, dt: em.b.fmul(acc, x, name="acc", flags=_RED_FM) if dt.is_float
    else em.b.mul(acc, x, name="acc"),
    "max": lambda em, acc, x, dt: (FLOAT_BINARY["max"] if dt.is_float else _int_minmax("max"))(
        em, acc, x, _fake_binary("max", dt)),
    "min": lambda em, acc, x, dt: (FLOAT_BINARY["min"] if dt.is_float else _int_minmax("min"))(
        em, acc, x, _fake_binary("min", dt)),
}


def _fake_binary(op: str, dt: DType) -> Binary:
    z = Const(0, dt)
    return Binary(op, z, z)


def _reduce(em: ExprEmitter, e: Reduce, loop_md: ir.MDValue | None = None) -> ir.Value:
    if e.op in ("argmax", "argmin"):
        return _arg_reduce(em, e)
    if loop_md is not None and len(e.vars) != 1:
        raise CompileError(f"a loop hint for the {len(e.vars)} loops of {e.op}: a loop ID names one loop")
    b = em.b
    dt = e.body.dtype
    ty = compute_type(dt)
    start = em.emit(e.init) if e.init is not None else identity(e.op, dt)
    acc = em.ctx.alloca(ty, f"{e.op}.acc")
    b.store(start, acc)
    em.hoist(e.body, guarded=True)
    with ExitStack() as st:
        for k, (v, ext) in enumerate(e.vars):
            n = em.emit(ext)
            idx = st.enter_context(for_range(b, n, v.name, guard=True, metadata=loop_md))
            em.push({v.name: idx}, {v.name: ext})
            st.callback(em.pop)
            if k + 1 < len(e.vars):
                em.hoist(e.body, guarded=True)
        x = em.emit(e.body)
        cur = b.load(acc, name=f"{e.op}.cur")
        b.store(REDUCE_COMBINE[e.op](em, cur, x, dt), acc)
    return b.load(acc, name=e.op)


def _arg_reduce(em: ExprEmitter, e: Reduce) -> ir.Value:
    """Index of the first max (min) along one var; NaN wins (numpy semantics)."""
    b = em.b
    dt = e.body.dtype
    ty = compute_type(dt)
    (v, ext), = e.vars
    best = em.ctx.alloca(ty, f"{e.op}.best")
    where = em.ctx.alloca(I64, f"{e.op}.idx")
    b.store(identity(e.op, dt), best)
    b.store(ir.Constant(I64, 0), where)
    em.hoist(e.body, guarded=True)
    n = em.emit(ext)
    with for_range(b, n, v.name, guard=True) as idx:
        em.push({v.name: idx}, {v.name: ext})
        x = em.emit(e.body)
        cur = b.load(best, name="best")
        op = ">" if e.op == "argmax" else "<"
        if dt.is_float:
            better = b.fcmp_ordered(op, x, cur, name="better")
            nan_first = b.and_(b.fcmp_unordered("uno", x, x, name="isnan"),
                               b.fcmp_ordered("ord", cur, cur, name="best.ord"), name="nan.first")
            better = b.or_(better, nan_first, name="better")
        elif dt.is_signed and dt is not DType.bool:
            better = b.icmp_signed(op, x, cur, name="better")
        else:
            better = b.icmp_unsigned(op, x, cur, name="better")
        b.store(b.select(better, x, cur, name="best.new"), best)
        b.store(b.select(better, idx, b.load(where, name="idx"), name="idx.new"), where)
        em.pop()
    return b.load(where, name=e.op)


_EMIT: dict[type, Callable[[ExprEmitter, Expr], ir.Value]] = {
    Const: _const, SymRef: _symref, Load: _load, Binary: _binary, Unary: _unary, Cast: _cast,
    Select: _select, Check: _check, Reduce: _reduce,
}
