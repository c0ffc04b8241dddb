"""Control-flow statements of kernel programs, beside `Compute`:

    IfStmt(cond, then_body, else_body)      a real branch on a bool expression read at run time
    LoopStmt(body, index, trips, cond, ...) a counted and/or conditional loop
    WriteAt(out, vars, index, body)        `out[index] = body` over a domain: a compute whose
                                           output index is a map of its vars (the slice of a
                                           stacked scan output an iteration writes)
    SetSymbol(symbol, value, bind)         reports a run-determined dim to the caller; with
                                           `bind`, binds it mid-run for the statements after it

A loop's iteration number lives in a rank-0 i64 buffer (`index`) the loop writes before
each iteration, so bodies read it with an ordinary load (`X[t[], i]` slices a scan input)
and every statement kind (parallel computes included) sees it the same way. Loop-carried
values are plain buffers: the lowering copies the yielded values into them at the end of
the body (ordinary computes), so nothing here knows about carrying.

Buffers used inside bodies are ordinary program buffers: memory planning sees a control
statement as one statement that reads and writes everything its bodies do, so body temps
are planned once and reused across iterations.

Run-determined dims (a Loop's scan outputs stacked over a data-dependent number of
iterations, an If whose branches yield different extents): the symbol's value during the
run is the upper bound `KernelProgram.run_dims` records (buffers are allocated for it);
`SetSymbol` (emitted last) writes the true value into the symbol's slot of the `syms`
array the caller passed, which the dispatcher reads back (`NAME_output_dims`).

Run-time symbols (NonZero's count, Compress's kept count, Unique's distinct count) are
bound mid-run instead: the producer computes the value, `SetSymbol(..., bind=True)` stores it
into `syms` right there, and every later statement sees the TRUE value (the CPU backend
emits the statements after a binding into a continuation function whose entry block
re-reads `syms`). Buffers with such dims are laid out compact row-major in the true
extents, inside an allocation sized for the bound (`KernelProgram.late_dims`: memory
planning sizes them with the bound, so offsets never move when the symbol is bound).

`optimize_nested` runs fusion and scheduling inside the bodies (the program-level passes
treat a control statement as opaque).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from onnxcc.errors import VerifyError
from onnxcc.ir import Dim, DType, canon, print_dim

from .expr import ERR_ASSERT, Expr, Load, Var, buffers_read, free_vars, symbols_used, walk
from .expr_text import format_expr
from .program import Buffer, KernelProgram, Stmt


def _reads(stmts: list[Stmt]) -> set[str]:
    out: set[str] = set()
    for s in stmts:
        out |= s.reads()
    return out


def _writes(stmts: list[Stmt]) -> set[str]:
    out: set[str] = set()
    for s in stmts:
        out |= s.writes()
    return out


def _fmt_body(stmts: list[Stmt], indent: str) -> list[str]:
    lines: list[str] = []
    for s in stmts:
        lines.extend(s.format(indent + "  "))
    return lines


def _check_expr(p: KernelProgram, e: Expr, known_syms: set[str], bound: set[str], where: str) -> None:
    unbound = free_vars(e) - bound
    if unbound:
        raise VerifyError(f"{where}: unbound vars {sorted(unbound)}")
    for n in walk(e):
        if isinstance(n, Load):
            b = p.buffers.get(n.buffer)
            if b is None:
                raise VerifyError(f"{where}: loads unknown buffer {n.buffer}")
            if len(n.indices) != b.rank or n.dtype is not b.dtype:
                raise VerifyError(f"{where}: load {format_expr(n)} does not match buffer {b.header()}")
    for s in symbols_used(e):
        if s not in known_syms:
            raise VerifyError(f"{where}: unknown symbol {s}")


def _scalar_buffer(p: KernelProgram, name: str | None, dtype: DType, where: str) -> None:
    if name is None:
        return
    b = p.buffers.get(name)
    if b is None or b.rank != 0 or b.dtype is not dtype:
        raise VerifyError(f"{where}: {name} must be a rank-0 {dtype.value} buffer, got "
                          f"{b.header() if b else 'nothing'}")
    if p.buffers[p.root(name)].kind in ("input", "const"):
        raise VerifyError(f"{where}: writes {b.kind} buffer {name}")


@dataclass(frozen=True, eq=False)
class IfStmt(Stmt):
    """Runs `then_body` when the bool `cond` (evaluated once, at the statement) holds, else
    `else_body`."""

    cond: Expr
    then_body: list[Stmt] = field(default_factory=list)
    else_body: list[Stmt] = field(default_factory=list)

    def bodies(self) -> tuple[list[Stmt], ...]:
        return (self.then_body, self.else_body)

    def reads(self) -> set[str]:
        return buffers_read(self.cond) | _reads(self.then_body) | _reads(self.else_body)

    def writes(self) -> set[str]:
        return _writes(self.then_body) | _writes(self.else_body)

    def format(self, indent: str = "  ") -> list[str]:
        lines = [f"{indent}if ({format_expr(self.cond)}) {{", *_fmt_body(self.then_body, indent)]
        if self.else_body:
            lines += [f"{indent}}} else {{", *_fmt_body(self.else_body, indent)]
        return lines + [f"{indent}}}"]

    def verify_in(self, p: KernelProgram, known_syms: set[str]) -> None:
        where = f"kernel {p.name}: if ({format_expr(self.cond)})"
        if self.cond.dtype is not DType.bool:
            raise VerifyError(f"{where}: condition is {self.cond.dtype.value}, expected bool")
        _check_expr(p, self.cond, known_syms, set(), where)
        for s in self.then_body + self.else_body:
            p.verify_stmt(s, known_syms)


@dataclass(frozen=True, eq=False)
class LoopStmt(Stmt):
    """`for (t = 0; (trips is None or t < trips) and (cond is None or cond); ++t) body`.

    `trips` (i64) is evaluated once before the loop, `cond` (bool) before every iteration
    (the body updates the buffers it reads). Before each iteration t is stored into the
    rank-0 i64 buffer `index` (when given); after the loop the number of iterations run
    goes to `count`. With `max_trips`, an iteration number reaching it while the loop would
    go on makes the kernel fail (`max_code`: ERR_ASSERT, or ERR_CAPACITY where max_trips is a
    capacity the dispatcher grows, ops/loop_capacity.py): the stacked outputs hold that many rows."""

    body: list[Stmt] = field(default_factory=list)
    index: str | None = None
    trips: Expr | None = None
    cond: Expr | None = None
    count: str | None = None
    max_trips: Dim | None = None
    max_code: int = ERR_ASSERT

    def bodies(self) -> tuple[list[Stmt], ...]:
        return (self.body,)

    def reads(self) -> set[str]:
        out = _reads(self.body)
        for e in (self.trips, self.cond):
            if e is not None:
                out |= buffers_read(e)
        return out

    def writes(self) -> set[str]:
        return _writes(self.body) | {n for n in (self.index, self.count) if n is not None}

    def format(self, indent: str = "  ") -> list[str]:
        trips = format_expr(self.trips) if self.trips is not None else "inf"
        head = f"{indent}loop {self.index or 't'} < {trips}"
        if self.cond is not None:
            head += f" while ({format_expr(self.cond)})"
        if self.max_trips is not None:
            head += f" at most {print_dim(self.max_trips)}"
            if self.max_code != ERR_ASSERT:
                head += f" code={self.max_code}"
        if self.count is not None:
            head += f" count -> {self.count}"
        return [head + " {", *_fmt_body(self.body, indent), f"{indent}}}"]

    def verify_in(self, p: KernelProgram, known_syms: set[str]) -> None:
        where = f"kernel {p.name}: loop {self.index or ''}"
        _scalar_buffer(p, self.index, DType.i64, where)
        _scalar_buffer(p, self.count, DType.i64, where)
        for e, want in ((self.trips, DType.i64), (self.cond, DType.bool)):
            if e is None:
                continue
            if e.dtype is not want:
                raise VerifyError(f"{where}: {format_expr(e)} is {e.dtype.value}, expected {want.value}")
            _check_expr(p, e, known_syms, set(), where)
        if self.trips is None and self.cond is None:
            raise VerifyError(f"{where}: a loop needs a trip count or a condition")
        for s in self.body:
            p.verify_stmt(s, known_syms)


@dataclass(frozen=True, eq=False)
class WriteAt(Stmt):
    """`out[index] = body` for every point of the row-major domain `vars`: like `Compute`,
    but the output position is a map of the vars (iterations are independent: the map must
    be injective)."""

    out: str
    vars: tuple[tuple[Var, Dim], ...]
    index: tuple[Expr, ...]
    body: Expr

    def __post_init__(self):
        vs = tuple((v if isinstance(v, Var) else Var(v), canon(d)) for v, d in self.vars)
        object.__setattr__(self, "vars", vs)
        object.__setattr__(self, "index", tuple(self.index))

    @property
    def var_names(self) -> tuple[str, ...]:
        return tuple(v.name for v, _ in self.vars)

    def reads(self) -> set[str]:
        out = buffers_read(self.body)
        for i in self.index:
            out |= buffers_read(i)
        return out

    def writes(self) -> set[str]:
        return {self.out}

    def format(self, indent: str = "  ") -> list[str]:
        dom = ", ".join(f"{v.name} < {print_dim(d)}" for v, d in self.vars)
        idx = ", ".join(format_expr(i) for i in self.index)
        return [f"{indent}{self.out}[{idx}] = {format_expr(self.body)}  for ({dom})"]

    def verify_in(self, p: KernelProgram, known_syms: set[str]) -> None:
        where = f"kernel {p.name}: {self.format('')[0]}"
        out = p.buffers.get(self.out)
        if out is None:
            raise VerifyError(f"{where}: unknown out buffer {self.out}")
        if p.buffers[p.root(self.out)].kind in ("input", "const"):
            raise VerifyError(f"{where}: writes {out.kind} buffer {self.out}")
        if len(self.index) != out.rank:
            raise VerifyError(f"{where}: {len(self.index)} indices for rank-{out.rank} buffer {self.out}")
        if self.body.dtype is not out.dtype:
            raise VerifyError(f"{where}: body is {self.body.dtype.value}, buffer {self.out} is "
                              f"{out.dtype.value}")
        bound = set(self.var_names)
        for e in (self.body, *self.index):
            _check_expr(p, e, known_syms, bound, where)
        root = p.root(self.out)
        if any(p.root(n) == root for n in self.reads()):
            raise VerifyError(f"{where}: reads a buffer that shares memory with its output")


@dataclass(frozen=True, eq=False)
class SetSymbol(Stmt):
    """`syms[symbol] = value`: the true value of a run-determined symbol, for the caller.
    Without `bind` it is placed after everything else, so no statement of the kernel sees
    the change; with `bind` the statements after it compute on the true value."""

    symbol: str
    value: Expr
    bind: bool = False

    def reads(self) -> set[str]:
        return buffers_read(self.value)

    def writes(self) -> set[str]:
        return set()

    def format(self, indent: str = "  ") -> list[str]:
        return [f"{indent}{'bind' if self.bind else 'symbol'} {self.symbol} := {format_expr(self.value)}"]

    def verify_in(self, p: KernelProgram, known_syms: set[str]) -> None:
        where = f"kernel {p.name}: {self.format('')[0]}"
        if self.symbol not in known_syms:
            raise VerifyError(f"{where}: unknown symbol {self.symbol}")
        if self.value.dtype is not DType.i64:
            raise VerifyError(f"{where}: value is {self.value.dtype.value}, expected i64")
        _check_expr(p, self.value, known_syms, set(), where)


CONTROL_STMTS = (IfStmt, LoopStmt, WriteAt, SetSymbol)


def rebinds(s: Stmt) -> bool:
    """Whether `s` binds a run-time symbol mid-run: a binding `SetSymbol`, or a control
    statement with one in its bodies (a Loop re-binding a carried dim every iteration).
    Code after it must re-read the symbols."""
    if isinstance(s, SetSymbol):
        return s.bind
    return any(rebinds(t) for b in s.bodies() for t in b)


# ---- passes inside bodies -------------------------------------------------------------------


def _all_stmts(stmts: list[Stmt]):
    for s in stmts:
        yield s
        for b in s.bodies():
            yield from _all_stmts(b)


def _own(s: Stmt) -> set[str]:
    """The buffers a statement itself touches, not counting its nested bodies."""
    if isinstance(s, IfStmt):
        return buffers_read(s.cond)
    if isinstance(s, LoopStmt):
        out = {n for n in (s.index, s.count) if n is not None}
        for e in (s.trips, s.cond):
            if e is not None:
                out |= buffers_read(e)
        return out
    return s.reads() | s.writes()


def _sub_program(p: KernelProgram, stmts: list[Stmt]) -> KernelProgram:
    """A program over the same buffers whose body IS `stmts` (the list object), where every
    buffer the rest of the program (or another iteration) may read is an output, so fusion
    keeps it: what the body writes and anything outside it reads, or the body reads before
    it writes it."""
    inner_w = {p.root(n) for n in _writes(stmts)}
    outside: set[str] = set()
    inside = {id(s) for s in _all_stmts(stmts)}
    for s in _all_stmts(p.body):
        if id(s) not in inside:
            outside |= {p.root(n) for n in _own(s)}
    keep = inner_w & outside
    # read before written within the body: carried from the previous iteration
    written: set[str] = set()
    for s in stmts:
        keep |= {p.root(n) for n in s.reads()} & inner_w - written
        written |= {p.root(n) for n in s.writes()}
    bufs: dict[str, Buffer] = {}
    outs = []
    for name, b in p.buffers.items():
        if name in keep and b.kind == "temp" and b.alias_of is None:
            b = replace(b, kind="output")
            outs.append(name)
        bufs[name] = b
    return KernelProgram(p.name, list(p.symbols), bufs, list(p.inputs), list(p.outputs) + outs, stmts)


def optimize_nested(p: KernelProgram, symbols=None, *, fuse: bool = True, target=None, facts=None) -> None:
    """Fuse (and, with a `target`, schedule) the computes inside every control statement's
    bodies, innermost first, in place; then drop the temps nothing touches any more."""
    from .fuse import fuse as fuse_program
    from .schedule import schedule_program

    def visit(stmts: list[Stmt]) -> None:
        for s in stmts:
            for b in s.bodies():
                visit(b)
                if fuse:
                    fuse_program(_sub_program(p, b), symbols)
                if target is not None:
                    schedule_program(_sub_program(p, b), target, facts)

    visit(p.body)
    used: set[str] = set()
    for s in _all_stmts(p.body):
        used |= s.reads() | s.writes()
    # a used view keeps every buffer of its alias chain (a view of a view of a temp), not
    # only the root: dropping an intermediate view orphaned the views built on it
    for n in list(used):
        b = p.buffers.get(n)
        while b is not None and b.alias_of is not None:
            used.add(b.alias_of)
            b = p.buffers.get(b.alias_of)
    for name in [n for n, b in p.buffers.items() if b.kind == "temp" and n not in used]:
        if p.buffers[name].alias_of is None and any(p.root(m) == name for m in used):
            continue
        del p.buffers[name]
    for name in [n for n, b in p.buffers.items() if b.alias_of is not None and b.alias_of not in p.buffers]:
        del p.buffers[name]
    p.verify()


def has_control(p: KernelProgram) -> bool:
    return any(s.bodies() or isinstance(s, SetSymbol) for s in p.body)


__all__ = ["CONTROL_STMTS", "IfStmt", "LoopStmt", "SetSymbol", "WriteAt", "has_control", "optimize_nested"]
