"""Row normalisation (softmax) as two passes over each row: which computes match
(kernel/rownorm.py), one exp per element in the emitted code (codegen/cpu/rownorm.py), the
numbers on odd sizes, serial and parallel, and the in-place slot it may share."""

from __future__ import annotations

import re

import numpy as np
import pytest

from onnxcc.codegen.cpu.jit import JitKernel
from onnxcc.ir import DType, canon, sym
from onnxcc.kernel import KernelProgram, Var, cast, exp, plan, rmax, rsum, select
from onnxcc.kernel.rownorm import match_row_norm
from onnxcc.kernel.schedule import TargetInfo, compute_work, schedule_program

F32, F16 = DType.f32, DType.f16
N, R = sym("N"), sym("R")
rng = np.random.default_rng(7)


def _softmax_program(out_dtype: DType = F32, guarded: bool = False) -> KernelProgram:
    """Z[r, j] = exp(X[r, j] - max) / sum(exp(X[r, d] - max)), optionally with Attention's
    empty-row guard on the divisor and an output cast."""
    p = KernelProgram.new("sm", ["R", "N"])
    X = p.input("X", F32, (R, N))
    Z = p.output("Z", out_dtype, (R, N))
    c, d = Var("c"), Var("d")

    def body(r, j):
        mx = rmax([(c, N)], X[r, c])
        s = rsum([(d, N)], exp(X[r, d] - mx))
        if guarded:
            s = select(s.eq(0.0), 1.0, s)
        return cast(exp(X[r, j] - mx) / s, out_dtype)

    p.compute(Z, body)
    return p


def test_match_row_norm_shapes():
    (c,) = _softmax_program().computes()
    rn = match_row_norm(c, F32)
    assert rn is not None and rn.denom == rn.rowsum
    (c,) = _softmax_program(guarded=True).computes()
    rn = match_row_norm(c, F32)
    assert rn is not None and rn.denom != rn.rowsum  # the guard stays around the sum
    # an f16 output would round the stored numerator before the division: not matched
    (c,) = _softmax_program(F16).computes()
    assert match_row_norm(c, F16) is None
    # a divisor that sums something else is not a row normalisation
    p = KernelProgram.new("other", ["R", "N"])
    X, Y = p.input("X", F32, (R, N)), p.input("Y", F32, (R, N))
    Z = p.output("Z", F32, (R, N))
    d = Var("d")
    p.compute(Z, lambda r, j: exp(X[r, j]) / rsum([(d, N)], exp(Y[r, d])))
    (c,) = p.computes()
    assert match_row_norm(c, F32) is None


def _exp_calls(kern: JitKernel, fn: str) -> int:
    """Calls of the vector libm's exp in the unoptimised IR of `fn` (and its parallel bodies)."""
    text = "\n".join(m.group(0) for m in re.finditer(r'define[^\n]*@"?' + re.escape(fn) + r'[".(][^\n]*\n.*?\n}',
                                                     kern.llvm_ir, re.S))
    return len(re.findall(r"call [^\n]*@\"?onnxcc\.math\.exp", text))


@pytest.mark.parametrize("parallel", [False, True])
def test_one_exp_per_element_and_numbers(parallel):
    p = _softmax_program()
    schedule_program(p, TargetInfo(parallel=parallel, min_parallel_work=64))
    (c,) = p.computes()
    assert c.schedule.row_norm is not None and "row-norm" in c.schedule.describe()
    # the row statistics run once per row: a few operations per element, not a reduction's
    # worth (which sent small softmaxes to the thread pool)
    assert compute_work(c) == canon(4 * R * N)
    kern = JitKernel(p, parallel=parallel, parallel_min_work=64)
    assert _exp_calls(kern, "sm") == 1  # the plain nest has two: the row sum's and the element's
    for rows, n in ((1, 1), (3, 7), (5, 17), (2, 100), (64, 33)):
        x = (rng.standard_normal((rows, n)) * 20).astype(np.float32)
        (z,) = kern(x)
        e = np.exp(x - x.max(1, keepdims=True))
        np.testing.assert_allclose(z, e / e.sum(1, keepdims=True), rtol=2e-6, atol=1e-7)


def test_unscheduled_softmax_keeps_the_plain_nest():
    """Without a schedule (the CUDA backend's view) the same compute is the one-loop form."""
    kern = JitKernel(_softmax_program())
    assert _exp_calls(kern, "sm") == 2
    x = rng.standard_normal((3, 9)).astype(np.float32)
    (z,) = kern(x)
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(z, e / e.sum(1, keepdims=True), rtol=2e-6, atol=1e-7)


def test_guarded_rows_of_zeros_and_in_place_over_scores():
    """Attention's shape: scores staged in a temp, the numerator 0 across a dead row, the
    divisor 1 where the sum is 0. The probabilities share the scores' slot (each element is
    read by the pass that overwrites it), and the result is still exact."""
    p = KernelProgram.new("att", ["R", "N"])
    X = p.input("X", F32, (R, N))
    dead = p.input("dead", DType.bool, (R,))
    Y = p.output("Y", F32, (R,))
    S = p.temp("S", F32, (R, N))
    M = p.temp("M", F32, (R,))
    P = p.temp("P", F32, (R, N))
    c, d, u = Var("c"), Var("d"), Var("u")
    p.compute(S, lambda r, j: X[r, j] * 2.0)
    p.compute(M, lambda r: rmax([(c, N)], S[r, c]))

    def numer(r, j):
        return select(dead[r], 0.0, exp(S[r, j] - M[r]))

    def prob(r, j):
        s = rsum([(d, N)], numer(r, d))
        return numer(r, j) / select(s.eq(0.0), 1.0, s)

    p.compute(P, prob)
    p.compute(Y, lambda r: rsum([(u, N)], P[r, u] * u.cast(F32)))
    schedule_program(p, TargetInfo(parallel=False))
    assert [c.schedule.row_norm is not None for c in p.computes()] == [False, False, True, False]
    mp = plan(p)
    assert mp.offsets["S"] == mp.offsets["P"]  # in place
    kern = JitKernel(p, mp)
    for rows, n in ((4, 5), (3, 31)):
        x = rng.standard_normal((rows, n)).astype(np.float32)
        dd = np.zeros(rows, bool)
        dd[1] = True
        (y,) = kern(x, dd)
        e = np.exp(2 * x - (2 * x).max(1, keepdims=True))
        pr = np.where(dd[:, None], 0.0, e / e.sum(1, keepdims=True))
        np.testing.assert_allclose(y, (pr * np.arange(n)).sum(1), rtol=1e-5, atol=1e-6)
        assert y[1] == 0.0


@pytest.mark.parametrize("other_row", [False, True])
def test_in_place_with_an_inline_row_max(other_row):
    """The transformer's shape: the softmax's max inline (hoisted before the row's passes)
    may read the row it overwrites, so the probabilities take the scores' slot; a max that
    reads another row (here row 0, overwritten first) keeps them apart."""
    p = KernelProgram.new("inl", ["R", "N"])
    X = p.input("X", F32, (R, N))
    Y = p.output("Y", F32, (R,))
    S = p.temp("S", F32, (R, N))
    P = p.temp("P", F32, (R, N))
    c, d, u = Var("c"), Var("d"), Var("u")
    p.compute(S, lambda r, j: X[r, j] * 2.0)

    def prob(r, j):
        mx = rmax([(c, N)], S[0 if other_row else r, c])
        return exp(S[r, j] - mx) / rsum([(d, N)], exp(S[r, d] - mx))

    p.compute(P, prob)
    p.compute(Y, lambda r: rsum([(u, N)], P[r, u] * u.cast(F32)))
    schedule_program(p, TargetInfo(parallel=True, min_parallel_work=16))
    assert list(p.computes())[1].schedule.row_norm is not None
    mp = plan(p)
    assert (mp.offsets["S"] == mp.offsets["P"]) is not other_row
    kern = JitKernel(p, mp, parallel=True, parallel_min_work=16)
    for rows, n in ((3, 5), (40, 67)):
        x = rng.standard_normal((rows, n)).astype(np.float32)
        (y,) = kern(x)
        s = 2 * x
        mx = s[:1].max(1, keepdims=True) if other_row else s.max(1, keepdims=True)
        e = np.exp(s - mx)
        np.testing.assert_allclose(y, (e / e.sum(1, keepdims=True) * np.arange(n)).sum(1), rtol=1e-5, atol=1e-5)
