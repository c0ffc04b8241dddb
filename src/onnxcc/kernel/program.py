"""Kernel programs: buffers, statements (`Compute` for now) and the program that owns them.

A `KernelProgram` is what one compiled function runs: a list of statements over named
buffers. `Compute(out, vars, body)` means: for every index tuple of the row-major domain
`vars` (extents are Dims), `out[vars] = body`. Statements subclass `Stmt`, so control flow
(`If`, `Loop`) can be added later beside `Compute`.

    p = KernelProgram.new("matmul", symbols=["M"])
    A = p.input("A", DType.f32, (M, 64)); B = p.input("B", DType.f32, (64, 32))
    C = p.output("C", DType.f32, (M, 32))
    k = Var("k")
    p.compute(C, lambda i, j: rsum([(k, 64)], A[i, k] * B[k, j]))
    print(p)   # ... C[i, j] = sum(k < 64: A[i, k] * B[k, j])
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import sympy

from onnxcc.errors import VerifyError
from onnxcc.ir import Dim, DType, canon, identical, print_dim, sym, to_bits

from .expr import (
    Expr,
    ExprLike,
    Load,
    Reduce,
    SymRef,
    Var,
    buffers_read,
    dim_to_expr,
    free_vars,
    lift,
    walk,
)
from .expr_text import format_expr, format_shared

BUFFER_KINDS = ("input", "output", "temp", "const")


@dataclass(frozen=True, eq=False)
class Buffer:
    """A contiguous row-major tensor the kernel reads or writes.

    `kind` is "input" | "output" | "temp" (lives in the workspace) | "const" (`data` is
    baked into the object file). A buffer with `alias_of` is a view of another buffer with
    the same element count (Reshape without a copy) and takes no memory itself; its dtype is
    the buffer's, or another of the same bit width whose loads reinterpret the bits (BitCast).
    Index it to build a load: `A[i, k]`.
    """

    name: str
    dtype: DType
    shape: tuple[Dim, ...]
    kind: str = "temp"
    data: np.ndarray | None = None
    alias_of: str | None = None

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(canon(d) for d in self.shape))
        if self.kind not in BUFFER_KINDS:
            raise ValueError(f"buffer {self.name}: kind must be one of {BUFFER_KINDS}, got {self.kind!r}")
        if self.kind == "const":
            if self.data is None:
                raise ValueError(f"const buffer {self.name} needs data")
            arr = to_bits(self.data, self.dtype)  # bf16 and the small types: bit patterns
            arr = np.ascontiguousarray(arr).reshape(arr.shape)  # NOTE: ascontiguousarray makes 0-d 1-d
            if tuple(arr.shape) != self.shape:
                raise ValueError(f"const buffer {self.name}: data shape {arr.shape} != {self.shape}")
            object.__setattr__(self, "data", arr)
        if self.alias_of is not None and self.kind != "temp":
            raise ValueError(f"buffer {self.name}: only temp buffers can alias, got kind {self.kind}")

    @property
    def rank(self) -> int:
        return len(self.shape)

    def numel(self) -> Dim:
        n: Any = 1
        for d in self.shape:
            n = n * d
        return canon(n)

    def nbytes(self) -> Dim:
        return canon(self.numel() * self.dtype.itemsize)

    def __getitem__(self, idx) -> Load:
        if not isinstance(idx, tuple):
            idx = (idx,)
        if len(idx) != self.rank:
            raise IndexError(f"buffer {self.name} has rank {self.rank}, indexed with {len(idx)} indices")
        return Load(self.name, tuple(lift(i, DType.i64) for i in idx), self.dtype)

    def load(self, *idx: ExprLike) -> Load:
        return self[tuple(idx)]

    def header(self) -> str:
        shape = ", ".join(print_dim(d) for d in self.shape)
        s = f"{self.kind} {self.name}: {self.dtype.value}[{shape}]"
        if self.alias_of is not None:
            s += f" = view({self.alias_of})"
        if self.kind == "const":
            s += f" = <{self.data.size} values>"  # type: ignore[union-attr]
        return s


class Stmt:
    """A statement of a kernel program."""

    def reads(self) -> set[str]:
        raise NotImplementedError

    def writes(self) -> set[str]:
        raise NotImplementedError

    def format(self, indent: str = "  ") -> list[str]:
        raise NotImplementedError

    def bodies(self) -> tuple[list[Stmt], ...]:
        """The statement lists nested in this one (control flow, see kernel/control.py)."""
        return ()

    def __str__(self) -> str:
        return "\n".join(self.format(""))


@dataclass(frozen=True, eq=False)
class Compute(Stmt):
    """`out[v0, v1, ...] = body` for all `v_i < extent_i` (row-major order unspecified:
    iterations are independent). `schedule` is attached later by the scheduler (loop
    order, tiles, vector width, parallel axis); codegen uses defaults when it is None."""

    out: str
    vars: tuple[tuple[Var, Dim], ...]
    body: Expr
    schedule: Any = None
    origin: tuple[str, ...] = ()
    """names of the graph ops this compute came from (several once fusion merged computes)"""

    def __post_init__(self):
        vs = tuple((v if isinstance(v, Var) else Var(v), canon(d)) for v, d in self.vars)
        object.__setattr__(self, "vars", vs)
        object.__setattr__(self, "origin", tuple(self.origin))

    @property
    def var_names(self) -> tuple[str, ...]:
        return tuple(v.name for v, _ in self.vars)

    @property
    def extents(self) -> tuple[Dim, ...]:
        return tuple(d for _, d in self.vars)

    def reads(self) -> set[str]:
        return buffers_read(self.body)

    def writes(self) -> set[str]:
        return {self.out}

    def format(self, indent: str = "  ") -> list[str]:
        text, defs = format_shared(self.body, self.var_names)
        lines = [f"{indent}{self.out}[{', '.join(self.var_names)}] = {text}"]
        if len(self.origin) > 1:  # a fused group: say which ops it holds
            lines[0] += f"  // fused: {', '.join(self.origin)}"
        lines.extend(f"{indent}    where {name} = {d}" for name, d in defs)
        return lines


def _param_names(fn: Callable, n: int) -> list[str]:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    if len(params) == n and all(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params):
        return [p.name for p in params]
    return [f"i{k}" for k in range(n)]


@dataclass(eq=False)
class KernelProgram:
    """One kernel function: symbols (their order is the index into the `syms` array),
    buffers, the order of input and output pointers, and the statements."""

    name: str
    symbols: list[str]
    buffers: dict[str, Buffer]
    inputs: list[str]
    outputs: list[str]
    body: list[Stmt] = field(default_factory=list)
    run_dims: dict[str, Dim] = field(default_factory=dict)
    """run-determined symbols (a loop's trip count, a branch's extent) -> the upper bound,
    over the other symbols, that buffers are allocated for; a `SetSymbol` statement reports
    the true value (see kernel/control.py)"""

    bound_mid_run: set[str] = field(default_factory=set)
    """symbols a lowering has bound mid-run so far (while it builds a loop body, `body` is
    that nested list, which does not show the bindings before it)"""

    @property
    def late_dims(self) -> set[str]:
        """Run-time symbols bound mid-run (a `SetSymbol` with `bind`, at top level or inside
        a loop body, where a carried dim is re-bound every iteration): later statements see
        their true value, buffers are allocated for their bound."""
        out: set[str] = set(self.bound_mid_run)
        todo = list(self.body)
        while todo:
            s = todo.pop()
            if getattr(s, "bind", False):
                out.add(s.symbol)  # type: ignore[attr-defined]  # a SetSymbol
            for b in s.bodies():
                todo.extend(b)
        return out

    def alloc_bytes(self, buf: Buffer) -> Dim:
        """The bytes `buf` takes in the workspace: its size with every mid-run symbol at its
        bound, so no offset moves when such a symbol is bound."""
        late = self.late_dims
        n = buf.nbytes()
        if not late or isinstance(n, int):
            return n
        subs = {sym(k): sympy.sympify(v) for k, v in self.run_dims.items() if k in late}
        return canon(sympy.sympify(n).xreplace(subs))

    @classmethod
    def new(cls, name: str, symbols: Sequence[str] = ()) -> KernelProgram:
        return cls(name, list(symbols), {}, [], [], [])

    # ---- building ----------------------------------------------------------------------
    def add_buffer(self, buf: Buffer) -> Buffer:
        if buf.name in self.buffers:
            raise ValueError(f"buffer {buf.name} already exists in kernel {self.name}")
        self.buffers[buf.name] = buf
        if buf.kind == "input":
            self.inputs.append(buf.name)
        elif buf.kind == "output":
            self.outputs.append(buf.name)
        return buf

    def input(self, name: str, dtype: DType, shape: Sequence[Dim]) -> Buffer:
        return self.add_buffer(Buffer(name, dtype, tuple(shape), "input"))

    def output(self, name: str, dtype: DType, shape: Sequence[Dim]) -> Buffer:
        return self.add_buffer(Buffer(name, dtype, tuple(shape), "output"))

    def temp(self, name: str, dtype: DType, shape: Sequence[Dim]) -> Buffer:
        return self.add_buffer(Buffer(name, dtype, tuple(shape), "temp"))

    def const(self, name: str, data: np.ndarray, dtype: DType | None = None) -> Buffer:
        dt = dtype or DType.from_np(np.asarray(data).dtype)
        return self.add_buffer(Buffer(name, dt, tuple(np.shape(data)), "const", data=np.asarray(data)))

    def view(self, name: str, of: str | Buffer, shape: Sequence[Dim]) -> Buffer:
        src = self.buffers[of if isinstance(of, str) else of.name]
        return self.add_buffer(Buffer(name, src.dtype, tuple(shape), "temp", alias_of=src.name))

    def compute(self, out: str | Buffer, fn: Callable[..., ExprLike] | Expr,
                names: Sequence[str] | None = None) -> Compute:
        """Append `out[vars] = fn(*vars)`; var names come from `names`, else from `fn`'s
        parameter names, else `i0, i1, ...`. The domain is the out buffer's shape."""
        buf = self.buffers[out if isinstance(out, str) else out.name]
        if isinstance(fn, Expr):
            if buf.rank != 0:
                raise ValueError(f"compute into {buf.name}: pass a function of {buf.rank} vars")
            body, vs = fn, ()
        else:
            ns = list(names) if names is not None else _param_names(fn, buf.rank)
            vs = tuple(Var(n) for n in ns)
            body = lift(fn(*vs), buf.dtype)
        c = Compute(buf.name, tuple(zip(vs, buf.shape)), body)
        self.body.append(c)
        return c

    # ---- queries -----------------------------------------------------------------------
    def root(self, name: str) -> str:
        """The buffer that owns the memory of `name` (follows `alias_of`)."""
        seen = set()
        while self.buffers[name].alias_of is not None:
            if name in seen:
                raise VerifyError(f"kernel {self.name}: alias cycle through buffer {name}")
            seen.add(name)
            name = self.buffers[name].alias_of  # type: ignore[assignment]
        return name

    def temps(self) -> list[Buffer]:
        """Temp buffers that own workspace memory (views excluded), in declaration order."""
        return [b for b in self.buffers.values() if b.kind == "temp" and b.alias_of is None]

    def computes(self) -> Iterator[Compute]:
        """Every compute, including those nested in control-flow statements."""
        stack = list(reversed(self.body))
        while stack:
            s = stack.pop()
            if isinstance(s, Compute):
                yield s
            else:
                for b in reversed(s.bodies()):
                    stack.extend(reversed(b))

    # ---- printing ----------------------------------------------------------------------
    def __str__(self) -> str:
        syms = ", ".join(self.symbols)
        lines = [f"kernel {self.name}({syms}) {{"]
        for name, bound in self.run_dims.items():
            lines.append(f"  run {name} <= {print_dim(bound)}")
        for b in self.buffers.values():
            lines.append(f"  {b.header()}")
        for s in self.body:
            lines.extend(s.format("  "))
        lines.append("}")
        return "\n".join(lines)

    # ---- verification ------------------------------------------------------------------
    def verify(self) -> None:
        """Raise VerifyError on a malformed program (unknown buffers or symbols, rank or
        dtype mismatches, unbound vars, a compute that reads what it writes, ...)."""
        where = f"kernel {self.name}"
        known_syms = set(self.symbols)
        if len(known_syms) != len(self.symbols):
            raise VerifyError(f"{where}: duplicate symbols in {self.symbols}")
        for name, b in self.buffers.items():
            if name != b.name:
                raise VerifyError(f"{where}: buffer registered as {name} is named {b.name}")
            for d in b.shape:
                _check_dim_symbols(d, known_syms, f"{where}: buffer {name} shape")
            if b.alias_of is not None:
                if b.alias_of not in self.buffers:
                    raise VerifyError(f"{where}: buffer {name} aliases unknown buffer {b.alias_of}")
                src = self.buffers[self.root(name)]
                # a view of another type reinterprets whole elements' bits (BitCast): same width
                if src.dtype is not b.dtype and (src.dtype.bits != b.dtype.bits or b.dtype.bits < 8):
                    raise VerifyError(f"{where}: view {name} is {b.dtype.value}, its buffer {src.name} is "
                                      f"{src.dtype.value}")
                if not identical(src.numel(), b.numel()):
                    raise VerifyError(f"{where}: view {name} has {b.numel()} elements, {src.name} has "
                                      f"{src.numel()}")
        for lst, kind in ((self.inputs, "input"), (self.outputs, "output")):
            for n in lst:
                if n not in self.buffers or self.buffers[n].kind != kind:
                    raise VerifyError(f"{where}: {kind} {n} is not an {kind} buffer")
        for s in self.body:
            self.verify_stmt(s, known_syms)

    def verify_stmt(self, s: Stmt, known_syms: set[str]) -> None:
        """Verify one statement; control-flow statements verify themselves (`verify_in`)."""
        if isinstance(s, Compute):
            self._verify_compute(s, known_syms)
        elif hasattr(s, "verify_in"):
            s.verify_in(self, known_syms)
        else:
            raise VerifyError(f"kernel {self.name}: unsupported statement {type(s).__name__}")

    def _verify_compute(self, c: Compute, known_syms: set[str]) -> None:
        def where() -> str:  # only for an error: printing a fused compute is most of a verify's time
            return f"kernel {self.name}: compute {c.format('')[0]}"

        if c.out not in self.buffers:
            raise VerifyError(f"{where()}: unknown out buffer {c.out}")
        out = self.buffers[c.out]
        if self.buffers[self.root(c.out)].kind in ("input", "const"):
            raise VerifyError(f"{where()}: writes {out.kind} buffer {c.out}")
        if out.rank != len(c.vars):
            raise VerifyError(f"{where()}: {len(c.vars)} vars for rank-{out.rank} buffer {c.out}")
        for (v, ext), d in zip(c.vars, out.shape):
            if not identical(ext, d):
                raise VerifyError(f"{where()}: extent of {v.name} is {ext}, buffer {c.out} has {d}")
        if c.body.dtype is not out.dtype:
            raise VerifyError(f"{where()}: body is {c.body.dtype.value}, buffer {c.out} is {out.dtype.value}")
        names = c.var_names
        if len(set(names)) != len(names):
            raise VerifyError(f"{where()}: duplicate vars {names}")
        unbound = free_vars(c.body) - set(names)
        if unbound:
            raise VerifyError(f"{where()}: unbound vars {sorted(unbound)}")
        out_root = self.root(c.out)
        syms: set[str] = set()  # the symbols read, on this walk (a walk of its own was a third of a verify)
        for n in walk(c.body):
            if isinstance(n, SymRef):
                syms.add(n.name)
            elif isinstance(n, Load):
                b = self.buffers.get(n.buffer)
                if b is None:
                    raise VerifyError(f"{where()}: loads unknown buffer {n.buffer}")
                if len(n.indices) != b.rank or n.dtype is not b.dtype:
                    raise VerifyError(f"{where()}: load {format_expr(n)} as {n.dtype.value} with "
                                      f"{len(n.indices)} indices, buffer is {b.dtype.value}[rank {b.rank}]")
                if self.root(n.buffer) == out_root:
                    raise VerifyError(f"{where()}: reads {n.buffer}, which shares memory with its output")
            elif isinstance(n, Reduce):
                for v, _ in n.vars:
                    if v.name in names:
                        raise VerifyError(f"{where()}: reduce var {v.name} shadows a compute var")
        for s in syms:
            if s not in known_syms:
                raise VerifyError(f"{where()}: unknown symbol {s}")


def _check_dim_symbols(d: Dim, known: set[str], where: str) -> None:
    if isinstance(d, int):
        if d < 0:
            raise VerifyError(f"{where}: negative extent {d}")
        return
    for s in sympy.sympify(d).free_symbols:
        if s.name not in known:
            raise VerifyError(f"{where}: unknown symbol {s.name} in {d}")
    dim_to_expr(d)  # raises on dims codegen cannot evaluate
