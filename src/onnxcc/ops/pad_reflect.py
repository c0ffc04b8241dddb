"""The reflect Pad's source index along one axis.

The general form folds any offset into the mirror image, whose period is 2 (n - 1): a
remainder per element, which also hides from LLVM that the interior reads are contiguous
(the loads become gathers; on convs1d at 3200 samples that Pad + LeakyRelu kernel took a
third of the run). When the pads are provably at most n - 1 (ONNX's usual case, and what
onnxruntime requires) one reflection at each end suffices: no remainder, and the interior
branch is the identity.
"""

from __future__ import annotations

from ..kernel import Const as KConst
from ..kernel import maximum, select


def _const_int(e) -> int | None:
    return int(e.value) if isinstance(e, KConst) else None


def single_reflection_ok(symbols, dim, begin, end) -> bool:
    """Whether both pads `begin`, `end` (kernel exprs) are constants no larger than the
    cropped extent minus one along an axis of size `dim` (int or sympy), proved from the
    symbols' ranges; negative pads crop, and the mirror then works on the cropped range."""
    b, e = _const_int(begin), _const_int(end)
    if b is None or e is None or dim is None:
        return False
    need = max(b, e, 0) + 1 + max(-b, 0) + max(-e, 0)  # reach + 1 <= cropped length
    if isinstance(dim, int):
        return need <= dim
    return symbols is not None and symbols.prove_le(need, dim) is True


def reflect_index(i, n, single: bool):
    """Source index in [0, n) for padded-axis offset `i` (in [-begin, n - 1 + end])."""
    if single:
        return select(i < 0, 0 - i, select(i < n, i, 2 * (n - 1) - i))
    m = i % maximum(2 * (n - 1), 1)
    return select(m < n, m, 2 * (n - 1) - m)

