"""A Loop whose carried value changes shape from one iteration to the next, compiled as a loop
(not unrolled): `for i in range(x.size(0)): out = cat([out, step(out[-1:])])`, a while loop
on a data condition that appends a row per step, a Pad that widens the state.

Each carried dim that varies is a run-time symbol (control_flow.LoopOp types it as a fresh
`carried` symbol): bound to the initial value's extent before the loop, and re-bound at the
end of every iteration to the extent the body yielded (`bind s := ...` inside the loop body).
The CPU backend runs such a body as its own function per iteration, whose entry re-reads the
symbols (codegen/cpu/control.py), so the body's kernels see the current extents. The state
buffer is allocated for the symbol's bound and holds the current value compact in its true
extents: the yielded value is copied in through a view with the yielded shape, before the
symbol moves. After the loop the symbol holds the final extent, so later kernels compute on
the Loop's result like on NonZero's.

The bound (every buffer with the dim is allocated for it) comes from the growth per
iteration and the trip count's bound: init + trips * growth when the growth does not depend
on the state (a constant, an input dim, a count bounded by either), the running maximum over
the iterations when the trip count is a small constant, else the symbol's own range
(`--dim carried0_d0=1:N`), else (a while loop on data that appends with nothing bounding it)
a capacity the dispatcher sets and doubles per call (ops/loop_capacity.py). Every new extent
is checked against the bound before the state is written (the kernel fails, ERR_ASSERT, or
ERR_CAPACITY for a capacity, rather than write past the end).
"""

from __future__ import annotations

from dataclasses import replace

import sympy

from ..ir import INT_MAX, DType, canon
from ..kernel import (
    ERR_ASSERT,
    Buffer,
    Compute,
    SetSymbol,
    SymRef,
    Var,
    WriteAt,
    binary,
    check,
    dim_to_expr,
    flatten_index,
    select,
    symbols_used,
    transform,
    unflatten_index,
)
from ..kernel.expr import ERR_CAPACITY, condition_to_expr
from .loop_capacity import CAPACITY_ATTR, capacity_bound, is_capacity

#: a constant trip count up to which the bound is found by running the growth symbolically
MAX_SYMBOLIC_TRIPS = 64


def varying_dims(ctx, arg_types, operand_idx) -> list[tuple[int, int, sympy.Symbol]]:
    """(carried index, dim, symbol) of every carried dim the body changes: the block arg's
    dim is a symbol other than the initial value's dim."""
    out = []
    for k, (at, i) in enumerate(zip(arg_types, operand_idx)):
        init = ctx.in_type(i)
        if at.rank != init.rank:
            continue
        for j, (d, e) in enumerate(zip(at.shape, init.shape)):
            if isinstance(d, sympy.Symbol) and canon(d) != canon(e) and ctx.lowerer.is_run_dim(d):
                out.append((k, j, d))
    return out


def _refuse(ctx, k: int, j: int, why: str):
    return ctx.unsupported(f"loop-carried value {k} dim {j} changes across iterations and {why}")


def open_bounds(ctx, vary) -> dict:
    """A placeholder bound per varying dim (a symbol `NAME__max` the lowering may use like an
    input's) while the body is lowered: counts the body binds are bounded in terms of it.
    Returns {dim name: placeholder}; `close_bounds` puts the real bounds in."""
    marks = {s.name: sympy.Symbol(f"{s.name}__max", integer=True, positive=True) for _, _, s in vary}
    ctx.lowerer.bound.update(m.name for m in marks.values())
    return marks


def close_bounds(ctx, marks: dict, bounds: dict, stmts: list) -> None:
    """The real bounds for the placeholders: in the allocation bounds, and in the checks of
    the re-bindings already emitted in the body `stmts` (a nested loop's carried dims)."""
    L = ctx.lowerer
    subs = {m: sympy.sympify(bounds[name]) for name, m in marks.items()}
    for name, b in list(L.program.run_dims.items()):
        L.program.run_dims[name] = canon(sympy.sympify(b).xreplace(subs))
    L.bound.difference_update(m.name for m in marks.values())
    exprs = {m.name: dim_to_expr(bounds[name]) for name, m in marks.items()}
    if exprs:
        _replace_marks(stmts, exprs)


def _replace_marks(stmts: list, exprs: dict) -> None:
    def swap(e):
        return transform(e, lambda x: exprs.get(x.name) if isinstance(x, SymRef) else None)

    for k, st in enumerate(stmts):
        if isinstance(st, SetSymbol) and symbols_used(st.value) & set(exprs):
            stmts[k] = SetSymbol(st.symbol, swap(st.value), st.bind)
        elif isinstance(st, Compute) and symbols_used(st.body) & set(exprs):
            # a nested loop's check of its new extent (`rebind_after`) against its bound
            stmts[k] = replace(st, body=swap(st.body))
        for b in st.bodies():
            _replace_marks(b, exprs)


def _over_inputs(ctx, e, k: int, j: int, what: str, marks: dict | None = None):
    """`e` with every symbol that is not an input's replaced by its bound: a run-time symbol
    bound earlier by its allocation bound, one the body binds (a count) by its range; a
    varying dim's placeholder (`open_bounds`) by the dim itself."""
    L = ctx.lowerer
    e = sympy.sympify(e)
    back = {m: sympy.Symbol(name, integer=True, positive=True) for name, m in (marks or {}).items()}
    subs = {}
    for s in e.free_symbols:
        if s.name in L.bound or s.name in (marks or {}):
            continue
        if s.name in L.program.run_dims:
            subs[s] = sympy.sympify(L.program.run_dims[s.name])
            continue
        info = L.module.symbols[s.name] if s.name in L.module.symbols else None
        if info is None or info.hi >= INT_MAX:
            raise _refuse(ctx, k, j, f"{what} depends on {s.name}, which has no upper bound over the input dims")
        subs[s] = sympy.Integer(info.hi)
    return e.xreplace(subs).xreplace(back)


def carried_bound(ctx, k: int, j: int, s: sympy.Symbol, init, grown, trips, others: set[str], marks: dict):
    """An upper bound, over the input symbols, of carried dim `s` (initially `init`, `grown`
    after one iteration: an expression of s) over a loop of at most `trips` iterations."""
    L = ctx.lowerer
    init_b = _over_inputs(ctx, init, k, j, "its initial extent")
    grown = _over_inputs(ctx, grown, k, j, "its extent after an iteration", marks)
    g = sympy.sympify(grown)
    coupled = sorted(x.name for x in g.free_symbols if x.name in others and x != s)
    growth = sympy.simplify(g - s)
    if not coupled and s not in growth.free_symbols:
        step = sympy.Max(0, growth)
        if step == 0:
            return canon(init_b)
        if trips is not None:
            return canon(init_b + sympy.sympify(trips) * step)
    elif not coupled and isinstance(trips, int) and trips <= MAX_SYMBOLIC_TRIPS:
        v, best = init_b, init_b
        for _ in range(trips):
            v = g.xreplace({s: v})
            best = sympy.Max(best, v)
        return canon(best)
    info = L.module.symbols[s.name]
    if info.hi < INT_MAX:  # the user's range for it (--dim): checked at every re-binding
        return info.hi
    # nothing bounds it over the inputs (its growth depends on the state or on other carried
    # dims, or the trip count has no bound): a capacity the dispatcher grows per call
    return capacity_bound(ctx, k, j, s, init_b)


def bind_initial(ctx, vary, bounds: dict, operand_idx) -> None:
    """Before the loop: each varying carried dim is the initial value's extent."""
    for k, j, s in vary:
        init = ctx.in_type(operand_idx[k]).shape[j]
        ctx.lowerer.bind_symbol(ctx.op, s.name, bounds[s.name], dim_to_expr(init))


def rebind_after(ctx, vary, states: list[Buffer], yields: list[Buffer], bounds: dict) -> tuple[list, list]:
    """At the end of the body, before any symbol moves: the new extents into i64 temps, each
    checked against its bound there, before `carry` writes the state (so a state that would
    outgrow its buffer fails the kernel instead of writing past it: ERR_CAPACITY where the
    bound is a capacity the dispatcher grows, ERR_ASSERT where it is fixed), and the updates
    for `control_lower.carry`, a varying state written in the yielded shape (`write_compact`).
    Returns (updates, [(symbol, temp)])."""
    p = ctx.program
    vary_k = {k for k, _, _ in vary}
    caps = ctx.lowerer.module.attrs.get(CAPACITY_ATTR, {})
    news = []
    for k, j, s in vary:
        t = ctx.temp(DType.i64, (), f"next_{s.name}")
        e = dim_to_expr(yields[k].shape[j])
        # NOTE: dims are positive symbols to the shape rules, so an extent they compute can
        # go below 0 where the state runs empty (a Slice [1:] of 0 rows): refused, not run
        code = ERR_CAPACITY if is_capacity(bounds[s.name], caps) else ERR_ASSERT
        p.compute(t, check(e <= dim_to_expr(bounds[s.name]), check(e >= 0, e, ERR_ASSERT), code))
        news.append((s, t))
    updates = [(st, y, write_compact) if k in vary_k else (st, y) for k, (st, y) in enumerate(zip(states, yields))]
    return updates, news


def write_compact(p, state: Buffer, y: Buffer) -> None:
    """state's memory = y, compact row-major in y's shape (the state's extents are still the
    old ones: element f of y goes to linear position f, whatever the state's shape says)."""
    vs = tuple(Var(f"w{j}") for j in range(y.rank))
    if y.rank == 0:
        p.compute(state, y[()])
        return
    if all(canon(a) == canon(b) for a, b in zip(y.shape[1:], state.shape[1:])):
        idx = vs  # only the leading extent differs: the same index is the same position
    else:
        idx = tuple(unflatten_index(flatten_index(list(vs), y.shape), state.shape))
    p.body.append(WriteAt(state.name, tuple(zip(vs, y.shape)), idx, y[vs]))


def emit_rebinds(ctx, news) -> None:
    """The new extents bound, after the carry (`rebind_after` checked them)."""
    for s, t in news:
        ctx.program.bound_mid_run.add(s.name)
        ctx.program.body.append(SetSymbol(s.name, t[()], bind=True))


def check_constraints(ctx, vary, stmts: list) -> list:
    """The model's constraints over the varying dims, checked where they must hold: one a
    body op needs (its origin names a node of this loop's body) at the start of every
    iteration, the others right after the loop (returned: statements to append there). A
    check re-binds the dim to itself through the assertion (ERR_ASSERT when false)."""
    L, op = ctx.lowerer, ctx.op
    mine = {s.name for _, _, s in vary}
    inside = f'node "{op.loc}/'
    head, after = [], []
    for c in L.module.constraints:
        names = sorted(x.name for x in c.expr.free_symbols if x.name in mine)
        if not names or id(c) in L.checked:
            continue
        if any(x.name not in L.bound and x.name not in mine for x in c.expr.free_symbols):
            continue  # over other run-time symbols too: the generic check decides (or refuses)
        s = sympy.Symbol(names[0], integer=True, positive=True)
        st = SetSymbol(s.name, check(condition_to_expr(c.expr), dim_to_expr(s), ERR_ASSERT), bind=True)
        (head if c.origin.startswith(inside) else after).append(st)
        L.checked.add(id(c))
    stmts[:0] = head
    return after


def check_slices(ctx, stmts, vary, slice_types, firsts=frozenset()) -> None:
    """Scan-output slices must keep their shape across iterations (the stacked output would
    be ragged): none may have a dim the body binds or a varying carried dim, except the dims
    (k, j) in `firsts`, checked at run time against the first iteration's (`first_extents`)."""
    moving = body_symbols(stmts) | {s.name for _, _, s in vary}
    for k, t in enumerate(slice_types):
        bad = sorted({s.name for j, d in enumerate(t.shape) if (k, j) not in firsts
                      for s in sympy.sympify(d).free_symbols if s.name in moving})
        if bad:
            raise ctx.unsupported(f"scan output {k} has slices {t} whose dims ({', '.join(bad)}) change from "
                                  "one iteration to the next (the stacked output would be ragged)")


def first_extents(ctx, scans: list[Buffer], slice_types, bounds: dict) -> list:
    """Scan-output dims typed as the first iteration's extent (control_flow.LoopOp: a slice
    dim that moves with a carried dim): each is a run-determined symbol allocated for the
    slice dim's bound (the carried dims at theirs), recorded into an i64 temp at iteration 0.
    Returns [(k, j, symbol, temp, slice dim)], j the slice's dim (the output's j + 1)."""
    L = ctx.lowerer
    subs = {sympy.Symbol(name, integer=True, positive=True): sympy.sympify(b) for name, b in bounds.items()}
    subs.update({sympy.Symbol(name, integer=True, positive=True): sympy.sympify(b)
                 for name, b in L.program.run_dims.items() if name not in bounds})
    out = []
    for k, (o, t) in enumerate(zip(scans, slice_types)):
        for j, (d, e) in enumerate(zip(o.shape[1:], t.shape)):
            if not (L.is_run_dim(d) and d.name not in L.program.run_dims and canon(d) != canon(e)):
                continue
            L.declare_run_dim(ctx.op, d.name, canon(sympy.sympify(e).xreplace(subs)))
            first = ctx.temp(DType.i64, (), f"first_{d.name}")
            ctx.program.compute(first, dim_to_expr(0))
            out.append((k, j, d.name, first, e))
    return out


def record_first(ctx, firsts: list, t) -> None:
    """In the body, before the slices are written: iteration 0 records each extent, the others
    must give the same (ERR_ASSERT, as onnxruntime's "inconsistent shape in loop output")."""
    for _, _, _, first, e in firsts:
        ext = dim_to_expr(e)
        # (Expr's == and != compare trees: the kernel's comparisons are `binary`)
        at0 = binary("eq", t, 0)
        same = binary("or", at0, binary("eq", ext, first[()]))
        now = ctx.temp(DType.i64, (), "extent")  # (a compute may not read its own output)
        ctx.program.compute(now, check(same, select(at0, ext, first[()]), ERR_ASSERT))
        ctx.program.compute(first, now[()])


def body_symbols(stmts) -> set[str]:
    """Symbols bound inside loop-body statements."""
    out: set[str] = set()
    todo = list(stmts)
    while todo:
        st = todo.pop()
        if isinstance(st, SetSymbol) and st.bind:
            out.add(st.symbol)
        for b in st.bodies():
            todo.extend(b)
    return out


__all__ = [
    "MAX_SYMBOLIC_TRIPS", "bind_initial", "body_symbols", "carried_bound", "check_constraints", "check_slices",
    "close_bounds", "emit_rebinds", "first_extents", "open_bounds", "rebind_after", "record_first", "varying_dims",
    "write_compact",
]
