"""com.microsoft.DynamicQuantizeLSTM: an LSTM whose W and R are 8-bit with scales and zero points.

Inputs: X, W [dirs, input, 4 * hidden], R [dirs, hidden, 4 * hidden] (u8 or i8, stored transposed
against onnx.LSTM's layout), B, sequence_lens, initial_h, initial_c, P as onnx.LSTM, then
W_scale, W_zero_point, R_scale, R_zero_point, each [dirs] (per direction) or [dirs, 4 * hidden]
(per output column). Attributes as onnx.LSTM.

W and R are dequantized at compile time, `(w - zero_point) * scale` in f32, into the onnx.LSTM
layout, and the op runs as LSTM (rnn.py) in f32. onnxruntime instead quantizes X and each step's
H to u8 on the fly and multiplies in integers, so its outputs differ from ours by that rounding
of the activations (measured below 1e-2 on the quantized torch RNN model; the op test states
its tolerance). Non-constant weights are refused.
"""

from __future__ import annotations

import numpy as np

from ..ir import DType, TensorType
from .registry import InferCtx, RefCtx, onnx_inputs, register
from .rnn import NAMES, LSTMOp

_Q_NAMES = (*NAMES["LSTM"], "W_scale", "W_zero_point", "R_scale", "R_zero_point")


def dequantize_weight(q: np.ndarray, scale: np.ndarray, zp: np.ndarray) -> np.ndarray:
    """[dirs, in, cols] codes -> f32 [dirs, cols, in]; scale / zero point per direction or per
    (direction, column)."""
    nd = q.shape[0]
    s = np.asarray(scale, np.float32).reshape(nd, -1)[:, None, :]
    z = np.asarray(zp).astype(np.int32).reshape(nd, -1)[:, None, :]
    return np.ascontiguousarray(((q.astype(np.int32) - z).astype(np.float32) * s).transpose(0, 2, 1))


@register("com.microsoft.DynamicQuantizeLSTM")
class DynamicQuantizeLSTMOp(LSTMOp):
    arity = (12, 12)

    def operands(self, op) -> dict:
        pos = onnx_inputs(op, list(range(len(op.operands))))
        return {n: i for n, i in zip(_Q_NAMES, pos, strict=False) if i is not None}

    def weight_types(self, ctx: InferCtx, w: TensorType, r: TensorType) -> tuple[TensorType, TensorType]:
        ix = self.operands(ctx.op)
        x = ctx.in_types[ix["X"]]
        out = []
        for name, t in (("W", w), ("R", r)):
            if t.dtype not in (DType.u8, DType.i8) or t.rank != 3:
                raise ctx.error(f"{name} must be 3-D u8 or i8, got {t}")
            s, z = ctx.in_types[ix[f"{name}_scale"]], ctx.in_types[ix[f"{name}_zero_point"]]
            if s.dtype is not DType.f32 or z.dtype is not t.dtype:
                raise ctx.error(f"{name}_scale must be f32 and {name}_zero_point {t.dtype.value}, got {s} and {z}")
            for p, what in ((s, "scale"), (z, "zero_point")):
                if p.rank not in (1, 2):
                    raise ctx.error(f"{name}_{what} must be [dirs] or [dirs, 4 * hidden], got {p}")
                ctx.require_eq(p.shape[0], t.shape[0], f"{name}_{what} dim 0 vs {name} dim 0")
                if p.rank == 2:
                    ctx.require_eq(p.shape[1], t.shape[2], f"{name}_{what} dim 1 vs {name} dim 2")
            out.append(TensorType(x.dtype, (t.shape[0], t.shape[2], t.shape[1])))
        return out[0], out[1]

    def weight_arrays(self, ctx: RefCtx, a: dict) -> dict:
        a = dict(a)
        for n in ("W", "R"):
            a[n] = dequantize_weight(a[n], a[f"{n}_scale"], a[f"{n}_zero_point"]).astype(a["X"].dtype)
        return a

    def weight_buffers(self, ctx, a: dict) -> dict:
        ix = self.operands(ctx.op)
        a = dict(a)
        for n in ("W", "R"):
            data = [ctx.const_value(ix[k]) for k in (n, f"{n}_scale", f"{n}_zero_point")]
            if any(d is None for d in data):
                raise ctx.unsupported(f"{n}, {n}_scale and {n}_zero_point must be constants (weights)")
            w = dequantize_weight(*data).astype(a["X"].dtype.np)
            a[n] = ctx.const(w, f"lstm_{n.lower()}")
        return a
