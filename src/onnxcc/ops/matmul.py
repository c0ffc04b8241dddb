"""Contractions: MatMul (numpy semantics: 1-D operands, broadcast batch dims), Gemm,
MatMulInteger and Einsum."""

from __future__ import annotations

import numpy as np

from ..ir import DType, TensorType
from ..kernel import Const, Var, broadcast_indices, cast, rsum
from .elementwise import cast_out, same_dtype, unidirectional, widen
from .half_as_f32 import lowered_in_f32
from .int8_gemm import vnni_matmul
from .int_gemm import transposed_b_loader
from .registry import InferCtx, RefCtx, define, onnx_inputs
from .traits import PadRule, set_cost, set_pad


def matmul_shape(ctx: InferCtx, a: tuple, b: tuple) -> tuple:
    """numpy.matmul's result shape; records or checks the contraction dim equality."""
    if not a or not b:
        raise ctx.error(f"operands must have rank >= 1, got ranks {len(a)} and {len(b)}")
    a2 = (1,) + tuple(a) if len(a) == 1 else tuple(a)
    b2 = tuple(b) + (1,) if len(b) == 1 else tuple(b)
    ctx.require_eq(a2[-1], b2[-2], "inner dim (a dim -1 vs b dim -2)")
    batch = ctx.broadcast(a2[:-2], b2[:-2])
    out = batch + ((a2[-2],) if len(a) > 1 else ()) + ((b2[-1],) if len(b) > 1 else ())
    return out


def _matmul_infer(ctx: InferCtx):
    dt = same_dtype(ctx)
    return [TensorType(dt, matmul_shape(ctx, ctx.in_types[0].shape, ctx.in_types[1].shape))]


def matmul_compute(ctx, out, a_shape, b_shape, load_a, load_b) -> None:
    """`out = a @ b` with numpy.matmul semantics as ONE compute whose body is a single `rsum`
    over the contraction: 1-D operands (prepended / appended 1 dim, dropped from the result)
    and broadcast batch dims. `load_a(idx)` / `load_b(idx)` turn an operand index into the
    loaded (and possibly shifted / cast) element, so MatMulInteger reuses this."""
    ra, rb = len(a_shape), len(b_shape)
    nbatch = out.rank - (ra > 1) - (rb > 1)
    k = Var("k")

    def body(*ix):
        batch, rest = ix[:nbatch], ix[nbatch:]
        ai = (*broadcast_indices(batch, a_shape[:-2]), rest[0], k) if ra > 1 else (k,)
        bi = (*broadcast_indices(batch, b_shape[:-2]), k, rest[-1]) if rb > 1 else (k,)
        return rsum([(k, a_shape[-1])], load_a(ai) * load_b(bi))

    ctx.compute(out, body)


def _matmul_lower(ctx) -> None:
    if lowered_in_f32(ctx, _matmul_lower):  # half precision: on f32 buffers (the GEMM path)
        return
    a, b = ctx.inputs
    matmul_compute(ctx, ctx.out(0), a.shape, b.shape, lambda i: a[i], lambda i: b[i])


define("onnx.MatMul", infer=_matmul_infer, kind="matmul", arity=2, math=np.matmul, lower=_matmul_lower,
       reference=lambda ctx, a, b: [cast_out(ctx, np.matmul(widen(a), widen(b)))])


# ---- Gemm ------------------------------------------------------------------------------------------


def gemm(a, b, c=None, alpha: float = 1.0, beta: float = 1.0, trans_a: int = 0, trans_b: int = 0):
    """Y = alpha * A' @ B' + beta * C (C broadcast to the result)."""
    y = alpha * ((a.T if trans_a else a) @ (b.T if trans_b else b))
    return y if c is None else y + beta * c


def _gemm_infer(ctx: InferCtx):
    ta, tb = ctx.in_types[0], ctx.in_types[1]
    dt = same_dtype(ctx)
    if ta.rank != 2 or tb.rank != 2:
        raise ctx.error(f"a and b must be 2-D, got {ta} and {tb}")
    m, k = ta.shape[::-1] if ctx.attr("transA", 0) else ta.shape
    k2, n = tb.shape[::-1] if ctx.attr("transB", 0) else tb.shape
    ctx.require_eq(k, k2, "inner dim (a's k vs b's k)")
    if len(ctx.in_types) > 2:
        unidirectional(ctx, (m, n), ctx.in_types[2].shape, "c")
    return [TensorType(dt, (m, n))]


def _gemm_ref(ctx: RefCtx, a, b, c=None):
    y = gemm(widen(a), widen(b), None if c is None else widen(c), float(ctx.attr("alpha", 1.0)),
             float(ctx.attr("beta", 1.0)), ctx.attr("transA", 0), ctx.attr("transB", 0))
    return [cast_out(ctx, y)]


def _scalar(value: float, dt: DType):
    """An attribute scale as a constant of the op's dtype (ints keep integral values)."""
    return Const(float(value) if dt.is_float else int(value), dt)


def _gemm_lower(ctx) -> None:
    a, b = ctx.inputs[0], ctx.inputs[1]
    c = ctx.inputs[2] if len(ctx.inputs) > 2 else None
    y = ctx.out(0)
    ta, tb = ctx.attr("transA", 0), ctx.attr("transB", 0)
    alpha, beta = float(ctx.attr("alpha", 1.0)), float(ctx.attr("beta", 1.0))
    kdim = a.shape[0] if ta else a.shape[1]
    k = Var("k")

    def body(i, j):
        # the contraction is one rsum; alpha and the C epilogue stay outside it
        acc = rsum([(k, kdim)], a[(k, i) if ta else (i, k)] * b[(j, k) if tb else (k, j)])
        if alpha != 1.0:
            acc = _scalar(alpha, y.dtype) * acc
        if c is not None and beta != 0.0:
            cv = c[broadcast_indices((i, j), c.shape)]
            acc = acc + (cv if beta == 1.0 else _scalar(beta, y.dtype) * cv)
        return acc

    ctx.compute(y, body)


define("onnx.Gemm", infer=_gemm_infer, reference=_gemm_ref, kind="matmul", arity=(2, 3), math=gemm,
       lower=_gemm_lower)


# ---- MatMulInteger ---------------------------------------------------------------------------------


def matmul_integer(a, b, a_zero=None, b_zero=None):
    """(A - a_zero) @ (B - b_zero) in int32; a_zero per row of A (or scalar), b_zero per column."""
    a = a.astype(np.int32)
    b = b.astype(np.int32)
    if a_zero is not None:
        az = a_zero.astype(np.int32).reshape(-1)
        a = a - (az[0] if az.size == 1 else az.reshape(-1, 1))
    if b_zero is not None:
        b = b - b_zero.astype(np.int32)
    return np.matmul(a, b)


def _mmi_infer(ctx: InferCtx):
    ta, tb = ctx.in_types[0], ctx.in_types[1]
    for t in (ta, tb):
        if t.dtype not in (DType.u8, DType.i8):
            raise ctx.error(f"operands must be u8 or i8, got {t.dtype.value}")
    return [TensorType(DType.i32, matmul_shape(ctx, ta.shape, tb.shape))]


def _mmi_ref(ctx: RefCtx, *args):
    a, b, az, bz = (onnx_inputs(ctx.op, list(args)) + [None, None])[:4]
    return [matmul_integer(a, b, az, bz)]


def _zp_index(zp, idx, per_row: bool) -> tuple:
    """The zero point's index for operand index `idx`: A's is a scalar, one value per row of A
    (1-D, length M) or broadcast like A; B's a scalar, one per column (1-D, length N) or
    broadcast like B."""
    if zp.rank == 0:
        return ()
    if all(isinstance(d, int) and d == 1 for d in zp.shape):
        return (0,) * zp.rank
    if per_row and zp.rank == 1:
        return (idx[-2],)
    return broadcast_indices(idx, zp.shape)


def _zero_point_loader(ctx, operand: int, zp, per_row: bool):
    """`idx -> i32(X[idx]) - i32(zp[...])` for MatMulInteger's A (per_row) or B operand; an
    all-zero constant zero point is dropped."""
    x = ctx.inputs[operand]
    data = None if zp is None else ctx.const_value(ctx.inputs.index(zp))
    if zp is None or (data is not None and not np.any(data)):
        zp = None
    if not per_row:
        # B (rank >= 2) is read from a transposed copy, made at compile time when constant (int_gemm)
        zpv = None if zp is None else (lambda idx: zp[_zp_index(zp, idx, False)])
        fast = transposed_b_loader(ctx, operand, zpv)
        if fast is not None:
            return fast
    if zp is None:
        return lambda idx: cast(x[idx], DType.i32)
    # the difference in i16 (it lies in [-255, 255]) then widened: LLVM matches the i16 products
    # summed into i32 to vpmaddwd / vpdpwssd
    i16 = DType.i16
    return lambda idx: cast(cast(x[idx], i16) - cast(zp[_zp_index(zp, idx, per_row)], i16), DType.i32)


def _mmi_lower(ctx) -> None:
    a, b, az, bz = (onnx_inputs(ctx.op, list(ctx.inputs)) + [None, None])[:4]
    if vnni_matmul(ctx, ctx.out(0), a, az, b, bz):  # constant B on the VNNI GEMM (int8_gemm.py)
        return
    matmul_compute(ctx, ctx.out(0), a.shape, b.shape, _zero_point_loader(ctx, 0, az, True),
                   _zero_point_loader(ctx, 1, bz, False))


define("onnx.MatMulInteger", infer=_mmi_infer, reference=_mmi_ref, kind="matmul", arity=(2, 4),
       math=matmul_integer, lower=_mmi_lower)


# ---- Einsum --------------------------------------------------------------------------------------


def einsum_terms(equation: str, ranks: list[int], fail) -> tuple[list[list[str]], list[str]]:
    """Expand an einsum equation into per-operand label lists and the output labels.

    An ellipsis becomes labels "...0", "...1", ... aligned from the right across operands.
    """
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    specs = lhs.split(",")
    if len(specs) != len(ranks):
        raise fail(f"equation {equation!r} names {len(specs)} operands, got {len(ranks)}")
    ell = max([r - (len(s) - 3) for s, r in zip(specs, ranks) if "..." in s], default=0)

    def expand(spec: str, rank: int | None) -> list[str]:
        if "..." not in spec:
            if rank is not None and len(spec) != rank:
                raise fail(f"term {spec!r} has {len(spec)} labels for an operand of rank {rank}")
            return list(spec)
        head, _, tail = spec.partition("...")
        k = ell if rank is None else rank - len(head) - len(tail)
        if k < 0:
            raise fail(f"term {spec!r} has too many labels for rank {rank}")
        return list(head) + [f"...{ell - k + j}" for j in range(k)] + list(tail)

    terms = [expand(s, r) for s, r in zip(specs, ranks)]
    if arrow:
        out = expand(rhs, None)
    else:
        counts: dict[str, int] = {}
        for t in terms:
            for lab in t:
                counts[lab] = counts.get(lab, 0) + 1
        out = [f"...{j}" for j in range(ell)] + sorted(lab for lab, n in counts.items()
                                                      if n == 1 and not lab.startswith("..."))
    return terms, out


def _einsum_infer(ctx: InferCtx):
    dt = same_dtype(ctx)
    eq = ctx.attr("equation")
    if not isinstance(eq, str):
        raise ctx.error("attribute 'equation' is required")
    terms, out = einsum_terms(eq, [t.rank for t in ctx.in_types], ctx.error)
    sizes: dict[str, object] = {}
    for t, labels in zip(ctx.in_types, terms):
        for lab, d in zip(labels, t.shape):
            ell = lab.startswith("...")
            if lab not in sizes or (ell and isinstance(sizes[lab], int) and sizes[lab] == 1):
                sizes[lab] = d
            elif not (ell and isinstance(d, int) and d == 1):
                sizes[lab] = ctx.require_eq(sizes[lab], d, f"einsum label {lab!r}")
    missing = [lab for lab in out if lab not in sizes]
    if missing:
        raise ctx.error(f"output label {missing[0]!r} does not appear in any operand")
    return [TensorType(dt, tuple(sizes[lab] for lab in out))]


def _einsum_lower(ctx) -> None:
    """Any einsum as one compute: output labels are the domain, every other label a var of
    one `rsum` over the product of the operand loads (repeated labels index diagonals; an
    operand dim that is the literal 1 under an ellipsis label broadcasts, index 0)."""
    xs = ctx.inputs
    terms, out_labels = einsum_terms(ctx.attr("equation"), [x.rank for x in xs], ctx.unsupported)
    sizes: dict[str, object] = {}
    for x, labels in zip(xs, terms):
        for lab, d in zip(labels, x.shape):
            if lab not in sizes or (isinstance(sizes[lab], int) and sizes[lab] == 1):
                sizes[lab] = d
    reduced = [lab for labels in terms for lab in labels if lab not in out_labels]
    reduced = list(dict.fromkeys(reduced))
    rvars = {lab: Var(f"r{j}") for j, lab in enumerate(reduced)}

    def body(*ix):
        env = dict(zip(out_labels, ix)) | rvars
        prod = None
        for x, labels in zip(xs, terms):
            idx = tuple(Const(0, DType.i64) if isinstance(d, int) and d == 1 else env[lab]
                        for lab, d in zip(labels, x.shape))
            v = x[idx]
            prod = v if prod is None else prod * v
        return rsum([(rvars[lab], sizes[lab]) for lab in reduced], prod) if reduced else prod

    ctx.compute(ctx.out(0), body)


define("onnx.Einsum", infer=_einsum_infer, kind="opaque", arity=(1, None), math=np.einsum,
       lower=_einsum_lower,
       reference=lambda ctx, *xs: [cast_out(ctx, np.einsum(ctx.attr("equation"), *[widen(x) for x in xs]))])


# ---- bucketing: a contraction over a padded axis needs zeros in one operand
set_pad(PadRule("matmul"), "onnx.MatMul")
set_pad(PadRule("gemm"), "onnx.Gemm")


# ---- cost (multiply-add = 2)
def _matmul_flops(op):
    return 2 * op.results[0].type.numel() * op.operands[0].type.shape[-1]


def _gemm_flops(op):
    a, out = op.operands[0].type, op.results[0].type.numel()
    k = a.shape[0] if op.attrs.get("transA", 0) else a.shape[1]
    return 2 * out * k + out


set_cost(_matmul_flops, "onnx.MatMul")
set_cost(_gemm_flops, "onnx.Gemm")
