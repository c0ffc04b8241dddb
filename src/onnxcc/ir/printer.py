"""The canonical text form. print -> parse -> print is a fixed point (tests check it).

```
module @mlp attributes {opset = 17} {
  sym batch in [1, 2147483647]  // input "x" dim 0
  constraint seq % 4 == 0  // node "Reshape_3": split into heads
  func @main(%x: f32[batch, 64]) -> (f32[batch, 10]) {
    %w = cc.const {value = @w} : f32[64, 10]
    %0 = onnx.MatMul(%x, %w) : f32[batch, 10]
    return %0
  }
}
```
Values are named `%<onnx name>` where that is a legal, unique identifier, else `%<n>`.
"""

from __future__ import annotations

import re

import numpy as np
import sympy
from sympy.printing.str import StrPrinter

from .core import Block, Function, Module, Op, Value, WeightRef
from .dims import Divisible
from .types import DType, TensorType

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")
INLINE_MAX = 64  # constants up to this many elements print inline
_PRINT_MEMO_MAX = 1 << 15  # subexpression texts DimPrinter keeps (cleared when full)


class DimPrinter(StrPrinter):
    """sympy's str printer, with `%` for Mod so dims read like C.

    NOTE: this is the one printer of dims and guards: the IR text, the kernel IR, NAME.h,
    NAME.json (`onnxcc inspect`) and every message about a dim or a guard go through
    `print_dim` / `print_bool` / `print_expr`, so a guard reads the same everywhere and the
    IR's parser reads back what they print (`parse_dim`).
    """

    def __init__(self, settings=None):
        super().__init__(settings)
        self._memo: dict = {}

    def _print(self, expr, **kwargs) -> str:
        # The text of every compound subexpression, memoised across prints: a conv net's
        # symbolic sizes repeat the same nested floors hundreds of times within one workspace
        # size (thousands of terms) and across the sizes printed for the pass statistics, the
        # version info, NAME.json and the dispatcher's messages, and sympy's printer orders
        # the terms of every sum again at each visit (0.2 s per print of MobileNetV3's size).
        # A compound's text does not depend on where it sits (only a bare Float's does: its
        # zeros are stripped below the top level, and atoms are not memoised).
        if kwargs or not getattr(expr, "args", None):
            return super()._print(expr, **kwargs)
        try:
            hit = self._memo.get(expr)
        except TypeError:  # unhashable
            return super()._print(expr)
        if hit is None:
            hit = super()._print(expr)
            if len(self._memo) >= _PRINT_MEMO_MAX:
                self._memo.clear()
            self._memo[expr] = hit
        return hit

    def _print_Mod(self, e):
        a, b = e.args
        return f"{self.parenthesize(a, 50)} % {self.parenthesize(b, 50)}"


_dim_printer = DimPrinter({"order": None})


def print_dim(d) -> str:
    if d is None:
        return "?"
    if isinstance(d, int):
        return str(d)
    return _dim_printer.doprint(d)


_REL = {sympy.Eq: "==", sympy.Ne: "!=", sympy.Le: "<=", sympy.Lt: "<", sympy.Ge: ">=", sympy.Gt: ">"}


def print_bool(e) -> str:
    """Render a guard / constraint: relations joined with `&`, `|`, `!`."""
    e = sympy.sympify(e)
    if e is sympy.true:
        return "true"
    if e is sympy.false:
        return "false"
    for cls, sign in _REL.items():
        if isinstance(e, cls):
            return f"{print_dim(e.lhs)} {sign} {print_dim(e.rhs)}"
    if isinstance(e, sympy.And):
        return " & ".join(_paren_bool(a) for a in _sorted_args(e))
    if isinstance(e, sympy.Or):
        return " | ".join(_paren_bool(a) for a in _sorted_args(e))
    if isinstance(e, sympy.Not):
        return "!" + _paren_bool(e.args[0], force=True)
    raise TypeError(f"cannot print boolean {e!r}")


def print_expr(e) -> str:
    """A dim (`print_dim`) or a guard / constraint (`print_bool`), whichever `e` is."""
    if isinstance(e, bool):
        return "true" if e else "false"
    if isinstance(e, sympy.Basic) and not isinstance(e, sympy.Expr):  # a relation, And, true...
        return print_bool(e)
    return print_dim(e)


def _sorted_args(e):
    return sorted(e.args, key=lambda a: print_bool(a))


def _paren_bool(e, force=False) -> str:
    s = print_bool(e)
    return f"({s})" if force or isinstance(e, (sympy.And, sympy.Or)) else s


def print_type(t: TensorType) -> str:
    return f"{t.dtype.value}[{', '.join(print_dim(d) for d in t.shape)}]"


def print_attr(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return _float(v)
    if isinstance(v, str):
        return _quote(v)
    if isinstance(v, DType):
        return v.value
    if isinstance(v, WeightRef):
        return _symref(v.name)
    if isinstance(v, TensorType):
        return f"!{print_type(v)}"
    if isinstance(v, Divisible):
        return f"#divisible<{print_bool(v.predicate)}>"
    if isinstance(v, np.ndarray):
        return _print_dense(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(print_attr(x) for x in v) + "]"
    if isinstance(v, sympy.Basic):
        # NOTE: test Expr first: sympy.Symbol is also a Boolean, but here it is a dim
        if isinstance(v, sympy.Expr):
            return f"#dim<{print_dim(v)}>"
        return f"#bool<{print_bool(v)}>"
    raise TypeError(f"cannot print attribute of type {type(v).__name__}")


def _print_dense(a: np.ndarray) -> str:
    dt = DType.from_np(a.dtype)
    flat = a.reshape(-1)
    if dt is DType.bool:
        vals = ["true" if x else "false" for x in flat]
    elif dt is DType.string:
        vals = [_quote(str(x)) for x in flat]
    elif dt.is_float:
        vals = [_float(float(x)) for x in flat]
    else:
        vals = [str(int(x)) for x in flat]
    shape = ", ".join(str(s) for s in a.shape)
    return f"dense<{dt.value}[{shape}]: [{', '.join(vals)}]>"


def _float(x: float) -> str:
    if np.isnan(x):
        return "nan"
    if np.isinf(x):
        return "inf" if x > 0 else "-inf"
    s = repr(float(x))
    return s


def _symref(name: str) -> str:
    """`@name`, quoted when the name is not a plain identifier (ONNX names can be anything)."""
    return f"@{name}" if _IDENT.match(name) else f"@{_quote(name)}"


def _key(k: str) -> str:
    return k if _IDENT.match(k) else _quote(k)


def _attr_dict(attrs: dict) -> str:
    return "{" + ", ".join(f"{_key(k)} = {print_attr(v)}" for k, v in sorted(attrs.items())) + "}"


def _quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


class _Namer:
    """Per-function value names: the ONNX name where legal and unique, else a counter."""

    def __init__(self):
        self.names: dict[int, str] = {}
        self.used: set[str] = set()
        self.counter = 0

    def name(self, v: Value) -> str:
        key = id(v)
        if key not in self.names:
            n = v.name
            if not (n and _IDENT.match(n) and n not in self.used and not n.isdigit()):
                while str(self.counter) in self.used:
                    self.counter += 1
                n = str(self.counter)
                self.counter += 1
            self.used.add(n)
            self.names[key] = n
        return "%" + self.names[key]

    def ref(self, v: Value) -> str:
        if id(v) not in self.names:
            return "%<undefined>"
        return "%" + self.names[id(v)]


class Printer:
    def __init__(self):
        self.lines: list[str] = []

    def emit(self, indent: int, text: str) -> None:
        self.lines.append("  " * indent + text)

    def module(self, m: Module) -> str:
        attrs = ""
        if m.attrs:
            attrs = " attributes " + _attr_dict(m.attrs)
        self.emit(0, f"module {_symref(m.name)}{attrs} {{")
        for s in m.symbols:
            extra = f" multiple_of {s.multiple_of}" if s.multiple_of != 1 else ""
            origin = f"  // {s.origin}" if s.origin else ""
            self.emit(1, f"sym {s.name} in [{s.lo}, {s.hi}]{extra}{origin}")
        for c in m.constraints:
            origin = f"  // {c.origin}" if c.origin else ""
            self.emit(1, f"constraint {print_bool(c.expr)}{origin}")
        for f in m.functions.values():
            self.function(f, 1)
        for name, versions in m.dispatch.items():
            self.emit(1, f"dispatch {_symref(name)} = [{', '.join(_symref(v) for v in versions)}]")
        self.emit(0, "}")
        return "\n".join(self.lines) + "\n"

    def function(self, f: Function, indent: int) -> None:
        namer = _Namer()
        params = ", ".join(f"{namer.name(a)}: {print_type(a.type)}" for a in f.params)
        results = ", ".join(print_type(t) for t in f.result_types)
        head = f"func {_symref(f.name)}({params}) -> ({results})"
        if f.guard is not sympy.true:
            head += f" guard {print_bool(f.guard)}"
        if f.subs:
            subs = ", ".join(f"{k} = {print_dim(v)}" for k, v in sorted(f.subs.items(), key=lambda kv: str(kv[0])))
            head += f" subs {{{subs}}}"
        if f.attrs:
            head += " attributes " + _attr_dict(f.attrs)
        self.emit(indent, head + " {")
        self.block_ops(f.body, indent + 1, namer)
        self.emit(indent, "}")

    def block_ops(self, b: Block, indent: int, namer: _Namer) -> None:
        for op in b.ops:
            self.op(op, indent, namer)

    def op(self, op: Op, indent: int, namer: _Namer) -> None:
        if op.name in ("return", "yield"):
            args = ", ".join(namer.ref(v) for v in op.operands)
            self.emit(indent, f"{op.name} {args}".rstrip())
            return
        operands = ", ".join(namer.ref(v) for v in op.operands)
        text = f"{op.name}({operands})"
        if op.attrs:
            text += " " + _attr_dict(op.attrs)
        if op.loc:
            text += f" loc({_quote(op.loc)})"
        if op.regions:
            self.emit(indent, self._results(op, namer) + text + " (")
            for i, r in enumerate(op.regions):
                b = r.block
                args = ", ".join(f"{namer.name(a)}: {print_type(a.type)}" for a in b.args)
                self.emit(indent + 1, f"^({args}) {{")
                self.block_ops(b, indent + 2, namer)
                self.emit(indent + 1, "}" + ("," if i + 1 < len(op.regions) else ""))
            types = ", ".join(print_type(r.type) for r in op.results)
            self.emit(indent, f") : ({types})")
            return
        types = ", ".join(print_type(r.type) for r in op.results)
        self.emit(indent, self._results(op, namer) + text + f" : ({types})")

    @staticmethod
    def _results(op: Op, namer: _Namer) -> str:
        if not op.results:
            return ""
        return ", ".join(namer.name(r) for r in op.results) + " = "


def print_module(m: Module) -> str:
    return Printer().module(m)


def print_function(f: Function) -> str:
    p = Printer()
    p.function(f, 0)
    return "\n".join(p.lines) + "\n"
