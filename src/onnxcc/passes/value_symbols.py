"""value-symbols: a small 1-D int64 input whose elements are only sizes becomes symbols.

An input such as Reshape's target shape, ConstantOfShape's shape or Tile's repeats, used
nowhere else, gets one symbol per element (`shape_0`, `shape_1`, ...; range [1, 2**31-1]):
its uses read a `cc.dims` of those symbols instead, so shape inference gives symbolic result
types and ONE generic version serves every value. The generated dispatcher binds the symbols
from the input's data before any kernel runs, like input dims (a value outside the range,
e.g. Reshape's 0 or -1, is refused with ERR_SHAPE naming the input and the element). Which
operands are sizes is the op's knowledge (`OpDef.size_operands`).

The function attribute `value_symbols` (["shape_0=shape[0]", ...]) records where each symbol
comes from, for the lowering (the symbols are bound) and the dispatcher.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from ..ir import DType, Function, Module, Op, TensorType
from ..ops import get_opdef
from ..ops.control_flow import carried_varies
from ..ops.infer import infer_shapes
from .base import ModulePass, PassContext, register_pass
from .canonicalize import canonicalize

#: at most this many elements per input
MAX_ELEMENTS = 8


def value_symbols_of(f: Function) -> dict[str, tuple[str, int]]:
    """{symbol: (input name, element)} from f's `value_symbols` attribute."""
    out = {}
    for item in f.attrs.get("value_symbols", []):
        name, _, where = item.partition("=")
        inp, _, k = where.rpartition("[")
        out[name] = (inp, int(k.rstrip("]")))
    return out


def _size_only(p) -> bool:
    """Every use of p is a size operand of its op."""
    uses = p.users
    if not uses:
        return False
    for op in uses:
        d = get_opdef(op.name)
        sizes = getattr(d, "size_operands", ()) if d is not None else ()
        if not all(i in sizes for i, v in enumerate(op.operands) if v is p):
            return False
    return True


@register_pass
@dataclass(frozen=True)
class ValueSymbolsPass(ModulePass):
    """Bind the elements of size-only 1-D int64 inputs of @main to symbols."""

    name: ClassVar[str] = "value-symbols"
    #: inputs left alone, `|`-separated (those with value versions: their values 0 or -1 must
    #: reach the dispatcher's value check, not a symbol's range check)
    #: inputs left alone (those with value versions); text pipelines: `skip="a|b"`
    skip: tuple[str, ...] = field(default=(), metadata={"parse": lambda t: tuple(filter(None, t.split("|")))})
    #: only inputs that are nothing but a kept Loop's trip count M (run without --value-symbols:
    #: one build serves every M, the loop's buffers sized from the symbol at dispatch)
    trips_only: bool = False

    def run(self, module: Module, ctx: PassContext) -> bool:
        f = module.functions.get("main")
        if f is None:
            return False
        made = []
        skip = set(self.skip)
        for p in f.params:
            t = p.type
            if p.name in skip or not can_bind(p) or not _size_only(p):
                continue
            trip = _trip_only(module, p)
            if (self.trips_only and not trip) or (t.rank != 1 and not trip):
                continue
            made += bind_to_symbols(module, f, p)
        if not made:
            return False
        infer_shapes(module)
        canonicalize(module)
        return True


def _trip_only(module: Module, p) -> bool:
    """Every use of p is as the trip count M (operand 0; a scalar) of a Loop whose carried
    value changes shape: the import kept it instead of unrolling it per value of M, and its
    state's bound needs M as a symbol. (Other Loops read M as data at run time, M = 0
    included, which a symbol's range [1, 2**31-1] would refuse.)"""
    return p.type.rank == 0 and bool(p.users) and all(
        op.name == "onnx.Loop" and op.operands[0] is p and all(v is not p for v in op.operands[1:])
        and carried_varies(op, module) for op in p.users)


def can_bind(p) -> bool:
    """Whether parameter p could be read into symbols at dispatch: int64, a scalar or 1-D
    with at most MAX_ELEMENTS elements (a static count)."""
    t = p.type
    return t.dtype is DType.i64 and t.rank <= 1 and all(isinstance(d, int) for d in t.shape) \
        and 1 <= (t.numel() or 0) <= MAX_ELEMENTS


def bind_to_symbols(module: Module, f: Function, p) -> list[str]:
    """Replace the uses of parameter p (see `can_bind`) by a `cc.dims` of fresh symbols, one
    per element, recorded in f's `value_symbols`; returns the new entries. The dispatcher
    reads them from p's data and refuses a value outside [1, 2**31-1] by name."""
    t = p.type
    n = t.numel() or 0
    syms = [module.symbols.fresh(f"{p.name}_{k}", f'input "{p.name}" element {k}') for k in range(n)]
    op = Op("cc.dims", (), [TensorType(DType.i64, t.shape)], {"dims": syms}, loc=f"value of input {p.name}",
            result_names=[f"{p.name}_dims"])
    if f.body.ops:
        f.body.insert_before(f.body.ops[0], op)
    else:
        f.body.append(op)
    p.replace_all_uses_with(op.result)
    made = [f"{s.name}={p.name}[{k}]" for k, s in enumerate(syms)]
    f.attrs["value_symbols"] = [*f.attrs.get("value_symbols", []), *made]
    return made
