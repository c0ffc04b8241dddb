"""The contract between the f32 implicit-GEMM conv lowering (ops/conv_implicit.py) and the
backend that runs it (codegen/cpu/gemm_implicit.py): the `CallStmt` name, its sizes and
buffers (by name: `Sizes`, `Buffers`, whose fields give the arrays' order), and the packed
layout of the constant weights.

    call onnxcc_f32conv(batch, M, N, S0, SS0, S1, SS1, L, sp, ldc, sc, relu, pool, res,
                        oh, ow, wpo, opt, opl, opb, opr, sr, rpad, ta, tb, c0; P, Q, C, B, R, V) -> C

    acc(b, m, n) = sum(s0 < S0, s1 < S1, l < L: P[b*sp + T(m) + s0*SS0 + s1*SS1 + l] * W[(s0, s1, l), n])
    T(m) = (m // ow)*ta + (m % ow)*tb                                                    pool = 1
    T(m) = (2*(g // ow) + s // 2)*ta + (2*(g % ow) + s % 2)*tb,  g = m // 4, s = m % 4      pool = 4
    y(b, m, n) = act(acc(b, m, n) + B[n] + r(b, m, n))      act: max(., 0) when relu, else identity
    r(b, m, n) = R[b*sr + m*ldc + n] when res (a residual laid out like C; pool = 1), else 0;
                 R[b*sr + V[m] + n] with rpad (R zero-padded, V[m] its interior pixel m's offset)
    C[b*sc + at(m)*ldc + c0 + n] = y(b, m, n)                                             pool = 1
    C[b*sc + at(g)*ldc + c0 + n] = max(y(b, 4g, n), y(b, 4g + 1, n), y(b, 4g + 2, n), y(b, 4g + 3, n))  pool = 4
    at(j) = (j // ow + opt) * wpo + j % ow + opl      the stored pixel j's place in C's rows

The GEMM's rows m are a conv's real output pixels (oh, ow), no padding columns; its columns
n the output channels (the vector lanes); K = (kh, kw, c) read in place from P, a padded
channels-last copy of the input, at each pixel's window offset T(m) (elements; ta and tb a
conv pixel's steps down and across, the call steps them from row to row: no table): one
contiguous segment of L = KW * C elements per window row (S1 = 1), or of C per tap when the
conv is dilated along W (S1 = KW). Offsets and strides count f32 elements. With pool = 4
(a 2x2 stride-2 MaxPool after the conv, M a multiple of 4) each 4 consecutive rows are one
pooling window's pixels, maxed (NaN-propagating) in the stores: only the pooled map is
written. Without res, R is any buffer (the call never reads it). With c0 > 0 (ldc >= c0 + N,
a flat C, no residual) the call writes channels [c0, c0 + N) of a wider map, its slice of a
channel Concat (kernel/conv_concat.py); the other channels are left as they are.

The stored pixels form oh x ow rows (the pooled ones with pool = 4). With out pads (opt, opl,
opb, opr, not all 0) C is the zero-padded map [batch, opt + oh + opb, wpo = opl + ow + opr,
ldc]: the call writes the interior at at(j) and zeros the border, so the next conv reads its
windows from C in place instead of from a padded copy (ops/conv_nhwc.py `out_pads`);
without, at(j) = j (ow = wpo, pads 0) and C is the flat map. A residual that another conv
wrote padded is read through V (i64, V[m] its interior pixel m's offset; `rpad`; else V is
any buffer, not read), sr its batch stride.

W is packed as Q: panels of NR columns, each [S0*S1*L][NR] f32, zero past N, so a panel
row is NR / 16 aligned vector loads."""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from onnxcc.ir import Dim

CALLEE = "onnxcc_f32conv"
"""the CallStmt's function name"""
NR = 32
"""columns per packed panel (two 16-lane vectors)"""
POOL_ROWS = 4
"""GEMM rows per stored output row with `pool`: a 2x2 window's pixels"""


class _InOrder:
    """a dataclass of the call's arguments by name, `values()` in its fields' order"""

    def values(self) -> tuple:
        return tuple(getattr(self, f.name) for f in fields(self))  # type: ignore[arg-type]  (a dataclass: the subclasses)


@dataclass(frozen=True)
class Sizes(_InOrder):
    """The call's sizes by name (the contract above): the lowering builds one with every field
    named, and the callee reads each size at its field's index (`SIZES`), so the two cannot
    disagree on the order of the call's sizes array."""

    batch: Dim
    m: Dim
    n: Dim
    s0: Dim
    ss0: Dim
    s1: Dim
    ss1: Dim
    l: Dim  # noqa: E741 (the contract's L, a segment's length: the name the codegen reads)
    sp: Dim
    ldc: Dim
    sc: Dim
    relu: Dim
    pool: Dim
    res: Dim
    oh: Dim
    ow: Dim
    wpo: Dim
    opt: Dim
    opl: Dim
    opb: Dim
    opr: Dim
    sr: Dim
    rpad: Dim
    ta: Dim
    tb: Dim
    c0: Dim = 0
    """the first channel the call writes in C's rows (0 but where kernel/conv_concat.py made
    the conv write its slice of a Concat)"""


SIZES = tuple(f.name for f in fields(Sizes))
"""the call's sizes, in order: the i64 array's index of each name"""


@dataclass(frozen=True)
class Buffers(_InOrder):
    """The call's buffers (their names) by the contract's letters; in `BUFFERS` order in the
    call's pointer array."""

    P: str
    Q: str
    C: str
    B: str
    R: str
    V: str


BUFFERS = tuple(f.name for f in fields(Buffers))
"""the call's buffers, in order: the pointer array's index of each letter"""


def panels(n: int) -> int:
    return -(-n // NR)


def pack_w(w: np.ndarray) -> np.ndarray:
    """Conv weights [M, C, KH, KW] as the packed Q [panels(M), KH*KW*C, NR] (f32), K ordered
    (kh, kw, c) like a window's elements in the channels-last copy, zero past M."""
    mo = w.shape[0]
    wk = np.ascontiguousarray(np.asarray(w, np.float32).transpose(2, 3, 1, 0)).reshape(-1, mo)  # [K, M]
    full = np.zeros((wk.shape[0], panels(mo) * NR), np.float32)
    full[:, :mo] = wk
    return np.ascontiguousarray(full.reshape(wk.shape[0], panels(mo), NR).transpose(1, 0, 2))


def pack_w_planar(w: np.ndarray) -> np.ndarray:
    """Conv weights [M, C, KH, KW] as the packed Q with K ordered (kh, c, kw): the order of a
    window in a planar padded copy [N, C, HP, WP] (a stem's few input channels), read as KH x C
    segments of KW contiguous elements."""
    mo = w.shape[0]
    wk = np.ascontiguousarray(np.asarray(w, np.float32).transpose(2, 1, 3, 0)).reshape(-1, mo)  # [K, M]
    full = np.zeros((wk.shape[0], panels(mo) * NR), np.float32)
    full[:, :mo] = wk
    return np.ascontiguousarray(full.reshape(wk.shape[0], panels(mo), NR).transpose(1, 0, 2))


__all__ = ["BUFFERS", "CALLEE", "NR", "POOL_ROWS", "SIZES", "Buffers", "Sizes", "pack_w", "pack_w_planar",
           "panels"]
