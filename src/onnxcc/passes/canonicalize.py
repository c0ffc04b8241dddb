"""canonicalize: fold constants and shape values, drop identities, then CSE and DCE.

Four steps, in this order:

1. value propagation over the module (each OpDef's `value` rule; types are not re-inferred,
   so run shape-inference first);
2. greedy patterns (`apply_patterns`), nested regions included:
   - constant folding: a pure op whose operands are all `cc.const` and whose results are
     static and small (<= `fold_limit` elements) is evaluated with its reference and
     becomes `cc.const`; ops producing big tensors are left alone;
   - shape-value folding: an integer result whose value propagation knows every element
     becomes `cc.const` when all are ints, else `cc.dims {dims = [...]}` (i64, rank <= 1,
     only symbols bound at function entry), e.g. the `Shape -> Gather -> Concat` chains
     exporters write;
   - identities: Identity, Dropout (inference), Reshape / Expand / Squeeze / Unsqueeze /
     Flatten / Cast / CastLike whose result type is exactly the operand's, Transpose with
     the identity perm, Transpose of Transpose (composed), x + 0, x - 0, x * 1, x / 1 when
     the result type is exactly x's (no broadcasting);
3. CSE (option `cse`, on by default): exporters write one Shape node per use, so folding
   leaves identical `cc.dims` / `cc.const` ops that only CSE merges;
4. DCE of everything that became dead (always).

"Exactly the same type" is structural equality of TensorTypes without `?` dims: dims are
canonical sympy expressions, so equal text is proved equal; anything weaker is kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import ClassVar

import numpy as np
import sympy

from ..ir import Block, DType, Function, Module, Op, TensorType, Value, canon, free_symbols, sym
from ..ops import InferCtx, RefCtx, get_opdef, onnx_inputs, registered_ops
from ..ops.cc import const_array
from ..ops.infer import tracks_value
from .base import ModulePass, PassContext, register_pass
from .cse import cse
from .dce import dce, is_pure
from .rewrite import RewritePattern, Rewriter, apply_patterns
from .shape_inference import MAX_TRACKED

#: results up to this many elements are folded into inline constants
FOLD_LIMIT = 64


# ---- value propagation ----------------------------------------------------------------------

def propagate_values(module: Module) -> dict[Value, np.ndarray]:
    """Known values of small integer tensors (object arrays of Dims), from the value rules.

    Like `shape_inference.infer_shapes` but read-only: types are taken as they are and ops
    without a definition (e.g. `test.*`) simply have unknown values.
    """
    values: dict[Value, np.ndarray] = {}
    for f in module.functions.values():
        _propagate_block(f.body, module, values)
    return values


def _propagate_block(block: Block, module: Module, values: dict) -> None:
    for op in block.ops:
        if op.name in ("return", "yield"):
            continue
        d = get_opdef(op.name)
        capture = getattr(d, "capture_operand", None)
        for ri, r in enumerate(op.regions):
            for b in r.blocks:
                if capture is not None:  # a captured constant is known inside the body too
                    for ai, a in enumerate(b.args):
                        i = capture(op, ri, ai)
                        if i is not None and i < len(op.operands) and op.operands[i] in values:
                            values[a] = values[op.operands[i]]
                _propagate_block(b, module, values)
        if d is None:
            continue
        vals = d.value(InferCtx(op, module, values))
        for r, v in zip(op.results, vals or ()):
            # the tracking rule of shape inference: a float chain over dims (torch's
            # `int(h * 0.5)` for a resize's size) reaches the int value it ends in
            if v is not None and tracks_value(r.type.dtype, d) and np.size(v) <= MAX_TRACKED:
                values[r] = np.asarray(v, dtype=object).reshape(r.type.shape) if r.type.is_static else v


# ---- helpers --------------------------------------------------------------------------------

def const_value(v: Value, module: Module) -> np.ndarray | None:
    """The data of a value defined by `cc.const`, else None (also for weights without data)."""
    op = v.owner
    if not isinstance(op, Op) or op.name != "cc.const":
        return None
    try:
        return np.asarray(const_array(op, module))
    except KeyError:
        return None


def same_type(a: TensorType, b: TensorType) -> bool:
    """Provably the same type: structurally equal and no unknown (`?`) dims."""
    return a == b and not a.has_unknown


def new_const(t: TensorType, value: np.ndarray, loc: str, name: str = "") -> Op:
    data = np.array(value, dtype=t.dtype.np).reshape(t.shape)  # a copy: never a view of another const
    return Op("cc.const", (), [t], {"value": data}, loc=loc, result_names=[name])


def _readonly(a: np.ndarray) -> np.ndarray:
    v = a.view()
    v.flags.writeable = False
    return v


def _small_static(t: TensorType, limit: int) -> bool:
    return t.is_static and t.dtype is not DType.bf16 and t.numel() <= limit


# ---- folding --------------------------------------------------------------------------------

class FoldConstants(RewritePattern):
    """A pure op of constants with small static results -> cc.const, via its reference."""

    def __init__(self, module: Module, limit: int = FOLD_LIMIT):
        self.module, self.limit = module, limit
        self._interp = SimpleNamespace(module=module)

    def match_and_rewrite(self, op: Op, rw: Rewriter) -> bool:
        if op.name in ("cc.const", "cc.dims") or op.regions or not op.operands:
            return False
        d = get_opdef(op.name)
        if d is None or not d.pure or not all(_small_static(r.type, self.limit) for r in op.results):
            return False
        args = [const_value(v, self.module) for v in op.operands]
        if any(a is None for a in args):
            return False
        args = [_readonly(a) for a in args]  # a reference must not scribble on an attribute
        try:
            with np.errstate(all="ignore"):
                outs = d.reference(RefCtx(op, {}, self._interp), *args)
        except Exception:  # NOTE: folding is optional; a failing op is left for run time to report
            return False
        if len(outs) != len(op.results):
            return False
        outs = [np.asarray(o) for o in outs]
        if any(o.shape != r.type.shape for o, r in zip(outs, op.results)):
            return False
        rw.replace_op(op, [rw.insert_before(op, new_const(r.type, o, op.loc, r.name)).result
                           for r, o in zip(op.results, outs)])
        return True


def entry_symbols(f: Function) -> set:
    """Symbols bound when `f` is entered: parameter dims that are a bare symbol, and subs.

    Other symbols (data-dependent ones such as NonZero's count) have no value at run time
    until the op producing them has run, so a `cc.dims` must not mention them.
    """
    out = {d for a in f.params for d in a.type.shape if isinstance(d, sympy.Symbol)}
    return out | {sym(str(k)) for k in f.subs}


class FoldKnownValues(RewritePattern):
    """An integer result with a fully known value -> cc.const (static) or cc.dims (symbolic),
    the latter only over symbols bound at function entry."""

    def __init__(self, module: Module, values: dict):
        self.values = values
        #: op -> the symbols its function binds on entry (ops in regions included)
        self.bound: dict[Op, set] = {}
        for f in module.functions.values():
            syms = entry_symbols(f)
            for op in f.walk():
                self.bound[op] = syms

    def match_and_rewrite(self, op: Op, rw: Rewriter) -> bool:
        if op.name == "cc.const":
            return False
        changed = False
        for r in op.results:
            if r.uses and (new := self._fold(op, r)) is not None:
                rw.replace_all_uses(r, rw.insert_before(op, new).result)
                changed = True
        if changed and not any(r.uses for r in op.results) and is_pure(op):
            rw.erase_op(op)
        return changed

    def _fold(self, op: Op, r: Value) -> Op | None:
        v = self.values.get(r)
        t = r.type
        if v is None or not t.is_static or not t.dtype.is_int:
            return None
        flat = [canon(x) for x in np.asarray(v, dtype=object).reshape(-1)]
        if len(flat) != t.numel() or any(x is None for x in flat):
            return None
        if all(isinstance(x, int) for x in flat):
            return new_const(t, np.array(flat, dtype=t.dtype.np), op.loc, r.name)
        if op.name == "cc.dims" or t.dtype is not DType.i64 or t.rank > 1:
            return None
        if not set().union(*(free_symbols(x) for x in flat)) <= self.bound.get(op, set()):
            return None
        return Op("cc.dims", (), [t], {"dims": flat}, loc=op.loc, result_names=[r.name])


# ---- identities: each pattern applies to the ops whose OpDef declares it (ops/traits.py) ------


def declaring(pattern: str) -> tuple[str, ...]:
    """The registered ops that declare canonical `pattern` on their OpDef."""
    return tuple(n for n in registered_ops() if pattern in get_opdef(n).canonical)  # type: ignore[union-attr]


class DropSameTypeIdentity(RewritePattern):
    """An op that returns its first operand unchanged when the types say so."""

    def __init__(self):
        self.op_names = declaring("same-type-identity")

    def match_and_rewrite(self, op: Op, rw: Rewriter) -> bool:
        if len(op.results) != 1 or not op.operands:
            return False
        a, b = op.result.type, op.operands[0].type
        # Identity is one whatever the types say, as long as they are written the same
        if not (same_type(a, b) or (op.name == "onnx.Identity" and a == b)):
            return False
        rw.replace_op(op, [op.operands[0]])
        return True


class DropDropout(RewritePattern):
    """Dropout at inference is the identity (the mask output, if any, must be unused)."""

    def __init__(self, module: Module):
        self.module = module
        self.op_names = declaring("dropout")

    def match_and_rewrite(self, op: Op, rw: Rewriter) -> bool:
        x = op.operands[0]
        if op.results[0].type != x.type or any(r.uses for r in op.results[1:]):
            return False
        ins = onnx_inputs(op, list(op.operands))
        training = ins[2] if len(ins) > 2 else None
        if training is not None:
            t = const_value(training, self.module)
            if t is None or t.any():
                return False
        rw.replace_op(op, [x] + [None] * (len(op.results) - 1))
        return True


def _perm(op: Op) -> list[int]:
    rank = op.operands[0].type.rank
    perm = op.attrs.get("perm")
    return list(perm) if perm is not None else list(range(rank))[::-1]


class SimplifyTranspose(RewritePattern):
    """Transpose by the identity perm -> its input; Transpose(Transpose(x)) -> one Transpose."""

    def __init__(self):
        self.op_names = declaring("transpose")

    def match_and_rewrite(self, op: Op, rw: Rewriter) -> bool:
        x, perm = op.operands[0], _perm(op)
        inner = x.owner
        if isinstance(inner, Op) and inner.name == "onnx.Transpose":
            p1 = _perm(inner)
            x, perm = inner.operands[0], [p1[i] for i in perm]
        if perm == list(range(len(perm))):
            if not same_type(op.result.type, x.type):
                return False
            rw.replace_op(op, [x])
            return True
        if x is op.operands[0]:
            return False
        new = Op("onnx.Transpose", [x], [op.result.type], {**op.attrs, "perm": perm}, loc=op.loc,
                 result_names=[op.result.name])
        rw.replace_op(op, new)
        return True


class DropNeutralOperand(RewritePattern):
    """x + 0, 0 + x, x - 0, x * 1, 1 * x, x / 1 -> x, when the result type is exactly x's (the
    neutral element and whether it commutes are on the op's OpDef)."""

    def __init__(self, module: Module):
        self.module = module
        self.op_names = declaring("neutral-operand")

    def match_and_rewrite(self, op: Op, rw: Rewriter) -> bool:
        if len(op.operands) != 2:
            return False
        spec = get_opdef(op.name).neutral  # type: ignore[union-attr]
        neutral, commutes = spec.value, spec.commutes
        a, b = op.operands
        for x, c in ((a, b), (b, a)) if commutes else ((a, b),):
            cv = const_value(c, self.module)
            if (cv is not None and cv.size and same_type(op.result.type, x.type)
                    and bool(np.all(cv == neutral))):
                rw.replace_op(op, [x])
                return True
        return False


# ---- the pass -------------------------------------------------------------------------------

def canonicalize(module: Module, fold_limit: int = FOLD_LIMIT, run_cse: bool = True,
                 max_iterations: int = 10) -> bool:
    values = propagate_values(module)
    patterns = [FoldKnownValues(module, values), FoldConstants(module, fold_limit), DropSameTypeIdentity(),
                DropDropout(module), SimplifyTranspose(), DropNeutralOperand(module)]
    changed = apply_patterns(module, patterns, max_iterations=max_iterations)
    if run_cse:
        changed |= cse(module) > 0
    changed |= dce(module) > 0
    return changed


@register_pass
@dataclass(frozen=True)
class CanonicalizePass(ModulePass):
    """Fold constants and shape values, remove identities, then CSE (optional) and DCE."""

    name: ClassVar[str] = "canonicalize"
    #: fold only results with at most this many elements (they become inline constants)
    fold_limit: int = FOLD_LIMIT
    #: merge duplicate pure ops after folding (canonicalize{cse=false} to keep them)
    cse: bool = True
    #: greedy sweeps over the module before giving up on a fixed point
    max_iterations: int = 10

    def run(self, module: Module, ctx: PassContext) -> bool:
        return canonicalize(module, self.fold_limit, self.cse, self.max_iterations)
