"""Operand loaders shared by the integer contractions (MatMulInteger, QLinearMatMul,
MatMulIntegerToFloat, DynamicQuantizeMatMul).

The contraction body is `rsum(k: load_a(.., k) * load_b(k, ..))` in i32. With B in its ONNX
layout (K, N) the k loop strides through B by N and LLVM leaves it a scalar loop; with B
stored transposed, (N, K), both operands are read along contiguous k and LLVM's loop
vectorizer turns the sum into vector dot products (AVX-512 VNNI vpdpwssd where the CPU has it),
measured 60x to 300x faster at 128x512x512."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .. import kernel as K
from ..ir import DType
from ..kernel import broadcast_indices, cast

Loader = Callable[[tuple], K.Expr]


def per_element(buf, i) -> K.Expr:
    """A scale / zero point that is one element or one per index `i`."""
    if buf.rank == 0 or all(isinstance(d, int) and d == 1 for d in buf.shape):
        return buf[(0,) * buf.rank]
    return buf[(i,) if buf.rank == 1 else broadcast_indices((i,), buf.shape)]


def nonzero_zero_point(ctx, zp):
    """A zero point, or None when it is absent or a constant of zeros (nothing to subtract)."""
    if zp is None:
        return None
    data = ctx.const_value(ctx.inputs.index(zp))
    return None if data is not None and not np.any(data) else zp


def zp_loader(x, z, axis: int) -> Loader:
    """`idx -> i32(x[idx]) - i32(z[idx[axis]])` (z one element or one per index along `axis`)."""
    i32 = DType.i32
    if z is None:
        return lambda idx: cast(x[idx], i32)
    return lambda idx: cast(x[idx], i32) - cast(per_element(z, idx[axis]), i32)


def _swap(idx: tuple) -> tuple:
    return (*idx[:-2], idx[-1], idx[-2])


def transposed_b_loader(ctx, operand: int, zp: Callable[[tuple], K.Expr] | None) -> Loader | None:
    """The loader of B (input `operand`, rank >= 2) read from a copy with its last two dims
    swapped, so the contraction over k reads it contiguously; None for a 1-D B (already
    contiguous along k: the caller keeps its plain loader).

    A constant B is transposed at compile time. Any other B is transposed at run time into an
    i16 temp holding `B - zero point` (both lie in [-255, 255]): O(K*N) work before an O(M*K*N)
    contraction, and the subtraction keeps the fuser from inlining the copy back into the
    contraction (it does not recompute arithmetic inside one).
    `zp(idx)` gives the zero point of B's element at its logical index `idx = (..., k, n)`, or is None."""
    b = ctx.inputs[operand]
    if b.rank < 2:
        return None
    i32 = DType.i32
    data = ctx.const_value(operand)
    if data is not None:
        bt = _transposed_const(ctx, data)
        if zp is None:
            return lambda idx: cast(bt[_swap(idx)], i32)
        # the difference in i16 (it lies in [-255, 255]) then widened: LLVM matches the i16
        # products summed into i32 to vpmaddwd / vpdpwssd
        i16 = DType.i16
        return lambda idx: cast(cast(bt[_swap(idx)], i16) - cast(zp(idx), i16), i32)
    i16 = DType.i16
    bt = ctx.temp(i16, _swap(tuple(b.shape)), "bt")

    def body(*ix):
        v = cast(b[_swap(ix)], i16)
        return v if zp is None else v - cast(zp(_swap(ix)), i16)

    ctx.compute(bt, body)
    return lambda idx: cast(bt[_swap(idx)], i32)


def _transposed_const(ctx, data: np.ndarray):
    """`data` with its last two dims swapped, as a constant buffer; one weight shared by several
    contractions (tied weights) is transposed into one buffer, not one per use."""
    t = np.ascontiguousarray(np.swapaxes(data, -1, -2))
    for buf in ctx.program.buffers.values():
        if (buf.kind == "const" and buf.shape == t.shape and buf.data.dtype == t.dtype
                and np.array_equal(buf.data, t)):
            return buf
    return ctx.const(t, "bt")


def b_loader(ctx, operand: int, bz) -> Loader:
    """B's loader for the QLinear / contrib contractions, whose B zero point is one element or one
    per column: read transposed unless B is 1-D."""
    bz = nonzero_zero_point(ctx, bz)
    zp = None if bz is None else (lambda idx: per_element(bz, idx[-1]))
    return transposed_b_loader(ctx, operand, zp) or zp_loader(ctx.inputs[operand], bz, -1)
