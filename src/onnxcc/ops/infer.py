"""Running the ops' shape rules over a block: the one mechanism the importer (to type what it
builds), shape inference and the version passes share.

Also propagates the values of small integer tensors (shape chains such as
Shape -> Gather -> Concat -> Reshape), so a Reshape whose target is computed at run time
still gets a symbolic shape. What cannot be proved becomes a module constraint.
"""

from __future__ import annotations

import numpy as np

from ..errors import OnnxccError, ShapeError
from ..ir import Block, DType, Module, Op, TensorType
from .control_flow import BranchSplit, DataBranch
from .registry import InferCtx, get_opdef, require_opdef

#: integer tensors up to this many elements have their values tracked
MAX_TRACKED = 64


def infer_op(op: Op, module: Module, values: dict, provisional: int | None = None) -> bool | None:
    """Run one op's shape rule (and value rule); update its result types. Returns changed.

    With `provisional` (the importer: 0 or 1), an If whose result ranks depend on a condition
    over dims is typed as that branch instead of refused, and None is returned;
    passes/split_if.py splits on it."""
    d = require_opdef(op)
    ctx = InferCtx(op, module, values)
    split = False
    try:
        types = d.infer(ctx)
    except BranchSplit as e:
        if provisional is None:
            raise
        types, split = e.branch_types[provisional], True
        if isinstance(e, DataBranch):  # remembered: later passes keep this typing (or split it)
            op.attrs["typed_as"] = provisional
    except OnnxccError:
        raise
    except Exception as e:
        raise ShapeError(f'node "{ctx.loc}" ({op.name}): shape rule failed: {type(e).__name__}: {e}') from e
    if len(types) != len(op.results):
        raise ShapeError(f'node "{ctx.loc}" ({op.name}): shape rule gave {len(types)} types for '
                         f"{len(op.results)} results")
    changed = False
    for r, t in zip(op.results, types):
        if not isinstance(t, TensorType):
            raise ShapeError(f'node "{ctx.loc}" ({op.name}): shape rule returned {t!r}')
        if r.type != t:
            r.type = t
            changed = True
    vals = d.value(ctx)
    if vals:
        for r, v in zip(op.results, vals):
            if v is not None and tracks_value(r.type.dtype, d) and np.size(v) <= MAX_TRACKED:
                values[r] = np.asarray(v, dtype=object).reshape(r.type.shape) if r.type.is_static else v
    return None if split else changed


def tracks_value(dtype: DType, d) -> bool:
    """Whether a result of this dtype made by OpDef `d` keeps its value rule's value: ints;
    bools as 0/1 (Equal -> Where); floats only through ops whose value rules stay exact on
    them (OpDef.float_values: Cast of a dim to float, arithmetic, reshapes). Shape inference
    and canonicalize's folding read values by this one rule."""
    return dtype.is_int or dtype is DType.bool or (dtype.is_float and d.float_values)


def infer_block(block: Block, module: Module, values: dict, provisional: int | None = None) -> bool:
    changed = False
    for op in block.ops:
        if op.name in ("return", "yield"):
            continue
        # regions first: a control-flow op's shape rule reads its bodies' yields; its OpDef
        # may drive the bodies itself (block arg types from operands, loop fixed points)
        done = None
        d = get_opdef(op.name) if op.regions else None
        if d is not None:
            done = d.infer_regions(InferCtx(op, module, values),
                                   lambda blk: infer_block(blk, module, values, provisional))
        if done is None:
            for reg in op.regions:
                changed |= infer_block(reg.block, module, values, provisional)
        else:
            changed |= bool(done)
        changed |= bool(infer_op(op, module, values, provisional))
    return changed


def infer_shapes(module: Module) -> dict:
    """Infer the whole module; returns the value map (Value -> object ndarray of Dims)."""
    values: dict = {}
    for f in module.functions.values():
        infer_block(f.body, module, values)
        f.result_types = [v.type for v in f.return_op.operands]
    return values
