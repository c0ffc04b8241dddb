"""kernel/border.py: the interior/border split of guarded expressions along one var."""

from __future__ import annotations

from onnxcc.ir import DType, sym
from onnxcc.kernel import KernelProgram, Var, select
from onnxcc.kernel.border import interior_split
from onnxcc.kernel.expr import Select, walk

F32 = DType.f32


def _x():
    p = KernelProgram.new("b", ["H", "W"])
    return p.input("X", F32, (sym("H"), sym("W")))


def test_conv_guard_splits_into_interior_and_interval_guard():
    X = _x()
    oh, ow, kh, kw = Var("oh"), Var("ow"), Var("kh"), Var("kw")
    ih, iw = oh * 2 + kh - 1, ow * 2 + kw * 2 - 1
    e = select((ih >= 0) & (ih < 9) & (iw >= 0) & (iw < 9), X[ih, iw], 0.0)
    interior, guard = interior_split(e, "ow")
    assert not any(isinstance(n, Select) for n in walk(interior))
    assert interior == X[ih, iw]
    assert guard == e.cond


def test_non_affine_or_unguarded_expressions_are_not_split():
    X = _x()
    ow, oh = Var("ow"), Var("oh")
    assert interior_split(X[oh, ow], "ow") is None  # nothing to split
    assert interior_split(select(oh < 3, X[oh, ow], 0.0), "ow") is None  # guard does not move with ow
    sq = select(ow * ow < 5, X[oh, ow], 0.0)  # not affine in ow: not an interval
    assert interior_split(sq, "ow") is None
    dv = select(ow // 2 < 5, X[oh, ow], 0.0)
    assert interior_split(dv, "ow") is None
