"""split-if: an If whose branches give results of different ranks, on a condition over input dims,
splits @main into one function per value of the condition.

`If(Equal(Shape(x)[0], 1))` with a then_branch that squeezes the batch dim yields a rank-2
result when batch == 1 and a rank-3 one otherwise; no single typing of the graph after it is
right. The importer types such an If as one branch for the moment (ops/control_flow.py,
`BranchSplit`); this pass, the first of the build, re-infers @main and, at each such If,
clones the function: the clone takes the condition P as its guard (and, for P = `SYM == c`,
the substitution SYM -> c, like an exact version) and the If is folded into the then_branch;
@main keeps the negation in its guard and the If is folded into the else_branch. A function
whose guard already decides the condition only folds. The clones go first in
`module.dispatch["main"]`; @main goes on to specialize as the generic function.

A condition computed from the values of small int64 inputs (a scalar `sr` that picks the
branch) is first made one over dims: those inputs are read into symbols at dispatch
(passes/data_branch.py), unless value versions were asked for them (`skip`). Any other
condition that depends on data, or on a dim only known at run time, cannot make a guard: the
If is refused with a one-line reason (an If the importer typed provisionally is refused when
it is lowered, so value versions that fold its condition can still be built).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import sympy

from ..errors import OnnxccError, UnsupportedOp
from ..ir import Block, Function, Module, Op, canon
from ..ir.clone import clone_function
from ..ops.control_flow import BranchSplit
from ..ops.infer import infer_block
from .base import ModulePass, PassContext, register_pass
from .data_branch import bind_deciding_inputs, data_ifs, deciding_inputs
from .value_symbols import value_symbols_of

#: bound on the functions one model may be split into
MAX_SPLITS = 8


def decided(guard, pred) -> bool | None:
    """Whether `guard` implies `pred` (True), its negation (False), or neither (None)."""
    if sympy.And(guard, sympy.Not(pred)) is sympy.false:
        return True
    if sympy.And(guard, pred) is sympy.false:
        return False
    subs = {a.lhs: a.rhs for a in sympy.And.make_args(guard)
            if isinstance(a, sympy.Eq) and isinstance(a.lhs, sympy.Symbol) and a.rhs.is_Integer}
    if subs:
        p = pred.subs(subs)
        if p in (sympy.true, sympy.false):
            return bool(p)
    return None


def fold_if(op: Op, branch: int) -> None:
    """Replace an If by the ops of one branch, in place (regions take captures as block args)."""
    block: Block = op.regions[branch].block
    args = {id(a): v for a, v in zip(block.args, op.operands[1:])}
    term = block.terminator
    parent = op.parent
    for o in [o for o in block.ops if o is not term]:
        for i, v in enumerate(o.operands):
            if id(v) in args:
                o.set_operand(i, args[id(v)])
        parent.insert_before(op, o)
    ys = [args.get(id(y), y) for y in term.operands]
    block.ops = [term]
    term.drop_operands()
    for r, y in zip(op.results, ys):
        if r.name and not y.name:
            y.name = r.name
        r.replace_all_uses_with(y)
    op.erase()


def _fold_known(f: Function, values: dict) -> bool:
    """Fold the outermost Ifs of f whose condition inference knows; whether any was."""
    for op in f.walk():
        if op.name != "onnx.If":
            continue
        v = values.get(op.operands[0])
        if v is not None and np.size(v) == 1 and isinstance(canon(np.asarray(v).reshape(-1)[0]), int):
            fold_if(op, 0 if canon(np.asarray(v).reshape(-1)[0]) else 1)
            return True  # the walk is stale now: the caller infers f again
    return False


def _op_index(f: Function, op: Op) -> int:
    for k, o in enumerate(f.walk()):
        if o is op:
            return k
    raise ValueError(f"{op!r} is not in @{f.name}")


def _input_symbols(f: Function) -> set:
    """The symbols the dispatcher binds before choosing: input dims and input values."""
    return {s for a in f.params for d in a.type.shape if not isinstance(d, int)
            for s in getattr(d, "free_symbols", ())} | {sympy.Symbol(n, integer=True, positive=True)
                                                       for n in value_symbols_of(f)}


def _tag(pred, n: int) -> str:
    """`if_batch1` for `batch == 1`, else `if{n}`."""
    if isinstance(pred, sympy.Eq) and isinstance(pred.lhs, sympy.Symbol) and pred.rhs.is_Integer:
        return f"if_{pred.lhs}{pred.rhs}"
    return f"if{n}"


@register_pass
@dataclass(frozen=True)
class SplitIfPass(ModulePass):
    """One function per value of a dims-only If condition whose branches differ in rank."""

    name: ClassVar[str] = "split-if"
    #: inputs whose values are not read into symbols (those with value versions)
    skip: tuple[str, ...] = field(default=(), metadata={"parse": lambda t: tuple(filter(None, t.split("|")))})
    read_inputs: bool = True
    """whether the target's dispatcher can read input data (host memory): without it an If
    decided by an input's value is refused here, naming the If and the input, rather than
    when the dispatcher is generated"""

    def run(self, module: Module, ctx: PassContext) -> bool:
        main = module.functions.get("main")
        if main is None or not any(o.name == "onnx.If" for o in main.walk()):
            return False
        if not self.read_inputs:
            _refuse_reads(main, set(self.skip))
        # a condition computed from small int64 inputs: their values become symbols
        bound = bind_deciding_inputs(module, main, set(self.skip))
        todo, done, changed = [main], [], bool(bound)
        saved, needs, dropped, n = module.constraints, [], [], 0
        while todo:
            f = todo.pop()
            module.constraints = []
            values: dict = {}
            try:
                infer_block(f.body, module, values)
            except BranchSplit as e:
                if e.pred is None:  # from data, and not typed by the importer (textual IR)
                    raise UnsupportedOp("If", "", e.node, e.detail) from None
                changed = True
                where = _op_index(f, e.op)
                taken = decided(f.guard, e.pred)
                if taken is not None:
                    fold_if(e.op, 0 if taken else 1)
                    todo.append(f)
                    continue
                free = e.pred.free_symbols - _input_symbols(f)
                if free:
                    raise UnsupportedOp("If", "", e.node, f"{e.detail}: the condition depends on "
                                        f"{', '.join(sorted(map(str, free)))}, known only at run time") from None
                if len(todo) + len(done) + 2 > MAX_SPLITS:
                    raise UnsupportedOp("If", "", e.node, f"{e.detail}: splitting on it would need more "
                                        f"than {MAX_SPLITS} versions") from None
                subs = {}
                if isinstance(e.pred, sympy.Eq) and isinstance(e.pred.lhs, sympy.Symbol) and e.pred.rhs.is_Integer:
                    subs = {e.pred.lhs: int(e.pred.rhs)}
                n += 1
                g = clone_function(f, f"{f.name}.{_tag(e.pred, n)}", subs, guard=sympy.And(f.guard, e.pred))
                g.attrs["kind"] = "split"
                module.add_function(g)
                fold_if(list(g.walk())[where], 0)
                f.guard = sympy.And(f.guard, sympy.Not(e.pred))
                fold_if(e.op, 1)
                todo += [f, g]
                continue
            except OnnxccError as e:
                if f.guard is sympy.true:
                    raise
                # this value of the condition leads to a graph that cannot hold (silero's
                # decoder feeds a rank-5 tensor to an LSTM unless the frame count is 1): no
                # version for it; such a call gets the dispatcher's guard error
                module.functions.pop(f.name, None)
                dropped.append((f, e))
                continue
            if bound and _fold_known(f, values):
                # input values read into symbols decide some conditions now: fold those Ifs, so
                # no branch that never runs keeps the types the importer guessed for it
                todo.append(f)
                continue
            f.result_types = [v.type for v in f.return_op.operands]
            needs += module.constraints
            done.append(f)
        module.constraints = saved
        if not done:
            raise dropped[0][1]
        if dropped:
            module.attrs.setdefault("dropped_versions", []).extend(
                f"{f.name} (guard {f.guard}): {e}" for f, e in dropped)
        if main not in done:  # the generic function specialize starts from is @main
            main = done.pop()
            module.functions.pop(main.name)
            main.name = "main"
            module.add_function(main)
            done.append(main)
        if changed:
            # the import's constraints came from typing the If as its then_branch: keep those
            # of the functions as split (shape-inference records them again)
            module.constraints = []
            for c in needs:
                module.add_constraint(c.expr, c.origin)
            module.dispatch["main"] = [f.name for f in done if f is not main]
        return changed


def _refuse_reads(main: Function, skip: set[str]) -> None:
    """An If whose branches differ in rank on the value of an input, on a target whose
    dispatcher cannot read input data (CUDA: the inputs are device memory)."""
    ps = deciding_inputs(main, skip)
    if not ps:
        return
    op = data_ifs(main)[0]
    names = ", ".join(f'"{p.name}"' for p in ps)
    raise UnsupportedOp("If", "", op.loc or op.name,
                        f"its branches give results of different ranks on a condition computed from the value of "
                        f"input {names}; reading an input's value at dispatch needs a target whose dispatcher reads "
                        "host memory, and this target's inputs are device memory (compile with --target cpu)")
