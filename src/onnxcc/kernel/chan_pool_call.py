"""The contract between the channels-last global pools (ops/pool_nhwc.py) and the backend that
runs them as one call (codegen/cpu/chan_pool.py): the `CallStmt` name, its sizes and buffers.

    call onnxcc_f32chanpool(batch, P, C, max; X, Y) -> Y

    Y[b*C + c] = sum(p < P: X[(b*P + p)*C + c]) / P      max = 0 (the mean)
    Y[b*C + c] = max(p < P: X[(b*P + p)*C + c])          max = 1 (NaN wins, as np.max)

X is a compact [N, H, W, C] f32 buffer (P = H*W pixels), Y the compact [N, 1, 1, C] result.
As a compute the pool is a reduction per output channel, which the CPU emitter runs with the
reduction loop innermost: a load stepping C elements per pixel (gathers or scalar code). The
call keeps the channels in the vector lanes and walks the pixels in memory order."""

from __future__ import annotations

CALLEE = "onnxcc_f32chanpool"
"""the CallStmt's function name"""
SIZES = ("batch", "p", "c", "max")
"""the call's sizes, in order"""

__all__ = ["CALLEE", "SIZES"]
