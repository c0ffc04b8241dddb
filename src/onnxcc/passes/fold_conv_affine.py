"""fold-conv-affine: a per-channel affine map after a Conv goes into the Conv's weights and bias.

    y = BatchNormalization(Conv(x, W, B), scale, bias, mean, var)      (inference form)
      = Conv(x, W * s, (B - mean) * s + bias),   s = scale / sqrt(var + epsilon)

and likewise Conv followed by Mul / Div by a constant per-channel (or scalar) factor c
(W * c, B * c; W / c, B / c) or Add / Sub of a constant per-channel offset (B + c, B - c).
The conv then writes the final values in one pass over its output instead of the kernel
doing a second elementwise pass (or an epilogue with four extra loads per element).

Applied only when nothing else can observe the difference:
- W, B (when present) and every affine parameter are `cc.const`s with data (weights
  included), of the conv's float dtype (f32 or f64);
- the conv's result has exactly one use, the affine op;
- the affine op is the inference form of BatchNormalization (no `training_mode`, one
  result) or a binary op whose constant broadcasts along the channel axis only, so its
  result type is exactly the conv's (no broadcast that grows the output);
- for Div, no factor is 0 (the folded weights would be inf / nan where the unfolded
  graph may give a finite value or a signed zero).

The new weights are computed in f64 and rounded once to the conv's dtype, so the folded
conv differs from the unfolded pair by rounding only (tests: relative 1e-5 in f32).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..ir import DType, Module, Op, TensorType, Value, WeightRef
from ..ops import onnx_inputs
from .base import ModulePass, PassContext, register_pass
from .canonicalize import const_value
from .dce import dce
from .rewrite import RewritePattern, Rewriter, apply_patterns

#: constants up to this many elements are stored inline in the op (as the importer does)
_INLINE_MAX = 64

_BINARY = ("onnx.Mul", "onnx.Add", "onnx.Sub", "onnx.Div")


def _channel_vector(c: np.ndarray, rank: int, m: int) -> np.ndarray | None:
    """`c` as a length-`m` vector when it broadcasts against an (N, M, spatial...) tensor
    along the channel axis only (a scalar, (M, 1, 1), (1, M, 1, 1), ...), else None."""
    if c.ndim > rank:
        return None
    shape = (1,) * (rank - c.ndim) + c.shape
    if any(d != 1 for i, d in enumerate(shape) if i != 1) or shape[1] not in (1, m):
        return None
    return np.broadcast_to(c.reshape(-1), (m,)).astype(np.float64)


class _FoldAffine(RewritePattern):
    op_names = ("onnx.BatchNormalization", *_BINARY)

    def __init__(self, module: Module):
        self.module = module

    def match_and_rewrite(self, op: Op, rewriter: Rewriter) -> bool:
        conv, side = self._conv_operand(op)
        if conv is None:
            return False
        parts = self._conv_parts(conv)
        if parts is None:
            return False
        w, b = parts
        m = w.shape[0]
        scale_shift = self._affine(op, side, op.results[0].type.rank, m)
        if scale_shift is None:
            return False
        scale, shift = scale_shift
        if not (np.all(np.isfinite(scale)) and np.all(np.isfinite(shift))):
            return False  # inf / nan factors: folding would change which outputs are nan
        w_new = w * scale.reshape((m,) + (1,) * (w.ndim - 1))
        b_new = b * scale + shift
        self._replace(conv, op, w_new, b_new, rewriter)
        return True

    # ---- matching ----------------------------------------------------------------------

    def _conv_operand(self, op: Op) -> tuple[Op | None, int]:
        """The Conv feeding `op` (its only user) and the operand position it sits at."""
        if op.name == "onnx.BatchNormalization":
            candidates = [0]
        elif op.name in ("onnx.Mul", "onnx.Add"):
            candidates = [0, 1]
        else:  # Sub and Div: only conv - c and conv / c are affine in the conv's output
            candidates = [0]
        for i in candidates:
            if i >= len(op.operands):
                continue
            v = op.operands[i]
            owner = v.owner
            if (isinstance(owner, Op) and owner.name == "onnx.Conv" and len(v.uses) == 1
                    and v.type == op.results[0].type and not v.type.has_unknown):
                return owner, i
        return None, -1

    def _conv_parts(self, conv: Op) -> tuple[np.ndarray, np.ndarray] | None:
        """(W, B) of a conv with constant weights of a float dtype, in f64 (B zeros if absent)."""
        ins = onnx_inputs(conv, list(conv.operands))
        if conv.results[0].type.dtype not in (DType.f32, DType.f64) or len(ins) < 2:
            return None
        w = const_value(ins[1], self.module)
        if w is None or w.ndim < 3:
            return None
        bias = ins[2] if len(ins) > 2 else None
        b = np.zeros(w.shape[0]) if bias is None else const_value(bias, self.module)
        if b is None or b.shape != (w.shape[0],):
            return None
        return w.astype(np.float64), b.astype(np.float64)

    def _affine(self, op: Op, side: int, rank: int, m: int) -> tuple[np.ndarray, np.ndarray] | None:
        """(scale, shift), each length m: op(y) = y * scale + shift per channel, else None."""
        if op.name == "onnx.BatchNormalization":
            return self._batch_norm(op, m)
        if len(op.operands) != 2 or len(op.results) != 1:
            return None
        c = const_value(op.operands[1 - side], self.module)
        if c is None or op.operands[1 - side].type.dtype != op.results[0].type.dtype:
            return None
        vec = _channel_vector(c, rank, m)
        if vec is None:
            return None
        ones, zeros = np.ones(m), np.zeros(m)
        if op.name == "onnx.Mul":
            return vec, zeros
        if op.name == "onnx.Add":
            return ones, vec
        if op.name == "onnx.Sub":
            return ones, -vec
        if np.any(vec == 0):  # Div
            return None
        return 1.0 / vec, zeros

    def _batch_norm(self, op: Op, m: int) -> tuple[np.ndarray, np.ndarray] | None:
        if op.attrs.get("training_mode", 0) or len(op.results) != 1 or len(op.operands) != 5:
            return None
        params = [const_value(v, self.module) for v in op.operands[1:]]
        if any(p is None or p.shape != (m,) for p in params):
            return None
        scale, bias, mean, var = (np.asarray(p, dtype=np.float64) for p in params)  # type: ignore[arg-type]
        s = scale / np.sqrt(var + float(op.attrs.get("epsilon", 1e-5)))
        return s, bias - mean * s

    # ---- rewriting ---------------------------------------------------------------------

    def _replace(self, conv: Op, op: Op, w: np.ndarray, b: np.ndarray, rw: Rewriter) -> None:
        """A new Conv (same input and attributes, folded W and B) where the old one was;
        the affine op's uses move to it and both old ops go."""
        dt = conv.results[0].type.dtype
        w_val = self._const(w.astype(dt.np), conv, "w_folded", rw)
        b_val = self._const(b.astype(dt.np), conv, "b_folded", rw)
        attrs = {k: v for k, v in conv.attrs.items() if k != "absent"}
        new = Op("onnx.Conv", [conv.operands[0], w_val, b_val], [op.results[0].type], attrs, loc=conv.loc,
                 result_names=[op.results[0].name])
        rw.insert_before(conv, new)
        rw.replace_op(op, [new.results[0]])
        rw.erase_op(conv)

    def _const(self, arr: np.ndarray, anchor: Op, name: str, rw: Rewriter) -> Value:
        t = TensorType(DType.from_np(arr.dtype), arr.shape)
        value: object = arr
        if arr.size > _INLINE_MAX:
            key, k = f"{name}", 0
            while key in self.module.weights:
                k += 1
                key = f"{name}_{k}"
            self.module.weights[key] = np.ascontiguousarray(arr)
            value = WeightRef(key)
        op = Op("cc.const", (), [t], {"value": value}, loc=anchor.loc)
        return rw.insert_before(anchor, op).results[0]


def fold_conv_affine(module: Module) -> bool:
    changed = apply_patterns(module, [_FoldAffine(module)])
    if changed:
        dce(module)
    return changed


@register_pass
@dataclass(frozen=True)
class FoldConvAffinePass(ModulePass):
    """Fold inference BatchNormalization and constant per-channel Mul / Add / Sub / Div
    after a Conv into the Conv's weights and bias (constant parameters only)."""

    name: ClassVar[str] = "fold-conv-affine"

    def run(self, module: Module, ctx: PassContext) -> bool:
        return fold_conv_affine(module)
