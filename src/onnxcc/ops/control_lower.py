"""Lowering of If, Loop and Scan to the kernel's control statements (kernel/control.py).

If    IfStmt(cond[0], then, else). Both branches read the captured operand buffers as they
      are (no copies); a value a branch yields is computed straight into the result buffer
      when its shape is the result's. When the branches' extents differ, the result dim is
      run-determined: the result is allocated for the larger extent, each branch writes its
      value into the leading corner (WriteAt) and records its own extent, which SetSymbol
      reports after the run, or binds right after the If where later ops read the result
      and the extents are leading dims (`_bind_after`). A branch may bind run-time symbols
      itself (NonMaxSuppression's count): the CPU runs such a branch as its own function.
Loop  The results are the state buffers: initialised from the carried inputs, then a
      LoopStmt over t < M while cond runs the body, writes each scan output's row t
      (WriteAt) and copies the yielded values and condition into the states (through a temp
      when a yielded value is another state, e.g. a swap). Scan outputs over a data-dependent
      trip count are allocated for its upper bound (M, else the symbol's range) and the
      count of iterations is reported with SetSymbol; the loop fails rather than overrun.
      A carried value whose shape changes per iteration: its varying dims are run-time
      symbols re-bound at the end of every iteration (ops/loop_carried.py).
Scan  A LoopStmt over the scan length: each iteration slices the scan inputs (a compute
      reading X at t, or at L-1-t when reversed, which fusion can inline into its
      consumers), runs the body, writes the output slices on their axes and copies states
      (a state that changes shape: as a Loop's carried value).
"""

from __future__ import annotations

import numpy as np
import sympy

from ..errors import UnsupportedOp
from ..ir import INT_MAX, DType, Op, canon, identical
from ..kernel import (
    ERR_ASSERT,
    ERR_CAPACITY,
    Buffer,
    IfStmt,
    LoopStmt,
    Var,
    WriteAt,
    dim_to_expr,
    flatten_index,
    unflatten_index,
)
from . import loop_capacity
from . import loop_carried as lc


def _first(buf: Buffer):
    """Element 0 of a one-element buffer (a scalar condition or trip count of any rank)."""
    return buf[(0,) * buf.rank]


def _same(a, b) -> bool:
    return identical(a, b)


def _same_shape(a, b) -> bool:
    return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))


def copy(p, dst: Buffer, src: Buffer) -> None:
    """dst = src (same element count; a scalar from any one-element buffer)."""
    if dst.rank == 0:
        p.compute(dst, _first(src))
    elif src.rank == dst.rank:
        p.compute(dst, lambda *ix: src[ix])
    else:
        p.compute(dst, lambda *ix: src[tuple(unflatten_index(flatten_index(list(ix), dst.shape), src.shape))])


def write_slice(p, out: Buffer, src: Buffer, axis: int, pos) -> None:
    """out[..., pos, ...] (pos on `axis`) = src."""
    vs = tuple(Var(f"w{j}") for j in range(src.rank))
    p.body.append(WriteAt(out.name, tuple(zip(vs, src.shape)), (*vs[:axis], pos, *vs[axis:]), src[vs]))


def carry(ctx, updates: list[tuple]) -> None:
    """Copy each yielded buffer into its state buffer: (state, yielded) or (state, yielded,
    write), `write(p, state, yielded)` replacing the plain copy. A yielded buffer that is
    itself one of the states is staged through a temp first, so no copy reads a state
    already overwritten."""
    p = ctx.program
    roots = {p.root(u[0].name) for u in updates}
    staged = []
    for dst, src, *how in updates:
        if p.root(src.name) == p.root(dst.name):
            continue  # passed through unchanged
        if p.root(src.name) in roots:
            tmp = ctx.temp(src.dtype, src.shape, "carried")
            copy(p, tmp, src)
            src = tmp
        staged.append((dst, src, how[0] if how else copy))
    for dst, src, write in staged:
        write(p, dst, src)


def _init_states(ctx, states, inits, arg_types, what: str, varying: frozenset = frozenset()) -> None:
    """Copy the initial values into the state buffers. A state in `varying` changes shape
    (ops/loop_carried.py): its dims are run-time symbols bound to the initial extents."""
    for k, (st, i, at) in enumerate(zip(states, inits, arg_types)):
        if k not in varying and not _same_shape(at.shape, ctx.in_type(i).shape):
            raise ctx.unsupported(f"{what} {k} changes shape across iterations ({ctx.in_type(i)} -> {at})")
        copy(ctx.program, st, ctx.inputs[i])


# ---- If ------------------------------------------------------------------------------------


def lower_if(ctx) -> None:
    L, p, op = ctx.lowerer, ctx.program, ctx.op
    caps = list(ctx.inputs[1:])
    outs = [ctx.out(k) for k in range(len(op.results))]
    c = ctx.const_value(0)
    if c is not None and c.size == 1:  # a constant condition: only the taken branch
        p.body.extend(_branch(ctx, 0 if bool(c.reshape(-1)[0]) else 1, caps, outs, {}))
        return
    if op.attrs.get("typed_as") is not None:  # typed as one branch for now (control_flow.DataBranch)
        ranks = [[y.type.rank for y in r.block.terminator.operands] for r in op.regions]
        k = next(k for k, (a, b) in enumerate(zip(*ranks)) if a != b)
        raise UnsupportedOp("If", "", op.loc or op.name,
                            f"result {k} has rank {ranks[0][k]} in then_branch and {ranks[1][k]} in else_branch, "
                            "and the condition depends on data")
    extents: dict[str, tuple[Buffer, list]] = {}
    then_s = _branch(ctx, 0, caps, outs, extents)
    else_s = _branch(ctx, 1, caps, outs, extents)
    p.body.append(IfStmt(_first(ctx.inputs[0]), then_s, else_s))
    bind = _bind_after(op, outs, set(extents))
    for name, (buf, exts) in extents.items():
        bound = canon(sympy.Max(*[sympy.sympify(e) for e in exts]))
        if bind:
            L.bind_symbol(op, name, bound, buf[()])
        else:
            L.declare_run_dim(op, name, bound)
            L.set_symbol(name, buf[()])


def _bind_after(op: Op, outs: list[Buffer], names: set[str]) -> bool:
    """Whether the branches' extents are bound right after the If (run-time symbols later
    ops compute on: torchvision's `if boxes.numel() == 0: keep = empty else: keep = nms(...)`
    feeds a Gather) rather than reported after the run. Only where every such dim is its
    result's leading one: a branch writes its value into the leading corner of the result,
    which is then exactly the compact layout of the true extents."""
    if not names or not any(u.op.name not in ("return", "yield") for r in op.results for u in r.uses):
        return False
    return all(not (isinstance(d, sympy.Symbol) and d.name in names) for o in outs for d in o.shape[1:])


def _branch(ctx, i: int, caps, outs, extents) -> list:
    L, p = ctx.lowerer, ctx.program
    block = ctx.op.regions[i].block
    ys = list(block.terminator.operands)
    targets = [o if _same_shape(o.shape, y.type.shape) else None for o, y in zip(outs, ys)]
    # a branch may bind a run-time symbol (codegen runs such a branch as its own function)
    stmts, bufs = L.lower_region(block, caps, targets, rebinds=True)
    with L.into(stmts):
        for o, y in zip(outs, bufs):
            if p.root(y.name) == p.root(o.name):
                continue
            if _same_shape(o.shape, y.shape):
                copy(p, o, y)
                continue
            _corner(p, o, y)
            for d, e in zip(o.shape, y.shape):
                if L.is_run_dim(d) and not _same(d, e):
                    buf, exts = extents.setdefault(d.name, (ctx.temp(DType.i64, (), "extent"), []))
                    p.compute(buf, dim_to_expr(e))
                    exts.append(e)
    return stmts


def _corner(p, out: Buffer, src: Buffer) -> None:
    vs = tuple(Var(f"w{j}") for j in range(src.rank))
    p.body.append(WriteAt(out.name, tuple(zip(vs, src.shape)), vs, src[vs]))


# ---- Loop ----------------------------------------------------------------------------------


def lower_loop(ctx) -> None:
    from .control_flow import loop_layout

    L, p, op = ctx.lowerer, ctx.program, ctx.op
    lay = loop_layout(op)
    for what, i, want in (("trip count M", lay.m, DType.i64), ("condition", lay.cond, DType.bool)):
        if i is not None and ctx.in_type(i).dtype is not want:  # (torch exports int(t.sum()) as a float M)
            raise ctx.unsupported(f"the {what} is {ctx.in_type(i)}, the spec says {want.value}: an invalid model")
    body = op.regions[0].block
    n = len(lay.carried)
    outs = [ctx.out(k) for k in range(len(op.results))]
    states, scans = outs[:n], outs[n:]
    arg_types = [a.type for a in body.args[2:2 + n]]
    vary = lc.varying_dims(ctx, arg_types, lay.carried)
    # the bounds need what the body binds (a count it appends): placeholders until it is lowered
    marks = lc.open_bounds(ctx, vary)
    lc.bind_initial(ctx, vary, marks, lay.carried)
    _init_states(ctx, states, lay.carried, arg_types, "loop-carried value", frozenset(k for k, _, _ in vary))
    t = ctx.temp(DType.i64, (), "loop_t")
    cond = None
    if lay.cond is not None:
        cond = ctx.temp(DType.bool, (), "loop_cond")
        p.compute(cond, _first(ctx.inputs[lay.cond]))
    trips = _first(ctx.inputs[lay.m]) if lay.m is not None else None
    if trips is None and op.attrs.get("counted_trips"):
        # the shape rule proved the count (ops/loop_count.py): the stacked outputs hold that
        # many rows, a grown state its bound, and the loop never runs past them whatever the
        # condition says
        trips = dim_to_expr(op.attrs["counted_trips"][0])
    if trips is None and cond is None:
        raise ctx.unsupported("a Loop with neither a trip count M nor a condition never ends")
    cond_arg = cond if cond is not None else ctx.const(np.array(True), "true")
    args = [t, cond_arg, *states, *(ctx.inputs[i] for i in lay.captures)]
    stmts, ys = L.lower_region(body, args, [None] * (1 + len(outs)), rebinds=True)
    bounds = _carried_bounds(ctx, lay, vary, body, marks)
    lc.close_bounds(ctx, marks, bounds, stmts)
    slice_types = [y.type for y in body.terminator.operands[1 + n:]]
    firsts = lc.first_extents(ctx, scans, slice_types, bounds)  # slices typed as the first one's
    lc.check_slices(ctx, stmts, vary, slice_types, {(k, j) for k, j, *_ in firsts})
    count = cap = None
    code = ERR_ASSERT
    run = sorted({d.name for d in (o.shape[0] for o in scans) if L.is_run_dim(d)})
    if run:
        bound = _trip_bound(ctx, lay, run[0])
        if bound is None:  # nothing bounds the iterations: a capacity grown per call
            bound, code = loop_capacity.trips_capacity(ctx, run[0]), ERR_CAPACITY
        count = ctx.temp(DType.i64, (), "loop_count")
        for name in run:
            L.declare_run_dim(op, name, bound)
        cap = p.run_dims[run[0]]
    with L.into(stmts):
        lc.record_first(ctx, firsts, t[()])
        for o, y in zip(scans, ys[1 + n:]):
            write_slice(p, o, y, 0, t[()])
        pairs, news = lc.rebind_after(ctx, vary, states, ys[1:1 + n], bounds)
        carry(ctx, ([(cond, ys[0])] if cond is not None else []) + pairs)
        lc.emit_rebinds(ctx, news)
    after = lc.check_constraints(ctx, vary, stmts)
    p.body.append(LoopStmt(stmts, index=t.name, trips=trips, cond=None if cond is None else cond[()],
                           count=None if count is None else count.name, max_trips=cap, max_code=code))
    for name in run:
        # the stacked outputs' leading dim: rows [0, count) are a compact prefix, so it is
        # bound right here and later ops compute on it (a ConcatFromSequence of the appended
        # slices), like NonZero's count
        L.bind_symbol(op, name, bound, count[()])
    for _, _, name, first, _ in firsts:
        L.set_symbol(name, first[()])
    p.body.extend(after)


def _carried_bounds(ctx, lay, vary, body, marks: dict) -> dict:
    """The allocation bound of each varying carried dim (ops/loop_carried.py)."""
    if not vary:
        return {}
    # the scan outputs' trip-count symbol (when the trip count is data) bounds the state too
    scan_dims = [r.type.shape[0] for r in ctx.op.results[len(lay.carried):]]
    iters = next((d.name for d in scan_dims if ctx.lowerer.is_run_dim(d)), None)
    trips = _trip_bound(ctx, lay, iters)
    others = {s.name for _, _, s in vary}
    ys = list(body.terminator.operands)
    return {s.name: lc.carried_bound(ctx, k, j, s, ctx.in_type(lay.carried[k]).shape[j], ys[1 + k].type.shape[j],
                                     trips, others, marks)
            for k, j, s in vary}


def _trip_bound(ctx, lay, name: str | None):
    """An upper bound of the trip count, over the input symbols: M when it is a constant or
    a dim (cc.dims), else the run-determined symbol's range (None if it has none)."""
    if lay.m is not None:
        c = ctx.const_value(lay.m)
        # (torch.onnx writes M = 2**63-1 for "no trip count": no bound)
        if c is not None and c.size == 1 and int(c.reshape(-1)[0]) < INT_MAX:
            return int(c.reshape(-1)[0])
        owner = ctx.op.operands[lay.m].owner
        if isinstance(owner, Op) and owner.name == "cc.dims" and len(owner.attrs["dims"]) == 1:
            return owner.attrs["dims"][0]
    if ctx.op.attrs.get("counted_trips"):  # a counting while loop (ops/loop_count.py)
        return ctx.op.attrs["counted_trips"][0]
    if name is None:
        return None
    info = ctx.lowerer.module.symbols[name]
    return info.hi if info.hi < INT_MAX else None


# ---- Scan ----------------------------------------------------------------------------------


def lower_scan(ctx) -> None:
    from .control_flow import scan_layout

    L, p, op = ctx.lowerer, ctx.program, ctx.op
    lay = scan_layout(op)
    body = op.regions[0].block
    ns, ni = len(lay.states), len(lay.inputs)
    outs = [ctx.out(k) for k in range(len(op.results))]
    states, scans = outs[:ns], outs[ns:]
    arg_types = [a.type for a in body.args[:ns]]
    vary = lc.varying_dims(ctx, arg_types, lay.states)
    marks = lc.open_bounds(ctx, vary)
    lc.bind_initial(ctx, vary, marks, lay.states)
    _init_states(ctx, states, lay.states, arg_types, "scan state", frozenset(k for k, _, _ in vary))
    axes = [a % ctx.in_type(i).rank for a, i in zip(lay.in_axes, lay.inputs)]
    length = ctx.in_type(lay.inputs[0]).shape[axes[0]]
    t = ctx.temp(DType.i64, (), "scan_t")
    fwd, rev = t[()], dim_to_expr(length) - 1 - t[()]
    slices = [ctx.temp(a.type.dtype, a.type.shape, "scan_in") for a in body.args[ns:ns + ni]]
    args = [*states, *slices, *(ctx.inputs[i] for i in lay.captures)]
    stmts, ys = L.lower_region(body, args, [None] * len(outs), rebinds=True)
    lc.check_slices(ctx, stmts, vary, [y.type for y in body.terminator.operands[ns:]])
    ys_t = [y.type for y in body.terminator.operands]
    others = {s.name for _, _, s in vary}
    bounds = {s.name: lc.carried_bound(ctx, k, j, s, ctx.in_type(lay.states[k]).shape[j], ys_t[k].shape[j], length,
                                       others, marks) for k, j, s in vary}
    lc.close_bounds(ctx, marks, bounds, stmts)
    with L.into([]) as pre:  # slice t of every scan input, first thing in the body
        for sl, i, ax, d in zip(slices, lay.inputs, axes, lay.in_dirs):
            x, pos = ctx.inputs[i], (rev if d else fwd)
            p.compute(sl, lambda *ix, x=x, ax=ax, pos=pos: x[(*ix[:ax], pos, *ix[ax:])])
    stmts[:0] = pre
    with L.into(stmts):
        for o, y, ax, d in zip(scans, ys[ns:], lay.out_axes, lay.out_dirs):
            write_slice(p, o, y, ax % o.rank, rev if d else fwd)
        pairs, news = lc.rebind_after(ctx, vary, states, ys[:ns], bounds)
        carry(ctx, pairs)
        lc.emit_rebinds(ctx, news)
    after = lc.check_constraints(ctx, vary, stmts)
    p.body.append(LoopStmt(stmts, index=t.name, trips=dim_to_expr(length)))
    p.body.extend(after)
