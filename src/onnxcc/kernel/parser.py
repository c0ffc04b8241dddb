"""The kernel IR's text, read back: `parse_program(str(program))` prints the same text.

    kernel k_v0(N) {
      input in0: f32[N, 8]
      output out0: f32[N]
      out0[i0] = sum(r < 8: in0[i0, r])
    }

What the text holds comes back: symbols, buffers (kinds, dtypes, shapes through the IR's
dim parser, views), the statements (computes with their `where $k = ...` shared
sub-expressions and `// fused:` origins, if / loop / write-at / symbol statements) and
every expression with its dtype. What the text does not hold is not invented: a const
buffer's values (`<N values>`) come back as zeros, schedules and memory plans are not
printed and do not come back. `parse_kernel_text` reads a `.kir` dump (`--dump-dir`):
every `kernel ... { }` in it, comment lines skipped.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import numpy as np

from onnxcc.errors import ParseError
from onnxcc.ir import Dim, DType, parse_dim

from .control import IfStmt, LoopStmt, SetSymbol, WriteAt
from .expr import (
    BINARY_OPS,
    ERR_INDEX,
    I64,
    REDUCE_OPS,
    UNARY_OPS,
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
)
from .extern import CallStmt
from .program import Buffer, Compute, KernelProgram, Stmt

_DTYPES = {d.value: d for d in DType}
_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<num>(?:\d+\.\d*(?:e[-+]?\d+)?|\d+e[-+]?\d+|\d+|nan|inf)(?::[a-z0-9]+\b)?)
  | (?P<name>\$\d+|[A-Za-z_][A-Za-z0-9_.]*)
  | (?P<op><=|>=|==|!=|<<|>>|//|->|:=|[-+*/%&|^~<>()\[\],:=])
""", re.VERBOSE)
#: infix symbol -> binary op name
_INFIX = {sym: op for op, (sym, _) in BINARY_OPS.items() if sym is not None}
_PREC = {sym: BINARY_OPS[op][1] for sym, op in _INFIX.items()}
_CALL_BINARY = {op for op, (sym, _) in BINARY_OPS.items() if sym is None}


class _Expr:
    """Recursive descent over one expression's tokens (precedence climbing, as `_fmt`
    prints: left-associative, comparisons never chain, unary `-` / `~` bind at 8)."""

    def __init__(self, text: str, line: int, program: KernelProgram, bound: set[str], names: Mapping[str, Expr]):
        self.text, self.line, self.p, self.bound, self.names = text, line, program, set(bound), names
        self.toks: list[tuple[str, str, int]] = []
        pos = 0
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None:
                raise self.error(f"unexpected character {text[pos]!r}", pos)
            if m.lastgroup != "ws":
                self.toks.append((m.lastgroup or "", m.group(), pos))
            pos = m.end()
        self.toks.append(("eof", "", len(text)))
        self.i = 0

    def error(self, msg: str, col: int | None = None) -> ParseError:
        return ParseError(msg, self.line, (self.toks[self.i][2] if col is None else col) + 1, "<kernel>")

    def peek(self) -> str:
        return self.toks[self.i][1]

    def next(self) -> tuple[str, str, int]:
        t = self.toks[self.i]
        self.i += 1
        return t

    def expect(self, text: str) -> None:
        if self.peek() != text:
            raise self.error(f"expected {text!r}, got {self.peek() or 'end of line'!r}")
        self.i += 1

    def done(self) -> None:
        if self.toks[self.i][0] != "eof":
            raise self.error(f"unexpected {self.peek()!r} after the expression")

    # ---- precedence climbing ----------------------------------------------------------------
    def expr(self, min_prec: int = 1) -> Expr:
        left = self.unary()
        while self.peek() in _PREC and _PREC[self.peek()] >= min_prec:
            sym = self.next()[1]
            prec = _PREC[sym]
            right = self.expr(prec + 1)
            left = Binary(_INFIX[sym], left, right)
            if prec == 1:  # comparisons never chain
                break
        return left

    def unary(self) -> Expr:
        if self.peek() == "-":
            self.i += 1
            if self.toks[self.i][0] == "num":
                c = self.atom()
                assert isinstance(c, Const)
                return Const(-c.value, c.dtype)
            return Unary("neg", self.unary())
        if self.peek() == "~":
            self.i += 1
            return Unary("not", self.unary())
        return self.atom()

    def atom(self) -> Expr:
        kind, text, col = self.next()
        if kind == "num":
            return _const(text)
        if text == "(":
            e = self.expr()
            self.expect(")")
            return e
        if kind != "name":
            raise self.error(f"expected an expression, got {text or 'end of line'!r}", col)
        if text in ("true", "false"):
            return Const(text == "true", DType.bool)
        if text.startswith("$"):
            if text not in self.names:
                raise self.error(f"{text} is not defined (no `where {text} = ...`)", col)
            return self.names[text]
        if self.peek() == "[":
            return self.load(text, col)
        if self.peek() == "(":
            return self.call(text, col)
        if text in self.bound:
            return Var(text)
        return SymRef(text)

    def load(self, buf: str, col: int) -> Expr:
        b = self.p.buffers.get(buf)
        if b is None:
            raise self.error(f"unknown buffer {buf}", col)
        self.expect("[")
        idx = self.args("]")
        return Load(buf, tuple(idx), b.dtype)

    def args(self, close: str) -> list[Expr]:
        out: list[Expr] = []
        while self.peek() != close:
            out.append(self.expr())
            if self.peek() != close:
                self.expect(",")
        self.i += 1
        return out

    def call(self, fn: str, col: int) -> Expr:
        self.expect("(")
        if fn in REDUCE_OPS and self._reduce_ahead():
            return self.reduce(fn)
        if fn == "check":
            cond = self.expr()
            self.expect(",")
            value = self.expr()
            code = ERR_INDEX
            if self.peek() == ",":
                self.i += 1
                self.expect("code")
                self.expect("=")
                code = int(self.next()[1])
            self.expect(")")
            return Check(cond, value, code)
        args = self.args(")")
        if fn == "select" and len(args) == 3:
            return Select(*args)
        if fn in _DTYPES and len(args) == 1:
            return Cast(args[0], _DTYPES[fn])
        if fn in UNARY_OPS and len(args) == 1:
            return Unary(fn, args[0])
        if fn in _CALL_BINARY and len(args) == 2:
            return Binary(fn, *args)
        raise self.error(f"unknown function {fn} of {len(args)} arguments", col)

    def _reduce_ahead(self) -> bool:
        """A `:` at this paren depth before the closing paren: `max(r < 5: x)`, not max(a, b)."""
        depth, j = 0, self.i
        while self.toks[j][0] != "eof":
            t = self.toks[j][1]
            if t in "([":
                depth += 1
            elif t in ")]":
                if depth == 0:
                    return False
                depth -= 1
            elif t == ":" and depth == 0:
                return True
            j += 1
        return False

    def reduce(self, op: str) -> Expr:
        vars_: list[tuple[Var, Expr]] = []
        init = None
        while self.peek() != ":":
            if self.peek() == "init":
                self.i += 1
                self.expect("=")
                init = self.expr()
            else:
                name = self.next()[1]
                self.expect("<")
                vars_.append((Var(name), self.expr(2)))
                self.bound.add(name)
            if self.peek() == ",":
                self.i += 1
        self.expect(":")
        body = self.expr()
        self.expect(")")
        for v, _ in vars_:
            self.bound.discard(v.name)
        return Reduce(op, tuple(vars_), body, init)


def _const(text: str) -> Const:
    num, _, suffix = text.partition(":")
    if suffix:
        dt = _DTYPES[suffix]
    elif any(c in num for c in ".en") or num in ("inf", "nan"):
        dt = DType.f32
    else:
        dt = I64
    value: float | int = float(num) if dt.is_float else int(num)
    return Const(value, dt)


def parse_expr(text: str, program: KernelProgram, bound: set[str] | frozenset[str] = frozenset(),
               names: Mapping[str, Expr] | None = None, line: int = 1) -> Expr:
    """One expression as `format_expr` prints it; names in `bound` are index vars, other
    plain names symbols, `$k` the shared sub-expressions in `names`."""
    p = _Expr(text, line, program, set(bound), names or {})
    e = p.expr()
    p.done()
    return e


# ---- programs ---------------------------------------------------------------------------------


_CALL = re.compile(r"^call ([A-Za-z_][A-Za-z0-9_]*)\((.*); (.*)\) -> (.*)$")


def _split_top(text: str) -> list[str]:
    """Split at commas outside brackets (`Max(a, b), 4` -> two dims)."""
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += (ch in "([" and 1) or 0
        depth -= (ch in ")]" and 1) or 0
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


_HEAD = re.compile(r"kernel ([A-Za-z_][A-Za-z0-9_.]*)\((.*)\) \{$")
_BUF = re.compile(r"(input|output|temp|const) ([^:\s]+): ([a-z0-9]+)\[(.*?)\](?: = view\((\S+)\)| = <(\d+) values>)?$")
_LOOP = re.compile(r"loop (\S+) < (.+?)(?: while \((.*)\))?(?: at most (\S+))?(?: code=(\d+))?(?: count -> (\S+))? \{$")
_WHERE = re.compile(r"where (\$\d+) = (.*)$")


class _Lines:
    def __init__(self, text: str, first_line: int = 1):
        self.lines = [(first_line + k, s.strip()) for k, s in enumerate(text.splitlines())]
        self.i = 0

    def peek(self) -> str:
        return self.lines[self.i][1] if self.i < len(self.lines) else ""

    def next(self) -> tuple[int, str]:
        if self.i >= len(self.lines):
            n = self.lines[-1][0] if self.lines else 1
            raise ParseError("unexpected end of the kernel text (missing `}`)", n, 1, "<kernel>")
        t = self.lines[self.i]
        self.i += 1
        return t


def _dims(text: str, line: int) -> tuple[Dim, ...]:
    try:
        return tuple(parse_dim(d) for d in _split_top(text))
    except ParseError as e:
        raise ParseError(f"bad dim in [{text}]: {e}", line, 1, "<kernel>") from None


def _program(lines: _Lines) -> KernelProgram:
    n, head = lines.next()
    m = _HEAD.match(head)
    if m is None:
        raise ParseError(f"expected `kernel NAME(SYMBOLS) {{`, got {head!r}", n, 1, "<kernel>")
    syms = [s.strip() for s in m.group(2).split(",") if s.strip()]
    p = KernelProgram(m.group(1), syms, {}, [], [])
    while lines.peek().startswith("run ") and " <= " in lines.peek():
        n, s = lines.next()
        name, bound = s[len("run "):].split(" <= ", 1)
        p.run_dims[name.strip()] = _dims(bound, n)[0]
    while (b := _BUF.match(lines.peek())) is not None:
        n, _ = lines.next()
        kind, name, dt, shape, view, count = b.groups()
        dims = _dims(shape, n)
        dtype = _DTYPES[dt]
        data = None
        if kind == "const":
            want = np.uint16 if dtype is DType.bf16 else dtype.np
            data = np.zeros(tuple(int(d) for d in dims), dtype=want)  # the text holds no values
            if count is not None and int(count) != data.size:
                raise ParseError(f"const buffer {name}: <{count} values> for {data.size} elements", n, 1, "<kernel>")
        p.buffers[name] = Buffer(name, dtype, dims, kind, data, view)
        if kind == "input":
            p.inputs.append(name)
        elif kind == "output":
            p.outputs.append(name)
    p.body = _stmts(lines, p, set())
    return p


def _stmts(lines: _Lines, p: KernelProgram, bound: set[str]) -> list[Stmt]:
    out: list[Stmt] = []
    while True:
        s = lines.peek()
        if s == "}" or s.startswith("} else {"):
            return out
        out.append(_stmt(lines, p, bound))


def _stmt(lines: _Lines, p: KernelProgram, bound: set[str]) -> Stmt:
    n, s = lines.next()
    if s.startswith("if (") and s.endswith(") {"):
        cond = parse_expr(s[4:-3], p, bound, line=n)
        then = _stmts(lines, p, bound)
        other: list[Stmt] = []
        if lines.next()[1] == "} else {":
            other = _stmts(lines, p, bound)
            lines.next()
        return IfStmt(cond, then, other)
    if (m := _LOOP.match(s)) is not None:
        index, trips, cond, most, code, count = m.groups()
        body = _stmts(lines, p, bound)
        lines.next()
        return LoopStmt(body, index if index in p.buffers else None,
                        None if trips == "inf" else parse_expr(trips, p, bound, line=n),
                        None if cond is None else parse_expr(cond, p, bound, line=n),
                        count, None if most is None else parse_dim(most),
                        *(() if code is None else (int(code),)))
    if s.startswith("symbol ") and " := " in s:
        name, value = s[len("symbol "):].split(" := ", 1)
        return SetSymbol(name.strip(), parse_expr(value, p, bound, line=n))
    if (c := _CALL.match(s)) is not None:  # a runtime call (kernel/extern.py)
        fn, sizes, bufs, outs = c.groups()
        return CallStmt(fn, tuple(parse_expr(x, p, bound, line=n) for x in _split_top(sizes)),
                        tuple(x.strip() for x in bufs.split(",") if x.strip()),
                        tuple(x.strip() for x in outs.split(",") if x.strip()))
    if s.startswith("bind ") and " := " in s:
        name, value = s[len("bind "):].split(" := ", 1)
        return SetSymbol(name.strip(), parse_expr(value, p, bound, line=n), bind=True)
    return _assign(lines, p, bound, n, s)


def _assign(lines: _Lines, p: KernelProgram, bound: set[str], n: int, s: str) -> Stmt:
    m = re.match(r"([^\[\s]+)\[(.*?)\] = (.*)$", s)
    if m is None or m.group(1) not in p.buffers:
        raise ParseError(f"expected a statement, got {s!r}", n, 1, "<kernel>")
    out, lhs, rhs = m.groups()
    if (w := re.search(r"  for \((.*)\)$", rhs)) is not None:  # write-at
        vars_ = []
        for item in _split_top(w.group(1)):
            v, d = item.split(" < ", 1)
            vars_.append((Var(v.strip()), parse_dim(d)))
        inner = bound | {v.name for v, _ in vars_}
        index = tuple(parse_expr(i, p, inner, line=n) for i in _split_top(lhs))
        return WriteAt(out, tuple(vars_), index, parse_expr(rhs[:w.start()], p, inner, line=n))
    origin: tuple[str, ...] = ()
    if "  // fused: " in rhs:
        rhs, fused = rhs.split("  // fused: ", 1)
        origin = tuple(x.strip() for x in fused.split(","))
    names = [v.strip() for v in lhs.split(",") if v.strip()]
    inner = bound | set(names)
    shared: dict[str, Expr] = {}
    while (d := _WHERE.match(lines.peek())) is not None:
        k, _ = lines.next()
        shared[d.group(1)] = parse_expr(d.group(2), p, inner, shared, line=k)
    body = parse_expr(rhs, p, inner, shared, line=n)
    shape = p.buffers[out].shape
    if len(shape) != len(names):
        raise ParseError(f"{len(names)} vars for rank-{len(shape)} buffer {out}", n, 1, "<kernel>")
    return Compute(out, tuple((Var(v), d) for v, d in zip(names, shape, strict=True)), body, origin=origin)


def parse_program(text: str) -> KernelProgram:
    """One `kernel NAME(...) { ... }` as `str(program)` prints it."""
    lines = _Lines(text)
    p = _program(lines)
    if lines.next()[1] != "}" or lines.peek():
        raise ParseError("expected the program's closing `}` and nothing after it", lines.lines[-1][0], 1,
                         "<kernel>")
    return p


def parse_kernel_text(text: str) -> list[KernelProgram]:
    """Every program of a kernel module's text (a `.kir` dump); `//` comment lines skipped."""
    out: list[KernelProgram] = []
    lines = _Lines(text)
    while lines.i < len(lines.lines):
        s = lines.peek()
        if not s or s.startswith("//"):
            lines.i += 1
            continue
        out.append(_program(lines))
        n, close = lines.next()
        if close != "}":
            raise ParseError(f"expected `}}`, got {close!r}", n, 1, "<kernel>")
    return out
