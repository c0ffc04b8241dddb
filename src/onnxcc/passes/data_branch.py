"""The inputs that decide an If whose branches differ in rank on a condition from data.

`If(Equal(sr, 16000))` with a rank-3 then_branch and a rank-1 else_branch: the condition is
computed from the value of the scalar input `sr`, so no guard over input dims decides it and
the importer could only type the If as one branch (`typed_as`, ops/control_flow.py
`DataBranch`). If the inputs it is computed from are small int64 ones, reading their values
into symbols at dispatch (value-symbols' `bind_to_symbols`) turns the condition into one over
dims (`sr_0 == 16000`), which split-if splits like a condition over input shapes: one library
whose versions together serve every value (every value in a symbol's range [1, 2**31-1]; the
dispatcher refuses others by name).

An input the user asked value versions for is left alone (`skip`): those versions fold it.
"""

from __future__ import annotations

from ..ir import Function, Module, Op
from ..ops import get_opdef
from .value_symbols import bind_to_symbols, can_bind


def data_ifs(f: Function) -> list[Op]:
    """The Ifs the importer typed provisionally (their condition depends on data)."""
    return [op for op in f.walk() if op.name == "onnx.If" and op.attrs.get("typed_as") is not None]


def _reach(f: Function, start) -> set[int]:
    """ids of the values `start` flows into, through ops and into the region arguments that
    capture them (Ifs and Loops nested at any depth)."""
    live = {id(start)}
    for op in f.walk():  # pre-order: an op's captures are marked before its body is visited
        hits = [i for i, v in enumerate(op.operands) if id(v) in live]
        if not hits:
            continue
        live |= {id(r) for r in op.results}
        d = get_opdef(op.name)
        capture = getattr(d, "capture_operand", None)
        for ri, reg in enumerate(op.regions):
            for ai, a in enumerate(reg.block.args):
                k = capture(op, ri, ai) if capture is not None else None
                # an argument we cannot map (a loop's iteration number) is taken as reached
                if k is None or k in hits:
                    live.add(id(a))
    return live


def deciding_inputs(f: Function, skip: set[str]) -> list:
    """The parameters of f that can be bound to symbols and reach the condition of a data If."""
    conds = {id(op.operands[0]) for op in data_ifs(f)}
    if not conds:
        return []
    return [p for p in f.params if p.name not in skip and can_bind(p) and _reach(f, p) & conds]


def bind_deciding_inputs(module: Module, f: Function, skip: set[str]) -> list[str]:
    """Bind the deciding inputs of f's data Ifs to symbols; returns the new `value_symbols`."""
    made: list[str] = []
    for p in deciding_inputs(f, skip):
        made += bind_to_symbols(module, f, p)
    return made
