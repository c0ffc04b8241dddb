"""TfIdfVectorizer (opset 9) over integer token ids.

The pool of n-grams is an attribute, so the matching compiles. What the op counts, stated
without the trie onnxruntime builds: the pool lists n-grams by size (ngram_counts[s - 1] is
where the size-s ones start in pool_int64s); n-gram number g (numbered across all sizes)
feeds output column ngram_indexes[g] with weight weights[g] (onnxruntime's reading; onnx's
reference indexes the weights by column). Only sizes in [min_gram_length, max_gram_length]
count. In a row of C tokens an n-gram of size s occurs at (start p, skip d) when
X[p + k*d] == gram[k] for every k < s, with p + (s-1)*d < C; unigrams count with d = 1 only,
longer n-grams with every d in 1 .. max_skip_count + 1. A pool holding the same n-gram twice
counts it under the later number (as the trie's overwrite does).

Lowering: per output column a sum, over the n-grams feeding it, of their occurrence counts
(a reduction over starts per skip, a product of equalities per position), then the weighting.
The kernel grows with the pool. A string pool (pool_strings, string X) numbers its distinct
strings (`vocab`) and counts over those numbers: X's strings become their numbers first (a
lookup, strings.py's `string_ids`; -1, which no n-gram holds, for the rest).
"""

from __future__ import annotations

import itertools

import numpy as np

from .. import kernel as K
from ..errors import UnsupportedOp
from ..ir import DType, TensorType
from ..kernel import Expr
from .dual_math import KX, NP
from .registry import InferCtx, RefCtx, define
from .strings import string_ids

_MODES = ("TF", "IDF", "TFIDF")


class _Pool:
    """The attributes, checked: `grams` maps each counted n-gram (a tuple) to its output column."""

    def __init__(self, attr, fail, unsupported):
        strings = attr("pool_strings")
        if strings is not None and attr("pool_int64s") is not None:
            raise fail("has both pool_strings and pool_int64s")
        #: a string pool's distinct strings, numbered in first-seen order (None: an int pool)
        self.vocab: list[str] | None = None
        if strings is not None:
            self.vocab = list(dict.fromkeys(str(w) for w in strings))
            number = {w: k for k, w in enumerate(self.vocab)}
            pool = [number[str(w)] for w in strings]
        else:
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
        weights = None if weights is None or len(weights) == 0 else [float(w) for w in weights]
        if weights is not None and len(weights) != len(indexes):
            raise fail(f"weights has {len(weights)} entries, ngram_indexes {len(indexes)}")
        #: each counted n-gram -> (its output column, its weight)
        self.grams: dict[tuple[int, ...], tuple[int, float]] = {}
        number = 0
        for s, start in enumerate(counts, start=1):
            end = counts[s] if s < len(counts) else len(pool)
            for k in range((end - start) // s):
                gram = tuple(pool[start + k * s: start + (k + 1) * s])
                if self.lo <= s <= self.hi:
                    if number >= len(indexes):
                        raise fail(f"ngram_indexes has {len(indexes)} entries, the pool more n-grams")
                    self.grams[gram] = (indexes[number], 1.0 if weights is None else weights[number])
                number += 1
        if self.mode == "IDF":
            # IDF writes the weight of the column's last hit in onnxruntime's scan order: only
            # columns whose n-grams share one weight have a result independent of that order
            seen: dict[int, float] = {}
            for col, w in self.grams.values():
                if seen.setdefault(col, w) != w:
                    raise unsupported(f"IDF with n-grams of different weights in output column {col} (its "
                                      "result would depend on the order of the hits)")

    def skips(self, size: int) -> range:
        return range(1, 2) if size == 1 else range(1, self.skip + 2)

    def by_col(self) -> dict[int, list[tuple[tuple[int, ...], float]]]:
        out: dict[int, list[tuple[tuple[int, ...], float]]] = {}
        for gram, (col, w) in self.grams.items():
            out.setdefault(col, []).append((gram, w))
        return out

    def column(self, counts: list, weights: list[float], m):
        """A column's value from the counts of the n-grams feeding it (m: numpy or the kernel):
        TF sums the counts, TFIDF the counts times the n-grams' weights (per n-gram, as
        onnxruntime applies them), IDF is the (shared) weight when any of them occurs."""
        if self.mode == "TF":
            return sum(counts[1:], counts[0])
        if self.mode == "TFIDF":
            terms = [c * w for c, w in zip(counts, weights, strict=True)]
            return sum(terms[1:], terms[0])
        total = sum(counts[1:], counts[0])
        return m.where(total > 0, weights[0], 0.0)


def _pool(ctx, fail) -> _Pool:
    def unsupported(msg: str) -> UnsupportedOp:
        return UnsupportedOp(ctx.op.opname, ctx.op.dialect, ctx.op.loc, msg)

    return _Pool(ctx.attr, fail, unsupported)


def _tfidf_infer(ctx: InferCtx) -> list[TensorType]:
    x = ctx.in_types[0]
    p = _pool(ctx, ctx.error)
    want = (DType.string,) if p.vocab is not None else (DType.i32, DType.i64)
    if x.dtype not in want:
        raise ctx.error(f"X must be {' or '.join(d.value for d in want)} (the pool's kind), got {x.dtype.value}")
    if x.rank not in (1, 2):
        raise ctx.error(f"X must be [C] or [B, C], got {x}")
    shape = (x.shape[0], p.width) if x.rank == 2 else (p.width,)
    return [TensorType(DType.f32, shape)]


def tfidf(x: np.ndarray, p: _Pool) -> np.ndarray:
    rows = x.reshape(1, -1) if x.ndim < 2 else x
    out = np.zeros((rows.shape[0], p.width), dtype=np.float64)
    for col, grams in p.by_col().items():
        counts = []
        for gram, _ in grams:
            s, c = len(gram), np.zeros(rows.shape[0])
            for d in p.skips(s):
                for start in range(rows.shape[1] - (s - 1) * d):
                    c += np.all(rows[:, start: start + (s - 1) * d + 1: d] == np.array(gram), axis=1)
            counts.append(c)
        out[:, col] = p.column(counts, [w for _, w in grams], NP)
    out = out.astype(np.float32)
    return out if x.ndim == 2 else out.reshape(-1)


def _tfidf_ref(ctx: RefCtx, x):
    p = _pool(ctx, ValueError)
    x = np.asarray(x)
    if p.vocab is not None:  # strings to their numbers in the pool, -1 for the rest
        number = {w: k for k, w in enumerate(p.vocab)}
        x = np.array([number.get(str(w), -1) for w in x.reshape(-1)], np.int64).reshape(x.shape)
    return [tfidf(x, p)]


def _tfidf_lower(ctx) -> None:
    x, y = ctx.inputs[0], ctx.out(0)
    p = _pool(ctx, ctx.unsupported)
    if p.vocab is not None:
        x = string_ids(ctx, x, p.vocab)
    length = K.dim_to_expr(x.shape[-1])
    by_col = p.by_col()

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
        grams = by_col[col]
        return K.lift(p.column([count(row, g) for g, _ in grams], [w for _, w in grams], KX), DType.f64)

    def body(*o):
        row, j = (o[0], o[1]) if x.rank == 2 else (None, o[0])
        e: Expr = K.Const(0.0, DType.f64)
        for col in sorted(by_col):
            e = K.select(j.eq(col), column(row, col), e)
        return K.cast(e, y.dtype)

    ctx.compute(y, body)


define("onnx.TfIdfVectorizer", infer=_tfidf_infer, reference=_tfidf_ref, lower=_tfidf_lower, kind="opaque",
       arity=1, math=tfidf, strings=True)
