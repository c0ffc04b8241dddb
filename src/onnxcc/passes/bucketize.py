"""bucketize: add bucket versions that pad a symbolic dim up to a static size, exactly.

A bucket version of `@main` for `SYM` and bound `Bk` is guarded by `B(k-1) < SYM <= Bk`.
Its PARAMETERS keep the true symbolic shapes; its body

  1. pads each input along the bucketed dims to `Bk` (`cc.pad_dim`, fill 0),
  2. runs the graph at the static size `Bk` (a clone with `SYM -> Bk`), with masks
     (`cc.mask_dim`) and rewrites the pad-safety analysis inserted where padding would
     otherwise change a valid result,
  3. cuts every output whose dim was bucketed back to the true length (`cc.unpad_dim`).

The true length is the call's own symbol value (the dispatcher passes every version the
symbols it bound), so masks read it at run time beside the static padded extent.

Pad-safety analysis (`PadSafety`), on the symbolic graph: for every value it tracks which
axes are padded (dim exactly `SYM`) and what the padded positions hold ("fill", defined for
positions whose OTHER padded axes are in range): a known number (0, -inf, 1...), FINITE
(unknown but finite) or GARBAGE (anything, NaN included). Elementwise ops keep padding where
it is (evaluating the op on known fills); a reduction over a padded axis gets its identity
(0 sum, -inf max, +inf min, 1 prod); a mean is rewritten to sum / true length; Softmax and
LogSoftmax over a padded axis mask with -inf; a MatMul contraction over a padded axis needs
zeros in one operand and finite values in the other; LayerNormalization over a padded axis is
rewritten to use the true count. Where a dim cannot be padded safely (a Reshape merging it
with another dim, data-dependent indexing along it, the symbol read as data, an op the
analysis does not know), the bucket is refused with an error naming the op and the node.

Options: `buckets`, the bounds per symbol (CLI: `bucketize{buckets=seq:64:128:512}`;
several symbols joined by `|`).
Bucket versions go into the dispatch list after the exact / 0-1 versions and before the
rest (divisibility, generic): values above the last bucket fall through to those.

Choosing the bounds from traffic (cost model, exact dynamic programme) is in bucket_choice.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import reduce as _fold
from typing import ClassVar

import numpy as np
import sympy

from ..errors import OnnxccError
from ..ir import Block, DType, Function, Module, Op, TensorType, Value, canon, identical, sym
from ..ir.clone import clone_function
from ..ops import InferCtx, RefCtx, get_opdef
from ..ops.cc import const_array
from ..ops.traits import PAD_RULES, PadRule
from .base import ModulePass, PassContext, SymValues, parse_sym_values, register_pass
from .shape_inference import infer_block, infer_function_constraints, infer_op


class BucketError(OnnxccError):
    """A bucket the compiler refuses: the message says which op and node, and why."""


# ---- fills ---------------------------------------------------------------------------------------


class _Unknown:
    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


#: the padded positions hold unknown but finite values
FINITE = _Unknown("FINITE")
#: the padded positions hold anything (NaN and inf included)
GARBAGE = _Unknown("GARBAGE")


def is_known(f) -> bool:
    return isinstance(f, float)


def is_finite(f) -> bool:
    return f is FINITE or (isinstance(f, float) and math.isfinite(f))


def _known(x) -> object:
    x = float(x)
    return GARBAGE if math.isnan(x) else x


def _rule(op: Op) -> PadRule | None:
    """The op's pad rule (on its OpDef, `ops/traits.py`); None: not known to be pad-safe."""
    d = get_opdef(op.name)
    return d.pad_rule() if d is not None else None


def _prod(dims) -> object:
    return canon(_fold(lambda a, b: a * b, dims, 1))


def _same(a, b) -> bool:
    """Structural dim equality (sympy canonical forms); no range reasoning."""
    return identical(a, b)


# ---- the analysis --------------------------------------------------------------------------------


class PadSafety:
    """Follow the padded dim through one function (symbolic), inserting masks and rewrites.

    `lo` is the smallest true length the bucket sees (constant indices below it are safe).
    `notes` records every decision, for people and tests.
    """

    def __init__(self, module: Module, f: Function, symbol: str, lo: int = 1):
        self.module, self.f, self.name, self.lo = module, f, symbol, lo
        self.s = sym(symbol)
        self.fills: dict[int, dict[int, object]] = {}
        self.shape_data: set[int] = set()
        self.values: dict = {}
        self.masks: dict[tuple, Value] = {}
        self.notes: list[str] = []
        self.counter = 0

    # ---- helpers -------------------------------------------------------------------------------
    def refuse(self, op: Op | None, why: str) -> BucketError:
        where = f'node "{op.loc or op.name}" ({op.name}) ' if op is not None else ""
        return BucketError(f"{where}{why}; cannot bucket {self.name}")

    def padded_axes(self, t: TensorType) -> list[int]:
        return [a for a, d in enumerate(t.shape) if isinstance(d, sympy.Symbol) and d.name == self.name]

    def involves(self, d) -> bool:
        return d is not None and not isinstance(d, int) and self.s in sympy.sympify(d).free_symbols

    def fill(self, v: Value, axis: int):
        return self.fills.get(id(v), {}).get(axis, GARBAGE)

    def is_padded(self, v: Value) -> bool:
        return bool(self.fills.get(id(v)))

    def const_info(self, v: Value):
        """(uniform value or None, all finite, all nonzero) of a cc.const, else None."""
        if not (isinstance(v.owner, Op) and v.owner.name == "cc.const"):
            return None
        try:
            arr = np.asarray(const_array(v.owner, self.module))
        except KeyError:
            return None
        if arr.dtype.kind not in "fiub" or arr.size == 0:
            return None
        flat = arr.reshape(-1).astype(np.float64)
        uniform = float(flat[0]) if np.all(flat == flat[0]) else None
        return uniform, bool(np.all(np.isfinite(flat))), bool(np.all(flat != 0))

    def content(self, v: Value):
        """What every VALID element of v is known to be: a number, FINITE or GARBAGE."""
        info = self.const_info(v)
        if info is None:
            return GARBAGE
        uniform, finite, _ = info
        if uniform is not None:
            return _known(uniform)
        return FINITE if finite else GARBAGE

    def const_finite(self, v: Value) -> bool:
        info = self.const_info(v)
        return info is not None and info[1]

    def new_op(self, anchor: Op, name: str, operands, attrs: dict, dtype: DType, hint: str) -> Op:
        """Insert a new op before `anchor` and infer its result type."""
        self.counter += 1
        loc = f"{anchor.loc or anchor.opname}.{hint}"
        op = Op(name, list(operands), [TensorType(dtype, ())], attrs, loc=loc)
        anchor.parent.insert_before(anchor, op)
        infer_op(op, self.module, self.values)
        return op

    def mask(self, op: Op, slot: int, axis: int, fill: float, why: str) -> None:
        """Make operand `slot` of op hold `fill` at positions >= the true length along axis."""
        v = op.operands[slot]
        key = (id(v), axis, fill)
        m = self.masks.get(key)
        if m is None:
            mop = self.new_op(op, "cc.mask_dim", [v], {"axis": axis, "fill": float(fill), "len": self.name},
                              v.type.dtype, "mask")
            m = mop.result
            self.fills[id(m)] = {**self.fills.get(id(v), {}), axis: float(_fill_as(fill, v.type.dtype))}
            self.masks[key] = m
        op.set_operand(slot, m)
        self.notes.append(f'node "{op.loc}" ({op.name}): mask operand {slot} axis {axis} with {fill} ({why})')

    # ---- driver --------------------------------------------------------------------------------
    def run(self) -> None:
        self.values = known_values(self.module, self.f)
        for k, a in enumerate(self.f.params):
            for d in a.type.shape:
                if self.involves(d) and not (isinstance(d, sympy.Symbol)):
                    raise BucketError(f'input "{a.name or k}" has dim {d}: only a dim that is exactly '
                                      f"{self.name} can be padded; cannot bucket {self.name}")
            axes = self.padded_axes(a.type)
            if axes:
                self.fills[id(a)] = {ax: 0.0 for ax in axes}
        for op in list(self.f.body.ops):
            self.visit(op)

    def visit(self, op: Op) -> None:
        if op.name == "return":
            for v in op.operands:
                if id(v) in self.shape_data:
                    raise self.refuse(op, f"returns a value computed from {self.name} as data")
            return
        padded_in = [i for i, v in enumerate(op.operands) if self.is_padded(v)]
        data_in = [i for i, v in enumerate(op.operands) if id(v) in self.shape_data]
        touches_s = any(self.involves(d) for r in op.results for d in r.type.shape)
        if op.name != "cc.dims" and any(self.involves(d) for d in _attr_dims(op.attrs)):
            raise self.refuse(op, f"reads {self.name} as data (attribute)")
        if op.regions and (padded_in or data_in or touches_s):
            raise self.refuse(op, f"has regions over padded dim {self.name}")
        rule = _rule(op)
        handler = _HANDLERS[rule.rule] if rule is not None else None
        sinks = [i for i in data_in if rule is not None and i in rule.shape_operands]
        arith = [i for i in data_in if i not in sinks]
        if arith:
            small = all((r.type.dtype.is_int or r.type.dtype is DType.bool) and not any(
                self.involves(d) for d in r.type.shape) for r in op.results)
            if not small or padded_in:
                raise self.refuse(op, f"reads {self.name} as data (operand {arith[0]} is computed from the "
                                      "shape)")
        if padded_in or touches_s:
            if handler is None:
                if data_in:
                    raise self.refuse(op, f"reads {self.name} as data (operand {data_in[0]} is computed from "
                                          f"the shape)")
                raise self.refuse(op, f"is not known to be pad-safe along padded dim {self.name}")
            out = handler(self, op)
            if out is None:  # rewritten into other ops, which were visited
                return
            self.set_results(op, out)
        self.mark_shape_data(op, bool(data_in))

    def set_results(self, op: Op, out: list[dict]) -> None:
        for r, fills in zip(op.results, out):
            for d in r.type.shape:
                if self.involves(d) and not isinstance(d, sympy.Symbol):
                    raise self.refuse(op, f"makes dim {d} of result {r.index} from padded dim {self.name}")
            axes = self.padded_axes(r.type)
            missing = [a for a in axes if a not in fills]
            if missing:
                raise self.refuse(op, f"result {r.index} dim {missing[0]} is {self.name} but its padding is "
                                      "not accounted for")
            if axes:
                self.fills[id(r)] = {a: fills[a] for a in axes}

    def mark_shape_data(self, op: Op, from_data: bool) -> None:
        for r in op.results:
            if not (r.type.dtype.is_int or r.type.dtype is DType.bool):
                continue
            v = self.values.get(r)
            if v is not None:
                if any(self.involves(canon(x)) for x in np.asarray(v, dtype=object).reshape(-1)):
                    self.shape_data.add(id(r))
            elif from_data or (getattr(_rule(op), "rule", None) == "passthrough" and self.is_padded(op.operands[0])):
                self.shape_data.add(id(r))


def _fill_as(fill: float, dtype: DType):
    from ..ops.bucket import fill_scalar

    return fill_scalar(fill, dtype) if dtype is not DType.bf16 else fill


def known_values(module: Module, f: Function) -> dict:
    """The values shape inference knows in f (small integer tensors), without touching f or
    the module: inference runs on a throwaway copy (which may make fresh symbols and record
    constraints; both are undone) and the values are mapped back op by op."""
    probe = clone_function(f, f.name + ".probe")
    saved_c, saved_s = module.constraints, module.symbols
    module.constraints, module.symbols = [], saved_s.copy()
    found: dict = {}
    try:
        infer_block(probe.body, module, found)
    finally:
        module.constraints, module.symbols = saved_c, saved_s
    out = {}
    for a, b in zip(_all_values(probe), _all_values(f)):
        if a in found:
            out[b] = found[a]
    return out


def _all_values(f: Function):
    yield from f.params
    for op in f.walk():
        yield from op.results


def _attr_dims(attrs: dict):
    for v in attrs.values():
        for x in (v if isinstance(v, (list, tuple)) else [v]):
            if isinstance(x, sympy.Expr):
                yield x


# ---- transfer functions: each returns, per result, {padded axis: fill} --------------------------


def _elementwise(a: PadSafety, op: Op) -> list[dict]:
    out_t = op.results[0].type
    rank = out_t.rank
    res: dict = {}
    for ax in a.padded_axes(out_t):
        ins = []
        for v in op.operands:
            k = ax - (rank - v.type.rank)
            if k < 0 or (isinstance(v.type.shape[k], int) and v.type.shape[k] == 1):
                ins.append(a.content(v))
            elif k in a.fills.get(id(v), {}):
                ins.append(a.fill(v, k))
            else:
                i = op.operands.index(v)
                raise a.refuse(op, f"dim {v.type.shape[k]} of operand {i} meets padded dim {a.name}")
        res[ax] = _eval_fill(a, op, ins)
    out = [res]
    for r in op.results[1:]:  # Dropout's mask and the like
        out.append({ax: GARBAGE for ax in a.padded_axes(r.type)})
    return out


def _eval_fill(a: PadSafety, op: Op, ins: list):
    """The op applied to what its operands hold at padded positions."""
    if all(is_known(x) for x in ins) and len(op.results) == 1:
        try:
            d = get_opdef(op.name)
            arrays = [np.array(x).astype(v.type.dtype.np) for x, v in zip(ins, op.operands)]
            with np.errstate(all="ignore"):
                y = d.reference(RefCtx(op, {}, None), *arrays)[0]
            return _known(np.asarray(y).reshape(-1)[0])
        except Exception:  # a fill we cannot evaluate is unknown, nothing worse
            return GARBAGE
    rule = _rule(op)
    fills = rule.fills if rule is not None else ""
    if fills == "product" and any(x == 0.0 for x in ins if is_known(x)) and all(is_finite(x) for x in ins):
        return 0.0
    if fills == "quotient":
        info = a.const_info(op.operands[1])
        den_ok = (is_known(ins[1]) and ins[1] != 0.0 and math.isfinite(ins[1])) or bool(
            info and info[1] and info[2])
        return FINITE if is_finite(ins[0]) and den_ok else GARBAGE
    if fills == "select":
        return FINITE if is_finite(ins[1]) and is_finite(ins[2]) else GARBAGE
    if rule is not None and rule.finite and all(is_finite(x) for x in ins):
        return FINITE
    return GARBAGE


def _view(a: PadSafety, op: Op) -> list[dict]:
    """Reshape-like ops: a padded axis must survive as its own dim, same place in memory."""
    x, t = op.operands[0].type, op.results[0].type
    res = {}
    for ax in a.padded_axes(x):
        before = _prod(x.shape[:ax])
        hit = [b for b, d in enumerate(t.shape) if isinstance(d, sympy.Symbol) and d.name == a.name
               and _same(_prod(t.shape[:b]), before)]
        if not hit:
            raise a.refuse(op, _merge_reason(a, x, t, ax))
        res[hit[0]] = a.fill(op.operands[0], ax)
    for b in a.padded_axes(t):
        if b not in res:
            raise a.refuse(op, f"makes a new dim {a.name} (result dim {b}) from other dims")
    return [res]


def _merge_reason(a: PadSafety, x: TensorType, t: TensorType, ax: int) -> str:
    for b, d in enumerate(t.shape):
        if a.involves(d):
            if isinstance(d, sympy.Symbol):
                continue
            q = sympy.simplify(sympy.sympify(d) / a.s)
            if a.involves(q) or not (q.is_Integer or q.free_symbols):  # seq/2, seq + 1...
                return f"splits padded dim {a.name} (input dim {ax}) into {d} (result dim {b})"
            for lo in range(ax, -1, -1):
                for hi in range(ax, x.rank):
                    if (lo, hi) != (ax, ax) and _same(_prod(x.shape[lo:hi + 1]), d):
                        others = [k for k in range(lo, hi + 1) if k != ax]
                        dims = ", ".join(f"dim {k}" for k in others)
                        return f"merges padded dim {a.name} with {dims}"
            return f"merges padded dim {a.name} (input dim {ax}) with other dims into {d} (result dim {b})"
    return f"moves padded dim {a.name} (input dim {ax}) to a different place in memory"


def _transpose(a: PadSafety, op: Op) -> list[dict]:
    x = op.operands[0]
    perm = op.attrs.get("perm") or list(range(x.type.rank))[::-1]
    return [{i: a.fill(x, p) for i, p in enumerate(perm) if p in a.fills.get(id(x), {})}]


def _matmul(a: PadSafety, op: Op) -> list[dict]:
    A, B = op.operands[:2]
    ra, rb, ro = A.type.rank, B.type.rank, op.results[0].type.rank
    ka, kb = ra - 1, (rb - 2 if rb >= 2 else 0)
    k_padded = _contraction(a, op, 0, ka, 1, kb)
    A, B = op.operands[:2]
    res = {}
    if ra >= 2 and ka - 1 in a.fills.get(id(A), {}):
        res[ro - 2 if rb >= 2 else ro - 1] = _product_fill(a, a.fill(A, ka - 1), B, k_padded)
    if rb >= 2 and rb - 1 in a.fills.get(id(B), {}):
        res[ro - 1] = _product_fill(a, a.fill(B, rb - 1), A, k_padded)
    nb = ro - (2 if ra >= 2 and rb >= 2 else 1)
    for ax in range(nb):
        if ax in res or ax not in a.padded_axes(op.results[0].type):
            continue
        fa = _batch_fill(a, A, ax - (nb - (ra - 2)))
        fb = _batch_fill(a, B, ax - (nb - (rb - 2)))
        if k_padded:
            res[ax] = GARBAGE
        elif (fa == 0.0 and is_finite(fb)) or (fb == 0.0 and is_finite(fa)):
            res[ax] = 0.0
        else:
            res[ax] = FINITE if is_finite(fa) and is_finite(fb) else GARBAGE
    return [res]


def _batch_fill(a: PadSafety, v: Value, k: int):
    if k < 0 or k not in a.fills.get(id(v), {}):
        return a.content(v)
    return a.fill(v, k)


def _product_fill(a: PadSafety, f, other: Value, k_padded: bool):
    """A padded row (fill f) times a non-padded operand: 0 stays 0 against finite weights."""
    if k_padded or a.is_padded(other):
        return GARBAGE
    if f == 0.0 and a.const_finite(other):
        return 0.0
    return FINITE if is_finite(f) and a.const_finite(other) else GARBAGE


def _contraction(a: PadSafety, op: Op, ia: int, ka: int, ib: int, kb: int) -> bool:
    """A sum over a padded axis: one side must hold 0 there and the other finite values
    (0 * inf is NaN), so mask what is needed. Returns whether the contracted axis is padded."""
    A, B = op.operands[ia], op.operands[ib]
    pa, pb = ka in a.fills.get(id(A), {}), kb in a.fills.get(id(B), {})
    if not (pa or pb):
        return False
    if pa != pb:
        raise a.refuse(op, f"contracts padded dim {a.name} with a dim that is not {a.name}")
    fa, fb = a.fill(A, ka), a.fill(B, kb)
    if (fa == 0.0 and is_finite(fb)) or (fb == 0.0 and is_finite(fa)):
        return True
    why = f"contraction over padded dim {a.name}"
    if is_finite(fb):
        a.mask(op, ia, ka, 0.0, why)
    elif is_finite(fa):
        a.mask(op, ib, kb, 0.0, why)
    else:
        a.mask(op, ia, ka, 0.0, why)
        a.mask(op, ib, kb, 0.0, why)
    return True


def _gemm(a: PadSafety, op: Op) -> list[dict]:
    A, B = op.operands[:2]
    ta, tb = op.attrs.get("transA", 0), op.attrs.get("transB", 0)
    k_padded = _contraction(a, op, 0, 0 if ta else 1, 1, 1 if tb else 0)
    A, B = op.operands[:2]
    res = {}
    c_ok = len(op.operands) < 3 or is_finite(a.content(op.operands[2])) or a.is_padded(op.operands[2])
    for out_ax, v, ax, other in ((0, A, 1 if ta else 0, B), (1, B, 0 if tb else 1, A)):
        if ax in a.fills.get(id(v), {}):
            f = _product_fill(a, a.fill(v, ax), other, k_padded)
            res[out_ax] = FINITE if is_finite(f) and c_ok and not (len(op.operands) > 2 and a.is_padded(
                op.operands[2])) else GARBAGE
    for ax in a.padded_axes(op.results[0].type):
        res.setdefault(ax, GARBAGE)
    return [res]


def _softmax(a: PadSafety, op: Op) -> list[dict]:
    rule = _rule(op)
    assert rule is not None
    x = op.operands[0]
    axis = op.attrs.get("axis", -1) % x.type.rank
    res = {}
    if axis in a.fills.get(id(x), {}):
        if a.fill(x, axis) != -math.inf:
            a.mask(op, 0, axis, -math.inf, f"{op.opname} over padded dim {a.name}")
        res[axis] = rule.result_fill
    x = op.operands[0]
    for ax, f in a.fills.get(id(x), {}).items():
        if ax != axis:
            res[ax] = FINITE if rule.finite and is_finite(f) else GARBAGE
    return [res]


def _reduce_axes(a: PadSafety, op: Op) -> tuple[int, ...]:
    from ..ops.reduce import reduce_axes

    rank = op.operands[0].type.rank
    if len(op.operands) > 1:
        v = a.values.get(op.operands[1])
        if v is None:
            raise a.refuse(op, "reduces over axes known only at run time")
        axes = [int(canon(x)) for x in np.asarray(v, dtype=object).reshape(-1)]
    else:
        axes = op.attrs.get("axes")
    return reduce_axes(axes, rank, op.attrs.get("noop_with_empty_axes", 0), lambda m: a.refuse(op, m))


def _kept_fills(a: PadSafety, op: Op, axes, keep: bool, zero_ok: bool) -> dict:
    x = op.operands[0]
    res = {}
    for ax, f in a.fills.get(id(x), {}).items():
        if ax in axes:
            continue
        out_ax = ax if keep else ax - sum(1 for r in axes if r < ax)
        res[out_ax] = 0.0 if (f == 0.0 and zero_ok) else (FINITE if is_finite(f) and zero_ok else GARBAGE)
    return res


def _reduce(a: PadSafety, op: Op) -> list[dict] | None:
    x = op.operands[0]
    axes, keep = _reduce_axes(a, op), bool(op.attrs.get("keepdims", 1))
    padded = [ax for ax in axes if ax in a.fills.get(id(x), {})]
    rule = _rule(op)
    assert rule is not None
    if rule.rule == "mean" and padded:
        _rewrite_mean(a, op, axes, padded)
        return None
    for ax in padded:
        if a.fill(op.operands[0], ax) != rule.identity:
            a.mask(op, 0, ax, rule.identity, f"{op.opname} over padded dim {a.name}")
    return [_kept_fills(a, op, axes, keep, rule.keeps_zero)]


def _true_count(a: PadSafety, x: TensorType, axes) -> str:
    return str(_prod([x.shape[ax] for ax in axes]))


def _rewrite_mean(a: PadSafety, op: Op, axes, padded) -> None:
    """ReduceMean over a padded axis -> ReduceSum(masked) / (true count)."""
    x = op.operands[0]
    if not x.type.dtype.is_float:
        raise a.refuse(op, f"averages integers over padded dim {a.name}")
    keep = op.attrs.get("keepdims", 1)
    m = x
    for ax in padded:
        if a.fill(m, ax) != 0.0:
            attrs = {"axis": ax, "fill": 0.0, "len": a.name}
            mop = a.new_op(op, "cc.mask_dim", [m], attrs, x.type.dtype, "mask")
            a.visit(mop)
            m = mop.result
    ax_op = a.new_op(op, "cc.const", [], {"value": np.array(axes, dtype=np.int64)}, DType.i64, "axes")
    a.visit(ax_op)
    s = a.new_op(op, "onnx.ReduceSum", [m, ax_op.result], {"keepdims": keep}, x.type.dtype, "sum")
    a.visit(s)
    n = a.new_op(op, "cc.true_len", [], {"len": _true_count(a, x.type, axes)}, x.type.dtype, "count")
    a.visit(n)
    mean = a.new_op(op, "onnx.Div", [s.result, n.result], {}, x.type.dtype, "mean")
    a.visit(mean)
    op.result.replace_all_uses_with(mean.result)
    mean.result.name = op.result.name
    op.erase()
    a.notes.append(f'node "{op.loc}" (onnx.ReduceMean): sum over padded dim {a.name} divided by the true '
                   "count")


def _argreduce(a: PadSafety, op: Op) -> list[dict]:
    x = op.operands[0]
    axis = op.attrs.get("axis", 0) % x.type.rank
    keep = bool(op.attrs.get("keepdims", 1))
    if axis in a.fills.get(id(x), {}):
        if op.attrs.get("select_last_index", 0):
            raise a.refuse(op, f"selects the last index along padded dim {a.name}")
        rule = _rule(op)
        ident = rule.identity if rule is not None else None
        if ident is None:
            raise a.refuse(op, "has no identity to mask padded positions with")
        if a.fill(x, axis) != ident:
            a.mask(op, 0, axis, ident, f"{op.opname} over padded dim {a.name}")
    res = _kept_fills(a, op, (axis,), keep, False)
    return [{ax: FINITE for ax in res}]


def _layernorm(a: PadSafety, op: Op) -> list[dict] | None:
    x = op.operands[0]
    rank = x.type.rank
    axis = op.attrs.get("axis", -1) % rank
    padded = [ax for ax in a.fills.get(id(x), {}) if ax >= axis]
    if padded:
        _rewrite_layernorm(a, op, axis, padded)
        return None
    finite = all(is_finite(a.fill(x, ax)) for ax in a.fills.get(id(x), {}))
    finite = finite and all(a.const_finite(v) for v in op.operands[1:])
    res = [{ax: (FINITE if finite else GARBAGE) for ax in a.fills.get(id(x), {})}]
    for r in op.results[1:]:
        res.append({ax: (FINITE if finite else GARBAGE) for ax in a.padded_axes(r.type)})
    return res


def _rewrite_layernorm(a: PadSafety, op: Op, axis: int, padded) -> None:
    """LayerNormalization over a padded axis, from primitives with the true count."""
    x = op.operands[0]
    dt = x.type.dtype
    if dt is not DType.f32 and dt is not DType.f64:
        raise a.refuse(op, f"normalizes {dt.value} over padded dim {a.name}")
    axes = list(range(axis, x.type.rank))

    def add(name, operands, attrs=None, hint="ln"):
        o = a.new_op(op, name, operands, attrs or {}, dt, hint)
        a.visit(o)
        return o.result

    def masked(v):
        for ax in padded:
            if a.fill(v, ax) != 0.0:
                v = add("cc.mask_dim", [v], {"axis": ax, "fill": 0.0, "len": a.name}, "mask")
        return v

    ax_v = a.new_op(op, "cc.const", [], {"value": np.array(axes, dtype=np.int64)}, DType.i64, "axes")
    a.visit(ax_v)
    n = add("cc.true_len", [], {"len": _true_count(a, x.type, axes)}, "count")
    total = add("onnx.ReduceSum", [masked(x), ax_v.result], {"keepdims": 1}, "sum")
    mean = add("onnx.Div", [total, n], hint="mean")
    d = add("onnx.Sub", [x, mean], hint="centered")
    dm = masked(d)
    var = add("onnx.Div", [add("onnx.ReduceSum", [add("onnx.Mul", [dm, dm], hint="sq"), ax_v.result],
                               {"keepdims": 1}, "sumsq"), n], hint="var")
    eps = np.array(op.attrs.get("epsilon", 1e-5), dtype=dt.np)
    eps_op = a.new_op(op, "cc.const", [], {"value": eps}, dt, "eps")
    a.visit(eps_op)
    rstd = add("onnx.Reciprocal", [add("onnx.Sqrt", [add("onnx.Add", [var, eps_op.result], hint="vareps")],
                                       hint="std")], hint="rstd")
    y = add("onnx.Mul", [add("onnx.Mul", [d, rstd], hint="norm"), op.operands[1]], hint="scaled")
    if len(op.operands) > 2:
        y = add("onnx.Add", [y, op.operands[2]], hint="shifted")
    for r, new in zip(op.results, (y, mean, rstd)):
        if r.type != new.type:
            raise a.refuse(op, f"result {r.index} of type {r.type} differs from its rewrite {new.type}")
        r.replace_all_uses_with(new)
    op.erase()
    a.notes.append(f'node "{op.loc}" (onnx.LayerNormalization): rewritten with the true count over padded '
                   f"dim {a.name}")


def _concat(a: PadSafety, op: Op) -> list[dict]:
    t = op.results[0].type
    axis = op.attrs.get("axis") % t.rank
    if any(axis in a.fills.get(id(v), {}) for v in op.operands):
        raise a.refuse(op, f"concatenates along padded dim {a.name}")
    res = {}
    for ax in a.padded_axes(t):
        fs = [a.fill(v, ax) for v in op.operands]
        res[ax] = fs[0] if all(f == fs[0] for f in fs) and is_known(fs[0]) else (
            FINITE if all(is_finite(f) for f in fs) else GARBAGE)
    return [res]


def _split(a: PadSafety, op: Op) -> list[dict]:
    x = op.operands[0]
    axis = op.attrs.get("axis", 0) % x.type.rank
    if axis in a.fills.get(id(x), {}):
        raise a.refuse(op, f"splits along padded dim {a.name}")
    return [dict(a.fills.get(id(x), {})) for _ in op.results]


def _slice(a: PadSafety, op: Op) -> list[dict]:
    from ..ops.shape import slice_params

    x = op.operands[0]
    starts, ends, axes, steps, _ = slice_params(InferCtx(op, a.module, a.values))
    if starts is None or ends is None or axes is None or steps is None:
        raise a.refuse(op, f"slices with bounds known only at run time along padded dim {a.name}")
    rank = x.type.rank
    sliced = {int(ax) % rank: k for k, ax in enumerate(axes)}
    t = op.results[0].type
    res = {}
    for ax in a.padded_axes(t):
        k = sliced.get(ax)
        whole = k is None
        if k is not None and canon(starts[k]) == 0 and steps[k] == 1:
            end = canon(ends[k])
            whole = (isinstance(end, int) and end >= 2**31 - 1) or _same(end, a.s)
            if not whole and ax not in a.fills.get(id(x), {}):  # x[:seq] of a longer dim: valid prefix
                res[ax] = FINITE if a.const_finite(x) else GARBAGE
                continue
        if not whole:
            raise a.refuse(op, f"slices padded dim {a.name} (axis {ax}) other than whole")
        if ax not in a.fills.get(id(x), {}):
            raise a.refuse(op, f"makes dim {a.name} (axis {ax}) from a dim that is not {a.name}")
        res[ax] = a.fill(x, ax)
    return [res]


def _gather(a: PadSafety, op: Op) -> list[dict]:
    data, idx = op.operands
    axis = op.attrs.get("axis", 0) % data.type.rank
    if axis in a.fills.get(id(data), {}):
        vals = a.values.get(idx)
        ints = None if vals is None else [canon(v) for v in np.asarray(vals, dtype=object).reshape(-1)]
        if ints is None or not all(isinstance(i, int) and 0 <= i < a.lo for i in ints):
            raise a.refuse(op, f"gathers along padded dim {a.name} with indices that may reach the padding")
    if a.is_padded(idx):
        for ax, f in list(a.fills[id(idx)].items()):
            dim = data.type.shape[axis]
            ok = is_known(f) and f == int(f) and isinstance(dim, int) and -dim <= f < dim
            if not ok and f != 0.0:
                a.mask(op, 1, ax, 0.0, "indices at padded positions must be in range")
        idx = op.operands[1]
    res = {}
    for ax, f in a.fills.get(id(data), {}).items():
        if ax != axis:
            res[ax if ax < axis else ax + idx.type.rank - 1] = f
    for ax in a.fills.get(id(idx), {}):
        res[axis + ax] = FINITE if a.const_finite(data) else GARBAGE
    return [res]


def _expand(a: PadSafety, op: Op) -> list[dict]:
    x = op.operands[0]
    t = op.results[0].type
    res = {}
    for ax in a.padded_axes(t):
        k = ax - (t.rank - x.type.rank)
        res[ax] = a.fill(x, k) if k >= 0 and k in a.fills.get(id(x), {}) else a.content(x)
    return [res]


def _constant_of_shape(a: PadSafety, op: Op) -> list[dict]:
    v = op.attrs.get("value")
    fill = _known(np.asarray(v).reshape(-1)[0]) if v is not None else 0.0
    return [{ax: fill for ax in a.padded_axes(op.results[0].type)}]


def _cumsum(a: PadSafety, op: Op) -> list[dict]:
    x = op.operands[0]
    av = a.values.get(op.operands[1])
    if av is None:
        raise a.refuse(op, "sums along an axis known only at run time")
    axis = int(canon(np.asarray(av, dtype=object).reshape(-1)[0])) % x.type.rank
    if axis in a.fills.get(id(x), {}) and op.attrs.get("reverse", 0) and a.fill(x, axis) != 0.0:
        a.mask(op, 0, axis, 0.0, f"reverse CumSum over padded dim {a.name}")
    x = op.operands[0]
    return [{ax: (f if f == 0.0 and ax != axis else GARBAGE) for ax, f in a.fills.get(id(x), {}).items()}]


def _batchnorm(a: PadSafety, op: Op) -> list[dict]:
    x = op.operands[0]
    if 1 in a.fills.get(id(x), {}):
        raise a.refuse(op, f"normalizes per channel along padded dim {a.name}")
    finite = all(a.const_finite(v) for v in op.operands[1:])
    res = [{ax: (FINITE if finite and is_finite(f) else GARBAGE) for ax, f in a.fills.get(id(x), {}).items()}]
    return res + [{} for _ in op.results[1:]]


def _mask(a: PadSafety, op: Op) -> list[dict]:
    x = op.operands[0]
    fill = float(_fill_as(op.attrs.get("fill", 0.0), x.type.dtype))
    return [{**a.fills.get(id(x), {}), op.attrs["axis"] % x.type.rank: fill}]


def _passthrough(a: PadSafety, op: Op) -> list[dict]:
    """Ops whose padded operands do not reach a padded result (Shape, Size)."""
    return [{} for _ in op.results]


def _pad(a: PadSafety, op: Op) -> list[dict]:
    x = op.operands[0]
    pads = a.values.get(op.operands[1]) if len(op.operands) > 1 else op.attrs.get("pads")
    if pads is None:
        raise a.refuse(op, "pads by amounts known only at run time")
    pads = [canon(p) for p in np.asarray(pads, dtype=object).reshape(-1)]
    rank = x.type.rank
    if len(op.operands) > 3 or "axes" in op.attrs:
        raise a.refuse(op, "pads selected axes (not supported with buckets)")
    for ax in a.fills.get(id(x), {}):
        if pads[ax] != 0 or pads[ax + rank] != 0:
            raise a.refuse(op, f"pads padded dim {a.name}")
    return [{ax: GARBAGE for ax in a.fills.get(id(x), {})}]


#: each pad rule (`ops/traits.py`, declared on the OpDefs) -> the handler that applies it
_HANDLERS = {
    "elementwise": _elementwise,
    "view": _view,
    "transpose": _transpose,
    "matmul": _matmul,
    "gemm": _gemm,
    "softmax": _softmax,
    "reduce": _reduce,
    "mean": _reduce,
    "argreduce": _argreduce,
    "layernorm": _layernorm,
    "concat": _concat,
    "split": _split,
    "slice": _slice,
    "gather": _gather,
    "expand": _expand,
    "constant_of_shape": _constant_of_shape,
    "cumsum": _cumsum,
    "batchnorm": _batchnorm,
    "passthrough": _passthrough,
    "pad": _pad,
    "mask": _mask,
}
assert set(_HANDLERS) == set(PAD_RULES), "every pad rule has a handler"


# ---- building a bucket version -------------------------------------------------------------------


def bucket_version(module: Module, generic: Function, symbol: str, bucket: int, lo: int,
                   notes: list | None = None) -> Function:
    """The bucket version of `generic` for `lo <= symbol <= bucket` (not yet in the module)."""
    s = sym(symbol)
    name = f"{generic.name.split('.')[0]}.{symbol}_b{bucket}"
    work = clone_function(generic, name)
    module.add_function(work)
    try:
        safety = PadSafety(module, work, symbol, lo)
        safety.run()
    finally:
        module.functions.pop(name, None)
    if notes is not None:
        notes.extend(safety.notes)
    static = clone_function(work, name, {s: bucket})
    static.subs = dict(generic.subs)
    body = Block([a.type for a in generic.params], [a.name for a in generic.params])
    for old, new in zip(static.params, body.args):
        v = new
        for ax in safety.padded_axes(new.type):
            padded = v.type.with_shape((*v.type.shape[:ax], bucket, *v.type.shape[ax + 1:]))
            op = Op("cc.pad_dim", [v], [padded], {"axis": ax, "size": bucket, "fill": 0.0},
                    loc=f"{new.name or 'input'}.pad")
            body.append(op)
            v = op.result
        old.replace_all_uses_with(v)
    for op in list(static.body.ops):
        body.append(op)
    ret = body.ops[-1]
    for k, (v, want) in enumerate(zip(list(ret.operands), generic.result_types)):
        for ax in safety.padded_axes(want):
            op = Op("cc.unpad_dim", [v], [v.type.with_shape((*v.type.shape[:ax], s, *v.type.shape[ax + 1:]))],
                    {"axis": ax, "len": symbol}, loc=f"output{k}.unpad")
            body.insert_before(ret, op)
            v = op.result
        ret.set_operand(k, v)
    f = Function(name, body, list(generic.result_types), subs=dict(generic.subs),
                 attrs={**generic.attrs, "kind": "bucket", "bucket": bucket, "symbol": symbol})
    module.add_function(f)
    try:
        needs = infer_function_constraints(module, f)
    except OnnxccError as e:
        module.functions.pop(name)
        raise BucketError(f"bucket {symbol} = {bucket}: the graph at the padded size fails: {e}") from e
    module.functions.pop(name)
    if f.result_types != list(generic.result_types):
        got = ", ".join(str(t) for t in f.result_types)
        raise BucketError(f"bucket {symbol} = {bucket}: the padded graph returns ({got}), expected "
                          f"({', '.join(str(t) for t in generic.result_types)})")
    pred = sympy.Le(s, bucket) if lo <= 1 else sympy.And(sympy.Lt(lo - 1, s), sympy.Le(s, bucket))
    # the generic function's own guard stays (split-if's, broadcast's a == b: its body may
    # have been folded for them)
    f.guard = sympy.And(pred, generic.guard, *[n.expr for n in needs])
    return f


def parse_buckets(text: str) -> SymValues:
    """'seq:64:128|batch:4' -> (('seq', (64, 128)), ('batch', (4,)))."""
    return parse_sym_values(text, "bucketize: buckets")


def bucket_table(buckets: SymValues) -> dict[str, list[int]]:
    """Symbol -> its bucket bounds, ascending, each once (refusing a size below 1)."""
    out: dict[str, list[int]] = {}
    for name, sizes in buckets:
        if not sizes or any(n < 1 for n in sizes):
            group = ":".join([name, *map(str, sizes)])
            raise OnnxccError(f"bucketize: expected SYM:B1[:B2...] with positive sizes, got {group!r}")
        out.setdefault(name, []).extend(sizes)
    return {k: sorted(set(v)) for k, v in out.items()}


@register_pass
@dataclass(frozen=True)
class BucketizePass(ModulePass):
    """Add exact bucket versions of @main (pad, run at the static size, mask, cut back)."""

    name: ClassVar[str] = "bucketize"
    #: bucket bounds per symbol (`seq:64:128|batch:4` in a textual pipeline)
    buckets: SymValues = field(default=(), metadata={"parse": parse_buckets})

    def run(self, module: Module, ctx: PassContext) -> bool:
        table = bucket_table(self.buckets)
        if not table:
            return False
        if "main" not in module.dispatch:
            if "main" not in module.functions:
                return False
            g = module.functions.pop("main")
            g.name = "main.generic"
            g.attrs.setdefault("kind", "generic")
            module.add_function(g)
            module.dispatch["main"] = [g.name]
        order = module.dispatch["main"]
        generic = module.functions[order[-1]]
        notes: list[str] = []
        made = []
        for name, sizes in table.items():
            if name not in module.symbols:
                known = ", ".join(s.name for s in module.symbols) or "none"
                raise OnnxccError(f"bucketize: unknown symbol {name!r} (known: {known})")
            info = module.symbols[name]
            prev = info.lo - 1
            for b in sizes:
                if b <= prev or prev >= info.hi:
                    continue
                f = bucket_version(module, generic, name, b, prev + 1, notes)
                module.add_function(f)
                made.append(f.name)
                prev = b
        at = sum(1 for v in order if module.functions[v].attrs.get("kind") in ("exact", "one"))
        module.dispatch["main"] = order[:at] + made + order[at:]
        ctx.options.setdefault("bucketize_notes", []).extend(notes)
        return bool(made)
