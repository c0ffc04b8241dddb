"""One formula, two evaluations: the numpy reference and the kernel lowering of an op can share
the function that spells its math when the function takes its few non-arithmetic operations
from a namespace: `NP` (numpy arrays, f64) or `KX` (kernel expressions, f64). Arithmetic
and comparisons are the operators both already share.

    def shrink(m, x, lambd):            # m is NP or KX
        return m.where(x > lambd, x - lambd, 0.0)

Used by the training optimizers, MelWeightMatrix and TfIdfVectorizer's weighting.
"""

from __future__ import annotations

import math

import numpy as np

from .. import kernel as K
from ..ir import DType

F64 = DType.f64


class NP:
    """numpy (the reference)."""

    sqrt, exp, log, floor = np.sqrt, np.exp, np.log, np.floor

    @staticmethod
    def eq(a, b):
        return a == b

    @staticmethod
    def where(c, a, b):
        return np.where(c, a, b)

    @staticmethod
    def pow_scalar(base: float, t):
        """base ** t for a constant base."""
        return np.power(base, t)


class KX:
    """Kernel expressions (the lowering); constants are lifted to f64."""

    sqrt, exp, log, floor = staticmethod(K.sqrt), staticmethod(K.exp), staticmethod(K.log), staticmethod(K.floor)

    @staticmethod
    def eq(a, b):
        return a.eq(b)

    @staticmethod
    def where(c, a, b):
        return K.select(c, K.lift(a, F64), K.lift(b, F64))

    @staticmethod
    def pow_scalar(base: float, t):
        """base ** t for a constant base, as exp(t * log(base)); base <= 0 only at t == 0 (1)
        or a positive t (0), the optimizers' decay rates' range."""
        if base <= 0.0:
            return K.select(t.eq(0.0), K.Const(1.0, F64), K.Const(0.0, F64))
        return K.exp(t * math.log(base))
