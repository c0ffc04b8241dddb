"""Signal ops beside DFT (signal.py): STFT and MelWeightMatrix (opset 17).

STFT: signal (B, L, 1 | 2) cut into frames of `fl` samples every `step`, each frame times
the window, transformed: (B, frames, bins, 2) with frames = (L - fl) // step + 1 and
bins = fl // 2 + 1 one-sided (the default), fl otherwise. fl is the window's length when a
window is given, else the frame_length input. Lowering: the frames times a constant twiddle
table in the output type (signal_table.py; a GEMM in f32, the window folded into the table when
it is a constant), or for a table past MAX_TABLE_BYTES a direct O(fl) sum per output element in
f64, the angle's integer part 2*pi*(k*n mod fl)/fl kept exact; fl must be known at compile
time, the step may be read at run time.

MelWeightMatrix: (dft_length // 2 + 1, num_mel_bins) triangular filters over mel-spaced
frequency bins; the two sizes decide the shape (a value version folds them when they are
inputs), the rates and edges are read at run time. Each element is a closed form of the bin
edges l, c, h of its filter (the spec's reference writes the rising edge, then the falling
one over it). Edges outside the spectrogram's bins are an error (index out of range), as in
onnxruntime, rather than filters silently cut.
"""

from __future__ import annotations

import math

import numpy as np
import sympy

from .. import kernel as K
from ..ir import DType, TensorType, canon
from ..kernel import Expr, Var
from .dtypes import onnx_dtype
from .dual_math import KX, NP
from .registry import InferCtx, RefCtx, define, onnx_inputs
from .shape_util import fresh_dim
from .signal import known_int
from .signal_table import table_fits, twiddle_table

F64 = DType.f64


# ---- STFT ----------------------------------------------------------------------------------------

def _stft_args(ctx, n: int) -> list:
    """[signal, frame_step, window, frame_length] operand positions (None where absent)."""
    pos = onnx_inputs(ctx.op, list(range(n)))
    return pos + [None] * (4 - len(pos))


def _frame_length(ctx, types, wp, lp, fail):
    """The frame length: the window's length, else the frame_length input (None: unknown)."""
    if wp is not None:
        w = types[wp]
        if w.rank != 1:
            raise fail(f"window must be 1-D, got {w}")
        fl = w.shape[0]
        known = known_int(ctx, lp)
        if known is not None and isinstance(fl, int) and known != fl:
            raise fail(f"frame_length {known} differs from the window's length {fl}")
        return fl
    if lp is None:
        raise fail("needs a window or a frame_length")
    return known_int(ctx, lp)


def _stft_infer(ctx: InferCtx) -> list[TensorType]:
    types = ctx.in_types
    _, sp, wp, lp = _stft_args(ctx, len(types))
    x = types[0]
    if not x.dtype.is_float or x.dtype.is_small:
        raise ctx.error(f"signal must be float, got {x.dtype.value}")
    if x.rank != 3 or x.shape[2] not in (1, 2):
        raise ctx.error(f"signal must be (batch, length, 1 | 2), got {x}")
    fl = _frame_length(ctx, types, wp, lp, ctx.error)
    step = known_int(ctx, sp)
    if isinstance(fl, int) and fl < 1:
        raise ctx.error(f"frame length must be >= 1, got {fl}")
    if step is not None and step < 1:
        raise ctx.error(f"frame_step must be >= 1, got {step}")
    onesided = int(ctx.attr("onesided", 1))
    if fl is None:
        bins = fresh_dim(ctx, "stft_bins", "frame_length input", dim=2)
    else:
        bins = canon(sympy.floor(sympy.sympify(fl) / 2) + 1) if onesided else fl
    if fl is None or step is None:
        frames = fresh_dim(ctx, "stft_frames", "frame_step / frame_length inputs", dim=1)
    else:
        ctx.require(sympy.sympify(fl) <= sympy.sympify(x.shape[1]), "frame length <= signal length")
        frames = canon(sympy.floor((sympy.sympify(x.shape[1]) - fl) / step) + 1)
    return [TensorType(x.dtype, (x.shape[0], frames, bins, 2))]


def stft(x, step: int, window, fl: int, onesided: bool):
    sig = x[..., 0] if x.shape[-1] == 1 else x[..., 0] + 1j * x[..., 1]
    w = np.ones(fl) if window is None else np.asarray(window, dtype=np.float64)
    frames = (sig.shape[1] - fl) // step + 1
    idx = np.arange(frames)[:, None] * step + np.arange(fl)[None, :]
    spec = np.fft.fft(sig[:, idx] * w, axis=-1)
    if onesided:
        spec = spec[..., : fl // 2 + 1]
    return np.stack([spec.real, spec.imag], -1).astype(x.dtype)


def _stft_ref(ctx: RefCtx, x, *rest):
    _, step, window, length = [*onnx_inputs(ctx.op, [x, *rest]), None, None][:4]
    fl = window.shape[0] if window is not None else int(np.asarray(length).reshape(-1)[0])
    s = int(np.asarray(step).reshape(-1)[0])
    if s < 1 or not 1 <= fl <= x.shape[1]:
        raise ValueError(f"STFT: frame_step {s} / frame length {fl} do not fit a signal of {x.shape[1]}")
    return [stft(x, s, window, fl, bool(ctx.attr("onesided", 1)))]


def _stft_lower(ctx) -> None:
    x, y = ctx.inputs[0], ctx.out(0)
    types = [v.type for v in ctx.op.operands]
    _, sp, wp, lp = _stft_args(ctx, len(ctx.inputs))
    fl = _frame_length(ctx, types, wp, lp, ctx.unsupported)
    if not isinstance(fl, int):
        raise ctx.unsupported("the frame length is known only at run time")
    step_c = known_int(ctx, sp)
    step = K.Const(step_c, DType.i64) if step_c is not None else K.cast(
        ctx.inputs[sp][(0,) * ctx.inputs[sp].rank], DType.i64)
    complex_in = x.shape[2] == 2
    n = Var("n")
    bins = y.shape[2]
    if y.dtype.is_float and table_fits(fl, bins, x.shape[2], y.dtype.np.itemsize):
        _stft_table(ctx, x, y, fl, step, wp)
        return

    def body(b, f, k, part):
        pos = f * step + n

        def at(c):
            v = K.cast(x[(b, pos, c)], F64)
            if wp is not None:
                v = v * K.cast(ctx.inputs[wp][(n,)], F64)
            return v

        th = K.cast((k * n) % fl, F64) * (2.0 * math.pi / fl)
        c, s = K.unary("cos", th), K.unary("sin", th)
        re, im = at(0), (at(1) if complex_in else K.Const(0.0, F64))
        real = K.rsum([(n, fl)], re * c + im * s)
        imag = K.rsum([(n, fl)], im * c - re * s)
        return K.cast(K.select(part.eq(0), real, imag), y.dtype)

    ctx.compute(y, body)


def _stft_table(ctx, x: K.Buffer, y: K.Buffer, fl: int, step: Expr, wp) -> None:
    """`y[b, f, k, p] = sum(n, c: x[b, f * step + n, c] * T[n, c, k, p])` against a constant
    twiddle table (signal_table.py), the window folded into it when it is a constant (else a
    factor of the frame's side): a GEMM of the frames by the table."""
    channels, bins = x.shape[2], y.shape[2]
    wconst = ctx.const_value(wp) if wp is not None else None
    table = ctx.const(twiddle_table(fl, bins, channels, -1.0, wconst, y.dtype.np), "twiddles")
    n, c = Var("n"), Var("c")
    win = ctx.inputs[wp] if wp is not None and wconst is None else None

    def body(b, f, k, part):
        ch = c if channels == 2 else K.Const(0, DType.i64)  # a real signal: no reduction over c
        v = K.cast(x[(b, f * step + n, ch)], y.dtype)
        if win is not None:
            v = v * K.cast(win[(n,)], y.dtype)
        axes = [(n, fl), (c, 2)] if channels == 2 else [(n, fl)]
        return K.rsum(axes, v * table[(n, ch, k, part)])

    ctx.compute(y, body)


define("onnx.STFT", infer=_stft_infer, reference=_stft_ref, lower=_stft_lower, kind="opaque", arity=(2, 4),
       math=stft)


# ---- MelWeightMatrix -----------------------------------------------------------------------------

def _mel_infer(ctx: InferCtx) -> list[TensorType]:
    ts = ctx.in_types
    for i, name in enumerate(("num_mel_bins", "dft_length", "sample_rate")):
        if not ts[i].dtype.is_int or ts[i].rank > 1:
            raise ctx.error(f"{name} must be an integer scalar, got {ts[i]}")
    for i, name in ((3, "lower_edge_hertz"), (4, "upper_edge_hertz")):
        if not ts[i].dtype.is_float or ts[i].rank > 1:
            raise ctx.error(f"{name} must be a float scalar, got {ts[i]}")
    mels, dft = known_int(ctx, 0), known_int(ctx, 1)
    if mels is not None and mels < 1:
        raise ctx.error(f"num_mel_bins must be >= 1, got {mels}")
    if dft is not None and dft < 1:
        raise ctx.error(f"dft_length must be >= 1, got {dft}")
    rows = dft // 2 + 1 if dft is not None else fresh_dim(ctx, "mel_rows", "dft_length input", dim=0)
    cols = mels if mels is not None else fresh_dim(ctx, "mel_bins", "num_mel_bins input", dim=1)
    return [TensorType(onnx_dtype(ctx.attr("output_datatype", 1)), (rows, cols))]


def _hz_to_mel(m, hz):
    return m.log(hz / 700.0 + 1.0) * (2595.0 / math.log(10.0))


def _bin_edge(m, i, mels: int, dft, sr, lo_hz, hi_hz):
    """The spectrogram bin of mel point i (0..mels+1): floor((dft + 1) * hz / sr)."""
    lo, hi = _hz_to_mel(m, lo_hz), _hz_to_mel(m, hi_hz)
    mel = i * ((hi - lo) / float(mels + 2)) + lo
    hz = (m.exp(mel * (math.log(10.0) / 2595.0)) - 1.0) * 700.0
    return m.floor((dft + 1.0) * hz / sr)


def _mel_value(m, j, i, mels: int, dft, sr, lo_hz, hi_hz):
    """Element (j, i): bin j's weight in filter i, from the filter's edges l <= c <= h."""
    left, center, right = (_bin_edge(m, i + d, mels, dft, sr, lo_hz, hi_hz) for d in (0, 1, 2))
    flat = m.eq(center, left)  # a filter one bin wide: 1 at its center
    rising = m.where(flat, m.where(m.eq(j, center), 1.0, 0.0),
                     m.where((j >= left) & (j <= center), (j - left) / m.where(flat, 1.0, center - left), 0.0))
    falling = (j >= center) & (j < right) & (right > center)
    return m.where(falling, (right - j) / m.where(right > center, right - center, 1.0), rising)


def mel_weight_matrix(mels: int, dft: int, sr: float, lo_hz: float, hi_hz: float, dtype) -> np.ndarray:
    first, last = (np.floor((dft + 1.0) * hz / sr) for hz in (lo_hz, hi_hz))
    if not 0 <= first <= last < dft // 2 + 1:
        raise ValueError(f"MelWeightMatrix: the edges fall in bins {first:g} .. {last:g}, outside the "
                         f"{dft // 2 + 1} bins of dft_length {dft} (check them against the sample rate)")
    j = np.arange(dft // 2 + 1, dtype=np.float64)[:, None]
    i = np.arange(mels, dtype=np.float64)[None, :]
    return _mel_value(NP, j, i, mels, float(dft), float(sr), float(lo_hz), float(hi_hz)).astype(dtype)


def _mel_ref(ctx: RefCtx, mels, dft, sr, lo, hi):
    one = [np.asarray(a).reshape(-1)[0].item() for a in (mels, dft, sr, lo, hi)]
    return [mel_weight_matrix(int(one[0]), int(one[1]), *one[2:], ctx.out_type().dtype.np)]


def _mel_lower(ctx) -> None:
    y = ctx.out(0)
    mels = known_int(ctx, 0)
    if mels is None:
        raise ctx.unsupported("num_mel_bins is known only at run time")

    def run(i: int) -> Expr:
        b = ctx.inputs[i]
        return K.cast(b[(0,) * b.rank], F64)

    rows = K.cast(K.dim_to_expr(y.shape[0]), F64)

    def body(j, i):
        jf, fi = K.cast(j, F64), K.cast(i, F64)
        args = (mels, run(1), run(2), run(3), run(4))
        value = K.cast(_mel_value(KX, jf, fi, *args), y.dtype)
        # the edges' bins must be spectrogram bins (as onnxruntime checks): else ERR_INDEX
        first, last = (K.floor((run(1) + 1.0) * hz / run(2)) for hz in (run(3), run(4)))
        return K.check((first >= 0.0) & (first <= last) & (last < rows), value)

    ctx.compute(y, body)


define("onnx.MelWeightMatrix", infer=_mel_infer, reference=_mel_ref, lower=_mel_lower, kind="opaque", arity=5,
       math=mel_weight_matrix)
