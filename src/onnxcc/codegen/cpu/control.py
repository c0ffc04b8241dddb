"""CPU emitters for the control-flow statements of kernel/control.py (IfStmt, LoopStmt,
WriteAt, SetSymbol). cpu.py's `STMT_EMITTERS` table points here; nested statements go back
through that table, so a compute inside a loop is emitted exactly like one outside it
(schedules, GEMM, parallel bodies included).

Every emitter has cpu.py's signature `(kernel_emitter, fn_ctx, stmt, k)` and leaves the
builder where the next statement continues.
"""

from __future__ import annotations

import itertools
from contextlib import ExitStack

from onnxcc.errors import CompileError
from onnxcc.kernel.control import IfStmt, LoopStmt, SetSymbol, WriteAt, rebinds

from ..llvm.exprs import ExprEmitter
from ..llvm.helpers import I32, I64, for_range, i32, i64, if_else, if_then, move_to_end

#: statement ids for nested statements (they name the scoped-noalias metadata of each one;
#: top-level statements use their index, so start far above any body length)
STMT_IDS = itertools.count(1 << 20)


def emit_body(kem, ctx, stmts) -> None:
    """Emit a nested statement list at the builder's position."""
    from .emit import STMT_EMITTERS

    for s in stmts:
        emit = STMT_EMITTERS.get(type(s))
        if emit is None:
            raise CompileError(f"cpu codegen: unsupported statement {type(s).__name__}")
        emit(kem, ctx, s, next(STMT_IDS))


def emit_if(kem, ctx, s: IfStmt, k: int) -> None:
    b = ctx.b
    cond = ExprEmitter(ctx, b).emit(s.cond)
    with if_else(b, cond, name=f"if{k}") as (then, otherwise):
        for part, stmts, tag in ((then, s.then_body, "then"), (otherwise, s.else_body, "else")):
            with part:
                # a branch that binds a run-time symbol (a Slice of a data length) runs as its
                # own function, as a re-binding loop body does: the code after the binding
                # re-reads `syms` (and the caller continues in a fresh function after the If)
                if any(rebinds(x) for x in stmts):
                    _call_body(kem, ctx, stmts, k, f"if{k}.{tag}")
                else:
                    emit_body(kem, ctx, stmts)


def emit_loop(kem, ctx, s: LoopStmt, k: int) -> None:
    b = ctx.b
    fn = b.function
    trips = ExprEmitter(ctx, b).emit(s.trips) if s.trips is not None else None
    cap = ctx.dim(s.max_trips) if s.max_trips is not None else None
    pre = b.block
    head = fn.append_basic_block(f"loop{k}.head")
    body = fn.append_basic_block(f"loop{k}.body")
    exit_ = fn.append_basic_block(f"loop{k}.end")
    b.branch(head)
    b.position_at_end(head)
    t = b.phi(I64, name=f"loop{k}.t")
    t.add_incoming(i64(0), pre)
    go = b.icmp_signed("<", t, trips, name=f"loop{k}.more") if trips is not None else None
    if s.cond is not None:
        # a fresh emitter: the condition's buffers are re-read on every trip through head
        c = ExprEmitter(ctx, b).emit(s.cond)
        go = c if go is None else b.and_(go, c, name=f"loop{k}.go")
    b.cbranch(go, body, exit_)
    b.position_at_end(body)
    if cap is not None:  # the stacked outputs hold `cap` rows: one more would overflow them
        ok = fn.append_basic_block(f"loop{k}.fits")
        b.cbranch(b.icmp_signed("<", t, cap, name=f"loop{k}.fits"), ok, ctx.fail_block(s.max_code))
        b.position_at_end(ok)
    if s.index is not None:
        b.store(t, ctx.buffer_ptr(s.index), align=8)
    if any(rebinds(x) for x in s.body):
        _call_body(kem, ctx, s.body, k)
    else:
        emit_body(kem, ctx, s.body)
    if not b.block.is_terminated:
        t.add_incoming(b.add(t, i64(1), name=f"loop{k}.next", flags=("nuw", "nsw")), b.block)
        b.branch(head)
    move_to_end(exit_)
    b.position_at_end(exit_)
    if s.count is not None:
        b.store(t, ctx.buffer_ptr(s.count), align=8)


def _call_body(kem, ctx, stmts, k: int, name: str = "") -> None:
    """A loop body that re-binds a run-time symbol (a carried dim that changes every
    iteration), or an If branch that binds one (NonMaxSuppression's count), runs as its own
    function, called once per iteration (or branch taken) with the kernel's arguments: its
    entry block reads `syms` afresh, so every dim and stride in it is the current one; a
    failure it reports is returned at once."""
    b = ctx.b
    if b.function.function_type.return_type != I32:
        raise CompileError(f"cpu codegen: {name or f'loop {k}'} re-binds a symbol outside a kernel function")
    fn = kem.kernel_fn(name or f"loop{k}.body")
    kem.emit_from(fn, stmts, 0)
    status = b.call(fn, [ctx.syms_p, ctx.inputs_p, ctx.outputs_p, ctx.ws_p], name=f"loop{k}.status")
    failed = b.icmp_signed("!=", status, i32(0), name=f"loop{k}.failed")
    with if_then(b, failed, name=f"loop{k}.fail"):
        b.ret(status)


def emit_write_at(kem, ctx, s: WriteAt, k: int) -> None:
    b = ctx.b
    em = ExprEmitter(ctx, b, access_md=kem.access_md(k))
    exprs = (s.body, *s.index)
    with ExitStack() as st:
        for v, d in s.vars:
            for e in exprs:  # loop-invariant parts out of the loops (failing ones stay inside)
                em.hoist(e, guarded=True)
            idx = st.enter_context(for_range(b, ctx.dim(d), v.name, guard=True))
            em.push({v.name: idx}, {v.name: d})
            st.callback(em.pop)
        em.store(s.out, [em.emit(i) for i in s.index], em.emit(s.body))


def emit_set_symbol(kem, ctx, s: SetSymbol, k: int) -> None:
    b = ctx.b
    try:
        slot = kem.program.symbols.index(s.symbol)
    except ValueError:
        raise CompileError(f"kernel {kem.program.name}: unknown symbol {s.symbol}") from None
    value = ExprEmitter(ctx, b).emit(s.value)
    ptr = b.gep(ctx.syms_p, [i64(slot)], inbounds=True, name=f"{s.symbol}.out", source_etype=I64)
    b.store(value, ptr, align=8)


CONTROL_EMITTERS = {IfStmt: emit_if, LoopStmt: emit_loop, WriteAt: emit_write_at, SetSymbol: emit_set_symbol}

__all__ = ["CONTROL_EMITTERS", "emit_body"]
