"""The contract between the 8-bit GEMM lowering (ops/int8_gemm.py) and the backend that runs
it (codegen/cpu/gemm_int8.py, AVX-512 VNNI): the `CallStmt` names, their sizes and buffers,
and the packed layout of the Q operand.

    call onnxcc_i8gemm_us(batch, M, N, K, lda, sp, sq, ldc, sc; P, Q, C) -> C
    C[b][m*ldc + n] = sum(k < K: P[b*sp + m*lda + k] * Q(b, k, n))   in i32

`us`: P u8, Q s8; `su`: P s8, Q u8. Q is packed in panels of NR columns, each
[ceil(K/4)][NR][4] bytes (four consecutive k of one column together), zeros past K and N;
batch b's panels start sq bytes after batch b-1's (sq = 0: one Q for every batch)."""

from __future__ import annotations

import numpy as np

NR = 32
"""columns per packed Q panel"""
CALLEES = {"onnxcc_i8gemm_us": False, "onnxcc_i8gemm_su": True}
"""CallStmt name -> whether P is the signed operand"""


def panels(n: int) -> int:
    return -(-n // NR)


def pack_q(q: np.ndarray) -> np.ndarray:
    """A constant Q (K, N) as its packed panels [panels(N), ceil(K/4), NR, 4], zero-padded."""
    kk, nn = q.shape
    g, npan = -(-kk // 4), panels(nn)
    full = np.zeros((g * 4, npan * NR), q.dtype)
    full[:kk, :nn] = q
    return np.ascontiguousarray(full.reshape(g, 4, npan, NR).transpose(2, 0, 3, 1))


__all__ = ["CALLEES", "NR", "pack_q", "panels"]
