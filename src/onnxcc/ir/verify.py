"""The verifier: structure, dominance, types and each op's own rules.

Messages name the op and its ONNX location, say what was expected and what was found.
"""

from __future__ import annotations

import sympy

from ..errors import VerifyError
from .core import Block, Function, Module, Op
from .printer import print_bool
from .types import TensorType


def verify(module: Module) -> None:
    declared = {s.name for s in module.symbols}
    for c in module.constraints:
        _check_symbols(c.expr.free_symbols, declared, f"constraint {print_bool(c.expr)}")
    for f in module.functions.values():
        verify_function(f, declared)
    for name, versions in module.dispatch.items():
        for v in versions:
            if v not in module.functions:
                raise VerifyError(f"dispatch @{name} names unknown function @{v}")


def verify_function(f: Function, declared: set[str]) -> None:
    for a in f.params:
        _check_symbols(a.type.symbols(), declared, f"@{f.name} parameter {a.name or a.index}")
    for i, t in enumerate(f.result_types):
        _check_symbols(t.symbols(), declared, f"@{f.name} result {i}")
    _check_symbols(sympy.sympify(f.guard).free_symbols, declared, f"@{f.name} guard")
    for k, v in f.subs.items():
        syms = sympy.sympify(k).free_symbols | sympy.sympify(v).free_symbols
        _check_symbols(syms, declared, f"@{f.name} subs")
    defined: set[int] = {id(a) for a in f.params}
    _verify_block(f.body, defined, declared, terminator="return", where=f"@{f.name}")
    ret = f.body.ops[-1]
    if len(ret.operands) != len(f.result_types):
        raise VerifyError(f"@{f.name} returns {len(ret.operands)} values but declares "
                          f"{len(f.result_types)} results", ret)
    for i, (v, t) in enumerate(zip(ret.operands, f.result_types)):
        if v.type != t:
            raise VerifyError(f"@{f.name} result {i}: returns {v.type}, declared {t}", ret)


def _verify_block(b: Block, defined: set[int], declared: set[str], terminator: str, where: str) -> None:
    if not b.ops or b.ops[-1].name != terminator:
        last = b.ops[-1].name if b.ops else "nothing"
        raise VerifyError(f"{where}: block must end with '{terminator}', got {last}")
    for a in b.args:
        defined.add(id(a))
    for op in b.ops:
        if op.parent is not b:
            raise VerifyError("op's parent link does not point at its block", op)
        for i, v in enumerate(op.operands):
            if id(v) not in defined:
                raise VerifyError(f"operand {i} is used before it is defined (or defined in another "
                                  f"region; regions are isolated: pass captures as operands)", op)
        if op.name in ("return", "yield") and op is not b.ops[-1]:
            raise VerifyError(f"'{op.name}' must be the last op of its block", op)
        for r in op.results:
            _check_symbols(r.type.symbols(), declared, f"result {r.index} of {_op_where(op)}")
        for k, v in op.attrs.items():
            _check_symbols(_attr_symbols(v), declared, f"attribute {k!r} of {_op_where(op)}")
        for i, reg in enumerate(op.regions):
            if len(reg.blocks) != 1:
                raise VerifyError("regions must have exactly one block", op)
            _verify_block(reg.block, set(), declared, terminator="yield",
                          where=f"region {i} of {_op_where(op)}")
        _verify_op(op)
        for r in op.results:
            defined.add(id(r))


#: how the verifier finds an op's definition (arity, result count, own checks). `ir` imports
#: nothing of the layers above it, so onnxcc.ops installs its registry lookup here on import.
_opdef_lookup = None


def set_opdef_lookup(lookup) -> None:
    global _opdef_lookup
    _opdef_lookup = lookup


def _verify_op(op: Op) -> None:
    if op.name in ("return", "yield") or _opdef_lookup is None:
        return
    d = _opdef_lookup(op.name)
    if d is None:
        return  # unregistered ops (test.*) are allowed in the IR
    ar = d.arity
    n = len(op.operands)
    if isinstance(ar, int) and n != ar:
        raise VerifyError(f"expects {ar} operands, got {n}", op)
    if isinstance(ar, tuple):
        lo, hi = ar
        if n < lo or (hi is not None and n > hi):
            raise VerifyError(f"expects {lo} to {hi if hi is not None else 'any'} operands, got {n}", op)
    if isinstance(d.num_results, int) and len(op.results) != d.num_results:
        raise VerifyError(f"expects {d.num_results} results, got {len(op.results)}", op)
    d.verify(op)


def _op_where(op: Op) -> str:
    return f"{op.name} ({op.loc})" if op.loc else op.name


def _attr_symbols(v) -> set:
    """Symbols in a dim / bool / type attribute, looking inside lists."""
    if isinstance(v, (list, tuple)):
        return set().union(*(_attr_symbols(x) for x in v)) if v else set()
    if isinstance(v, TensorType):
        return v.symbols()
    if isinstance(v, sympy.Basic):
        return v.free_symbols
    return set()


def _check_symbols(syms, declared: set[str], where: str) -> None:
    for s in syms:
        if s.name not in declared:
            raise VerifyError(f"{where} uses undeclared symbol {s.name!r}")
