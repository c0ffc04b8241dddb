"""The contract between the 8-bit GEMM lowering (ops/int8_gemm.py) and the backend that runs
it (codegen/cpu/gemm_int8.py, AVX-512 VNNI): the `CallStmt` names, their sizes and buffers,
and the packed layout of the weights.

    call onnxcc_i8gemm(batch, M, N, S0, SS0, S1, SS1, L, lda, sp, ldc, sc, cs, zp; P, Q, C) -> C
    call onnxcc_i8gemm_rows(same sizes; P, Q, C, T) -> C
    (each also as ..._n16: Q packed in panels of NR_NARROW columns, for N <= 16)

    acc(b, m, n) = sum(s0 < S0, s1 < S1, l < L: P[b*sp + row(m) + s0*SS0 + s1*SS1 + l] * W[(s0, s1, l), n])
    C[b*sc + m*ldc + n*cs] = acc(b, m, n)                                         (i32)

The `_u8` / `_i8` variants (after `_rows` where both) take two more buffers, bias (i32 [N])
and scale (f32 [N]), and store the requantization of ops/quant.py's requant_expr:
    C[...] = clamp(roundeven(f32(acc + bias[n]) * scale[n]) + zp, lo, hi)        (u8 / i8)

P is u8 (the activations), W s8 (constant weights); row(m) = m * lda, or T[m] (i64 byte
offsets) for `_rows`. A matmul is one segment (S0 = S1 = 1, L = K); a conv reads its windows
in place from a padded channels-last copy of its input: one segment per window row (or per
tap), each a contiguous run of L bytes, row(m) the output pixel's window corner.

W is packed as Q: panels of NR columns, each [S0*S1*ceil(L/4)][NR][4] bytes (four
consecutive l of one column together; a segment's last group zero-padded past L), zero past N."""

from __future__ import annotations

import numpy as np

NR = 32
"""columns per packed panel"""
NR_NARROW = 16
"""columns per panel of the `_n16` callees: N <= 16 (a mobile net's 8- and 16-channel convs)
would leave half or more of a 32-column panel's lanes idle"""
CALLEES = {f"onnxcc_i8gemm{r}{o}{w}": (bool(r), o[1:] or "i32", NR_NARROW if w else NR)
           for r in ("", "_rows") for o in ("", "_u8", "_i8") for w in ("", "_n16")}
"""CallStmt name -> (whether the rows' offsets come from a table, what C holds: i32, u8, i8,
columns per panel)"""


def panel_width(n: int) -> int:
    """the panel width for N columns: NR_NARROW up to 16, else NR"""
    return NR_NARROW if n <= NR_NARROW else NR


def panels(n: int, nr: int = NR) -> int:
    return -(-n // nr)


def pack_q(w: np.ndarray, segments: int = 1, nr: int = NR) -> np.ndarray:
    """Constant weights (K, N) (K = segments * L, segment-major) as the packed Q
    [panels(N), segments * ceil(L/4) * 4 / 4, nr, 4] (int8), zero-padded."""
    kk, nn = w.shape
    seg_len = kk // segments
    l4 = -(-seg_len // 4) * 4
    full = np.zeros((segments, l4, panels(nn, nr) * nr), w.dtype)
    full[:, :seg_len, :nn] = w.reshape(segments, seg_len, nn)
    g = segments * l4 // 4
    return np.ascontiguousarray(full.reshape(g, 4, panels(nn, nr), nr).transpose(2, 0, 3, 1))


__all__ = ["CALLEES", "NR", "NR_NARROW", "pack_q", "panel_width", "panels"]
