"""Transforms of a constant length as a contraction against a constant twiddle table.

For a frame length `fl` known at compile time, the DFT of a frame is a matrix product:
`y[k, p] = sum(n, c: x[n, c] * T[n, c, k, p])` with `T` holding cos / sin of 2*pi*k*n/fl
(and the window, when it is a constant, folded in). Lowered that way the CPU schedule reads
the compute as a GEMM with a prepacked constant B (kernel/schedule.py `match_gemm`); the
direct form computed a cos and a sin in f64 for every term, 3x slower than onnxruntime's FFT
on a small spectrogram. The table is built in f64 and rounded once to the output type; its
quarter-turn entries are exact (0, +-1), so a real signal's DC and Nyquist bins get an
imaginary part of exactly 0, as an FFT gives.
"""

from __future__ import annotations

import numpy as np

#: the largest table lowered this way (bytes); longer frames keep the direct O(fl) sums
#: (a 1024-sample frame's one-sided table for a real signal is 4.2 MB)
MAX_TABLE_BYTES = 1 << 23


def _cos_sin(rows: int, cols: int, period: int) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of 2*pi*n*k/period for n < rows, k < cols, exact at the quarter turns."""
    n = np.arange(rows, dtype=np.int64)[:, None]
    k = np.arange(cols, dtype=np.int64)[None, :]
    turn = (n * k) % period  # exact integer part of the angle
    theta = turn.astype(np.float64) * (2.0 * np.pi / period)
    cos, sin = np.cos(theta), np.sin(theta)
    # np.sin(pi) is 1.2e-16, not 0
    q, on_quarter = (4 * turn) // period, (4 * turn) % period == 0
    cos = np.where(on_quarter, np.choose(q % 4, [1.0, 0.0, -1.0, 0.0]), cos)
    sin = np.where(on_quarter, np.choose(q % 4, [0.0, 1.0, 0.0, -1.0]), sin)
    return cos, sin


def irfft_table(n_len: int, channels: int, dtype) -> np.ndarray:
    """T[j, c, n, 0] (shape (n_len // 2 + 1, channels, n_len, 1)): the real signal of a
    Hermitian spectrum given by its first half, y[n] = sum(j, c: X[j, c] * T[j, c, n, 0]).
    Bin j stands for itself and its mirror N - j (a conjugate): weight 2, except the bins that
    are their own mirror (0, and N / 2 for even N); scaled by 1 / N."""
    half = n_len // 2 + 1
    cos, sin = _cos_sin(half, n_len, n_len)
    w = np.full((half, 1), 2.0)
    w[0] = 1.0
    if n_len % 2 == 0:
        w[n_len // 2] = 1.0
    t = np.zeros((half, channels, n_len, 1), np.float64)
    t[:, 0, :, 0] = w * cos / n_len
    if channels == 2:
        t[:, 1, :, 0] = -w * sin / n_len
    return t.astype(dtype)


def twiddle_table(fl: int, bins: int, channels: int, sign: float, window: np.ndarray | None,
                  dtype, scale: float = 1.0) -> np.ndarray:
    """T[n, c, k, p] (shape (fl, channels, bins, 2)) with sum(n, c: x[n, c] * T[n, c, k, p])
    the transform of x (c: real, imaginary part of x; p: real, imaginary part of the result):
    `sign` -1 forward (e^{-i theta}), +1 inverse, times `scale`."""
    cos, sin = _cos_sin(fl, bins, fl)
    cos, sin = cos * scale, sin * scale
    t = np.zeros((fl, channels, bins, 2), np.float64)
    # (re + i im) * (cos + i sign sin) = re cos - sign im sin + i (im cos + sign re sin)
    t[:, 0, :, 0] = cos
    t[:, 0, :, 1] = sign * sin
    if channels == 2:
        t[:, 1, :, 0] = -sign * sin
        t[:, 1, :, 1] = cos
    if window is not None:
        t *= np.asarray(window, np.float64).reshape(fl, 1, 1, 1)
    return t.astype(dtype)


def table_fits(fl: int, bins: int, channels: int, itemsize: int) -> bool:
    return fl * channels * bins * 2 * itemsize <= MAX_TABLE_BYTES
