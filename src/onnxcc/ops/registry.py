"""Op definitions: what each op name means.

An `OpDef` holds, for one op name (dialect-qualified, e.g. "onnx.Add"):
  - `infer(ctx)`: the symbolic shape rule -> result TensorTypes (may record constraints);
  - `value(ctx)`: optional value propagation for small integer tensors (shape chains) ->
    per result an object ndarray of Dims (ints or sympy exprs), or None when unknown;
  - `reference(ctx, *arrays)`: numpy semantics -> list of result arrays (the oracle);
  - `lower(ctx)`: lowering to kernel compute definitions (see onnxcc.ops.lowering).

Ops are registered with `@register("onnx.Add", ...)` on a subclass of OpDef, or with
`define(...)` for table-driven families. Unregistered ops (e.g. `test.*`) still parse and
print; passes that need a definition raise UnsupportedOp naming the op and node.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import sympy

from ..errors import ShapeError, UnsupportedOp
from ..ir import Dim, Module, Op, TensorType, canon, print_dim
from .traits import ELEMENTWISE, Neutral, PadRule

_REGISTRY: dict[str, OpDef] = {}


class OpDef:
    name: str = ""
    #: number of operands: an int, or (min, max) with max None for variadic
    arity: Any = None
    #: results: an int, or None when it depends on the op (e.g. Split, If)
    num_results: Any = 1
    #: the op's class: elementwise | broadcast | injective | reduction | matmul | opaque. The
    #: defaults of its traits read it (`pad_rule`, `flops`); fusion does not (it classifies
    #: the lowered computes, kernel/fuse.py)
    kind: str = "opaque"
    #: free of side effects, safe to CSE / DCE
    pure: bool = True
    #: operands broadcast against each other numpy-style (a dim of 1 stretches): the 0/1
    #: specialisation rule looks for symbols in such ops
    numpy_broadcast: bool = False
    #: operands whose VALUE is a shape that broadcasts against operand 0's (Expand's target):
    #: the 0/1 rule looks there too, where the value is known (a `cc.dims` / `cc.const`)
    broadcast_shape_operands: tuple[int, ...] = ()
    #: operands whose elements are sizes (any value >= 1 is valid): a 1-D int64 graph input
    #: used only there may be bound to symbols at dispatch (passes/value_symbols.py)
    size_operands: tuple[int, ...] = ()
    #: the native lowering takes the small types (8-bit and 4-bit floats, sub-byte integers);
    #: other ops refuse them unless they only make views
    small_types: bool = False
    #: the native lowering takes string tensors (ops/strings.py: the string ops, and ops that
    #: only move elements); other ops refuse them unless they only make views
    strings: bool = False
    #: how the op treats positions padded for a bucket version (`traits.PadRule`); None:
    #: bucketize refuses it by name (elementwise and broadcast ops default to the
    #: elementwise rule, see `pad_rule`)
    pad: PadRule | None = None
    #: the canonical patterns that apply (`traits.CANONICAL_PATTERNS`)
    canonical: tuple[str, ...] = ()
    #: a binary op's neutral element, for the neutral-operand pattern
    neutral: Neutral | None = None

    def flops(self, op: Op) -> Any:
        """Floating-point work of one run of `op` as a dim expression (multiply-add = 2),
        for the bucket cost model. Default: one per result element for elementwise and
        broadcast ops, one per input element for reductions, else 0. A family file sets its
        own with `traits.set_cost`."""
        if self.kind in ("elementwise", "broadcast"):
            return sympy.sympify(sum((r.type.numel() or 0) for r in op.results))
        if self.kind == "reduction":
            return sympy.sympify(op.operands[0].type.numel() or 0)
        return sympy.Integer(0)

    def pad_rule(self) -> PadRule | None:
        if self.pad is not None:
            return self.pad
        return ELEMENTWISE if self.kind in ("elementwise", "broadcast") else None
    #: for ops with a bool result: `predicate(p)` -> the condition the result stands for, as a
    #: sympy Boolean over dims (p: control_flow.PredCtx), or None when it is not one
    predicate: Callable | None = None
    #: the value rule is exact on float results too (their values are tracked like integers')
    float_values: bool = False

    def infer(self, ctx: InferCtx) -> list[TensorType]:
        raise NotImplementedError(f"{self.name} has no shape rule")

    def value(self, ctx: InferCtx) -> list[np.ndarray | None] | None:
        return None

    def reference(self, ctx: RefCtx, *args: np.ndarray) -> list[np.ndarray]:
        raise NotImplementedError(f"{self.name} has no reference implementation")

    def lower(self, ctx) -> None:
        raise UnsupportedOp(ctx.op.opname, ctx.op.dialect, ctx.op.loc, "no lowering to compute kernels")

    def verify(self, op: Op) -> None:
        """Extra structural checks beyond arity (override where needed); raise VerifyError."""

    def infer_regions(self, ctx: InferCtx, infer_block: Callable) -> bool | None:
        """Infer the op's region bodies (control flow): set the block args' types from the
        operands, then call `infer_block(block)` (which returns whether anything changed) as
        often as needed. Return whether anything changed, or None to let the pass infer each
        region once as is (the default)."""
        return None


def register(*names: str):
    """Class decorator: instantiate the OpDef and register it under each name."""

    def deco(cls):
        for n in names:
            inst = cls()
            inst.name = n
            _REGISTRY[n] = inst
        return cls

    return deco


def define(name: str, *, infer: Callable | None = None, reference: Callable | None = None,
           value: Callable | None = None, lower: Callable | None = None, kind: str = "opaque",
           arity=None, num_results=1, **extra) -> OpDef:
    """Register a table-driven OpDef from plain functions (each takes the ctx first)."""
    d = OpDef()
    d.name, d.kind, d.arity, d.num_results = name, kind, arity, num_results
    if infer:
        d.infer = infer
    if reference:
        d.reference = reference
    if value:
        d.value = value
    if lower:
        d.lower = lower
    for k, v in extra.items():
        setattr(d, k, v)
    _REGISTRY[name] = d
    return d


def get_opdef(name: str) -> OpDef | None:
    return _REGISTRY.get(name)


def require_opdef(op: Op) -> OpDef:
    d = _REGISTRY.get(op.name)
    if d is None:
        raise UnsupportedOp(op.opname, op.dialect, op.loc)
    return d


def registered_ops() -> list[str]:
    return sorted(_REGISTRY)


class InferCtx:
    """What a shape rule sees: the op, its operand types and known values, the module."""

    def __init__(self, op: Op, module: Module, values: dict | None = None):
        self.op = op
        self.module = module
        self.in_types: list[TensorType] = [v.type for v in op.operands]
        self._values = values if values is not None else {}
        self.in_values: list[np.ndarray | None] = [self._values.get(v) for v in op.operands]

    # ---- attributes ----------------------------------------------------------------------
    def attr(self, name: str, default=None):
        return self.op.attrs.get(name, default)

    @property
    def loc(self) -> str:
        return self.op.loc or self.op.name

    # ---- symbolic reasoning --------------------------------------------------------------
    @property
    def symbols(self):
        return self.module.symbols

    def fresh(self, hint: str) -> sympy.Symbol:
        """A new symbol for a dim only the run can tell (data-dependent)."""
        return self.module.symbols.fresh(hint, origin=f'node "{self.loc}": data-dependent')

    def require(self, expr, why: str) -> None:
        """Record that `expr` must hold; raise if it provably does not."""
        expr = sympy.sympify(expr)
        if expr is sympy.true:
            return
        if expr is sympy.false:
            raise ShapeError(f'node "{self.loc}" ({self.op.name}): {why} can never hold')
        self.module.add_constraint(expr, f'node "{self.loc}": {why}')

    def require_eq(self, a: Dim, b: Dim, why: str) -> Dim:
        """Assert two dims are equal: proved, refuted (error) or recorded as a constraint."""
        if a is None:
            return b
        if b is None:
            return a
        p = self.symbols.prove_eq(a, b)
        if p is True:
            return a
        if p is False:
            raise ShapeError(f'node "{self.loc}" ({self.op.name}): {why}: {print_dim(a)} != {print_dim(b)}')
        self.require(sympy.Eq(sympy.sympify(a), sympy.sympify(b)), f"{why} ({print_dim(a)} == {print_dim(b)})")
        # prefer the simpler side (a plain symbol over an expression)
        return a if _complexity(a) <= _complexity(b) else b

    def broadcast(self, *shapes: tuple) -> tuple:
        """Numpy-style multidirectional broadcasting of symbolic shapes."""
        rank = max((len(s) for s in shapes), default=0)
        padded = [(1,) * (rank - len(s)) + tuple(s) for s in shapes]
        out = []
        for i in range(rank):
            dims = [p[i] for p in padded]
            cur: Dim = 1
            for d in dims:
                if d is None:
                    cur = None if cur == 1 else cur
                    continue
                if isinstance(d, int) and d == 1:
                    continue
                if cur is None:
                    cur = d
                elif isinstance(cur, int) and cur == 1:
                    cur = d
                else:
                    cur = self.require_eq(cur, d, f"broadcast dim {i - rank}")
            out.append(cur)
        return tuple(out)

    def known(self, i: int) -> np.ndarray | None:
        """The known value of operand i (object array of Dims), or None."""
        return self.in_values[i] if i < len(self.in_values) else None

    def known_ints(self, i: int) -> list[int] | None:
        """Operand i's value if fully static integers."""
        v = self.known(i)
        if v is None:
            return None
        out = []
        for x in v.reshape(-1):
            x = canon(x)
            if not isinstance(x, int):
                return None
            out.append(x)
        return out

    def value_of(self, value) -> np.ndarray | None:
        """The known value of any value inference has reached (not only an operand)."""
        return self._values.get(value)

    def error(self, msg: str) -> ShapeError:
        return ShapeError(f'node "{self.loc}" ({self.op.name}): {msg}')

    def set_known(self, value, v: np.ndarray | None) -> None:
        """Record (or forget, with None) the known value of a value, e.g. a region block arg."""
        if v is None:
            self._values.pop(value, None)
        else:
            self._values[value] = v


class RefCtx:
    """What a reference implementation sees: the op, symbol values, and the interpreter."""

    def __init__(self, op: Op, env: dict[str, int], interp):
        self.op = op
        self.env = env
        self.interp = interp

    def attr(self, name: str, default=None):
        return self.op.attrs.get(name, default)

    def run_region(self, index: int, args: list[np.ndarray]) -> list[np.ndarray]:
        return self.interp.run_block(self.op.regions[index].block, args, self.env)

    def out_type(self, i: int = 0) -> TensorType:
        return self.op.results[i].type


def _complexity(d: Dim) -> int:
    return 0 if isinstance(d, int) else sympy.count_ops(d) + 1


def onnx_inputs(op: Op, items: list) -> list:
    """Align per-operand items with ONNX input positions: absent optional inputs -> None.

    The importer drops absent optional inputs and records their positions in the `absent`
    attribute (only when a later input is present), so operand i is not always ONNX input i.
    """
    absent = set(op.attrs.get("absent", ()))
    out, it = [], iter(items)
    n = len(items) + len(absent)
    for pos in range(n):
        out.append(None if pos in absent else next(it))
    return out
