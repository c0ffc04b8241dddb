"""TfIdfVectorizer (opset 9) over integer token ids.

The pool of n-grams is an attribute, so the matching compiles. What the op counts, stated
without the trie onnxruntime builds: the pool lists n-grams by size (ngram_counts[s - 1] is
where the size-s ones start in pool_int64s); n-gram number g (numbered across all sizes)
feeds output column ngram_indexes[g]. Only sizes in [min_gram_length, max_gram_length]
count. In a row of C tokens an n-gram of size s occurs at (start p, skip d) when
X[p + k*d] == gram[k] for every k < s, with p + (s-1)*d < C; unigrams count with d = 1 only,
longer n-grams with every d in 1 .. max_skip_count + 1. A pool holding the same n-gram twice
counts it under the later number (as the trie's overwrite does).

Lowering: per output column a sum, over the n-grams feeding it, of their occurrence counts
(a reduction over starts per skip, a product of equalities per position), then the weighting.
The kernel grows with the pool; string pools are refused (no string tensors).
"""

from __future__ import annotations

import itertools

import numpy as np

from .. import kernel as K
from ..ir import DType, TensorType
from ..kernel import Expr
from .registry import InferCtx, RefCtx, define

_MODES = ("TF", "IDF", "TFIDF")


class _Pool:
    """The attributes, checked: `grams` maps each counted n-gram (a tuple) to its output column."""

    def __init__(self, attr, fail):
        if attr("pool_strings") is not None:
            raise fail("pool_strings needs string tensors, which onnxcc does not support")
        pool = [int(v) for v in (attr("pool_int64s") or [])]
        counts = [int(v) for v in (attr("ngram_counts") or [])]
        indexes = [int(v) for v in (attr("ngram_indexes") or [])]
        self.mode = attr("mode", None)
        if self.mode not in _MODES:
            raise fail(f"mode must be one of {', '.join(_MODES)}, got {self.mode!r}")
        self.lo, self.hi = int(attr("min_gram_length", 0)), int(attr("max_gram_length", 0))
        self.skip = int(attr("max_skip_count", 0))
        if not 1 <= self.lo <= self.hi or self.skip < 0:
            raise fail(f"need 1 <= min_gram_length ({self.lo}) <= max_gram_length ({self.hi}) "
                       f"and max_skip_count >= 0 ({self.skip})")
        if not indexes:
            raise fail("ngram_indexes is empty")
        self.width = max(indexes) + 1
        if min(indexes) < 0:
            raise fail("ngram_indexes holds a negative column")
        if any(b < a for a, b in itertools.pairwise(counts)) or (counts and not 0 <= counts[-1] <= len(pool)):
            raise fail("ngram_counts must be ascending offsets into the pool")
        weights = attr("weights")
        self.weights = None if weights is None or len(weights) == 0 else [float(w) for w in weights]
        if self.weights is not None and len(self.weights) < self.width:
            raise fail(f"weights has {len(self.weights)} entries for {self.width} columns")
        self.grams: dict[tuple[int, ...], int] = {}
        number = 0
        for s, start in enumerate(counts, start=1):
            end = counts[s] if s < len(counts) else len(pool)
            for k in range((end - start) // s):
                gram = tuple(pool[start + k * s: start + (k + 1) * s])
                if self.lo <= s <= self.hi:
                    if number >= len(indexes):
                        raise fail(f"ngram_indexes has {len(indexes)} entries, the pool more n-grams")
                    self.grams[gram] = indexes[number]
                number += 1

    def skips(self, size: int) -> range:
        return range(1, 2) if size == 1 else range(1, self.skip + 2)

    def weigh(self, count, col: int, m):
        """The output value of a column from its count (m: numpy or the kernel)."""
        w = 1.0 if self.weights is None else self.weights[col]
        if self.mode == "TF":
            return count
        if self.mode == "IDF":
            return m.where(count > 0, w, 0.0)
        return count * w


def _pool(ctx, fail) -> _Pool:
    return _Pool(ctx.attr, fail)


def _tfidf_infer(ctx: InferCtx) -> list[TensorType]:
    x = ctx.in_types[0]
    if x.dtype not in (DType.i32, DType.i64):
        raise ctx.error(f"X must be int32 or int64 token ids, got {x.dtype.value}")
    if x.rank not in (1, 2):
        raise ctx.error(f"X must be [C] or [B, C], got {x}")
    p = _pool(ctx, ctx.error)
    shape = (x.shape[0], p.width) if x.rank == 2 else (p.width,)
    return [TensorType(DType.f32, shape)]


class _Np:
    @staticmethod
    def where(c, a, b):
        return np.where(c, a, b)


class _Kx:
    @staticmethod
    def where(c, a, b):
        return K.select(c, K.lift(a, DType.f64), K.lift(b, DType.f64))


def tfidf(x: np.ndarray, p: _Pool) -> np.ndarray:
    rows = x.reshape(1, -1) if x.ndim < 2 else x
    counts = np.zeros((rows.shape[0], p.width), dtype=np.float64)
    for r, row in enumerate(rows):
        c = len(row)
        for gram, col in p.grams.items():
            s = len(gram)
            for d in p.skips(s):
                for start in range(c - (s - 1) * d):
                    if all(row[start + k * d] == gram[k] for k in range(s)):
                        counts[r, col] += 1
    out = np.stack([p.weigh(counts[:, col], col, _Np) for col in range(p.width)], -1).astype(np.float32)
    return out if x.ndim == 2 else out.reshape(-1)


def _tfidf_ref(ctx: RefCtx, x):
    return [tfidf(np.asarray(x), _pool(ctx, ValueError))]


def _tfidf_lower(ctx) -> None:
    x, y = ctx.inputs[0], ctx.out(0)
    p = _pool(ctx, ctx.unsupported)
    length = K.dim_to_expr(x.shape[-1])
    by_col: dict[int, list[tuple[int, ...]]] = {}
    for gram, col in p.grams.items():
        by_col.setdefault(col, []).append(gram)

    def token(row, pos) -> Expr:
        return K.cast(x[(row, pos)] if x.rank == 2 else x[(pos,)], DType.i64)

    def count(row, gram) -> Expr:
        s, total = len(gram), None
        for d in p.skips(s):
            start = K.fresh_var("p")
            hit = None
            for k, tok in enumerate(gram):
                e = token(row, start + k * d).eq(tok)
                hit = e if hit is None else hit & e
            assert hit is not None  # n-grams have at least one token
            n = K.rsum([(start, K.maximum(length - (s - 1) * d, 0))],
                       K.select(hit, K.Const(1.0, DType.f64), K.Const(0.0, DType.f64)))
            total = n if total is None else total + n
        assert total is not None
        return total

    def column(row, col: int) -> Expr:
        grams = by_col.get(col, [])
        c = K.Const(0.0, DType.f64)
        for g in grams:
            c = c + count(row, g)
        return p.weigh(c, col, _Kx) if grams else K.Const(0.0, DType.f64)

    def body(*o):
        row, j = (o[0], o[1]) if x.rank == 2 else (None, o[0])
        e: Expr = K.Const(0.0, DType.f64)
        for col in sorted(by_col):
            e = K.select(j.eq(col), K.lift(column(row, col), DType.f64), e)
        return K.cast(e, y.dtype)

    ctx.compute(y, body)


define("onnx.TfIdfVectorizer", infer=_tfidf_infer, reference=_tfidf_ref, lower=_tfidf_lower, kind="opaque",
       arity=1, math=tfidf)
