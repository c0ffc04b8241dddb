"""Conv and MatMul on half-precision operands (f16, bf16) lowered as their f32 selves.

The CPU's GEMM and conv-window micro-kernels read and store f32 (kernel/schedule.py
`match_gemm`), so a float16 model's convs and matmuls (onnxruntime's float16 converter,
keep_io_types either way) ran as scalar loop nests: a small conv net 6-13x slower than
onnxruntime, which computes them in f32 too (its CPU kernels widen half precision). Here the
half operands are widened once (constant weights at compile time, the rest by a cast pass),
the op's own lowering runs on f32 buffers into f32 results, and each result is rounded to its
half type once: the rounding the half-typed compute does at its store, so the values match."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..ir import DType
from ..kernel import cast

HALF = (DType.f16, DType.bf16)


def lowered_in_f32(ctx, lower: Callable) -> bool:
    """Run `lower` on f32 copies of the op's half operands and round its f32 results into the
    real ones; False (nothing lowered) when no operand is half precision."""
    if not any(b is not None and b.dtype in HALF for b in ctx.inputs):
        return False
    f32 = DType.f32
    inputs, consts = [], []
    for i, b in enumerate(ctx.inputs):
        data = ctx.const_value(i)
        if b is None or b.dtype not in HALF:
            inputs.append(b)
            consts.append(data)
        elif data is not None:
            wide = np.asarray(data).astype(np.float32)
            inputs.append(ctx.const(wide, "wide"))
            consts.append(wide)
        else:
            t = ctx.temp(f32, b.shape, "wide")
            ctx.compute(t, lambda *ix, b=b: cast(b[ix], f32))
            inputs.append(t)
            consts.append(None)
    outs = [ctx.out(k) for k in range(len(ctx.op.results))]
    accs = [ctx.temp(f32, y.shape, "acc") for y in outs]
    lower(ctx.over(inputs, accs, consts))
    for y, acc in zip(outs, accs, strict=True):
        ctx.compute(y, lambda *ix, y=y, acc=acc: cast(acc[ix], y.dtype))
    return True
