"""Workspace planning: where each temp buffer lives inside the one workspace of a call.

    mp = plan(program, symbols)      # after fusion: only the temps that are left get slots
    mp.offsets, mp.workspace_bytes, mp.peak_live_bytes, mp.total_bytes

Liveness is taken over the statement order: a temp (with all its views) is live from the
first statement that touches it to the last one. Buffers whose lifetimes overlap get
disjoint 64-byte aligned slots; others may share memory:

- in place: an elementwise compute (no reductions: a GEMM schedule stores partial sums
  before its epilogue reads the other operands) writes its output over an input temp
  that dies there when both have the same shape and dtype and every load of that input
  reads exactly the element being written (identity index map), so each element is read
  before it is overwritten, by the same iteration; a row normalisation scheduled as two
  passes (softmax, kernel/rownorm.py) counts as elementwise through its per-element reads;
- best fit: slots are placed biggest first (a few orders are tried, the best plan kept),
  each at the offset (0 or the end of an overlapping slot) that leaves the smallest gap
  below an overlapping slot, else on top.

Offsets and sizes are Dims. With concrete sizes (a version whose symbols are fixed) the
plan is a static best fit. With symbolic sizes every placement is checked by `prove_le`
over the symbols' ranges (polynomials in positive symbols, `ceiling` bounds, `Max`): a slot
reuses a gap only when it provably fits, else it is stacked on top (`Max` of the ends when
no end provably dominates; only the ends no other slot covers by construction, `_tops`, are
compared), so offsets are expressions the codegen evaluates once per call. Which valid
plan is best depends on the symbols' values, so plans are made ranking choices at a few
sample points (`SAMPLE_VALUES`) and the one closest to the peak at all of
them is kept (one symbolic layout cannot be optimal at every size: the transformer's
scores, 16*batch*seq**2 bytes, outgrow its 1024*batch*seq projections at seq = 64).
`peak_live_bytes` is the lower bound (the most aligned bytes live at one statement; a `Max`
when symbolic), `total_bytes` the sum of all temps (aligned). Temps no statement
touches still get slots, stacked after the others.
"""

from __future__ import annotations

import functools
import math
import time
import weakref
from dataclasses import dataclass, field, replace
from fractions import Fraction

import sympy

from onnxcc.ir.dims import Dim, Prover, SymbolTable, canon, evaluate, max_alternatives, sym, unevaluated
from onnxcc.ir.exact_value import NoValue, exact_value
from onnxcc.ir.rounding import ceiling_of

from .expr import Load, Reduce, Var, walk
from .program import Compute, KernelProgram
from .rownorm import per_element_reads

ALIGN = 64


@dataclass(frozen=True)
class MemoryPlan:
    """Byte offsets of temp buffers in the workspace (views resolve to their root buffer's
    offset) and the workspace size the caller must provide (64-byte aligned pointer)."""

    offsets: dict[str, Dim]
    workspace_bytes: Dim
    sizes: dict[str, Dim] = field(default_factory=dict)
    """bytes each planned buffer needs (unaligned)"""
    scratch_offset: Dim | None = None
    """where the scratch region that scheduled computes share (GEMM packing) starts; None
    when no compute needs one (see `reserve_scratch`)"""
    peak_live_bytes: Dim = 0
    """the most (64-byte aligned) bytes of temps live at any one statement: the lower bound"""
    total_bytes: Dim = 0
    """the sum of all temps' aligned sizes (what a plan without reuse would need)"""
    proofs_cut: bool = False
    """the proof budget (`PROOF_SECONDS`) ran out: every temp has a region of its own (no reuse)"""

    def describe(self) -> str:
        lines = [f"workspace: {self.workspace_bytes} bytes (peak live {self.peak_live_bytes}, "
                 f"sum of buffers {self.total_bytes})"]
        for name, off in self.offsets.items():
            lines.append(f"  {name}: offset {off}, {self.sizes.get(name, '?')} bytes")
        return "\n".join(lines)


def align_up(x: Dim, a: int = ALIGN) -> Dim:
    """The least multiple of `a` that is >= x (exact for symbolic x)."""
    if isinstance(x, int):
        return -(-x // a) * a
    return _align_up_expr(sympy.sympify(x), a)


@functools.lru_cache(maxsize=1 << 12)
def _align_up_expr(x: sympy.Expr, a: int) -> Dim:
    # memoised: the plan aligns the same symbolic sizes again for each range it tries, and
    # sympy's ceiling asks the assumptions of the whole tree (tens of ms on a conv net's sum)
    if isinstance(x, sympy.Piecewise):  # per part, so every part stays a plain dim
        pieces: list = list(x.args)
        return sympy.Piecewise(*[(align_up(v, a), c) for v, c in pieces])
    return canon(ceiling_of(x / a) * a)


def max_dims(items: list[Dim], prover: Prover, sample=None) -> Dim:
    """The maximum of `items` as one Dim, dropping the ones another provably covers."""
    # by hash (pairwise `==` of sympy trees recursed through every equal-hash subtree)
    uniq: list[Dim] = list(dict.fromkeys(canon(d) for d in items))
    if not uniq:
        return 0
    if all(isinstance(d, int) for d in uniq):
        return max(uniq)  # type: ignore[type-var]
    # the same maxima come back (each placement order's ends, stacked offsets): a
    # MobileNet's plan asked 1618 times for 404 of them, each pair a `_le`
    memo = _MAXES.get(prover)
    if memo is None:
        memo = _MAXES[prover] = {}
    key = (None if sample is None else sample.key, tuple(uniq))
    hit = memo.get(key)
    if hit is not None:
        return hit
    if sample is not None:
        uniq.sort(key=lambda d: -sample(d))
    kept: list[Dim] = []
    for d in uniq:
        if not any(_le(prover, d, k) for k in kept):
            kept = [k for k in kept if not _le(prover, k, d)] + [d]
    hit = memo[key] = _intern(kept[0] if len(kept) == 1 else unevaluated_max(kept))
    return hit


def unevaluated_max(items: list[Dim]) -> Dim:
    """`Max(*items)` (nested Maxes flattened, duplicates dropped) WITHOUT sympy's own
    simplification: sympy compares every pair of arguments symbolically (`factor_terms` on
    each difference), which took most of a convnet's compile time on its workspace size
    (seconds per call), and orders them canonically, counting every argument's nodes
    (`dims.unevaluated` orders them by a cheap fingerprint instead). The numbers become one;
    the callers drop the arguments another provably covers themselves; the value is the same
    either way."""
    args: dict[sympy.Expr, None] = {}  # by hash: a list's `in` compared big trees pairwise
    for d in items:
        e = sympy.sympify(d)
        for a in (e.args if isinstance(e, sympy.Max) else (e,)):
            args[a] = None
    if all(a.is_Integer for a in args):
        return max(int(a) for a in args)
    nums = [int(a) for a in args if a.is_Integer]
    rest = [a for a in args if not a.is_Integer] + ([sympy.Integer(max(nums))] if nums else [])
    return unevaluated(sympy.Max, rest)


def _le(prover: Prover, a: Dim, b: Dim) -> bool:
    """`prover.le(a, b)`, with its work cut three ways (the answer is the prover's):

    - a `Max` is split here into its alternatives (`a <= b` iff every alternative of `a` is
      below some alternative of `b`, as the prover splits it), so that
    - a pair that a point of the symbols' ranges refutes is never sent to the prover: the
      proof (expanding polynomials of nested floors) costs milliseconds, a numeric
      evaluation microseconds, and most pairs a placement asks about are plainly unordered;
      the prover is sound, so it never proves what a point refutes;
    - what a prover over wider ranges proved (the whole-range plan, before the ranges are
      split) holds over the narrower ones and is not proved again."""
    if isinstance(a, int) and isinstance(b, int):
        return a <= b
    memo = _ANSWERS.get(prover)
    if memo is None:
        memo = _ANSWERS[prover] = {}
    hit = memo.get((a, b))
    if hit is None and _refuter(prover).refutes(a, b):
        # a point where a > b refutes it whole (the values of Maxes evaluated as they are),
        # before the Maxes are split into alternatives compared pair by pair
        hit = memo[(a, b)] = False
    if hit is None:
        xs, ys = _alternatives(a), _alternatives(b)
        if len(xs) > 1 or len(ys) > 1:
            hit = all(any(_le1(prover, x, y) for y in ys) for x in xs)
        else:
            hit = _le1(prover, a, b)
        memo[(a, b)] = hit
    return hit


def _alternatives(d: Dim) -> list[Dim]:
    """`max_alternatives`, memoised per plan, each alternative interned (`_intern`): `_le`
    asks for the same few offsets and ends thousands of times per placement (callers only
    read the list), and the same sum comes out of several Maxes (an offset stacked on a Max,
    and the Max's own alternatives) as distinct objects, which every memo of the prover then
    compared node by node (a detection net's plan: a fifth of its time in sympy's `==`)."""
    alts = _RUNNING[0].alternatives
    hit = alts.get(d)
    if hit is None:
        hit = alts[d] = [_intern(x) for x in max_alternatives(d)]
    return hit


def _refuter(prover: Prover) -> _Refuter:
    ref = _REFUTERS.get(prover)
    if ref is None:
        ref = _REFUTERS[prover] = _Refuter(prover.table)
    return ref


def _le1(prover: Prover, a: Dim, b: Dim) -> bool:
    if _refuter(prover).refutes(a, b):
        return False
    key = (canon(a), canon(b))
    parent = _PARENTS.get(prover)
    while parent is not None:
        if key in _PROVED.get(parent, ()):
            return True
        parent = _PARENTS.get(parent)
    _check_budget()
    if prover.le(a, b):
        _PROVED.setdefault(prover, set()).add(key)
        return True
    return False


#: the prover over the wider ranges a narrowed prover's table was cut from, and the pairs
#: each prover proved (`_le`)
_PARENTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_PROVED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_ANSWERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_MAXES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # prover -> {(point, dims): max_dims}


class _Refuter:
    """A few points inside the symbols' ranges (every symbol at its low end, then at a few
    common values clipped to its range) at which `a <= b` is checked numerically."""

    def __init__(self, table: SymbolTable):
        self.points: list[dict[str, int]] = []
        for v in (None, 4, 64, 512):
            env = {n: i.lo if v is None else min(max(v, i.lo), i.hi) for n, i in table.infos.items()}
            if env not in self.points:
                self.points.append(env)
        self._memo: list[dict] = [_point_memo(env) for env in self.points]
        self._values: dict = {}  # dim -> its values at the points (ints where integral)
        self._by_id: dict[int, tuple] = {}  # id(dim) -> (dim, its values)

    def values(self, d: Dim) -> tuple:
        # by identity first: a placement asks for the same objects again and again, and a dict
        # lookup of one equal to a key but built apart (an alternative of a Max, an end of an
        # earlier plan) compares the two trees node by node (a detection net's plan: a third
        # of its refutations); the dict by equality then once per such object
        hit = self._by_id.get(id(d))
        if hit is not None and hit[0] is d:
            return hit[1]
        v = self._values.get(d)
        if v is None:
            xs = (_value(d, env, memo) for env, memo in zip(self.points, self._memo, strict=True))
            v = self._values[d] = tuple(x if x is None or x.denominator != 1 else int(x) for x in xs)
        self._by_id[id(d)] = (d, v)  # the object held: its id is not reused while it is here
        return v

    def refutes(self, a: Dim, b: Dim) -> bool:
        for x, y in zip(self.values(a), self.values(b), strict=True):
            if x is not None and y is not None and x > y:
                return True
        return False


_REFUTERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _point_memo(env: dict[str, int]) -> dict:
    """`exact_value`'s memo for the point `env`, shared by every refuter and sampler of the running
    plan that evaluates there: each range a plan tries has its own prover and samplers, but
    most of their points are the same (only the split symbol's value moves), and evaluating
    a conv net's offsets (Max trees of nested floors) again at each was a tenth of its plan."""
    return _RUNNING[0].points.setdefault(tuple(sorted(env.items())), {})


def _value(d: Dim, env: dict[str, int], memo: dict) -> Fraction | int | None:
    """The exact value of a dim at `env` (None when some symbol has no value or the tree
    has a node this evaluator does not know)."""
    if isinstance(d, int):
        return d
    try:
        return exact_value(sympy.sympify(d), env, memo)
    except (NoValue, ZeroDivisionError):
        return None


# ---- the plan -----------------------------------------------------------------------------


@dataclass
class _Slot:
    members: list[str]
    first: int
    last: int
    size: Dim  # aligned bytes
    order: int
    offset: Dim = 0
    _end: tuple | None = field(default=None, repr=False, compare=False)
    covers: frozenset = field(default=frozenset(), repr=False, compare=False)
    """ids of the placed slots whose ends are at most this one's by construction: its offset
    is one of their ends, or the Max of them, or above such a slot's end (sizes are >= 0)"""

    @property
    def end(self) -> Dim:
        # cached per offset: a placement asks for the ends of the placed slots once per
        # candidate per slot placed after them, and building the sum is a sympy Add each time
        if self._end is None or self._end[0] is not self.offset:
            self._end = (self.offset, _sum(self.offset, self.size))
        return self._end[1]




def _intern(d: Dim) -> Dim:
    """One object per distinct dim: every trial placement builds its slots' ends anew (sympy's
    own cache keeps only the last thousand), and a memo lookup with an equal but distinct
    key compares the two trees node by node; with one object it stops at identity."""
    return d if isinstance(d, int) else _RUNNING[0].interned.setdefault(d, d)


def _sum(offset: Dim, size: Dim) -> Dim:
    """`offset + size`, interned, built once per pair in a plan: each placement order and
    sample point tries the same slots at the same candidate offsets again, and a sympy sum of
    two sums of nested floors is tens of microseconds to flatten and sort."""
    sums = _RUNNING[0].sums
    hit = sums.get((offset, size))
    if hit is None:
        hit = sums[(offset, size)] = _intern(canon(offset + size))
    return hit


def liveness(program: KernelProgram) -> dict[str, tuple[int, int]]:
    """Root temp -> (first, last) statement index that touches it or one of its views."""
    out: dict[str, tuple[int, int]] = {}
    for k, s in enumerate(program.body):
        for n in s.reads() | s.writes():
            r = program.root(n)
            if program.buffers[r].kind == "temp":
                out[r] = (out[r][0], k) if r in out else (k, k)
    return out


PROOF_QUERIES = 400_000
"""Proofs (`Prover.le` calls, `_le1`) one plan may make before it is abandoned for the plan
that needs none: every temp in a region of its own, stacked (`_stacked_plan`; the arena is
the sum of the buffers, as without reuse), said by `MemoryPlan.proofs_cut` and NAME.json's
version info `plan_proofs_cut`. Sizes built of nested floors (a MobileNet's or a voice
model's strided convs and pools over symbolic lengths) can make a placement ask thousands and
offsets stacked as `Max` of `Max` grow without bound; the optional work (`PLAN_PROOFS`)
stops long before this, which only a first placement can reach. Counted, not timed, so the
same module gets the same plan on any machine under any load."""

PROOF_SECONDS = 20.0
"""The backstop behind `PROOF_QUERIES`: CPU seconds one plan may spend proving, for a model
whose single proofs cost seconds (nothing in the zoo comes near: its largest plan proves in
about a second). The one clock-dependent cut, reported like the counted one."""


class _BudgetSpent(Exception):
    pass


_deadline = [math.inf]  # when the running plan's proof backstop ends (plans do not nest)
_next_look = [0.0]  # wall time before which the CPU clock is not read again
_proofs = [0]  # proofs the running plan has made (`_le1`): what its budgets count


def _check_budget() -> None:
    _proofs[0] += 1
    if _proofs[0] > PROOF_QUERIES:
        raise _BudgetSpent
    # NOTE: the CPU clock is a system call (microseconds, far more on a loaded machine) and a
    # plan checks before every proof: it is read at most every 10 ms of wall time, which
    # passes no faster than CPU time in a single-threaded process, so the cut comes as late
    # as 10 ms after the backstop ends, never sooner
    now = time.perf_counter()
    if now < _next_look[0]:
        return
    _next_look[0] = now + 0.01
    if time.process_time() > _deadline[0]:
        raise _BudgetSpent


class PlanMemos:
    """What the plans of one module's versions share (`plan`'s `memos`): the provers, one per
    state of the ranges (what a prover proved holds for every plan made under its ranges),
    and one object per distinct end and maximum, so that the memos keyed by them stop at
    identity (equal trees built apart are compared node by node)."""

    def __init__(self) -> None:
        self.provers: dict = {}  # the ranges -> `Prover` (`_prover`)
        self.interned: dict = {}  # dim -> its one object (`_intern`)
        self.sums: dict = {}  # (offset, size) -> end (`_sum`)
        self.points: dict[tuple, dict] = {}  # point -> `exact_value`'s memo there (`_point_memo`)
        self.alternatives: dict = {}  # dim -> its Max alternatives, interned (`_alternatives`)


_RUNNING = [PlanMemos()]  # the running plan's (plans do not nest)


def plan(program: KernelProgram, symbols: SymbolTable | None = None,
         memos: PlanMemos | None = None) -> MemoryPlan:
    """Offsets for every temp that owns memory (see the module docstring). `symbols`
    gives the symbols' ranges (default: [1, 2**31-1]). `memos`, kept by the caller for the
    plans of one module's versions, shares their provers and what those proved (each
    version's placements ask many of the same pairs under the same ranges)."""
    _deadline[0] = time.process_time() + PROOF_SECONDS
    _proofs[0] = 0
    _RUNNING[0] = memos if memos is not None else PlanMemos()
    try:
        return _plan(program, symbols)
    except _BudgetSpent:
        return _stacked_plan(program)
    finally:
        _deadline[0] = math.inf
        _next_look[0] = 0.0
        _proofs[0] = 0
        _RUNNING[0] = PlanMemos()


def _prover(table: SymbolTable | None) -> Prover:
    """A prover over `table`'s ranges as they are now, shared by the plans given the same
    `PlanMemos` (a prover's answers depend only on the ranges). It proves over a copy of the
    table, so a later change to the table cannot make its answers stale."""
    key = None if table is None else tuple((i.name, i.lo, i.hi, i.multiple_of) for i in table.infos.values())
    provers = _RUNNING[0].provers
    p = provers.get(key)
    if p is None:
        p = provers[key] = Prover(None if table is None else table.copy())
    return p


def _stacked_plan(program: KernelProgram) -> MemoryPlan:
    """Every temp in a region of its own, one after the other: valid without any proof."""
    temps = program.temps()
    sizes = {b.name: program.alloc_bytes(b) for b in temps}
    offsets: dict[str, Dim] = {}
    top: Dim = 0
    for b in temps:
        offsets[b.name] = canon(top)
        top = canon(top + align_up(sizes[b.name]))
    live = liveness(program)
    sums = {canon(sum((align_up(sizes[n]) for n, (f, last) in live.items() if n in sizes and f <= k <= last),
                     sympy.Integer(0)))
            for k in range(len(program.body))}
    peak = unevaluated_max(sorted(sums, key=str)) if sums else 0
    return MemoryPlan(offsets, top, sizes, peak_live_bytes=canon(peak), total_bytes=top, proofs_cut=True)


def _plan(program: KernelProgram, symbols: SymbolTable | None) -> MemoryPlan:
    prover = _prover(symbols)
    temps = program.temps()
    sizes = {b.name: program.alloc_bytes(b) for b in temps}
    live = liveness(program)
    order = {b.name: k for k, b in enumerate(temps)}
    slots = _in_place_slots(program, [b for b in temps if b.name in live], live, order, prover)
    samplers = [_Sampler(env) for env in _sample_points(program, prover.table)]
    sums = [canon(sum((s.size for s in slots if s.first <= k <= s.last), sympy.Integer(0)))
            for k in range(len(program.body))]
    peak = max_dims(sums, prover, samplers[0])
    if all(isinstance(x.size, int) for x in slots):
        layout = _best_layout(slots, prover, samplers[:1], peak)
    else:
        layout = _range_layouts(slots, program, prover, peak)
    slot_offsets, ws = layout.offsets, layout.workspace
    offsets: dict[str, Dim] = {}
    for s, off in zip(slots, slot_offsets):
        for m in s.members:
            offsets[m] = canon(off)
    untouched = [b for b in temps if b.name not in live]
    rest: Dim = 0
    for b in untouched:  # never touched: stacked after the rest (they may be written elsewhere)
        offsets[b.name] = canon(ws + rest)
        rest = canon(rest + align_up(program.alloc_bytes(b)))
    ws = canon(ws + rest)
    peak = canon(peak + rest)
    total = canon(sum((align_up(d) for d in sizes.values()), sympy.Integer(0)))
    offsets = {b.name: offsets[b.name] for b in temps}
    return MemoryPlan(offsets, ws, sizes, peak_live_bytes=peak, total_bytes=total)


@dataclass
class _Layout:
    offsets: list[Dim]  # one per slot, in the slots' order
    workspace: Dim
    worst: float        # the largest arena / peak ratio at the sample points


def _best_layout(slots: list[_Slot], prover: Prover, samplers: list[_Sampler], peak: Dim,
                 sweep: list[_Sampler] | None = None, proofs: float = math.inf) -> _Layout:
    """Best fit in each order of `_ORDERS`, ranked at each sample point; the layout whose
    arena is closest to the peak at every point is kept. Every layout tried is valid over the
    whole range of `prover.table`. `worst` is taken over `sweep` (default: the samplers).

    Each order is tried at every point before the next order (the first, biggest first, kept
    324 of the 390 layouts the zoo's 68 models planned, ties included; the other two 35 and
    31); after the first placement, one is started only while the plan has made fewer than
    `proofs` proofs. Equal scores keep the point-major first (its index in `tries`), so a
    search that is not cut keeps the layout it kept when the points were the outer loop."""
    best = None
    tries = [(sample, key) for sample in samplers for key in _ORDERS]
    for k in sorted(range(len(tries)), key=lambda k: (k % len(_ORDERS), k)):
        if best is not None and _proofs[0] >= proofs:
            break
        sample, key = tries[k]
        trial = [_Slot(list(x.members), x.first, x.last, x.size, x.order) for x in slots]
        _place(sorted(trial, key=lambda x: key(x, sample)), prover, sample)
        ws = max_dims(_tops(trial), prover, sample)
        ratios = [q(ws) / max(1, q(peak)) for q in samplers]
        score = (max(ratios), sum(q(ws) for q in samplers), k)
        if best is None or score < best[0]:
            best = (score, _Layout([x.offset for x in trial], ws, 0.0))
    if best is None:
        return _Layout([], 0, 1.0)
    lay = best[1]
    lay.worst = max(q(lay.workspace) / max(1, q(peak)) for q in (sweep or samplers))
    return lay


SPLIT_ABOVE = 1.05
"""a symbolic layout whose arena exceeds the peak by more than this at a sample point is
split into per-range layouts (`_range_layouts`)"""
MAX_SPLIT_DEPTH = 4
MAX_RANGE_LAYOUTS = 8
"""placements tried per plan beyond the whole-range one: a BERT encoder whose arena stays at
1.2x the peak in every range spent 31 placements per version (most of its compile time)"""
SPLIT_CAP = 1 << 16
"""ranges are bisected geometrically below this value (symbols' ranges often end at 2**31)"""
PLAN_PROOFS = 8_000
"""Proofs (`_le1`'s calls of `Prover.le`, counted per plan) a plan may spend on the work that
only improves it: the whole-range layout's placements after its first (`_best_layout`), then
the per-range layouts, each started only where the proofs made so far plus what the last
range layout made stay within it (they plan the same slots: the last one's count is a fair
guess); the parts not yet planned keep the whole-range layout, valid over every range.
Counted, not timed, so a plan is the same on any machine under any load (a clock budget gave
a loaded machine a different plan, a different library). A version's count includes what
the module's earlier versions proved for it (`PlanMemos`: a proof asked again is free), the
same in every build of the module. Sized on a 670-node OCR detector: its whole-range layout
makes 14-20k proofs in 12 placements (its fourth wins), each range layout 9-13k for an arena
1.188x -> 1.186x the peak; a budget in seconds took 3.5 s for its two versions."""


def _range_layouts(slots: list[_Slot], program: KernelProgram, prover: Prover, peak: Dim) -> _Layout:
    """One symbolic layout, or one per range of a symbol chosen at run time.

    One layout valid for every value cannot be best at every value: a gap that holds a
    buffer at one size is too small at another, so the placer stacks it on top (the
    transformer's scores, 16*batch*seq**2 bytes, outgrow its 1024*batch*seq projections
    near seq = 64: 1.14x the peak at seq = 200). When the whole-range layout is more than
    SPLIT_ABOVE over the peak, the range of the symbol of highest degree in the buffer sizes
    is bisected (geometrically) and each part planned under its narrowed range, where more
    placements provably fit; equal neighbours merge. Offsets and the arena become
    `Piecewise((part 1, sym <= hi1), ..., (last part, True))`, evaluated once per call."""
    table = prover.table

    def layout(t: SymbolTable, proofs: float = math.inf) -> _Layout:
        p = prover
        if t is not table:  # a part of the range: what the whole-range prover proved holds here
            p = _prover(t)
            _PARENTS[p] = prover
        return _best_layout(slots, p, [_Sampler(e) for e in _sample_points(program, t)], peak,
                            [_Sampler(e) for e in _sweep_points(program, t)], proofs)

    whole = layout(table, PLAN_PROOFS)
    if whole.worst <= SPLIT_ABOVE:
        return whole
    split = _split_symbol(slots)
    if split is None or split not in table.infos:
        return whole
    info = table.infos[split]

    budget = [MAX_RANGE_LAYOUTS]  # layouts left to try (each costs a full placement)
    last = [0]  # proofs the last range layout made: what the next one is expected to

    def out_of_proofs() -> bool:
        # NOTE: a layout is not started that would be expected to end past the budget (the
        # OCR detector's range layouts each made 9-13k proofs, one budget's worth)
        return _proofs[0] + last[0] > PLAN_PROOFS

    def solve(lo: int, hi: int, depth: int, lay: _Layout | None = None) -> list[tuple[int, _Layout]]:
        if lay is None and out_of_proofs():
            return [(hi, whole)]
        if lay is None:
            sub = SymbolTable(dict(table.infos))
            sub.infos[split] = replace(info, lo=lo, hi=hi)
            begun = _proofs[0]
            lay = layout(sub)
            last[0] = _proofs[0] - begun
            budget[0] -= 1
        top = min(hi, SPLIT_CAP)
        if lay.worst <= SPLIT_ABOVE or depth == 0 or top - lo < 2 or budget[0] < 2 or out_of_proofs():
            return [(hi, lay)]
        mid = max(lo, min(top - 1, math.isqrt(lo * top)))
        return solve(lo, mid, depth - 1) + solve(mid + 1, hi, depth - 1)

    parts: list[tuple[int, _Layout]] = []
    for hi, lay in solve(info.lo, info.hi, MAX_SPLIT_DEPTH, whole):
        if parts and parts[-1][1].offsets == lay.offsets and parts[-1][1].workspace == lay.workspace:
            parts[-1] = (hi, lay)  # the same layout as the range below: one part
        else:
            parts.append((hi, lay))
    if len(parts) == 1:
        return parts[0][1]
    s = sym(split)

    def pick(values: list[Dim]) -> Dim:
        if all(v == values[0] for v in values):
            return values[0]
        # Merge runs of equal neighbours here: the parts are ascending ranges, so a run ends
        # at one `s <= hi` (left to sympy, equal neighbours become `(s <= 33) | (s <= 65)`).
        runs: list[tuple[Dim, int]] = []
        for (hi, _), v in zip(parts, values):
            if runs and runs[-1][0] == v:
                runs[-1] = (v, hi)
            else:
                runs.append((v, hi))
        pieces = [(sympy.sympify(v), s <= hi) for v, hi in runs[:-1]]
        return sympy.Piecewise(*pieces, (sympy.sympify(runs[-1][0]), True))

    offsets = [pick([lay.offsets[i] for _, lay in parts]) for i in range(len(slots))]
    return _Layout(offsets, pick([lay.workspace for _, lay in parts]), max(lay.worst for _, lay in parts))


def _split_symbol(slots: list[_Slot]) -> str | None:
    """The symbol of highest degree in the slots' sizes (the one whose value most changes
    which buffers are big), ties to the first by name."""
    best: tuple[int, str] | None = None
    memo: dict = {}
    for x in slots:
        if isinstance(x.size, int):
            continue
        for v, deg in _degrees(sympy.sympify(x.size), memo).items():
            key = (-deg if deg is not None else 0, v)
            if best is None or key < best:
                best = key
    return best[1] if best is not None else None


def _degrees(e, memo: dict) -> dict[str, int | None]:
    """Symbol name -> the degree of `e` in it with every floor / ceiling read as its argument
    (None where it is not a polynomial in it: under a Max, a Mod, a negative power), read off
    the tree (expanding a conv net's sizes to ask sympy took seconds). Sizes are sums of
    products with positive coefficients, where nothing cancels: the degree sympy would give."""
    hit = memo.get(e)
    if hit is not None:
        return hit
    out: dict[str, int | None]
    if e.is_Symbol:
        out = {e.name: 1}
    elif e.is_Number:
        out = {}
    elif isinstance(e, (sympy.floor, sympy.ceiling)):
        out = _degrees(e.args[0], memo)
    elif e.is_Add or e.is_Mul:
        out = {}
        for a in e.args:
            for v, d in _degrees(a, memo).items():
                if v not in out:
                    out[v] = d
                elif out[v] is None or d is None:
                    out[v] = None
                else:
                    out[v] = max(out[v], d) if e.is_Add else out[v] + d  # type: ignore[operator]
    elif e.is_Pow and e.exp.is_Integer and int(e.exp) >= 0:
        out = {v: None if d is None else d * int(e.exp) for v, d in _degrees(e.base, memo).items()}
    else:
        out = {s.name: None for s in e.free_symbols}
    memo[e] = out
    return out


def _in_place_slots(program: KernelProgram, temps, live, order, prover: Prover) -> list[_Slot]:
    """One slot per temp, except that an output written in place over a dying input joins
    that input's slot."""
    slot_of: dict[str, _Slot] = {}
    slots: list[_Slot] = []
    for b in temps:
        s = _Slot([b.name], live[b.name][0], live[b.name][1], align_up(program.alloc_bytes(b)), order[b.name])
        slot_of[b.name] = s
        slots.append(s)
    for k, st in enumerate(program.body):
        if not isinstance(st, Compute):
            continue
        out = program.buffers[st.out]
        if out.kind != "temp" or out.alias_of is not None or live[out.name][0] != k:
            continue
        for a in _in_place_candidates(program, st, k, live, prover):
            host = slot_of[a]
            if host.last != k or not prover.eq(program.alloc_bytes(program.buffers[a]), program.alloc_bytes(out)):
                continue
            mine = slot_of[out.name]
            slots.remove(mine)
            host.members.append(out.name)
            host.last = mine.last
            slot_of[out.name] = host
            break
    return slots


def _in_place_candidates(program: KernelProgram, c: Compute, k: int, live, prover: Prover) -> list[str]:
    """Temps read by `c` that die at `c` and are read only at the element `c` writes."""
    out = program.buffers[c.out]
    own = tuple(Var(n) for n in c.var_names)
    loads: dict[str, list[Load]] = {}
    # a row normalisation (softmax) is elementwise in how the CPU emits it (rownorm.py)
    rn = getattr(c.schedule, "row_norm", None)
    reads = [c.body] if rn is None else per_element_reads(rn, c)
    for n in (m for r in reads for m in walk(r)):
        if isinstance(n, Reduce):
            # NOTE: not elementwise; a GEMM schedule accumulates into the output over
            # several passes before its epilogue reads the other operands
            return []
        if isinstance(n, Load):
            loads.setdefault(program.root(n.buffer), []).append(n)
    found = []
    for root, lds in loads.items():
        b = program.buffers[root]
        if b.kind != "temp" or b.alias_of is not None or live[root][1] != k or b.dtype is not out.dtype:
            continue
        ok = True
        for ld in lds:
            shape = program.buffers[ld.buffer].shape
            if ld.indices != own or len(shape) != len(out.shape) or \
                    not all(prover.eq(x, y) for x, y in zip(shape, out.shape)):
                ok = False
                break
        if ok:
            found.append(root)
    return found


class _Sampler:
    """Evaluates Dims at one point (symbol values): only to rank choices, never to decide
    whether one is valid."""

    def __init__(self, env: dict[str, int]):
        self.env = env
        self.key = tuple(sorted(env.items()))  # the point, as a memo key (max_dims)
        self._memo: dict = {}
        self._exact: dict = _point_memo(env)  # exact_value's memo of subexpressions
        self.inexact = False
        """some value given was not the dim's exact integer value there (a fallback)"""

    def __call__(self, d: Dim) -> int:
        if isinstance(d, int):
            return d
        v = self._memo.get(d)
        if v is None:
            # the exact rational evaluator first (microseconds); sympy's substitution
            # (a tree rebuild, about a millisecond, tens on a voice model's sizes) only for
            # nodes it does not know
            try:
                x = exact_value(sympy.sympify(d), self.env, self._exact)
                v = int(x) if x.denominator == 1 else 0
                self.inexact |= x.denominator != 1
            except ZeroDivisionError:
                v = 0  # sympy's substitution divides by 0 there too (zoo): ranked as 0
                self.inexact = True
            except NoValue:
                self.inexact = True
                try:
                    v = evaluate(d, self.env)
                except (ValueError, TypeError):
                    v = 0
            self._memo[d] = v
        return v

    def inside(self, table: SymbolTable) -> bool:
        """The point is one the prover proves over: every symbol in its range and a
        multiple of what the table says it is a multiple of."""
        for name, v in self.env.items():
            info = table.infos.get(name)
            lo, hi, k = (info.lo, info.hi, info.multiple_of) if info is not None else (1, 1 << 31, 1)
            if not lo <= v <= hi or v % k:
                return False
        return True


SAMPLE_VALUES = (64, 4, 512, 4096)
"""symbol values (each clipped to its range) the symbolic plan is ranked at; the first one
also orders the terms of `Max` expressions"""


def _sample_points(program: KernelProgram, table: SymbolTable) -> list[dict[str, int]]:
    out: list[dict[str, int]] = []
    for v in SAMPLE_VALUES:
        env = {}
        for name in program.symbols:
            info = table.infos.get(name)
            lo, hi = (info.lo, info.hi) if info is not None else (1, 1 << 31)
            env[name] = min(max(v, lo), hi)
        if env not in out:
            out.append(env)
    return out or [{}]


def _sweep_points(program: KernelProgram, table: SymbolTable) -> list[dict[str, int]]:
    """Where a layout's arena is compared with the peak: every symbol at each power of two
    (and each range's ends), clipped to its range, up to SPLIT_CAP."""
    values = {1 << k for k in range(17)}
    for name in program.symbols:
        info = table.infos.get(name)
        if info is not None:
            values |= {info.lo, min(info.hi, SPLIT_CAP)}
    out: list[dict[str, int]] = []
    for v in sorted(values):
        env = {}
        for name in program.symbols:
            info = table.infos.get(name)
            lo, hi = (info.lo, info.hi) if info is not None else (1, 1 << 31)
            env[name] = min(max(v, lo), hi, max(lo, SPLIT_CAP))
        if env not in out:
            out.append(env)
    return out or [{}]


#: placement orders tried (best fit depends on it): biggest first, then longest-lived first
#: among equal sizes, then biggest lifetime x size first
_ORDERS = (
    lambda s, q: (-q(s.size), s.first, s.order),
    lambda s, q: (-q(s.size), s.first - s.last, s.order),
    lambda s, q: (-q(s.size) * (s.last - s.first + 1), s.first, s.order),
)


def _place(slots: list[_Slot], prover: Prover, sample: _Sampler) -> None:
    """Best fit in the given order: each slot goes to the valid offset (0 or the end of an
    overlapping slot) with the smallest gap left below the next overlapping slot."""
    placed: list[_Slot] = []
    at: dict[int, tuple[int, int]] = {}  # id(slot) -> (offset, end) at the sample point
    inside = sample.inside(prover.table)
    for g in slots:
        conf = [q for q in placed if q.first <= g.last and g.first <= q.last]
        cands: list[Dim] = list(dict.fromkeys([0, *(q.end for q in conf)]))
        best: tuple | None = None
        gsize = sample(g.size)
        scored: list[tuple[tuple[int, int], Dim]] = []
        ambiguous = False
        spans = [at[id(q)] for q in conf]
        for o in cands:
            lo = sample(o)
            hi = lo + gsize
            gap = 1 << 62
            for q0, q1 in spans:
                if hi <= q0:
                    gap = min(gap, q0 - hi)
                    # above and below g here (both of size 0 at the point): which side the
                    # proofs put it on is not known before they are made
                    ambiguous |= q1 <= lo
                elif not q1 <= lo:
                    break  # overlaps g at the point: cannot be proved apart
            else:  # (the cheap numeric filter: what fails at the sample point cannot be proved)
                scored.append(((gap, lo), o))
        # NOTE: at a point the prover proves over, with exact values, a valid candidate's
        # slots above g are exactly those above it at the point (proved above implies above
        # there; proved below implies below there, and none is both), so its key is the one
        # scored here: the candidates are tried best key first (stable: ties keep their
        # order, as the strict `<` below did) and the first valid one is the best fit.
        # Most candidates that pass the numeric filter cannot be proved (a detection net's
        # plan: ~150k unprovable pairs), and the first valid one ends the search.
        first_valid = inside and not ambiguous and not sample.inexact
        if first_valid:
            scored.sort(key=lambda c: c[0])
        for _, o in scored:
            lo = sample(o)
            hi = lo + gsize
            above = []
            ok = True
            top = _sum(o, g.size)
            for q in conf:
                if first_valid:
                    # the one side q can be proved on is the side it is on at the point
                    if hi <= at[id(q)][0]:
                        ok = _le(prover, top, q.offset)
                        above.append(q)
                    else:
                        ok = _le(prover, q.end, o)
                    if not ok:
                        break
                elif _le(prover, top, q.offset):
                    above.append(q)
                elif not _le(prover, q.end, o):
                    ok = False
                    break
            if not ok:
                continue
            gap = min((at[id(q)][0] - hi for q in above), default=1 << 62)
            key = (gap, lo)
            if best is None or key < best[0]:
                best = (key, o)
            if first_valid:
                break
        if best is not None:
            g.offset = best[1]
            under = [q for q in conf if q.end is g.offset]  # stacked right on top of q
        else:
            g.offset = max_dims(_tops(conf), prover, sample)
            under = conf
        g.covers = frozenset().union(*(q.covers | {id(q)} for q in under))
        at[id(g)] = (sample(g.offset), sample(g.end))
        placed.append(g)


def _tops(slots: list[_Slot]) -> list[Dim]:
    """The ends of `slots` that no other one of them covers (`_Slot.covers`): their maximum
    is the maximum of all the ends, found without comparing the ends below them (an
    Inception's stacked ends, Maxes of sums of nested floors, compared pairwise were most of
    its plan)."""
    covered = set().union(*(x.covers for x in slots)) if slots else set()
    return [x.end for x in slots if id(x) not in covered]


def reserve_scratch(mplan: MemoryPlan, program: KernelProgram) -> MemoryPlan:
    """`mplan` grown by the scratch region the program's schedules ask for (a no-op when
    none does, or when it is already reserved): it starts 64-byte aligned after the rest."""
    from dataclasses import replace

    from .schedule import scratch_bytes

    need = scratch_bytes(program)
    if mplan.scratch_offset is not None or need == 0:
        return mplan
    off = align_up(mplan.workspace_bytes)
    return replace(mplan, scratch_offset=off, workspace_bytes=canon(off + align_up(need)))
