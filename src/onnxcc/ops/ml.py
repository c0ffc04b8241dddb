"""ai.onnx.ml ops onnxruntime runs on numeric tensors: Binarizer, ArrayFeatureExtractor,
TreeEnsemble (opset 5) and LabelEncoder (at the end of the file).

TreeEnsemble's trees are attributes, so they compile: each tree becomes one nested select
per target (a comparison per internal node, a leaf's weight where the leaf feeds that target,
the aggregate's identity where it does not), and the trees are combined with the aggregate.
The expression is as large as the tree, so huge forests make large kernels (correct, not
fast). Only post_transform NONE is compiled; the others are refused by name: onnxruntime
1.32 reads the numbers in another order than the spec (1 as LOGISTIC where the spec says
SOFTMAX, 2 as SOFTMAX), so there is no agreed answer to match.
"""

from __future__ import annotations

import numpy as np
import sympy

from .. import kernel as K
from ..errors import UnsupportedOp
from ..ir import DType, TensorType, canon
from ..kernel import Expr
from .registry import InferCtx, RefCtx, define
from .strings import lower_label_strings

ML = "ai.onnx.ml."


# ---- Binarizer: y = x > threshold, in x's type ---------------------------------------------------

def _binarizer_infer(ctx: InferCtx) -> list[TensorType]:
    x = ctx.in_types[0]
    if x.dtype is DType.bool or x.dtype.is_small:
        raise ctx.error(f"input must be a numeric tensor, got {x.dtype.value}")
    return [x]


def _binarizer_ref(ctx: RefCtx, x):
    return [(x > ctx.attr("threshold", 0.0)).astype(x.dtype)]


def _binarizer_lower(ctx) -> None:
    x, y = ctx.inputs[0], ctx.out(0)
    t = float(ctx.attr("threshold", 0.0))
    # compare in f64 so an integer input meets a fractional threshold exactly
    ctx.compute(y, lambda *ix: K.cast(K.cast(x[ix], DType.f64) > t, y.dtype))


define(ML + "Binarizer", infer=_binarizer_infer, reference=_binarizer_ref, lower=_binarizer_lower,
       kind="elementwise", arity=1)


# ---- ArrayFeatureExtractor: pick features (last dim) by index -------------------------------------
#
# Y[..., k] = X[..., indices.flat[k]]; a 1-D X gives a (1, K) result, as onnxruntime does.

def _afe_shape(x: TensorType, idx: TensorType, ctx) -> tuple:
    count = canon(idx.numel()) if idx.rank else 1
    if x.rank == 0:
        raise ctx.error("data must have rank >= 1")
    return (1, count) if x.rank == 1 else (*x.shape[:-1], count)


def _afe_infer(ctx: InferCtx) -> list[TensorType]:
    x, idx = ctx.in_types
    if idx.dtype is not DType.i64:
        raise ctx.error(f"indices must be int64, got {idx.dtype.value}")
    return [TensorType(x.dtype, _afe_shape(x, idx, ctx))]


def _afe_ref(ctx: RefCtx, x, idx):
    flat = np.asarray(idx, dtype=np.int64).reshape(-1)
    if flat.size and (flat.min() < 0 or flat.max() >= x.shape[-1]):
        raise IndexError(f"ArrayFeatureExtractor: index out of range [0, {x.shape[-1]})")
    out = x[..., flat]
    return [out.reshape(1, -1) if x.ndim == 1 else out]


def _afe_lower(ctx) -> None:
    x, idx = ctx.inputs
    y = ctx.out(0)
    feats = x.shape[-1]

    def body(*o):
        k = o[-1]
        pos = K.unflatten_index(k, idx.shape) if idx.rank else ()
        f = K.cast(idx[pos], DType.i64)
        f = K.check((f >= 0) & (f < K.dim_to_expr(feats)), f)
        lead = () if x.rank == 1 else o[:-1]
        return x[(*lead, f)]

    ctx.compute(y, body)


define(ML + "ArrayFeatureExtractor", infer=_afe_infer, reference=_afe_ref, lower=_afe_lower,
       kind="opaque", arity=2)


# ---- TreeEnsemble (ai.onnx.ml opset 5) -----------------------------------------------------------

_LEQ, _LT, _GTE, _GT, _EQ, _NEQ, _MEMBER = range(7)
_AVERAGE, _SUM, _MIN, _MAX = range(4)


class _Forest:
    """The attributes of one TreeEnsemble node, checked, with each tree as nested tuples:
    ("leaf", weight, target) or ("node", mode, feature, value(s), missing_true, t, f)."""

    def __init__(self, attr, fail):
        def ints(name, default=None):
            v = attr(name, default)
            if v is None:
                raise fail(f"attribute {name} is required")
            return [int(a) for a in np.asarray(v).reshape(-1)]

        self.agg = int(attr("aggregate_function", _SUM))
        if self.agg not in (_AVERAGE, _SUM, _MIN, _MAX):
            raise fail(f"aggregate_function {self.agg} is not one of 0..3")
        post = int(attr("post_transform", 0))
        if post != 0:
            raise fail(f"post_transform {post} is not supported (only 0, NONE: onnxruntime and the spec "
                       "disagree on what the other numbers mean)")
        self.n_targets = int(attr("n_targets", 0) or 0)
        if self.n_targets < 1:
            raise fail("n_targets must be >= 1")
        splits = np.asarray(attr("nodes_splits"), dtype=np.float64).reshape(-1) \
            if attr("nodes_splits") is not None else None
        if splits is None:
            raise fail("attribute nodes_splits is required")
        feats, modes = ints("nodes_featureids"), ints("nodes_modes")
        tids, fids = ints("nodes_truenodeids"), ints("nodes_falsenodeids")
        tleaf, fleaf = ints("nodes_trueleafs"), ints("nodes_falseleafs")
        miss = ints("nodes_missing_value_tracks_true", [0] * len(feats))
        targets, roots = ints("leaf_targetids"), ints("tree_roots")
        weights = np.asarray(attr("leaf_weights"), dtype=np.float64).reshape(-1)
        n = len(feats)
        if any(len(a) != n for a in (modes, tids, fids, tleaf, fleaf, miss)) or splits.size != n:
            raise fail("the nodes_* attributes differ in length")
        if len(targets) != weights.size:
            raise fail("leaf_targetids and leaf_weights differ in length")
        if any(not 0 <= t < self.n_targets for t in targets):
            raise fail(f"a leaf target id is outside [0, {self.n_targets})")
        members = list(np.asarray(attr("membership_values", []), dtype=np.float64).reshape(-1))
        sets, cur = [], []
        for v in members:  # NaN ends each member node's set, in node order
            if np.isnan(v):
                sets.append(tuple(cur))
                cur = []
            else:
                cur.append(float(v))
        if sum(m == _MEMBER for m in modes) != len(sets):
            raise fail("membership_values must hold one NaN-terminated set per set-membership node")
        set_of = {}
        for i in range(n):
            if modes[i] == _MEMBER:
                set_of[i] = sets[len(set_of)]
            elif not 0 <= modes[i] <= _MEMBER:
                raise fail(f"node {i} has unknown mode {modes[i]}")
        self.max_feature = max(feats, default=-1)

        def build(i: int, leaf: bool, depth: int):
            if depth > n + 1:
                raise fail("the trees have a cycle")
            if leaf:
                if not 0 <= i < len(targets):
                    raise fail(f"leaf id {i} out of range")
                return ("leaf", float(weights[i]), targets[i])
            if not 0 <= i < n:
                raise fail(f"node id {i} out of range")
            value = set_of.get(i, float(splits[i]))
            return ("node", modes[i], feats[i], value, bool(miss[i]),
                    build(tids[i], bool(tleaf[i]), depth + 1), build(fids[i], bool(fleaf[i]), depth + 1))

        self.trees = []
        for r in roots:
            if not 0 <= r < n:
                raise fail(f"tree root {r} out of range")
            # a root whose both branches are the same leaf is that leaf (a one-leaf tree)
            if tleaf[r] and fleaf[r] and tids[r] == fids[r]:
                self.trees.append(build(tids[r], True, 0))
            else:
                self.trees.append(build(r, False, 0))
        if not self.trees:
            raise fail("tree_roots is empty")


def _forest(ctx, fail) -> _Forest:
    return _Forest(ctx.attr, fail)


def _te_infer(ctx: InferCtx) -> list[TensorType]:
    x = ctx.in_types[0]
    if not x.dtype.is_float or x.dtype.is_small:
        raise ctx.error(f"X must be float, double or float16, got {x.dtype.value}")
    if x.rank != 2:
        raise ctx.error(f"X must be 2-D (N, features), got {x}")
    f = _forest(ctx, ctx.error)
    # the kernel reads X[n, feature] unchecked: a feature count only the run knows is checked then
    if x.shape[1] is not None:
        ctx.require(sympy.sympify(x.shape[1]) > f.max_feature,
                    f"X has more than {f.max_feature} features (the trees read feature {f.max_feature})")
    return [TensorType(x.dtype, (x.shape[0], f.n_targets))]


def _test(mode: int, x: float, value) -> bool:
    if mode == _MEMBER:
        return x in value
    return {_LEQ: x <= value, _LT: x < value, _GTE: x >= value, _GT: x > value,
            _EQ: x == value, _NEQ: x != value}[mode]


def _leaf_of(tree, row: np.ndarray):
    while tree[0] == "node":
        _, mode, feat, value, miss, t, f = tree
        v = float(row[feat])
        tree = t if _test(mode, v, value) or (miss and np.isnan(v)) else f
    return tree


def _te_ref(ctx: RefCtx, x):
    f = _forest(ctx, ValueError)
    rows = x.astype(np.float64)
    lo = {_SUM: 0.0, _AVERAGE: 0.0, _MIN: np.inf, _MAX: -np.inf}[f.agg]
    out = np.full((x.shape[0], f.n_targets), lo)
    for n in range(x.shape[0]):
        for tree in f.trees:
            _, w, t = _leaf_of(tree, rows[n])
            if f.agg in (_SUM, _AVERAGE):
                out[n, t] += w
            else:
                out[n, t] = min(out[n, t], w) if f.agg == _MIN else max(out[n, t], w)
    if f.agg == _AVERAGE:
        out /= len(f.trees)
    out[np.isinf(out)] = 0.0  # MIN / MAX: a target no tree reached is 0, as in onnxruntime
    return [out.astype(x.dtype)]


def _k_cond(mode: int, xv: Expr, value) -> Expr:
    if mode == _MEMBER:
        c = K.Const(False, DType.bool)
        for m in value:
            c = c | xv.eq(m)
        return c
    return {_LEQ: xv <= value, _LT: xv < value, _GTE: xv >= value, _GT: xv > value,
            _EQ: xv.eq(value), _NEQ: xv.ne(value)}[mode]


def _k_tree(tree, x: K.Buffer, n: Expr, target: int, none: float) -> Expr:
    """The tree's contribution to `target` for row n (f64): the reached leaf's weight when it
    feeds `target`, else `none`."""
    if tree[0] == "leaf":
        return K.Const(tree[1] if tree[2] == target else none, DType.f64)
    _, mode, feat, value, miss, t, f = tree
    xv = K.cast(x[(n, feat)], DType.f64)
    c = _k_cond(mode, xv, value)
    if miss:
        c = c | K.unary("isnan", xv)
    return K.select(c, _k_tree(t, x, n, target, none), _k_tree(f, x, n, target, none))


def _te_lower(ctx) -> None:
    x, y = ctx.inputs[0], ctx.out(0)
    f = _forest(ctx, ctx.unsupported)
    none = {_SUM: 0.0, _AVERAGE: 0.0, _MIN: np.inf, _MAX: -np.inf}[f.agg]

    def one_target(n: Expr, k: int) -> Expr:
        parts = [_k_tree(t, x, n, k, none) for t in f.trees]
        acc = parts[0]
        for p in parts[1:]:
            acc = acc + p if f.agg in (_SUM, _AVERAGE) else (
                K.minimum(acc, p) if f.agg == _MIN else K.maximum(acc, p))
        if f.agg == _AVERAGE:
            acc = acc / float(len(f.trees))
        if f.agg in (_MIN, _MAX):  # a target no tree reached is 0, as in onnxruntime
            acc = K.select(acc.eq(none), K.Const(0.0, DType.f64), acc)
        return acc

    def body(n, k):
        e = one_target(n, f.n_targets - 1)
        for t in range(f.n_targets - 2, -1, -1):
            e = K.select(k.eq(t), one_target(n, t), e)
        return K.cast(e, y.dtype)

    ctx.compute(y, body)


define(ML + "TreeEnsemble", infer=_te_infer, reference=_te_ref, lower=_te_lower, kind="opaque", arity=1)


# ---- LabelEncoder (ai.onnx.ml opsets 2 and 4) ---------------------------------------------------------
#
# A lookup table from the keys_* attribute to the values_* one, the default where no key
# matches; keys and values given as lists (int64s, floats, strings) or tensors (opset 4).
# Numeric tables compile to a chain of selects over the keys (the table is an attribute);
# string keys or values go through the string runtime (strings.py). A float key NaN matches NaN.

_LE_KEYS = (("keys_int64s", DType.i64), ("keys_floats", DType.f32), ("keys_strings", DType.string),
            ("keys_tensor", None))
_LE_VALUES = (("values_int64s", DType.i64, "default_int64", -1),
              ("values_floats", DType.f32, "default_float", -0.0),
              ("values_strings", DType.string, "default_string", "_Unused"),
              ("values_tensor", None, "default_tensor", None))


def _label_table(ctx, fail, unsupported) -> tuple[DType, np.ndarray, DType, np.ndarray, float | str]:
    """(key dtype, keys, value dtype, values, default)."""
    if ctx.attr("classes_strings") is not None:
        raise unsupported("classes_strings (LabelEncoder opset 1) is not supported")
    keys = [(n, dt) for n, dt in _LE_KEYS if ctx.attr(n) is not None]
    vals = [(n, dt, dn, dv) for n, dt, dn, dv in _LE_VALUES if ctx.attr(n) is not None]
    if len(keys) != 1 or len(vals) != 1:
        raise fail("needs exactly one keys_* and one values_* attribute")
    (kname, kdt), (vname, vdt, dname, dval) = keys[0], vals[0]
    k, v = _table_array(ctx.attr(kname), kdt), _table_array(ctx.attr(vname), vdt)
    kdt, vdt = kdt or DType.from_np(k.dtype), vdt or DType.from_np(v.dtype)
    if k.size != v.size:
        raise fail(f"{kname} has {k.size} entries, {vname} {v.size}")
    if kdt is DType.string:
        distinct = len({str(x) for x in k})
    else:
        distinct = len({float(x) if not np.isnan(x) else "nan" for x in k.astype(np.float64)})
    if distinct != k.size:
        raise fail(f"{kname} holds a key twice")
    default = ctx.attr(dname, dval)
    if vdt is DType.string:
        default = str(np.asarray(default, dtype=object).reshape(-1)[0]) if default is not None else "_Unused"
    else:
        default = float(np.asarray(default).reshape(-1)[0]) if default is not None else 0.0
    return kdt, k.astype(kdt.np), vdt, v.astype(vdt.np), default


def _table_array(value, dt: DType | None) -> np.ndarray:
    """A keys_* / values_* attribute as a flat array (strings as an object array)."""
    a = np.asarray(value, dtype=object if dt is DType.string else None).reshape(-1)
    return a.astype(object) if a.dtype.kind in "US" else a


def _le_unsupported(ctx):
    return lambda msg: UnsupportedOp(ctx.op.opname, ctx.op.dialect, ctx.op.loc, msg)


def _le_infer(ctx: InferCtx) -> list[TensorType]:
    x = ctx.in_types[0]
    kdt, _, vdt, _, _ = _label_table(ctx, ctx.error, _le_unsupported(ctx))
    if x.dtype is not kdt:
        raise ctx.error(f"X is {x.dtype.value}, the keys are {kdt.value}")
    return [TensorType(vdt, x.shape)]


def _le_ref(ctx: RefCtx, x):
    _, keys, vdt, vals, default = _label_table(ctx, ValueError, ValueError)
    out = np.full(x.shape, default, dtype=vdt.np)
    for k, v in zip(keys, vals, strict=True):
        out[np.isnan(x) if isinstance(k, float | np.floating) and np.isnan(k) else x == k] = v
    return [out]


def _le_lower(ctx) -> None:
    x, y = ctx.inputs[0], ctx.out(0)
    kdt, keys, vdt, vals, default = _label_table(ctx, ctx.unsupported, ctx.unsupported)
    if DType.string in (kdt, vdt):
        lower_label_strings(ctx, keys, vdt, vals, default)
        return
    assert isinstance(default, float)

    def body(*ix):
        xv = x[ix]
        e: Expr = K.Const(default, vdt)
        for k, v in zip(keys.tolist(), vals.tolist(), strict=True):
            hit = K.unary("isnan", xv) if isinstance(k, float) and np.isnan(k) else xv.eq(k)
            e = K.select(hit, K.Const(v, vdt), e)
        return e

    ctx.compute(y, body)


define(ML + "LabelEncoder", infer=_le_infer, reference=_le_ref, lower=_le_lower, kind="elementwise", arity=1,
       strings=True)


# ---- CategoryMapper (ai.onnx.ml opset 1) ------------------------------------------------------------------
#
# int64 <-> string through the pairs (cats_int64s[k], cats_strings[k]): a string input maps to
# its int64 (default_int64 where none matches), an int64 input to its string (default_string).
# A LabelEncoder table read in the input's direction (strings.py lowers it).

def _cm_table(ctx, fail) -> tuple[np.ndarray, DType, np.ndarray, int | str]:
    """(keys, value dtype, values, default) for the input's dtype."""
    ints, strs = ctx.attr("cats_int64s"), ctx.attr("cats_strings")
    if ints is None or strs is None or len(ints) != len(strs) or not ints:
        raise fail("needs cats_int64s and cats_strings of the same nonzero length")
    ints, strs = np.asarray(ints, np.int64), np.asarray(list(strs), dtype=object)
    x = ctx.op.operands[0].type.dtype
    if x is DType.string:
        if len({str(s) for s in strs}) != len(strs):
            raise fail("cats_strings holds a string twice")
        return strs, DType.i64, ints, int(ctx.attr("default_int64", -1))
    if x is not DType.i64:
        raise fail(f"X must be str or i64, got {x.value}")
    if len(set(ints.tolist())) != len(ints):
        raise fail("cats_int64s holds a value twice")
    return ints, DType.string, strs, str(ctx.attr("default_string", "_Unused"))


def _cm_infer(ctx: InferCtx) -> list[TensorType]:
    _, vdt, _, _ = _cm_table(ctx, ctx.error)
    return [ctx.in_types[0].with_dtype(vdt)]


def _cm_ref(ctx: RefCtx, x):
    keys, vdt, vals, default = _cm_table(ctx, ValueError)
    out = np.full(x.shape, default, dtype=vdt.np)
    for k, v in zip(keys.tolist(), vals.tolist(), strict=True):
        out[x == k] = v
    return [out]


def _cm_lower(ctx) -> None:
    keys, vdt, vals, default = _cm_table(ctx, ctx.unsupported)
    lower_label_strings(ctx, keys, vdt, vals, default)


define(ML + "CategoryMapper", infer=_cm_infer, reference=_cm_ref, lower=_cm_lower, kind="elementwise", arity=1,
       strings=True)
