"""Parse the canonical text form back into a Module (a lexer plus recursive descent).

Dim and guard expressions are parsed by a small precedence-climbing parser into sympy;
nothing is ever `eval`ed. Errors carry line and column.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import ml_dtypes
import numpy as np
import sympy

from ..errors import ParseError
from .core import Block, Function, Module, Op, Region, Value, WeightRef
from .dims import Divisible, SymbolInfo, canon, sym
from .types import DType, TensorType

_TOKEN = re.compile(r"""
  (?P<ws>[ \t\r\n]+)
| (?P<comment>//[^\n]*)
| (?P<value>%[A-Za-z0-9_.$]+)
| (?P<symref>@(?:[A-Za-z_][A-Za-z0-9_.]*|"(?:[^"\\]|\\.)*"))
| (?P<string>"(?:[^"\\]|\\.)*")
| (?P<number>(?:\d+\.\d*(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+|\d+))
| (?P<ident>[A-Za-z_][A-Za-z0-9_.]*)
| (?P<punct>->|==|!=|<=|>=|\*\*|[{}()\[\],:=<>!#&|+\-*/%^?])
""", re.VERBOSE)


@dataclass
class Tok:
    kind: str
    text: str
    line: int
    col: int


def tokenize(text: str, filename: str) -> list[Tok]:
    toks: list[Tok] = []
    pos, line, line_start = 0, 1, 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise ParseError(f"unexpected character {text[pos]!r}", line, pos - line_start + 1, filename)
        kind = m.lastgroup or ""
        s = m.group()
        if kind != "ws":
            toks.append(Tok(kind, s, line, pos - line_start + 1))
        nl = s.count("\n")
        if nl:
            line += nl
            line_start = pos + s.rfind("\n") + 1
        pos = m.end()
    toks.append(Tok("eof", "", line, pos - line_start + 1))
    return toks


_FUNCS = {"floor": sympy.floor, "ceiling": sympy.ceiling, "Max": sympy.Max, "Min": sympy.Min,
          "Mod": sympy.Mod, "Abs": sympy.Abs}
_RELS = {"==": sympy.Eq, "!=": sympy.Ne, "<=": sympy.Le, "<": sympy.Lt, ">=": sympy.Ge, ">": sympy.Gt}


class Parser:
    def __init__(self, text: str, filename: str = "<text>"):
        self.filename = filename
        self.toks = tokenize(text, filename)
        self.pos = 0
        self.scopes: list[dict[str, Value]] = []

    # ---- token helpers -------------------------------------------------------------------
    def peek(self, k: int = 0) -> Tok:
        i, seen = self.pos, -1
        while True:
            t = self.toks[i]
            if t.kind != "comment":
                seen += 1
                if seen == k:
                    return t
            if t.kind == "eof":
                return t
            i += 1

    def next(self) -> Tok:
        while self.toks[self.pos].kind == "comment":
            self.pos += 1
        t = self.toks[self.pos]
        if t.kind != "eof":
            self.pos += 1
        return t

    def trailing_comment(self, line: int) -> str:
        """A `// ...` comment on the given line right after the current position."""
        t = self.toks[self.pos]
        if t.kind == "comment" and t.line == line:
            self.pos += 1
            return t.text[2:].strip()
        return ""

    def error(self, msg: str, tok: Tok | None = None) -> ParseError:
        tok = tok or self.peek()
        got = tok.text if tok.kind != "eof" else "end of input"
        return ParseError(f"{msg}, got {got!r}", tok.line, tok.col, self.filename)

    def at(self, text: str) -> bool:
        t = self.peek()
        return t.text == text and t.kind in ("punct", "ident")

    def accept(self, text: str) -> bool:
        if self.at(text):
            self.next()
            return True
        return False

    def expect(self, text: str) -> Tok:
        if not self.at(text):
            raise self.error(f"expected {text!r}")
        return self.next()

    def expect_kind(self, kind: str, what: str) -> Tok:
        if self.peek().kind != kind:
            raise self.error(f"expected {what}")
        return self.next()

    # ---- module --------------------------------------------------------------------------
    def parse_module(self) -> Module:
        self.expect("module")
        m = Module(name=self._symname(self.expect_kind("symref", "module name like @name")))
        if self.accept("attributes"):
            m.attrs = self.parse_attr_dict()
        self.expect("{")
        while not self.accept("}"):
            t = self.peek()
            if t.text == "sym":
                self.parse_sym(m)
            elif t.text == "constraint":
                self.next()
                expr = self.parse_bool()
                m.constraints.append(_constraint(expr, self.trailing_comment(t.line)))
            elif t.text == "func":
                m.add_function(self.parse_function(m))
            elif t.text == "dispatch":
                self.next()
                name = self._symname(self.expect_kind("symref", "dispatch name"))
                self.expect("=")
                self.expect("[")
                vs = []
                while not self.accept("]"):
                    vs.append(self._symname(self.expect_kind("symref", "function name")))
                    self.accept(",")
                m.dispatch[name] = vs
            else:
                raise self.error("expected 'sym', 'constraint', 'func', 'dispatch' or '}'")
        if self.peek().kind != "eof":
            raise self.error("expected end of input after module")
        return m

    def parse_sym(self, m: Module) -> None:
        t = self.expect("sym")
        name = self.expect_kind("ident", "symbol name").text
        self.expect("in")
        self.expect("[")
        lo = self.parse_int()
        self.expect(",")
        hi = self.parse_int()
        self.expect("]")
        mult = 1
        if self.accept("multiple_of"):
            mult = self.parse_int()
        origin = self.trailing_comment(t.line)
        if name in m.symbols:
            raise ParseError(f"symbol {name!r} declared twice", t.line, t.col, self.filename)
        m.symbols.infos[name] = SymbolInfo(name, lo, hi, mult, origin)

    def parse_int(self) -> int:
        neg = self.accept("-")
        t = self.expect_kind("number", "integer")
        if not t.text.isdigit():
            raise self.error("expected integer", t)
        return -int(t.text) if neg else int(t.text)

    def _symname(self, t: Tok) -> str:
        s = t.text[1:]
        return _unquote(s) if s.startswith('"') else s

    # ---- functions and ops ---------------------------------------------------------------
    def parse_function(self, m: Module) -> Function:
        self.expect("func")
        name = self._symname(self.expect_kind("symref", "function name"))
        self.scopes.append({})
        self.expect("(")
        body = Block()
        while not self.accept(")"):
            vt = self.expect_kind("value", "parameter like %x")
            self.expect(":")
            a = body.add_arg(self.parse_type(), _vname(vt.text))
            self.define(vt, a)
            self.accept(",")
        self.expect("->")
        results = self.parse_type_list()
        guard: sympy.logic.boolalg.Boolean = sympy.true
        subs, attrs = {}, {}
        if self.accept("guard"):
            guard = self.parse_bool()
        if self.accept("subs"):
            self.expect("{")
            while not self.accept("}"):
                k = self.expect_kind("ident", "symbol").text
                self.expect("=")
                subs[sym(k)] = self.parse_dim()
                self.accept(",")
        if self.accept("attributes"):
            attrs = self.parse_attr_dict()
        self.expect("{")
        self.parse_ops(body)
        self.scopes.pop()
        return Function(name, body, results, guard, subs, attrs)

    def parse_ops(self, block: Block) -> None:
        while not self.accept("}"):
            block.append(self.parse_op())

    def parse_op(self) -> Op:
        t = self.peek()
        if t.text in ("return", "yield") and t.kind == "ident":
            self.next()
            vals = []
            if self.peek().kind == "value":
                vals.append(self.use(self.next()))
                while self.accept(","):
                    vals.append(self.use(self.expect_kind("value", "value")))
            return Op(t.text, vals)
        results: list[Tok] = []
        if t.kind == "value":
            results.append(self.next())
            while self.accept(","):
                results.append(self.expect_kind("value", "result name"))
            self.expect("=")
        name_tok = self.expect_kind("ident", "op name")
        self.expect("(")
        operands = []
        while not self.accept(")"):
            operands.append(self.use(self.expect_kind("value", "operand")))
            self.accept(",")
        attrs = self.parse_attr_dict() if self.at("{") else {}
        loc = ""
        if self.accept("loc"):
            self.expect("(")
            loc = _unquote(self.expect_kind("string", "location string").text)
            self.expect(")")
        regions = []
        if self.accept("("):
            while True:
                regions.append(self.parse_region())
                if not self.accept(","):
                    break
            self.expect(")")
        self.expect(":")
        types = self.parse_type_list()
        if len(types) != len(results):
            raise ParseError(f"{name_tok.text} has {len(results)} results but {len(types)} types",
                             name_tok.line, name_tok.col, self.filename)
        op = Op(name_tok.text, operands, types, attrs, regions, loc, [_vname(r.text) for r in results])
        for r, v in zip(results, op.results):
            self.define(r, v)
        return op

    def parse_region(self) -> Region:
        self.expect("^")
        self.expect("(")
        block = Block()
        self.scopes.append({})
        while not self.accept(")"):
            vt = self.expect_kind("value", "block argument")
            self.expect(":")
            self.define(vt, block.add_arg(self.parse_type(), _vname(vt.text)))
            self.accept(",")
        self.expect("{")
        self.parse_ops(block)
        self.scopes.pop()
        return Region([block])

    def define(self, t: Tok, v: Value) -> None:
        scope = self.scopes[-1]
        if t.text in scope:
            raise ParseError(f"value {t.text} defined twice", t.line, t.col, self.filename)
        scope[t.text] = v

    def use(self, t: Tok) -> Value:
        for scope in reversed(self.scopes):
            if t.text in scope:
                return scope[t.text]
        raise ParseError(f"use of undefined value {t.text}", t.line, t.col, self.filename)

    # ---- types ---------------------------------------------------------------------------
    def parse_type_list(self) -> list[TensorType]:
        self.expect("(")
        out = []
        while not self.accept(")"):
            out.append(self.parse_type())
            self.accept(",")
        return out

    def parse_type(self) -> TensorType:
        t = self.expect_kind("ident", "tensor type like f32[N, 4]")
        try:
            dt = DType(t.text)
        except ValueError:
            raise ParseError(f"unknown element type {t.text!r}", t.line, t.col, self.filename) from None
        self.expect("[")
        dims = []
        while not self.accept("]"):
            dims.append(None if self.accept("?") else self.parse_dim())
            if not self.at("]"):
                self.expect(",")
        return TensorType(dt, tuple(dims))

    # ---- dim expressions (precedence climbing) -------------------------------------------
    def parse_dim(self):
        e = self._term()
        while self.peek().text in ("+", "-") and self.peek().kind == "punct":
            op = self.next().text
            rhs = self._term()
            e = e + rhs if op == "+" else e - rhs
        return e

    def _term(self):
        e = self._unary()
        while self.peek().text in ("*", "/", "%") and self.peek().kind == "punct":
            op = self.next().text
            rhs = self._unary()
            if op == "*":
                e = e * rhs
            elif op == "/":
                e = sympy.Rational(e, rhs) if isinstance(e, int) and isinstance(rhs, int) else sympy.sympify(e) / rhs
            else:
                e = sympy.Mod(e, rhs)
        return e

    def _unary(self):
        if self.accept("-"):
            return -self._unary()
        base = self._atom()
        if self.accept("**"):
            return sympy.sympify(base) ** self._unary()
        return base

    def _atom(self):
        t = self.peek()
        if t.kind == "number":
            if not t.text.isdigit():
                raise self.error("expected integer in dim expression")
            self.next()
            return sympy.Integer(int(t.text))
        if t.kind == "ident":
            self.next()
            if self.at("(") and t.text in _FUNCS:
                self.next()
                args = [self.parse_dim()]
                while self.accept(","):
                    args.append(self.parse_dim())
                self.expect(")")
                return _FUNCS[t.text](*args)
            if t.text in _FUNCS:
                raise self.error(f"expected '(' after {t.text}")
            return sym(t.text)
        if self.accept("("):
            e = self.parse_dim()
            self.expect(")")
            return e
        raise self.error("expected a dim expression")

    # ---- boolean expressions (guards, constraints) ---------------------------------------
    def parse_bool(self):
        e = self._and()
        while self.accept("|"):
            e = sympy.Or(e, self._and())
        return e

    def _and(self):
        e = self._not()
        while self.accept("&"):
            e = sympy.And(e, self._not())
        return e

    def _not(self):
        if self.accept("!"):
            return sympy.Not(self._not())
        if self.accept("true"):
            return sympy.true
        if self.accept("false"):
            return sympy.false
        if self.at("("):
            save = self.pos
            try:
                return self._relation()
            except ParseError:
                self.pos = save
            self.expect("(")
            e = self.parse_bool()
            self.expect(")")
            return e
        return self._relation()

    def _relation(self):
        lhs = self.parse_dim()
        t = self.peek()
        if t.text not in _RELS:
            raise self.error("expected a comparison (==, !=, <=, <, >=, >)")
        self.next()
        rhs = self.parse_dim()
        return _RELS[t.text](lhs, rhs, evaluate=False)

    # ---- attributes ----------------------------------------------------------------------
    def parse_attr_dict(self) -> dict:
        self.expect("{")
        out = {}
        while not self.accept("}"):
            k = self.next()
            if k.kind not in ("ident", "string"):
                raise self.error("expected attribute name", k)
            self.expect("=")
            out[_unquote(k.text) if k.kind == "string" else k.text] = self.parse_attr()
            self.accept(",")
        return out

    def parse_attr(self):
        t = self.peek()
        if t.kind == "string":
            return _unquote(self.next().text)
        if t.kind == "symref":
            return WeightRef(self._symname(self.next()))
        if t.kind == "number" or t.text == "-":
            return self._number()
        if self.accept("["):
            items = []
            while not self.accept("]"):
                items.append(self.parse_attr())
                self.accept(",")
            return items
        if self.accept("!"):
            return self.parse_type()
        if self.accept("#"):
            kt = self.peek()
            kind = self.expect_kind("ident", "#dim<...>, #bool<...> or #divisible<...>").text
            if kind not in ("dim", "bool", "divisible"):
                raise self.error("expected #dim<...>, #bool<...> or #divisible<...>", kt)
            self.expect("<")
            vt = self.peek()
            v = self.parse_dim() if kind == "dim" else self.parse_bool()
            self.expect(">")
            if kind == "divisible":
                fact = Divisible.from_predicate(v)
                if fact is None:
                    raise self.error("expected #divisible<SYM % K == 0>", vt)
                return fact
            return v
        if t.kind == "ident":
            self.next()
            if t.text in ("true", "false"):
                return t.text == "true"
            if t.text in ("nan", "inf"):
                return float(t.text)
            if t.text == "dense":
                return self._dense(t)
            try:
                return DType(t.text)
            except ValueError:
                raise ParseError(f"unknown attribute value {t.text!r}", t.line, t.col, self.filename) from None
        raise self.error("expected an attribute value")

    def _number(self):
        neg = self.accept("-")
        t = self.peek()
        if t.kind == "ident" and t.text in ("inf", "nan"):
            self.next()
            v = float(t.text)
        else:
            t = self.expect_kind("number", "number")
            v = int(t.text) if t.text.isdigit() else float(t.text)
        return -v if neg else v

    def _dense(self, start: Tok) -> np.ndarray:
        self.expect("<")
        ty = self.parse_type()
        if not ty.is_static:
            raise ParseError(f"dense constants need a static shape, got {ty}", start.line, start.col,
                             self.filename)
        self.expect(":")
        self.expect("[")
        vals = []
        while not self.accept("]"):
            t = self.peek()
            if t.kind == "string" and ty.dtype is DType.string:
                self.next()
                vals.append(_unquote(t.text))
                self.accept(",")
                continue
            if self.accept("true"):
                v = True
            elif self.accept("false"):
                v = False
            else:
                v = self._number()
            if not _fits(v, ty.dtype):
                raise ParseError(f"value {v} does not fit element type {ty.dtype.value}", t.line, t.col,
                                 self.filename)
            vals.append(v)
            self.accept(",")
        self.expect(">")
        arr = np.array(vals, dtype=ty.dtype.np)
        shape = [int(d) for d in ty.shape]  # a dense constant's type is static (checked above)
        n = math.prod(shape)
        if arr.size != n:
            raise ParseError(f"dense constant of type {ty} needs {n} values, got {arr.size}", start.line,
                             start.col, self.filename)
        return arr.reshape(shape)


def _fits(v, dt: DType) -> bool:
    """Whether a literal is a legal element of a dense constant of dtype `dt`."""
    if dt is DType.string:  # its elements are quoted strings (taken above)
        return False
    if dt is DType.bool:
        return isinstance(v, bool)
    if dt.is_float:
        return not isinstance(v, bool)
    if isinstance(v, bool) or not isinstance(v, int):
        return False
    info = ml_dtypes.iinfo(dt.np) if dt.is_small else np.iinfo(dt.np)
    return info.min <= v <= info.max


def _constraint(expr, origin):
    from .core import Constraint

    return Constraint(expr, origin)


def _vname(text: str) -> str:
    n = text[1:]
    return "" if n.isdigit() else n


def _unquote(s: str) -> str:
    body = s[1:-1]
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), body)


def parse_module(text: str, filename: str = "<text>") -> Module:
    return Parser(text, filename).parse_module()


def parse_dim(text: str, filename: str = "<dim>"):
    """Parse one dim expression as the IR writes it (`seq + 1`, `2*batch`, `floor(seq/2)`), without
    eval; a ParseError (line:col) for anything else, trailing text included."""
    p = Parser(text, filename)
    d = canon(p.parse_dim())
    if p.peek().kind != "eof":
        raise p.error("unexpected text after the dim expression")
    return d
