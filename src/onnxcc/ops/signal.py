"""Signal ops: DFT (opset 17/20: forward, inverse, one-sided forward, one-sided inverse = irfft)
and the Hann / Hamming / Blackman windows (at the end of the file).

x is (..., L, ..., c) with c = 1 (real) or 2 (complex, real then imaginary part last); the
transform runs along `axis` (an attribute up to opset 19, an input from 20; never the last
dim). N is dft_length when given, else L (one-sided inverse: 2 * (L - 1)); the signal is cut
or zero-padded to N. Results: forward (N, or N // 2 + 1 one-sided, complex), inverse
(N, complex, divided by N), one-sided inverse (N, real: the input is the first half of a
Hermitian spectrum, the rest mirrored as conjugates).

Lowering: one compute, each output element an O(N) sum over the signal (no FFT). With the
axis known, against a constant table of cos / sin (signal_table.py; `_dft_table` says when in
f32 as a GEMM, when exactly in f64); else computing them in f64, the angle
2*pi*(k*n mod N)/N with its integer part exact. An axis only the run knows
picks among the per-axis bodies with a select, possible when every candidate axis gives
the same result shape (otherwise that dim is data-dependent and not compiled).
"""

from __future__ import annotations

import math

import numpy as np
import sympy

from .. import kernel as K
from ..ir import DType, TensorType, canon
from ..kernel import Expr, Var
from .dtypes import onnx_dtype
from .registry import InferCtx, RefCtx, define, onnx_inputs
from .shape import fresh_dim
from .signal_table import irfft_table, table_fits, twiddle_table


def _opset(ctx) -> int:
    """The model's ai.onnx opset: the axis defaults to 1 before 20 (an attribute), -2 from 20."""
    module = getattr(ctx, "module", None)
    if module is None:
        owner = getattr(ctx, "interp", None) or getattr(ctx, "lowerer", None)
        module = getattr(owner, "module", None)
    return int(module.attrs.get("opset", 20)) if module is not None else 20


def _args(ctx, n_operands: int) -> list:
    """[x, dft_length, axis] operand positions (None where absent)."""
    pos = onnx_inputs(ctx.op, list(range(n_operands)))
    return pos + [None] * (3 - len(pos))


def known_int(ctx, i) -> int | None:
    """Operand i's value as a python int when the compiler knows it."""
    if i is None:
        return None
    if isinstance(ctx, InferCtx):
        v = ctx.known_ints(i)
        return None if v is None else int(v[0])
    c = ctx.const_value(i)  # a LowerCtx
    if c is not None:
        return int(np.asarray(c).reshape(-1)[0])
    k = ctx.known_value(i)
    if k is not None and isinstance(canon(k.reshape(-1)[0]), int):
        return int(canon(k.reshape(-1)[0]))
    return None


def _axis_attr(ctx, rank: int, axis_pos, fail) -> int | None:
    """The normalized axis, or None when only the run knows it."""
    if axis_pos is None:
        a = ctx.attr("axis", None)
        if a is None:
            a = -2 if _opset(ctx) >= 20 else 1
    else:
        a = known_int(ctx, axis_pos)
        if a is None:
            return None
    if not -rank <= a < rank or a % rank == rank - 1:
        raise fail(f"axis {a} must name a signal dim of the rank-{rank} input (not the last dim)")
    return a % rank


def _geometry(ctx, shape, axis: int, n_len) -> tuple[tuple, int | object]:
    """(result shape, N) for the transform along `axis`."""
    inverse, onesided = int(ctx.attr("inverse", 0)), int(ctx.attr("onesided", 0))
    length = shape[axis]
    if n_len is None:
        n_len = canon(2 * (length - 1)) if inverse and onesided else length
    if inverse and onesided:
        out_len, last = n_len, 1
    elif onesided:
        out_len, last = _half(n_len), 2
    else:
        out_len, last = n_len, 2
    return (*shape[:axis], out_len, *shape[axis + 1:-1], last), n_len


def _dft_infer(ctx: InferCtx) -> list[TensorType]:
    x = ctx.in_types[0]
    _, lp, ap = _args(ctx, len(ctx.in_types))
    if not x.dtype.is_float:
        raise ctx.error(f"input must be a float tensor, got {x.dtype.value}")
    if x.rank < 2 or x.shape[-1] not in (1, 2):
        raise ctx.error(f"input must end in a dim of 1 (real) or 2 (complex), got {x}")
    inverse, onesided = int(ctx.attr("inverse", 0)), int(ctx.attr("onesided", 0))
    if onesided and x.shape[-1] != (2 if inverse else 1):
        raise ctx.error("a one-sided inverse DFT needs complex input (last dim 2)" if inverse else
                        "a one-sided DFT needs real input (last dim 1)")
    n_len = None
    if lp is not None:
        n_len = known_int(ctx, lp)
        if n_len is None:
            n_len = fresh_dim(ctx, "dft_length", "dft_length input", dim=x.rank)
        elif n_len < 1:
            raise ctx.error(f"dft_length must be >= 1, got {n_len}")
    axis = _axis_attr(ctx, x.rank, ap, ctx.error)
    cands = [axis] if axis is not None else list(range(x.rank - 1))
    shapes = []
    for a in cands:
        shape, _ = _geometry(ctx, x.shape, a, n_len)
        shapes.append(shape)
    out = []
    for i in range(x.rank):
        dims = {canon(s[i]) for s in shapes}
        out.append(dims.pop() if len(dims) == 1 else fresh_dim(ctx, "dft_dim", "DFT axis input", dim=i))
    return [TensorType(x.dtype, tuple(out))]


def _half(n):
    return canon(sympy.floor(sympy.sympify(n) / 2) + 1)


# ---- numpy reference -------------------------------------------------------------------------------


def dft(x, axis: int, n_len: int | None, inverse: bool, onesided: bool):
    sig = x[..., 0] if x.shape[-1] == 1 else x[..., 0] + 1j * x[..., 1]
    a = axis
    if n_len is None:
        n_len = 2 * (x.shape[a] - 1) if inverse and onesided else x.shape[a]
    if inverse and onesided:
        return np.fft.irfft(sig, n=n_len, axis=a)[..., None].astype(x.dtype)
    y = np.fft.ifft(sig, n=n_len, axis=a) if inverse else np.fft.fft(sig, n=n_len, axis=a)
    if onesided:
        y = np.take(y, np.arange(n_len // 2 + 1), axis=a)
    return np.stack([y.real, y.imag], -1).astype(x.dtype)


def _dft_ref(ctx: RefCtx, x, *rest):
    items = [*onnx_inputs(ctx.op, [x, *rest]), None, None]  # x, dft_length, axis by ONNX position
    n_len = None if items[1] is None else int(np.asarray(items[1]).reshape(-1)[0])
    if items[2] is not None:
        axis = int(np.asarray(items[2]).reshape(-1)[0])
    else:
        axis = ctx.attr("axis", -2 if _opset(ctx) >= 20 else 1)
    if not -x.ndim <= axis < x.ndim or axis % x.ndim == x.ndim - 1:
        raise ValueError(f"axis {axis} out of range")
    return [dft(x, axis % x.ndim, n_len, bool(ctx.attr("inverse", 0)), bool(ctx.attr("onesided", 0)))]


# ---- lowering --------------------------------------------------------------------------------------


def _k_dft(ctx, x: K.Buffer, o, axis: int, n_len: int) -> Expr:
    """Output element `o` of the transform along `axis` (f64)."""
    inverse, onesided = int(ctx.attr("inverse", 0)), int(ctx.attr("onesided", 0))
    f64 = DType.f64
    length = x.shape[axis]
    complex_in = x.shape[-1] == 2
    k, part = o[axis], o[-1]
    n = Var("n")

    def at(pos, c):
        idx = (*o[:axis], pos, *o[axis + 1:-1], c)
        return K.cast(x[idx], f64)

    def angle(a, b):
        return K.cast((a * b) % n_len, f64) * (2.0 * math.pi / n_len)

    if inverse and onesided:  # real output: sum over the whole Hermitian spectrum
        m = K.dim_to_expr(length)
        half = n_len // 2 + 1
        mirrored = n >= half
        j = K.select(mirrored, n_len - n, n)
        inside = j < m
        re = K.select(inside, at(j, 0), 0.0)
        im = K.select(inside, at(j, 1), 0.0) if complex_in else K.Const(0.0, f64)
        im = K.select(mirrored, -im, im)
        th = angle(n, k)
        term = re * K.unary("cos", th) - im * K.unary("sin", th)
        return K.rsum([(n, n_len)], term) / float(n_len)
    s = 1.0 if inverse else -1.0
    count = K.minimum(K.dim_to_expr(length), n_len)
    re, im = at(n, 0), (at(n, 1) if complex_in else K.Const(0.0, f64))
    th = angle(n, k)
    c, sn = K.unary("cos", th), K.unary("sin", th)
    real = K.rsum([(n, count)], re * c - s * im * sn)
    imag = K.rsum([(n, count)], im * c + s * re * sn)
    out = K.select(part.eq(0), real, imag)
    return out / float(n_len) if inverse else out


def _dft_lower(ctx) -> None:
    x, y = ctx.inputs[0], ctx.out(0)
    _, lp, ap = _args(ctx, len(ctx.inputs))
    n_len = known_int(ctx, lp)
    if lp is not None and n_len is None:
        raise ctx.unsupported("dft_length known only at run time")
    axis = _axis_attr(ctx, x.rank, ap, ctx.unsupported)
    cands = [axis] if axis is not None else list(range(x.rank - 1))

    def n_of(a):
        if n_len is not None:
            return n_len
        _, n = _geometry(ctx, x.shape, a, None)
        if not isinstance(n, int):
            raise ctx.unsupported(f"signal length {n} along axis {a} is not a compile-time constant")
        return n

    if axis is not None and _dft_table(ctx, x, y, axis, n_of(axis)):
        return
    dead: list[int] = []
    if axis is None:
        # an axis read at run time: an irfft along a dim of length 1 has no samples (n = 0), so
        # that axis is no candidate; the kernel refuses it (below) rather than fall through
        dead = [d for d in cands if n_of(d) == 0]
        cands = [d for d in cands if d not in dead]
        if not cands:
            raise ctx.unsupported("no axis of the input can be transformed (every length gives 0 samples)")

    def body(*o):
        e = _k_dft(ctx, x, o, cands[-1], n_of(cands[-1]))
        if axis is not None:
            return K.cast(e, y.dtype)
        a = K.wrap_index(ctx.inputs[ap][(0,) * ctx.inputs[ap].rank], x.rank)
        a = K.check(a < x.rank - 1, a)  # the last dim holds the real / imaginary parts
        for d in dead:
            a = K.check(a.ne(d), a)
        for d in cands[:-1][::-1]:
            e = K.select(a.eq(d), _k_dft(ctx, x, o, d, n_of(d)), e)
        return K.cast(e, y.dtype)

    ctx.compute(y, body)


#: the shortest f32 transform summed in f32 (a GEMM) rather than exactly in f64
GEMM_MIN_LENGTH = 64


def _dft_table(ctx, x: K.Buffer, y: K.Buffer, axis: int, n_len: int) -> bool:
    """The transform along a known axis of a constant length as a sum against a constant
    table (signal_table.py) instead of a cos and a sin per term. Below GEMM_MIN_LENGTH points,
    or in f64, the table is f64 and the sum too, so each element is the exact result rounded
    once (the node tests' atol 1e-7 on exact zeros); longer f32 transforms sum in f32, which
    the CPU runs as a GEMM against the prepacked table when the axis is the one before the
    parts (an rfft of 256 points: 11x faster than the f64 sum), with the round-off of an f32
    FFT's order (onnxruntime's). False where it does not apply (small floats, a big table)."""
    inverse, onesided = int(ctx.attr("inverse", 0)), int(ctx.attr("onesided", 0))
    channels, length = x.shape[-1], x.shape[axis]
    if y.dtype not in (DType.f32, DType.f64) or x.dtype is not y.dtype:
        return False
    if inverse and onesided:
        rows, cols = n_len // 2 + 1, n_len
    else:
        rows, cols = n_len, y.shape[axis]
    acc = y.dtype if y.dtype is DType.f32 and n_len >= GEMM_MIN_LENGTH else DType.f64
    if not isinstance(cols, int) or not table_fits(rows, cols, channels, acc.np.itemsize):
        return False
    if inverse and onesided:
        data = irfft_table(n_len, channels, acc.np)
    else:
        data = twiddle_table(n_len, cols, channels, 1.0 if inverse else -1.0, None, acc.np,
                             1.0 / n_len if inverse else 1.0)
    table = ctx.const(data, "twiddles")
    n, c = Var("n"), Var("c")
    count = K.minimum(K.dim_to_expr(length), rows)  # the signal cut or zero-padded to the table

    def body(*o):
        ch = c if channels == 2 else K.Const(0, DType.i64)
        idx = (*o[:axis], n, *o[axis + 1:-1], ch)
        axes = [(n, count), (c, 2)] if channels == 2 else [(n, count)]
        return K.cast(K.rsum(axes, K.cast(x[idx], acc) * table[(n, ch, o[axis], o[-1])]), y.dtype)

    ctx.compute(y, body)
    return True


define("onnx.DFT", infer=_dft_infer, reference=_dft_ref, lower=_dft_lower, kind="opaque", arity=(1, 3),
       math=dft)


# ---- Hann / Hamming / Blackman windows -------------------------------------------------------------
#
# w[n] = sum_k a_k cos(2 pi k n / D), n < size, D = size (periodic, the default) or size - 1.
# The size is an input: a constant (or a value shape inference knows) gives a static length;
# one only the run knows gives a data-dependent dim (not compiled).

#: the cosine coefficients a_k of each window
_WINDOWS = {"HannWindow": (0.5, -0.5), "HammingWindow": (25 / 46, -21 / 46),
            "BlackmanWindow": (0.42, -0.5, 0.08)}


def window(name: str, size: int, periodic: bool, dtype) -> np.ndarray:
    n = np.arange(size, dtype=np.float64)
    d = size if periodic else size - 1
    with np.errstate(divide="ignore", invalid="ignore"):
        w = sum(c * np.cos(2 * np.pi * k * n / d) for k, c in enumerate(_WINDOWS[name]))
    return np.asarray(w).astype(dtype)


def _window_op(name: str) -> None:
    def infer(ctx: InferCtx):
        t = ctx.in_types[0]
        if t.dtype not in (DType.i32, DType.i64) or t.rank > 1 or (t.rank == 1 and t.shape[0] != 1):
            raise ctx.error(f"size must be an int32 / int64 scalar, got {t}")
        known = ctx.known_ints(0)
        if known is not None and known[0] < 0:
            raise ctx.error(f"size must be >= 0, got {known[0]}")
        n = known[0] if known is not None else fresh_dim(ctx, "window_size", "size input")
        return [TensorType(onnx_dtype(ctx.attr("output_datatype", 1)), (n,))]

    def reference(ctx: RefCtx, size):
        dt = ctx.out_type().dtype.np
        return [window(name, int(np.asarray(size).reshape(-1)[0]), bool(ctx.attr("periodic", 1)), dt)]

    def lower(ctx) -> None:
        y = ctx.out(0)
        size = K.cast(K.dim_to_expr(y.shape[0]), DType.f64)
        d = size if ctx.attr("periodic", 1) else size - 1.0

        def body(i):
            th = K.cast(i, DType.f64) * (2.0 * math.pi) / d
            acc = None
            for k, c in enumerate(_WINDOWS[name]):
                term = K.Const(c, DType.f64) if k == 0 else K.unary("cos", th * float(k)) * c
                acc = term if acc is None else acc + term
            return K.cast(acc, y.dtype)

        ctx.compute(y, body)

    define(f"onnx.{name}", infer=infer, reference=reference, lower=lower, kind="opaque", arity=1, math=window)


for _name in _WINDOWS:
    _window_op(_name)
