"""onnxcc's own ops: constants and symbolic shape values.

cc.const  {value = dense<...> | @weight}   a constant tensor (inline when small, else a weight)
cc.dims   {dims = [#dim<batch>, 4, ...]}   an i64 tensor whose elements are dims, evaluated
                                           from the bound symbols at run time; what folding a
                                           shape chain (Shape -> Gather -> Concat) leaves behind
"""

from __future__ import annotations

import math

import numpy as np
import sympy

from ..errors import CompileError
from ..ir import DType, TensorType, WeightRef, evaluate
from .registry import InferCtx, OpDef, RefCtx, register


class MissingWeight(CompileError, KeyError):
    """A `cc.const {value = @name}` whose tensor the module does not hold (IR text read without
    its weights file): a user error when compiling; folding passes catch it as a KeyError."""

    __str__ = Exception.__str__


def const_array(op, module) -> np.ndarray:
    v = op.attrs["value"]
    if isinstance(v, WeightRef):
        if module is None or v.name not in module.weights:
            raise MissingWeight(f"weight @{v.name} has no data: IR text holds only small constants; write the "
                               "IR with `onnxcc ir MODEL -o FILE.onnxir`, which saves the weights beside it")
        return module.weights[v.name]
    return v


def _exact_float(x: float):
    """x as an exact sympy number when it is an integer or a dyadic fraction (denominator at
    most 1024) below 2**24 in magnitude, else None."""
    if not math.isfinite(x) or abs(x) >= 2 ** 24:
        return None
    r = sympy.Rational(x)  # the float's exact binary value
    if r.q > 1024:
        return None
    return int(r) if r.q == 1 else r


@register("cc.const")
class ConstOp(OpDef):
    arity = 0
    kind = "opaque"

    def infer(self, ctx: InferCtx):
        v = ctx.attr("value")
        if isinstance(v, WeightRef):
            return [ctx.op.results[0].type]
        return [TensorType(DType.from_np(v.dtype), v.shape)]

    # float constants are tracked too (OpDef.float_values), when every element is a value that
    # f32 arithmetic on dims below 2**24 keeps exact: an integer or a fraction with a small
    # power-of-two denominator (torch's `ceil(h / 2.0) * 2.0` on a dim cast to float)
    float_values = True

    def value(self, ctx: InferCtx):
        v = ctx.attr("value")
        if not isinstance(v, np.ndarray) or v.size > 64:
            return None
        if v.dtype.kind in "iu":
            return [np.array([int(x) for x in v.reshape(-1)], dtype=object).reshape(v.shape)]
        if v.dtype.kind == "f" and v.dtype.itemsize >= 4:
            exact = [_exact_float(float(x)) for x in v.reshape(-1)]
            if all(e is not None for e in exact):
                return [np.array(exact, dtype=object).reshape(v.shape)]
        return None

    def reference(self, ctx: RefCtx):
        return [const_array(ctx.op, ctx.interp.module)]


@register("cc.dims")
class DimsOp(OpDef):
    arity = 0
    kind = "injective"

    def infer(self, ctx: InferCtx):
        return [ctx.op.results[0].type]

    def value(self, ctx: InferCtx):
        t = ctx.op.results[0].type
        return [np.array(list(ctx.attr("dims")), dtype=object).reshape(t.shape)]

    def reference(self, ctx: RefCtx):
        t = ctx.out_type()
        vals = [evaluate(d, ctx.env) for d in ctx.attr("dims")]
        return [np.array(vals, dtype=t.dtype.np).reshape(t.shape)]
