"""Control flow: If, Loop, Scan. Shape rules over region bodies, region-aware verification,
and references that run the bodies through the interpreter.

Region layout (regions are isolated from above; captures are operands):
  If    operands (cond, *captures)               then_branch / else_branch args (*captures)
                                                 each branch yields the results
  Loop  operands (M?, cond?, *carried, *captures)  body args (iter_num i64[], cond bool[],
                                                 *carried, *captures); body yields
                                                 (cond, *carried, *scan_outputs)
  Scan  operands (*states, *scan_inputs, *captures)  body args (*states, *scan_input_slices,
                                                 *captures); yields (*states, *scan_output_slices)

Lowering to native code (If/Loop/Scan -> kernel control statements): ops/control_lower.py.

The op's `infer_regions` sets the body's block-arg types from the operands before the body
is inferred. A loop-carried value keeps its type across iterations; where the body proves a
dim of it changes, that dim becomes a fresh symbol (the carried value's dim in the current
iteration) and the body is inferred again. A Loop's scan outputs get a leading trip-count
dim: M itself when M is known and no condition can stop the loop early, else a fresh symbol.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import sympy

from ..errors import OnnxccError, UnsupportedOp, VerifyError
from ..ir import Block, BlockArg, DType, Op, TensorType, canon, evaluate
from .loop_count import counter_trips
from .registry import InferCtx, OpDef, RefCtx, get_opdef, onnx_inputs, register
from .shape import const_value, fresh_dim, known_dims, norm_axis, simplify

BOOL0 = TensorType(DType.bool, ())
I640 = TensorType(DType.i64, ())
#: rounds of "infer the body, widen the carried dims that change" before giving up
MAX_ROUNDS = 4


def _yields(block: Block) -> list:
    t = block.terminator
    return list(t.operands) if t is not None else []


def _same_kind(a: TensorType, b: TensorType) -> bool:
    return a.dtype == b.dtype and a.rank == b.rank


def _bind_captures(ctx: InferCtx, args, operand_idx) -> None:
    """Captured block args take the captured operands' types and known values."""
    for a, i in zip(args, operand_idx):
        a.type = ctx.in_types[i]
        ctx.set_known(a, ctx.known(i))


def _run_body(ctx: RefCtx, index: int, args: list[np.ndarray]) -> list[np.ndarray]:
    """Run region `index`, binding any symbol its block args introduce (e.g. a carried dim
    that varies across iterations) from the arrays passed in."""
    block = ctx.op.regions[index].block
    env = dict(ctx.env)
    for a, x in zip(block.args, args):
        for d, n in zip(a.type.shape, np.shape(x)):
            if isinstance(d, sympy.Symbol) and d.name not in env:
                env[d.name] = int(n)
    return ctx.interp.run_block(block, [np.asarray(x) for x in args], env)


def _stack(ctx: RefCtx, slices: list, axis: int, t: TensorType) -> np.ndarray:
    if slices:
        return np.stack(slices, axis=axis)
    shape = []
    for d in t.shape:
        try:
            shape.append(evaluate(d, ctx.env))
        except (ValueError, TypeError):
            shape.append(0)
    shape[axis] = 0
    return np.zeros(shape, dtype=t.dtype.np)


# ---- loop-carried types ------------------------------------------------------------------------

def _varying_mark(ctx: InferCtx) -> str:
    return f'node "{ctx.loc}": loop-carried'


def _is_varying(ctx: InferCtx, d) -> bool:
    return isinstance(d, sympy.Symbol) and d.name in ctx.symbols \
        and ctx.symbols[d.name].origin.startswith(_varying_mark(ctx))


def carried_varies(op: Op, module) -> bool:
    """Whether the body of Loop `op` (as typed) changes a carried value's shape from one
    iteration to the next: some carried argument has a dim widened to a varying symbol."""
    if op.name != "onnx.Loop" or not op.regions:
        return False
    mark = f'node "{op.loc or op.name}": loop-carried'
    n = len(loop_layout(op).carried)
    return any(isinstance(d, sympy.Symbol) and d.name in module.symbols
               and module.symbols[d.name].origin.startswith(mark)
               for a in op.regions[0].block.args[2:2 + n] for d in a.type.shape)


def ragged_scans(op: Op, module) -> bool:
    """Whether a scan output of Loop `op` stacks slices that are a varying carried dim itself
    (the body yields a carried value as a scan output: torch's `for ...: y = y + x[i:i+1];
    ys.append(y)`): the import builds such a Loop per value of M (unrolled) rather than keep
    it. Slices that move otherwise (`carried0_d0 + 1`) are typed by the first one's extent
    and stay one loop (`LoopOp.infer`)."""
    mark = f'node "{op.loc or op.name}": loop-carried'
    n = len(loop_layout(op).carried)
    ys = _yields(op.regions[0].block)
    return any(isinstance(d, sympy.Symbol) and d.name in module.symbols
               and module.symbols[d.name].origin.startswith(mark)
               for y in ys[1 + n:] for d in y.type.shape)


def _bind_carried(ctx: InferCtx, args, operand_idx) -> None:
    """Carried block args enter with the initial values' types, keeping dims already known
    to vary (from an earlier run of shape inference)."""
    for a, i in zip(args, operand_idx):
        init, cur = ctx.in_types[i], a.type
        if _same_kind(init, cur):
            a.type = init.with_shape(c if _is_varying(ctx, c) else d for d, c in zip(init.shape, cur.shape))
        else:
            a.type = init
        ctx.set_known(a, None)  # a carried value changes from one iteration to the next


def _widen(ctx: InferCtx, args, yields, what: str) -> bool:
    """Make each carried dim the body changes a fresh symbol; True if any was widened."""
    widened = False
    for k, (a, y) in enumerate(zip(args, yields)):
        at, yt = a.type, y.type
        if at.dtype != yt.dtype:
            raise ctx.error(f"{what} value {k} enters the body as {at} but the body yields {yt}")
        if at.rank != yt.rank:
            raise UnsupportedOp(ctx.op.opname, "", ctx.loc, f"{what} value {k} changes rank across iterations "
                                f"({at} -> {yt})")
        shape = list(at.shape)
        for j, (d, e) in enumerate(zip(at.shape, yt.shape)):
            if _is_varying(ctx, d) or ctx.symbols.prove_eq(d, e) is True:
                continue
            shape[j] = ctx.symbols.fresh(f"carried{k}_d{j}",
                                         origin=f"{_varying_mark(ctx)} value {k} dim {j} varies across iterations")
            widened = True
        a.type = at.with_shape(shape)
    return widened


def _fixed_point(ctx: InferCtx, body: Block, infer_block, carried_args, first_carried_yield: int, what: str) -> bool:
    changed = False
    for _ in range(MAX_ROUNDS):
        changed |= bool(infer_block(body))
        ys = _yields(body)[first_carried_yield:first_carried_yield + len(carried_args)]
        if not _widen(ctx, carried_args, ys, what):
            return changed
    raise UnsupportedOp(ctx.op.opname, "", ctx.loc, f"{what} types do not settle after {MAX_ROUNDS} rounds")


def _verify_carried(op: Op, inits, args, yields, results, what: str) -> None:
    """A carried value keeps its dtype and rank; a dim may change only where the body's
    block arg marks it as varying (it differs from the initial value's dim)."""
    for k, (i, a, y, r) in enumerate(zip(inits, args, yields, results)):
        if not _same_kind(i.type, a.type):
            raise VerifyError(f"{what} value {k} is {i.type} but the body takes {a.type}", op)
        fixed = [j for j, (d, e) in enumerate(zip(i.type.shape, a.type.shape)) if d == e]
        if not _same_kind(a.type, y.type) or any(a.type.shape[j] != y.type.shape[j] for j in fixed):
            raise VerifyError(f"{what} value {k} changes type: it enters the body as {a.type} but the body "
                              f"yields {y.type}", op)
        if not _same_kind(r.type, a.type):
            raise VerifyError(f"result {k} is {r.type} but {what} value {k} is {a.type}", op)


# ---- If ------------------------------------------------------------------------------------

class BranchSplit(UnsupportedOp):
    """An If whose branches give results of different ranks, on a condition that is a function
    of dims only (`pred`): each value of the condition needs its own version. The split-if
    pass makes them (passes/split_if.py); until then the importer types the results as
    one branch's (`branch_types[0]`: then, `[1]`: else; then first, else if the rest of the
    graph does not fit)."""

    def __init__(self, op: Op, pred, detail: str, branch_types: list):
        super().__init__("If", "", op.loc or op.name, detail)
        self.op, self.pred, self.branch_types, self.detail = op, pred, branch_types, detail


class DataBranch(BranchSplit):
    """Such an If whose condition is computed from data (`pred` None): no guard over dims can
    split it as it stands. The importer types it as one branch and records which in the op's
    `typed_as` attribute; split-if turns the small integer inputs the condition is computed
    from into symbols read at dispatch (passes/value_symbols.py), which makes it a condition
    over dims; where that is not possible the function that holds it cannot be lowered (a
    value version, which folds the condition, can)."""

    def __init__(self, op: Op, detail: str, branch_types: list):
        super().__init__(op, None, detail, branch_types)


#: how deep `dim_predicate` follows a condition's producers
MAX_PRED_DEPTH = 16


class PredCtx:
    """What an OpDef's `predicate` rule sees of its op: operand i as a known scalar dim
    (`dim`), as a condition (`pred`), and the dtypes."""

    def __init__(self, op: Op, lookup, depth: int):
        self.op, self._lookup, self._depth = op, lookup, depth

    def dtype(self, i: int) -> DType:
        return self.op.operands[i].type.dtype

    def out_dtype(self) -> DType:
        return self.op.results[0].type.dtype

    def dim(self, i: int):
        k = self._lookup(self.op.operands[i])
        if k is None or np.size(k) != 1:
            return None
        return canon(np.asarray(k, dtype=object).reshape(-1)[0])

    def pred(self, i: int):
        return dim_predicate(self.op.operands[i], self._lookup, self._depth + 1)


def dim_predicate(v, lookup, depth: int = 0):
    """The condition a one-element bool value stands for, as a sympy Boolean over dims
    (sympy.true / false when known), or None when it depends on data. `lookup(value)` gives
    a value's propagated value (object array of Dims) or None."""
    if depth > MAX_PRED_DEPTH or v.type.numel() != 1:
        return None
    k = lookup(v)
    if k is not None and np.size(k) == 1:
        x = canon(np.asarray(k, dtype=object).reshape(-1)[0])
        if isinstance(x, int):
            return sympy.true if x else sympy.false
    owner = getattr(v, "op", None)
    if owner is None or len(owner.results) != 1:
        return None
    d = get_opdef(owner.name)
    rule = getattr(d, "predicate", None) if d is not None else None
    if rule is None:
        return None
    p = rule(PredCtx(owner, lookup, depth))
    return None if p is None else sympy.sympify(p)


@register("onnx.If")
class IfOp(OpDef):
    arity = (1, None)
    num_results = None

    def infer_regions(self, ctx, infer_block):
        changed = False
        taken = _taken(ctx)
        for i, reg in enumerate(ctx.op.regions):
            _bind_captures(ctx, reg.block.args, range(1, len(ctx.op.operands)))
            if taken is None or i == taken:
                changed |= bool(infer_block(reg.block))
                continue
            # a branch that never runs may not fit the values now known (an input read into
            # symbols: AffineGrid's 2-D branch splits a 5-element size in four): typed as far
            # as it goes, its failure is no error (split-if folds such Ifs away)
            saved = list(ctx.module.constraints)
            try:
                changed |= bool(infer_block(reg.block))
            except (OnnxccError, ValueError):
                pass
            finally:
                ctx.module.constraints[:] = saved  # nor is what it would need a constraint
        return changed

    def value(self, ctx):
        """A constant condition passes the taken branch's known values through (AffineGrid's
        N, C, D, H, W split from its size input, read on by the shapes after it)."""
        taken = _taken(ctx)
        if taken is None:
            return None
        return [ctx.value_of(y) for y in _yields(ctx.op.regions[taken].block)]

    def infer(self, ctx):
        op = ctx.op
        if len(op.regions) != 2:
            raise ctx.error(f"expected 2 regions (then_branch, else_branch), got {len(op.regions)}")
        then_y, else_y = (_yields(r.block) for r in op.regions)
        if len(then_y) != len(else_y):
            raise ctx.error(f"then_branch yields {len(then_y)} values but else_branch yields {len(else_y)}")
        cond = const_value(ctx, 0)
        if cond is not None and cond.size == 1:  # a constant condition: the taken branch decides
            return [v.type for v in (then_y if bool(cond.reshape(-1)[0]) else else_y)]
        out = []
        for k, (a, b) in enumerate(zip(then_y, else_y)):
            at, bt = a.type, b.type
            if at.dtype != bt.dtype:
                raise ctx.error(f"result {k}: then_branch yields {at} but else_branch yields {bt}")
            if at.rank != bt.rank:
                what = f"result {k} has rank {at.rank} in then_branch and {bt.rank} in else_branch"
                pred = dim_predicate(op.operands[0], ctx.value_of)
                if pred is None:
                    typed = op.attrs.get("typed_as")
                    if typed is not None:  # provisional: lowering refuses it (see DataBranch)
                        return [y.type for y in (then_y, else_y)[typed]]
                    raise DataBranch(op, f"{what}, and the condition depends on data (a version can be split "
                                     "only on a condition over input dims)",
                                     [[y.type for y in then_y], [y.type for y in else_y]])
                raise BranchSplit(op, pred, f"{what}, on the condition {pred}",
                                  [[y.type for y in then_y], [y.type for y in else_y]])
            shape = [d if ctx.symbols.prove_eq(d, e) is True else
                     fresh_dim(ctx, "branch", f"result {k} dim {j} is {d} or {e} depending on the branch", k, j)
                     for j, (d, e) in enumerate(zip(at.shape, bt.shape))]
            out.append(at.with_shape(shape))
        return out

    def verify(self, op):
        if len(op.regions) != 2:
            raise VerifyError(f"expects 2 regions (then_branch, else_branch), got {len(op.regions)}", op)
        cond = op.operands[0].type
        if cond.dtype != DType.bool or (isinstance(cond.numel(), int) and cond.numel() != 1):
            raise VerifyError(f"condition must be a single bool, got {cond}", op)
        caps = op.operands[1:]
        names = ("then_branch", "else_branch")
        for name, reg in zip(names, op.regions):
            b = reg.block
            if len(b.args) != len(caps):
                raise VerifyError(f"{name} takes {len(b.args)} arguments but the op passes {len(caps)} captures", op)
            for i, (a, v) in enumerate(zip(b.args, caps)):
                if not _same_kind(a.type, v.type):
                    raise VerifyError(f"{name} argument {i} is {a.type} but capture {i} is {v.type}", op)
        then_y, else_y = (_yields(r.block) for r in op.regions)
        if len(then_y) != len(else_y):
            raise VerifyError(f"then_branch yields {len(then_y)} values but else_branch yields {len(else_y)}", op)
        if len(then_y) != len(op.results):
            raise VerifyError(f"branches yield {len(then_y)} values but the op has {len(op.results)} results", op)
        for k, (a, b, r) in enumerate(zip(then_y, else_y, op.results)):
            if a.type.dtype != b.type.dtype:
                raise VerifyError(f"result {k}: then_branch yields {a.type} but else_branch yields {b.type}", op)
            if not _same_kind(r.type, a.type) and not _same_kind(r.type, b.type):
                raise VerifyError(f"result {k} is {r.type} but the branches yield {a.type} and {b.type}", op)

    def capture_operand(self, op: Op, region: int, arg: int) -> int | None:
        """The operand a region's block arg captures (None: not a capture)."""
        return 1 + arg

    def reference(self, ctx, cond, *caps):
        taken = 0 if bool(np.asarray(cond).reshape(-1)[0]) else 1
        return _run_body(ctx, taken, list(caps))

    def lower(self, ctx):
        from .control_lower import lower_if

        lower_if(ctx)


def _taken(ctx) -> int | None:
    """The branch an If with a known condition takes (0: then, 1: else), else None."""
    cond = const_value(ctx, 0)
    if cond is None or cond.size != 1:
        return None
    return 0 if bool(cond.reshape(-1)[0]) else 1


def captured_value(v):
    """The value a region's block arg captures from outside (through nested regions), or `v`
    itself when it is not a capture: so a lowering inside a branch or loop body sees a
    captured constant (a Slice's axes) as the constant it is."""
    while isinstance(v, BlockArg):
        region = v.owner.parent
        op = region.parent if region is not None else None
        d = get_opdef(op.name) if op is not None else None
        rule = getattr(d, "capture_operand", None)
        i = rule(op, op.regions.index(region), v.index) if rule is not None else None
        if i is None or i >= len(op.operands):
            return v
        v = op.operands[i]
    return v


# ---- Loop ------------------------------------------------------------------------------------

@dataclass
class _LoopLayout:
    m: int | None  # operand index of M, None when absent
    cond: int | None  # operand index of cond, None when absent
    carried: list[int]
    captures: list[int]


def _loop_num_captures(op: Op) -> int:
    if "num_captures" in op.attrs:
        return int(op.attrs["num_captures"])
    # NOTE: without the attribute, captured block args are recognised by carrying the
    # captured value's name (how the importer names them); textual IR must give the attr.
    if not op.regions:
        return 0
    args, n = op.regions[0].block.args, 0
    while n < min(len(args) - 2, len(op.operands)) and args[-1 - n].name \
            and args[-1 - n].name == op.operands[-1 - n].name:
        n += 1
    return n


def loop_layout(op: Op) -> _LoopLayout:
    pos = onnx_inputs(op, list(range(len(op.operands))))
    pos += [None] * (2 - len(pos))
    rest = [p for p in pos[2:] if p is not None]
    n_caps = _loop_num_captures(op)
    n_carried = len(rest) - n_caps
    if n_carried < 0:
        raise VerifyError(f"num_captures {n_caps} exceeds the {len(rest)} operands after M and cond", op)
    return _LoopLayout(pos[0], pos[1], rest[:n_carried], rest[n_carried:])


@register("onnx.Loop")
class LoopOp(OpDef):
    arity = (0, None)
    num_results = None
    size_operands = (0,)  # M: an input that is only a trip count may be read into a symbol

    def infer_regions(self, ctx, infer_block):
        op, lay = ctx.op, loop_layout(ctx.op)
        body = op.regions[0].block
        n = len(lay.carried)
        if len(body.args) != 2 + n + len(lay.captures):
            raise ctx.error(f"body takes {len(body.args)} arguments, expected 2 + {n} carried + "
                            f"{len(lay.captures)} captures")
        body.args[0].type, body.args[1].type = I640, BOOL0
        _bind_carried(ctx, body.args[2:2 + n], lay.carried)
        _bind_captures(ctx, body.args[2 + n:], lay.captures)
        return _fixed_point(ctx, body, infer_block, body.args[2:2 + n], 1, "loop-carried")

    def infer(self, ctx):
        op, lay = ctx.op, loop_layout(ctx.op)
        body = op.regions[0].block
        ys, n = _yields(body), len(lay.carried)
        n_scan = len(op.results) - n
        if n_scan < 0 or len(ys) != 1 + n + n_scan:
            raise ctx.error(f"body yields {len(ys)} values, expected 1 (cond) + {n} carried + "
                            f"{max(n_scan, 0)} scan outputs")
        if ys[0].type.dtype != DType.bool:
            raise ctx.error(f"body yields a {ys[0].type} condition, expected bool")
        out = []
        for k, (a, y) in enumerate(zip(body.args[2:2 + n], ys[1:1 + n])):
            at = a.type
            if not _same_kind(at, y.type):  # the pass fixes the body first; this guards direct calls
                raise ctx.error(f"loop-carried value {k} enters the body as {at} but the body yields {y.type}")
            out.append(at.with_shape(d if _is_varying(ctx, d) or ctx.symbols.prove_eq(d, e) is True else
                                     fresh_dim(ctx, "carried", f"loop-carried value {k} dim {j} varies", k, j)
                                     for j, (d, e) in enumerate(zip(at.shape, y.type.shape))))
        # a counting while loop's exact trip count, kept for the lowering (the loop's bound and
        # the allocation bound of a carried value it grows): ops/loop_count.py
        counted = counter_trips(ctx, lay, body)
        if counted is None:
            op.attrs.pop("counted_trips", None)
        else:
            op.attrs["counted_trips"] = [counted]
        if n_scan:
            trips = self._trip_count(ctx, lay, body, n, counted)
            # a slice dim that moves with a carried dim: every iteration must give the first
            # one's extent (onnxruntime fails otherwise), a run-time symbol the lowering
            # records at the first iteration and checks at the others (control_lower.py)
            out += [y.type.with_shape((trips,) + tuple(
                fresh_dim(ctx, "scan", f"scan output {k} dim {j + 1}: the first iteration's extent", n + k, j + 1)
                if any(_is_varying(ctx, x) for x in sympy.sympify(d).free_symbols) else d
                for j, d in enumerate(y.type.shape))) for k, y in enumerate(ys[1 + n:])]
        return out

    def _trip_count(self, ctx, lay, body: Block, first_scan: int, counted):
        m = known_dims(ctx, lay.m) if lay.m is not None else None
        m = m[0] if m is not None and len(m) == 1 else None
        stops_early = lay.cond is not None and not (_const_true(ctx, lay.cond) and _yields_true(body))
        if m is not None and not stops_early:
            return max(m, 0) if isinstance(m, int) else simplify(ctx.symbols, sympy.Max(0, m))
        if counted is not None:  # `while i < n: ...; i += 1` runs n - i0 times
            return counted
        s = fresh_dim(ctx, "iters", "trip count of the loop (data-dependent)", first_scan, 0)
        if isinstance(m, int):
            info = ctx.symbols[s.name]
            info.hi = min(info.hi, max(m, 1))
        return s

    def verify(self, op):
        if len(op.regions) != 1:
            raise VerifyError(f"expects 1 region (body), got {len(op.regions)}", op)
        lay = loop_layout(op)
        body, n = op.regions[0].block, len(lay.carried)
        if len(body.args) != 2 + n + len(lay.captures):
            raise VerifyError(f"body takes {len(body.args)} arguments, expected 2 (iter_num, cond) + {n} carried "
                              f"+ {len(lay.captures)} captures", op)
        if body.args[0].type != I640 or body.args[1].type != BOOL0:
            raise VerifyError(f"body must take (i64[], bool[], ...), got ({body.args[0].type}, "
                              f"{body.args[1].type}, ...)", op)
        for name, i, want in (("M", lay.m, DType.i64), ("cond", lay.cond, DType.bool)):
            if i is not None and op.operands[i].type.dtype != want:
                raise VerifyError(f"{name} must be {want.value}, got {op.operands[i].type}", op)
        ys = _yields(body)
        n_scan = len(op.results) - n
        if n_scan < 0 or len(ys) != 1 + n + n_scan:
            raise VerifyError(f"body yields {len(ys)} values, expected 1 (cond) + {n} carried + "
                              f"{max(n_scan, 0)} scan outputs (the op has {len(op.results)} results)", op)
        if ys[0].type.dtype != DType.bool:
            raise VerifyError(f"body's first yield (the condition) must be bool, got {ys[0].type}", op)
        inits = [op.operands[i] for i in lay.carried]
        _verify_carried(op, inits, body.args[2:2 + n], ys[1:1 + n], op.results[:n], "loop-carried")
        for k, (y, r) in enumerate(zip(ys[1 + n:], op.results[n:])):
            if r.type.dtype != y.type.dtype or r.type.rank != y.type.rank + 1:
                raise VerifyError(f"scan output {k} is {r.type}; the body yields slices {y.type}", op)

    def capture_operand(self, op: Op, region: int, arg: int) -> int | None:
        lay = loop_layout(op)
        k = arg - 2 - len(lay.carried)
        return lay.captures[k] if 0 <= k < len(lay.captures) else None

    def reference(self, ctx, *ins):
        lay = loop_layout(ctx.op)
        m = None if lay.m is None else int(np.asarray(ins[lay.m]).reshape(-1)[0])
        cond = True if lay.cond is None else bool(np.asarray(ins[lay.cond]).reshape(-1)[0])
        carried = [ins[i] for i in lay.carried]
        caps = [ins[i] for i in lay.captures]
        n = len(carried)
        scans: list[list] = [[] for _ in range(len(ctx.op.results) - n)]
        i = 0
        while (m is None or i < m) and cond:
            outs = _run_body(ctx, 0, [np.array(i, dtype=np.int64), np.array(cond), *carried, *caps])
            if lay.cond is not None:  # without a cond input the body's condition is ignored
                cond = bool(np.asarray(outs[0]).reshape(-1)[0])
            carried = outs[1:1 + n]
            for s, v in zip(scans, outs[1 + n:]):
                s.append(v)
            i += 1
        return carried + [_stack(ctx, s, 0, r.type) for s, r in zip(scans, ctx.op.results[n:])]

    def lower(self, ctx):
        from .control_lower import lower_loop

        lower_loop(ctx)


def _const_true(ctx: InferCtx, i: int) -> bool:
    c = const_value(ctx, i)
    return c is not None and c.size == 1 and bool(c.reshape(-1)[0])


def _yields_true(body: Block) -> bool:
    """Whether the body's condition is always true: it passes its cond arg through, or a true
    constant, seen through Identity, a Cast to bool (which keeps truthiness) and captures
    (TorchScript yields `Cast(to=bool)` of the captured constant the Loop's cond is)."""
    y = _yields(body)[0]
    while True:
        owner = getattr(y, "op", None)
        if owner is not None and (owner.name == "onnx.Identity" or (owner.name == "onnx.Cast"
                                  and y.type.dtype is DType.bool)):
            y = owner.operands[0]
        elif y is body.args[1]:
            return True
        elif isinstance(y, BlockArg) and captured_value(y) is not y:
            y = captured_value(y)
        else:
            break
    owner = getattr(y, "op", None)
    if owner is not None and owner.name == "cc.const":
        v = owner.attrs.get("value")
        return isinstance(v, np.ndarray) and v.size == 1 and bool(v.reshape(-1)[0])
    return False


# ---- Scan ------------------------------------------------------------------------------------

@dataclass
class _ScanLayout:
    states: list[int]
    inputs: list[int]
    captures: list[int]
    in_axes: list[int]
    in_dirs: list[int]
    out_axes: list[int]
    out_dirs: list[int]


def scan_layout(op: Op) -> _ScanLayout:
    n_in = int(op.attrs.get("num_scan_inputs", 0))
    n_caps = int(op.attrs.get("num_captures", 0))
    n_ops = len(op.operands)
    n_state = n_ops - n_in - n_caps
    if n_in < 1 or n_state < 0:
        raise VerifyError(f"num_scan_inputs {n_in} and num_captures {n_caps} do not fit {n_ops} operands", op)
    n_out = len(op.results) - n_state
    idx = list(range(n_ops))
    return _ScanLayout(
        idx[:n_state], idx[n_state:n_state + n_in], idx[n_state + n_in:],
        list(op.attrs.get("scan_input_axes", [0] * n_in)), list(op.attrs.get("scan_input_directions", [0] * n_in)),
        list(op.attrs.get("scan_output_axes", [0] * max(n_out, 0))),
        list(op.attrs.get("scan_output_directions", [0] * max(n_out, 0))))


def _scan_axes(ctx: InferCtx, lay: _ScanLayout) -> list[int]:
    if len(lay.in_axes) != len(lay.inputs):
        raise ctx.error(f"scan_input_axes has {len(lay.in_axes)} entries for {len(lay.inputs)} scan inputs")
    return [norm_axis(ctx, a, ctx.in_types[i].rank, "scan input axis") for a, i in zip(lay.in_axes, lay.inputs)]


def _scan_length(ctx: InferCtx, lay: _ScanLayout, axes: list[int]):
    length = None
    for k, (i, a) in enumerate(zip(lay.inputs, axes)):
        d = ctx.in_types[i].shape[a]
        length = d if length is None else ctx.require_eq(length, d, f"scan length of scan input {k}")
    return length


@register("onnx.Scan")
class ScanOp(OpDef):
    arity = (1, None)
    num_results = None

    def infer_regions(self, ctx, infer_block):
        op, lay = ctx.op, scan_layout(ctx.op)
        body = op.regions[0].block
        ns, ni = len(lay.states), len(lay.inputs)
        if len(body.args) != ns + ni + len(lay.captures):
            raise ctx.error(f"body takes {len(body.args)} arguments, expected {ns} states + {ni} scan inputs + "
                            f"{len(lay.captures)} captures")
        _bind_carried(ctx, body.args[:ns], lay.states)
        for a, i, ax in zip(body.args[ns:ns + ni], lay.inputs, _scan_axes(ctx, lay)):
            t = ctx.in_types[i]
            a.type = t.with_shape(t.shape[:ax] + t.shape[ax + 1:])
            ctx.set_known(a, None)
        _bind_captures(ctx, body.args[ns + ni:], lay.captures)
        return _fixed_point(ctx, body, infer_block, body.args[:ns], 0, "scan state")

    def infer(self, ctx):
        op, lay = ctx.op, scan_layout(ctx.op)
        body = op.regions[0].block
        ys, ns = _yields(body), len(lay.states)
        n_out = len(op.results) - ns
        if n_out < 0 or len(ys) != ns + n_out:
            raise ctx.error(f"body yields {len(ys)} values, expected {ns} states + {max(n_out, 0)} scan outputs")
        length = _scan_length(ctx, lay, _scan_axes(ctx, lay))
        if len(lay.out_axes) != n_out:
            raise ctx.error(f"scan_output_axes has {len(lay.out_axes)} entries for {n_out} scan outputs")
        out = []
        for k, (a, y) in enumerate(zip(body.args[:ns], ys[:ns])):
            if not _same_kind(a.type, y.type):
                raise ctx.error(f"scan state {k} enters the body as {a.type} but the body yields {y.type}")
            out.append(a.type.with_shape(d if _is_varying(ctx, d) or ctx.symbols.prove_eq(d, e) is True else
                                         fresh_dim(ctx, "state", f"scan state {k} dim {j} varies", k, j)
                                         for j, (d, e) in enumerate(zip(a.type.shape, y.type.shape))))
        for y, ax in zip(ys[ns:], lay.out_axes):
            t = y.type
            ax = norm_axis(ctx, ax, t.rank + 1, "scan output axis")
            out.append(t.with_shape(t.shape[:ax] + (length,) + t.shape[ax:]))
        return out

    def verify(self, op):
        if len(op.regions) != 1:
            raise VerifyError(f"expects 1 region (body), got {len(op.regions)}", op)
        lay = scan_layout(op)
        body = op.regions[0].block
        ns, ni, nc = len(lay.states), len(lay.inputs), len(lay.captures)
        if len(body.args) != ns + ni + nc:
            raise VerifyError(f"body takes {len(body.args)} arguments, expected {ns} states + {ni} scan inputs + "
                              f"{nc} captures", op)
        ys = _yields(body)
        n_out = len(op.results) - ns
        if n_out < 0 or len(ys) != ns + n_out:
            raise VerifyError(f"body yields {len(ys)} values, expected {ns} states + {max(n_out, 0)} scan outputs "
                              f"(the op has {len(op.results)} results)", op)
        for k, (a, i) in enumerate(zip(body.args[ns:ns + ni], lay.inputs)):
            t = op.operands[i].type
            if a.type.dtype != t.dtype or a.type.rank != t.rank - 1:
                raise VerifyError(f"scan input {k} is {t}; the body takes slices {a.type}", op)
        _verify_carried(op, [op.operands[i] for i in lay.states], body.args[:ns], ys[:ns], op.results[:ns],
                        "scan state")
        for k, (y, r) in enumerate(zip(ys[ns:], op.results[ns:])):
            if r.type.dtype != y.type.dtype or r.type.rank != y.type.rank + 1:
                raise VerifyError(f"scan output {k} is {r.type}; the body yields slices {y.type}", op)

    def capture_operand(self, op: Op, region: int, arg: int) -> int | None:
        lay = scan_layout(op)
        k = arg - len(lay.states) - len(lay.inputs)
        return lay.captures[k] if 0 <= k < len(lay.captures) else None

    def reference(self, ctx, *ins):
        lay = scan_layout(ctx.op)
        states = [ins[i] for i in lay.states]
        xs = [ins[i] for i in lay.inputs]
        caps = [ins[i] for i in lay.captures]
        axes = [a % x.ndim for a, x in zip(lay.in_axes, xs)]
        length = xs[0].shape[axes[0]]
        ns = len(states)
        outs: list[list] = [[] for _ in range(len(ctx.op.results) - ns)]
        for t in range(length):
            slices = [np.take(x, length - 1 - t if d else t, axis=a) for x, a, d in zip(xs, axes, lay.in_dirs)]
            res = _run_body(ctx, 0, [*states, *slices, *caps])
            states = res[:ns]
            for o, v in zip(outs, res[ns:]):
                o.append(v)
        result = list(states)
        for o, ax, d, r in zip(outs, lay.out_axes, lay.out_dirs, ctx.op.results[ns:]):
            ax = ax % r.type.rank
            result.append(_stack(ctx, o[::-1] if d else o, ax, r.type))
        return result

    def lower(self, ctx):
        from .control_lower import lower_scan

        lower_scan(ctx)
