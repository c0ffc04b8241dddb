"""Deep copies of functions, optionally substituting symbols in every type and dim attr.

Specialisation clones the generic function once per version and substitutes the version's
fixed symbols (`{seq: 128}`), so each version's types carry its own extents.
"""

from __future__ import annotations

import sympy

from .core import Block, Function, Op, Region, Value
from .dims import canon, subs_dim
from .types import TensorType


def _subst_dim(d, subs):
    if d is None or isinstance(d, int) or not subs:
        return d
    return canon(subs_dim(d, subs))


def subst_type(t: TensorType, subs: dict) -> TensorType:
    if not subs:
        return t
    return TensorType(t.dtype, tuple(_subst_dim(d, subs) for d in t.shape))


def subst_attr(v, subs: dict):
    if not subs:
        return v
    if isinstance(v, (list, tuple)):
        return type(v)(subst_attr(x, subs) for x in v)
    if isinstance(v, TensorType):
        return subst_type(v, subs)
    if isinstance(v, sympy.Basic):
        r = subs_dim(v, subs)
        return canon(r) if isinstance(r, sympy.Expr) else r
    return v


def clone_block(src: Block, mapping: dict[int, Value], subs: dict) -> Block:
    dst = Block([subst_type(a.type, subs) for a in src.args], [a.name for a in src.args])
    for a, b in zip(src.args, dst.args):
        mapping[id(a)] = b
    for op in src.ops:
        dst.append(clone_op(op, mapping, subs))
    return dst


def clone_op(op: Op, mapping: dict[int, Value], subs: dict) -> Op:
    regions = [Region([clone_block(r.block, {}, subs)]) for r in op.regions]
    new = Op(op.name, [mapping[id(v)] for v in op.operands],
             [subst_type(r.type, subs) for r in op.results],
             {k: subst_attr(v, subs) for k, v in op.attrs.items()}, regions, op.loc,
             [r.name for r in op.results])
    for a, b in zip(op.results, new.results):
        mapping[id(a)] = b
    return new


def clone_function(f: Function, name: str, subs: dict | None = None, guard=None) -> Function:
    """A copy of `f` named `name` with `subs` ({Symbol: int}) applied to every type."""
    subs = {sympy.Symbol(str(k), integer=True, positive=True) if isinstance(k, str) else k: v
            for k, v in (subs or {}).items()}
    body = clone_block(f.body, {}, subs)
    return Function(name, body, [subst_type(t, subs) for t in f.result_types],
                    guard if guard is not None else f.guard, {**f.subs, **subs}, dict(f.attrs))
