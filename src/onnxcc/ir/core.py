"""The SSA graph IR: values with use lists, generic ops, blocks, regions, functions, module.

One generic `Op` class serves every operation; what an op means lives in its `OpDef`
(onnxcc.ops), looked up by `op.name`. Regions are isolated from above: a subgraph's
captures are passed to its op as operands and bound to the region block's arguments, so
every pass and backend can treat a region like a small function.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import sympy

from .dims import SymbolTable
from .types import TensorType


@dataclass(frozen=True)
class WeightRef:
    """A reference to a tensor held in `Module.weights` (data never appears in the text)."""

    name: str


@dataclass(frozen=True)
class Use:
    op: Op
    index: int


class Value:
    """An SSA value: a block argument or an op result."""

    def __init__(self, type: TensorType, name: str = ""):
        self.type = type
        #: the ONNX name (or a hint); the printer keeps it where legal
        self.name = name
        #: the ops that read this value, one Use per operand slot
        self.uses: list[Use] = []

    @property
    def users(self) -> list[Op]:
        seen: dict[int, Op] = {}
        for u in self.uses:
            seen.setdefault(id(u.op), u.op)
        return list(seen.values())

    def replace_all_uses_with(self, new: Value) -> None:
        for u in list(self.uses):
            u.op.set_operand(u.index, new)

    @property
    def owner(self):  # pragma: no cover - overridden
        raise NotImplementedError


class BlockArg(Value):
    def __init__(self, type: TensorType, block: Block, index: int, name: str = ""):
        super().__init__(type, name)
        self.block = block
        self.index = index

    @property
    def owner(self) -> Block:
        return self.block

    def __repr__(self) -> str:
        return f"<BlockArg {self.name or self.index}: {self.type}>"


class OpResult(Value):
    def __init__(self, type: TensorType, op: Op, index: int, name: str = ""):
        super().__init__(type, name)
        self.op = op
        self.index = index

    @property
    def owner(self) -> Op:
        return self.op

    def __repr__(self) -> str:
        return f"<OpResult {self.op.name}#{self.index}: {self.type}>"


class Op:
    """A generic operation. `name` is dialect-qualified: 'onnx.MatMul', 'cc.const', 'yield'."""

    def __init__(self, name: str, operands=(), result_types=(), attrs: dict[str, Any] | None = None,
                 regions: list[Region] | None = None, loc: str = "", result_names=()):
        self.name = name
        self.attrs: dict[str, Any] = dict(attrs or {})
        #: the ONNX node name, used in every diagnostic
        self.loc = loc
        self.parent: Block | None = None
        self._operands: list[Value] = []
        for v in operands:
            self._add_operand(v)
        names = list(result_names) + [""] * (len(result_types) - len(result_names))
        self.results: list[OpResult] = [OpResult(t, self, i, n) for i, (t, n) in
                                        enumerate(zip(result_types, names))]
        self.regions: list[Region] = []
        for r in regions or []:
            self.add_region(r)

    # ---- operands ------------------------------------------------------------------------
    @property
    def operands(self) -> tuple[Value, ...]:
        return tuple(self._operands)

    def _add_operand(self, v: Value) -> None:
        if not isinstance(v, Value):
            raise TypeError(f"operand of {self.name} must be a Value, got {type(v).__name__}")
        v.uses.append(Use(self, len(self._operands)))
        self._operands.append(v)

    def set_operand(self, i: int, v: Value) -> None:
        old = self._operands[i]
        old.uses = [u for u in old.uses if not (u.op is self and u.index == i)]
        self._operands[i] = v
        v.uses.append(Use(self, i))

    def set_operands(self, values) -> None:
        self.drop_operands()
        for v in values:
            self._add_operand(v)

    def drop_operands(self) -> None:
        for i, v in enumerate(self._operands):
            v.uses = [u for u in v.uses if not (u.op is self and u.index == i)]
        self._operands = []

    # ---- results, regions ----------------------------------------------------------------
    @property
    def result(self) -> OpResult:
        if len(self.results) != 1:
            raise ValueError(f"{self.name} has {len(self.results)} results, not 1")
        return self.results[0]

    def add_region(self, r: Region) -> None:
        r.parent = self
        self.regions.append(r)

    @property
    def dialect(self) -> str:
        return self.name.split(".", 1)[0] if "." in self.name else ""

    @property
    def opname(self) -> str:
        return self.name.split(".", 1)[1] if "." in self.name else self.name

    def erase(self) -> None:
        """Remove from the parent block; the results must be unused."""
        for r in self.results:
            if r.uses:
                raise ValueError(f"cannot erase {self.name} ({self.loc}): result {r.index} still used")
        self.drop_operands()
        for reg in self.regions:
            for b in reg.blocks:
                for o in list(b.ops):
                    o.drop_operands()
        if self.parent is not None:
            self.parent.ops.remove(self)
            self.parent = None

    def walk(self) -> Iterator[Op]:
        """This op, then every op nested in its regions, in order."""
        yield self
        for r in self.regions:
            for b in r.blocks:
                for o in b.ops:
                    yield from o.walk()

    def __repr__(self) -> str:
        return f"<Op {self.name} {self.loc!r}>"


class Block:
    def __init__(self, arg_types=(), arg_names=()):
        names = list(arg_names) + [""] * (len(arg_types) - len(arg_names))
        self.args: list[BlockArg] = [BlockArg(t, self, i, n) for i, (t, n) in
                                     enumerate(zip(arg_types, names))]
        self.ops: list[Op] = []
        self.parent: Region | None = None

    def add_arg(self, t: TensorType, name: str = "") -> BlockArg:
        a = BlockArg(t, self, len(self.args), name)
        self.args.append(a)
        return a

    def append(self, op: Op) -> Op:
        op.parent = self
        self.ops.append(op)
        return op

    def insert_before(self, anchor: Op, op: Op) -> Op:
        op.parent = self
        self.ops.insert(self.ops.index(anchor), op)
        return op

    @property
    def terminator(self) -> Op | None:
        return self.ops[-1] if self.ops and self.ops[-1].name in ("return", "yield") else None

    def walk(self) -> Iterator[Op]:
        for o in list(self.ops):
            yield from o.walk()


class Region:
    """One or more blocks owned by an op (onnxcc uses single-block regions)."""

    def __init__(self, blocks: list[Block] | None = None):
        self.blocks: list[Block] = []
        self.parent: Op | None = None
        for b in blocks or []:
            self.add_block(b)

    def add_block(self, b: Block) -> Block:
        b.parent = self
        self.blocks.append(b)
        return b

    @property
    def block(self) -> Block:
        return self.blocks[0]


@dataclass
class Constraint:
    """A fact the graph needs (e.g. `Eq(a, b)` from a broadcast); checked at run time."""

    expr: sympy.Basic
    #: why: the node that needs it and what for, e.g. 'node "Add_3": broadcast of x dim 1'
    origin: str = ""


class Function:
    """A function: a body block whose arguments are the parameters, plus a guard.

    A function in a dispatch table is a version: `guard` says when it may run (True for
    the generic version) and `subs` maps symbols to the values this version fixed.
    """

    def __init__(self, name: str, body: Block, result_types=(), guard: sympy.logic.boolalg.Boolean = sympy.true,
                 subs: dict | None = None, attrs: dict | None = None):
        self.name = name
        self.body = body
        self.result_types: list[TensorType] = list(result_types)
        self.guard = guard
        self.subs: dict = dict(subs or {})
        self.attrs: dict[str, Any] = dict(attrs or {})
        self.module: Module | None = None

    @property
    def params(self) -> list[BlockArg]:
        return self.body.args

    @property
    def return_op(self) -> Op:
        t = self.body.terminator
        if t is None or t.name != "return":
            raise ValueError(f"function @{self.name} has no return")
        return t

    def walk(self) -> Iterator[Op]:
        return self.body.walk()


@dataclass
class Module:
    name: str = "model"
    symbols: SymbolTable = field(default_factory=SymbolTable)
    constraints: list[Constraint] = field(default_factory=list)
    functions: dict[str, Function] = field(default_factory=dict)
    #: public name -> ordered version names (first guard that holds wins)
    dispatch: dict[str, list[str]] = field(default_factory=dict)
    attrs: dict[str, Any] = field(default_factory=dict)
    #: weights referenced by `cc.const {value = @name}`; never printed
    weights: dict[str, np.ndarray] = field(default_factory=dict)

    def add_function(self, f: Function) -> Function:
        f.module = self
        self.functions[f.name] = f
        return f

    @property
    def main(self) -> Function:
        if "main" in self.functions:
            return self.functions["main"]
        return next(iter(self.functions.values()))

    def add_constraint(self, expr, origin: str = "") -> None:
        expr = sympy.sympify(expr)
        if expr is sympy.true:
            return
        for c in self.constraints:
            if c.expr == expr:
                return
        self.constraints.append(Constraint(expr, origin))

    def walk(self) -> Iterator[Op]:
        for f in self.functions.values():
            yield from f.walk()

    def __str__(self) -> str:
        from .printer import print_module

        return print_module(self)
