"""Schedules: how each `Compute` of a kernel program maps to loops on a target.

`schedule_program(program, target, facts)` attaches a `Schedule` to every compute (it
replaces the computes in `program.body`, which are frozen); codegen reads it. Decisions:

- matmul-like computes (one `sum` reduce whose body is a product of factors that split into
  an "A" side over (batch, m, k) vars and a "B" side over (batch, n, k) vars, with an
  elementwise epilogue around the reduce; n vars trailing, m vars consecutive) get a
  `GemmPlan`: codegen packs B (once per call, or at compile time when B is constant) and
  A (per task, on the stack; at compile time when A is constant: a conv's weights), runs
  a register-tiled micro-kernel over cache blocks in parallel, and applies the epilogue
  once per output tile. MatMul, Gemm, batched and broadcast MatMul, 1x1 and general Conv
  (im2col through the packing) take this path; depthwise convs lower as unrolled taps
  (ops/nn.py) and take the elementwise one.
- every other compute: the innermost output axis (the contiguous one) is strip-mined to
  the target's vector width with a scalar tail, or with no tail where the extent is a
  proven multiple of the width (the version's `multiple_of` facts); the outer loops run in
  parallel when the work is big enough (decided at run time when it is symbolic).

`facts` maps symbol names to a known divisor (`{"seq": 16}`), from the version's guard
(`Function.attrs["multiple_of"]`, see `facts_from_attrs`) and the symbol table.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import sympy

from onnxcc.ir import Dim, Divisible, DType, canon

from .a_runs import runs_of
from .conv_window import ConvWindow, in_place_source, match_conv_window
from .expr import Binary, Cast, Check, Const, Expr, Load, Reduce, Select, SymRef, Unary, Var, free_vars, transform, walk
from .flash import Flash, match_flash, rows_per_item
from .fuse import expr_to_dim
from .program import Compute, KernelProgram
from .row_epilogue import RowOp, match_row_epilogue
from .rownorm import RowNorm, match_row_norm
from .rowstage import RowStage, match_row_stage

F32 = DType.f32


# ---- the target ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TargetInfo:
    """What schedules need to know about the machine."""

    vector_width: int = 16
    """f32 lanes of the widest vector unit (AVX-512: 16)"""
    parallel: bool = True
    """whether computes may run on the runtime's thread pool"""
    min_parallel_work: int = 1 << 15
    """estimated element-operations below which a compute stays serial"""
    l1_bytes: int = 48 * 1024
    l2_bytes: int = 1 << 20
    gemm_mr: int = 12
    """micro-kernel rows (broadcast A values)"""
    gemm_nr: int = 32
    """micro-kernel columns (a multiple of vector_width)"""
    gemm_kc: int = 256
    """contraction block (the B micro-panel kc x nr stays in L1)"""
    gemm_mc_panels: int = 8
    """max A panels (of mr rows) per task block (the A block mc x kc stays in L2)"""
    gemm_tasks: int = 2
    """blocks to aim for per thread and GEMM call (load balance)"""
    gemm_min_work: int = 4096
    """M*N*K below which a matmul stays on the plain loop nest"""
    gemm_window: bool = True
    """whether a conv's B may be read from a padded copy of its input (`GemmPlan.window`)"""

    @classmethod
    def from_features(cls, features: str = "", **overrides) -> TargetInfo:
        """A target from an LLVM feature string (`+avx512f,...`)."""
        if "+avx512f" in features:
            vw, mr, nr = 16, 12, 32
        elif "+avx" in features:
            vw, mr, nr = 8, 6, 16
        else:
            vw, mr, nr = 4, 6, 8
        return cls(**{"vector_width": vw, "gemm_mr": mr, "gemm_nr": nr, **overrides})


# ---- schedules ----------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class GemmPlan:
    """A compute recognised as `out[...] = epilogue(sum(k: A(batch, m, k) * B(batch, n, k)))`.

    The compute's vars split into `n` (a trailing run: the flattened n index is contiguous
    in the output), `m` (a consecutive run: rows at a constant stride) and `batch` (all the
    others, anywhere: a transposed output like attention's [b, s, h, d] has batch vars
    between m and n). `k` are the reduce's vars (flattened row-major into K). `a` / `b` are
    arbitrary expressions (loads, casts, selects: conv padding); the packers evaluate them.
    An operand that does not use some batch vars is packed once for all of them."""

    reduce: Reduce
    a: Expr
    b: Expr
    batch: tuple[str, ...]
    m: tuple[str, ...]
    n: tuple[str, ...]
    a_batch_vars: tuple[str, ...]
    """the batch vars A depends on"""
    b_batch_vars: tuple[str, ...]
    """the batch vars B depends on (packed B holds one copy per combination of them)"""
    epilogue: Expr | None
    """the compute body with the reduce replaced by a load of the output element (None:
    the body is the reduce itself)"""
    a_k_inner: bool
    """pack A reading along k (A is contiguous in k) rather than along m"""
    b_k_inner: bool
    k_inner: int
    """product of the extents of every reduce var but the first (blocks cut the first)"""
    mr: int
    nr: int
    kc: int
    mc_panels: int
    tasks: int
    min_work: int
    vl: int = 16
    """lanes of one micro-kernel vector (nr is a multiple)"""
    a_direct: bool = False
    """A is a plain load `X[..., m..., ..., k]` (k the last index, unit stride; the m vars
    consecutive, X's dims matching their extents; every other index a batch var): the
    micro-kernel reads A's rows in place (row stride = X's stride of the last m var) and A
    is not packed"""
    b_packed: np.ndarray | None = None
    """B packed at compile time (it reads only constant buffers and its extents are
    static): float32 [B batches, N panels, K, nr], zero-padded columns"""
    a_packed: np.ndarray | None = None
    """A packed at compile time (it reads only constant buffers, uses no batch var and its
    extents are static: a conv's weights): float32 [M panels, K, mr], zero-padded rows"""
    window: ConvWindow | None = None
    """B read in place from a padded copy of a conv's input (kernel/conv_window.py): no
    im2col packing, one k block, tiles over the padded grid"""
    row_ops: tuple[RowOp, ...] | None = None
    """the epilogue as per-row operations the window micro-kernel applies before it stores
    (kernel/row_epilogue.py; None: a separate pass over the stored tile)"""
    dense: bool = False
    """a dense layer: B prepacked, A not, static N x K of at least DENSE_MIN_WORK multiply-adds
    per row (codegen/cpu/gemm_static.py `dense_rows`: tiles row block by row block, in tasks
    of one row panel; K up to ONE_BLOCK_MAX_K in one block). The rule reads N x K, not M: a
    task covers one row panel whatever M is, so N x K alone sizes the work of a row panel
    against a task's overhead, while M (the tokens or pixels, usually symbolic) only sets how
    many row panels there are (codegen/cpu/gemm_dense.py `dense_blocks`)"""
    a_stage: bool = False
    """A is read in place (`a_direct`) but its rows sit a multiple of 4 KiB apart (a hidden
    size of 1024 or 2048 floats), so the micro-kernel's rows would all map to the same L1
    sets: each task copies its rows of every k block into a stack block of a row stride that
    does not alias (`A_STAGE_PAD` more than the block), then reads that in place"""
    a_runs: int = 0
    """A is staged (`a_stage`) from runs of this many contiguous k, each starting where A's
    own index says (kernel/a_runs.py: attention's output read through its head transpose);
    0: A's rows are plain strided"""
    col_ops: tuple[RowOp, ...] | None = None
    """the epilogue as per-column operations (bias[n], a residual tile) the micro-kernel
    applies before it stores, for A read in place and B prepacked in one k block (a
    channels-last 1x1 conv): operands load one vector per column vector, not a splat"""

    @property
    def b_const(self) -> bool:
        return self.b_packed is not None

    @property
    def a_const(self) -> bool:
        return self.a_packed is not None

    @property
    def b_interleaved(self) -> bool:
        """B is packed per call and depends on every batch var (a conv's n): codegen may pack
        and multiply one batch at a time, into batch 0's panels (decided at run time)"""
        return (not self.b_const and self.window is None and bool(self.batch)
                and tuple(self.b_batch_vars) == tuple(self.batch))

    @property
    def a_batch(self) -> bool:
        return bool(self.a_batch_vars)

    @property
    def b_batch(self) -> bool:
        return bool(self.b_batch_vars)

    def describe(self) -> str:
        k = ", ".join(v.name for v, _ in self.reduce.vars)
        return (f"gemm batch=({', '.join(self.batch)}) m=({', '.join(self.m)}) n=({', '.join(self.n)}) "
                f"k=({k}) tile={self.mr}x{self.nr} kc={self.kc} "
                f"a={self._a_mode} "
                f"b={'prepacked' if self.b_const else 'window' if self.window else 'packed'}"
                f"{'' if self.epilogue is None else ' +epilogue' + (' in registers' if self.in_regs else '')}")

    @property
    def _a_mode(self) -> str:
        if self.a_direct:
            return "runs" if self.a_runs else "staged" if self.a_stage else "direct"
        return "prepacked" if self.a_const else "packed"

    @property
    def in_regs(self) -> bool:
        """whether the micro-kernel applies the epilogue (row or column operations)"""
        return bool(self.row_ops or self.col_ops)


@dataclass(frozen=True)
class Schedule:
    """The loop structure of one compute (read by codegen/cpu.py through `NestPlan`)."""

    order: tuple[str, ...] | None = None
    """loop order, outermost first (None: the domain's order)"""
    tiles: Mapping[str, int] = field(default_factory=dict)
    vector_width: int | None = None
    """strip-mine the innermost loop into chunks of this many lanes"""
    vector_tail: str = "scalar"
    """"scalar": a scalar loop finishes the extent; "none": the extent is a proven multiple"""
    strip_mine: bool = True
    """codegen splits the innermost loop itself (False: vector_width only hints LLVM)"""
    parallel: bool | None = None
    """run the outer loops on the thread pool (None: decide by the work at run time)"""
    unroll: int | None = None
    reduce_vector_width: int | None = None
    """vector width asked of inner reduction loops (vector accumulators)"""
    gemm: GemmPlan | None = None
    row_norm: RowNorm | None = None
    """the innermost axis is a row normalised by its own sum (softmax): codegen runs it as
    two passes, the numerator stored and summed once, then divided (kernel/rownorm.py)"""
    row_stage: RowStage | None = None
    """a costly elementwise part read by the row's statistics and its element is staged in
    the output row first, then read back (kernel/rowstage.py: a LayerNorm after an activation)"""
    flash: Flash | None = None
    """the compute is attention over its innermost axis: codegen runs each row over key
    blocks with an online softmax, scores never stored (kernel/flash.py)"""
    scratch_bytes: Dim = 0
    """workspace the compute needs while it runs (packed B panels)"""
    rows_per_item: int | None = None
    """the parallel items are the vars before the second-innermost and a chunk of this many
    of its values (the second-innermost var over [lo, hi) in each item), not whole: a fused
    attention's query rows (kernel/flash.py `rows_per_item`), so a batch of 4 heads still
    splits into even items on 2 threads"""

    def describe(self) -> str:
        if self.gemm is not None:
            return self.gemm.describe() + f" parallel={self.parallel} scratch={self.scratch_bytes}"
        parts = []
        if self.vector_width:
            parts.append(f"vector={self.vector_width} tail={self.vector_tail}")
        if self.row_norm is not None:
            parts.append("row-norm")
        if self.row_stage is not None:
            parts.append("row-stage")
        if self.flash is not None:
            parts.append(f"flash row={self.flash.row}")
        if self.rows_per_item:
            parts.append(f"rows/item={self.rows_per_item}")
        parts.append(f"parallel={self.parallel}")
        if self.order:
            parts.append(f"order=({', '.join(self.order)})")
        return " ".join(parts)


# ---- facts --------------------------------------------------------------------------------


def facts_from_attrs(items: Iterable[Divisible] = (), symbols=None) -> dict[str, int]:
    """Divisibility facts: a version's `multiple_of` attr (`Divisible("seq", 16)`, ...)
    merged with the symbol table's `multiple_of` (an `ir.SymbolTable` or None), as
    symbol name -> a known divisor."""
    out: dict[str, int] = {}
    if symbols is not None:
        for s in symbols:
            if getattr(s, "multiple_of", 1) > 1:
                out[s.name] = int(s.multiple_of)
    for fact in items:
        out[fact.symbol] = _lcm(out.get(fact.symbol, 1), fact.k)
    return out


def _lcm(a: int, b: int) -> int:
    import math

    return a * b // math.gcd(a, b)


def proves_multiple(d: Dim | Expr, k: int, facts: Mapping[str, int]) -> bool:
    """Whether `d` (a dim or a var-free i64 expression) is a multiple of `k` for every
    value of its symbols allowed by `facts`."""
    if k <= 1:
        return True
    if isinstance(d, Const):
        d = d.value
    if isinstance(d, Expr):
        d = _expr_to_dim(d)
        if d is None:
            return False
    d = canon(d)
    if isinstance(d, int):
        return d % k == 0
    e = sympy.sympify(d)
    subs = {}
    for s in e.free_symbols:
        m = facts.get(s.name, 1)
        subs[s] = m * sympy.Symbol(f"_q_{s.name}", integer=True, positive=True)
    e = sympy.expand(e.xreplace(subs))
    try:
        poly = sympy.Poly(e, *sorted(e.free_symbols, key=str)) if e.free_symbols else None
    except sympy.PolynomialError:
        return False
    if poly is None:
        return e.is_Integer and int(e) % k == 0
    return all(c.is_Integer and int(c) % k == 0 for c in poly.coeffs())


def _expr_to_dim(e: Expr) -> Dim | None:
    """A var-free i64 kernel expression (add/sub/mul of symbols and constants) as a Dim."""
    if isinstance(e, Const):
        return int(e.value)
    if isinstance(e, SymRef):
        from onnxcc.ir import sym

        return sym(e.name)
    if isinstance(e, Binary) and e.op in ("add", "sub", "mul"):
        a, b = _expr_to_dim(e.a), _expr_to_dim(e.b)
        if a is None or b is None:
            return None
        return canon(a + b if e.op == "add" else a - b if e.op == "sub" else a * b)
    return None


# ---- work estimates -----------------------------------------------------------------------

_UNKNOWN_EXTENT = 64


_ROW_NORM_COST = 4
"""per element of a two-pass row normalisation: its row statistics (max, sum) run once per
row, so each element costs a few passes over the row, not a reduction of its own"""


TAP_WORK_DIVISOR = 4
"""window taps per element-operation of `compute_work`: a tap is one vector load and FMA (a 5x5
depthwise conv ran 76 ps a tap); counted whole, 3x3 depthwise convs of 2-5 us split, where the
pool's cost per loop (~1.5 us) ate the gain (benchmarks/region_profile.py)"""


def compute_work(c: Compute, row_norm: bool = False) -> Dim:
    """Estimated element-operations of a compute: domain size x the biggest reduction, or
    x the most distinct loads of one buffer / TAP_WORK_DIVISOR (a window's unrolled taps: a
    5x5 depthwise conv reads its input 25 times per element; counted as 1, mnasnet's on a
    12 x 10 plane ran serially, 44 us of a 1.1 ms call, benchmarks/region_profile.py) (a
    row-norm schedule, or `row_norm`: x `_ROW_NORM_COST`)."""
    n: Dim = 1
    for d in c.extents:
        n = canon(n * d)
    if row_norm or getattr(c.schedule, "row_norm", None) is not None:
        return canon(n * _ROW_NORM_COST)
    cost = 1
    taps: dict[str, int] = {}
    for e in walk(c.body):  # each distinct node once: x * sigmoid(x) loads x once
        if isinstance(e, Reduce):
            k = 1
            for _, x in e.vars:
                k *= x.value if isinstance(x, Const) else _UNKNOWN_EXTENT
            cost = max(cost, k)
        elif isinstance(e, Load):
            taps[e.buffer] = taps.get(e.buffer, 0) + 1
    tap_cost = -(-max(taps.values(), default=0) // TAP_WORK_DIVISOR)
    return canon(n * max(cost, tap_cost))


# ---- GEMM recognition ---------------------------------------------------------------------


def _factors(e: Expr) -> list[Expr]:
    if isinstance(e, Binary) and e.op == "mul":
        return _factors(e.a) + _factors(e.b)
    return [e]


def _product(fs: list[Expr]) -> Expr:
    out = fs[0]
    for f in fs[1:]:
        out = out * f
    return out


def _reads_const_only(e: Expr, program: KernelProgram) -> bool:
    for n in walk(e):
        if isinstance(n, Load) and program.buffers[n.buffer].kind != "const":
            return False
        if isinstance(n, SymRef):
            return False
    return True


def _k_inner(e: Expr, kvars: set[str], ovars: set[str], default: bool) -> bool:
    """Whether the operand's main load walks memory along a k var (its last index uses one)
    rather than along an output var."""
    for n in walk(e):
        if isinstance(n, Load) and n.indices:
            fv = free_vars(n.indices[-1])
            if fv & kvars and not fv & ovars:
                return True
            if fv & ovars and not fv & kvars:
                return False
    return default


def _a_direct(a: Expr, r: Reduce, m: Sequence[str], batch: Sequence[str], ext: Mapping[str, Dim],
              program: KernelProgram) -> bool:
    """Whether A can be read in place (see `GemmPlan.a_direct`)."""
    if len(r.vars) != 1 or not isinstance(a, Load) or a.dtype is not F32:
        return False
    shape = program.buffers[a.buffer].shape
    # index 0 on a dim of size 1 (a batch == 1 version's broadcast lowering) adds nothing
    keep = [j for j, i in enumerate(a.indices) if not (isinstance(i, Const) and i.value == 0 and shape[j] == 1)]
    if not all(isinstance(a.indices[j], Var) for j in keep):
        return False
    names = [a.indices[j].name for j in keep]
    shape = [shape[j] for j in keep]
    if len(set(names)) != len(names) or names[-1] != r.vars[0][0].name:
        return False
    m = [v for v in m if v in names or sympy.sympify(ext[v]) != 1]  # extent-1 m vars may read 0
    nm = len(m)
    if not m or m[0] not in names:
        return False
    at = names.index(m[0])
    if names[at:at + nm] != list(m) or not set(names[:at] + names[at + nm:-1]) <= set(batch):
        return False
    # rows are flattened over the m vars with the compute's extents: X's dims must agree
    return all(sympy.sympify(shape[at + j]) == sympy.sympify(ext[v]) for j, v in enumerate(m) if j > 0)


def _under_select(body: Expr, r: Expr) -> bool:
    for n in walk(body):
        if isinstance(n, Select) and any(x == r for arm in (n.a, n.b) for x in walk(arm)):
            return True
    return False


def match_gemm(c: Compute, program: KernelProgram, target: TargetInfo) -> GemmPlan | None:
    """The GEMM reading of `c`, or None when it is not matmul-like (see `GemmPlan`)."""
    out = program.buffers[c.out]
    if out.dtype is not F32 or c.body.dtype is not F32 or len(c.vars) < 2:
        return None
    reduces = [n for n in walk(c.body) if isinstance(n, Reduce)]
    if len(reduces) != 1:
        return None
    r = reduces[0]
    if r.op != "sum" or r.init is not None or r.dtype is not F32:
        return None
    if any(free_vars(x) for _, x in r.vars):
        return None
    if not vectorizable(r.body) and _under_select(c.body, r):
        return None  # the packers evaluate every element: a lazy arm could fail for nothing
    kvars = {v.name for v, _ in r.vars}
    # every reduce var but the first must have a small static extent (blocks cut the first)
    k_inner = 1
    for _, x in r.vars[1:]:
        if not isinstance(x, Const):
            return None
        k_inner *= x.value
    if k_inner > target.gemm_kc // 2:
        return None
    fs = _factors(r.body)
    if len(fs) < 2 or any(f.dtype is not F32 for f in fs):
        return None
    names = c.var_names
    rank = len(names)
    found = None
    # n: a trailing run (longest first: a conv's (oh, ow)); m: a consecutive run before it
    # (the one next to n and longest first); batch: every other var
    for s3 in range(1, rank):
        nv = set(names[s3:])
        for s2 in range(s3, 0, -1):
            for s1 in range(0, s2):
                mv = set(names[s1:s2])
                a_side, b_side = [], []
                ok = True
                for f in fs:
                    fv = free_vars(f)
                    if fv & mv and fv & nv:
                        ok = False
                        break
                    (b_side if fv & nv else a_side).append(f)
                if not ok or not a_side or not b_side:
                    continue
                if not any(free_vars(f) & mv for f in a_side) or not any(free_vars(f) & nv for f in b_side):
                    continue
                found = (s1, s2, s3, a_side, b_side)
                break
            if found:
                break
        if found:
            break
    if found is None:
        return None
    s1, s2, s3, a_side, b_side = found
    a, b = _product(a_side), _product(b_side)
    mv, nv = names[s1:s2], names[s3:]
    batch = tuple(n for n in names if n not in mv and n not in nv)
    # static size check: tiny products stay on the loop nest
    ext = dict(zip(names, c.extents))
    sizes = {n: _static(ext[n]) for n in names}
    ks = [x.value if isinstance(x, Const) else None for _, x in r.vars]
    if all(sizes[n] is not None for n in (*mv, *nv)) and all(k is not None for k in ks):
        kk = _prod(ks)
        if kk == 0 or _prod(sizes[n] for n in (*mv, *nv)) * kk < target.gemm_min_work:
            return None
    epi: Expr | None = None
    if c.body is not r:
        acc = Load(c.out, tuple(Var(n) for n in names), F32)
        epi = transform(c.body, lambda n: acc if n == r else None)
    b_vars = set(free_vars(b))
    a_vars = set(free_vars(a))
    m_static = _prod(sizes[n] for n in mv) if all(sizes[n] is not None for n in mv) else None
    n_static = _prod(sizes[x] for x in nv) if all(sizes[x] is not None for x in nv) else None
    tile = {"vl": min(target.vector_width, target.gemm_nr), **gemm_tile(target, m_static, n_static)}
    g = GemmPlan(
        reduce=r, a=a, b=b, batch=batch, m=tuple(mv), n=tuple(nv),
        a_batch_vars=tuple(v for v in batch if v in a_vars), b_batch_vars=tuple(v for v in batch if v in b_vars),
        epilogue=epi,
        a_k_inner=_k_inner(a, kvars, set(mv), True), b_k_inner=_k_inner(b, kvars, set(nv), False),
        k_inner=k_inner, **tile, kc=target.gemm_kc,
        mc_panels=target.gemm_mc_panels, tasks=target.gemm_tasks, min_work=target.gemm_min_work,
        a_direct=_a_direct(a, r, mv, batch, ext, program))
    if _reads_const_only(b, program):
        packed = prepack_b(c, g, program)
        if packed is not None:
            g = dataclasses.replace(g, b_packed=packed)
            if not _reads_const_only(a, program):  # a dense layer: activations times weights
                g = _dense_blocking(g, a, ks, n_static, program)
                if (g.dense and not g.a_direct and not g.batch  # one A for every row panel
                        and (d := runs_of(a, r, g.kc, lambda n: program.buffers[n].shape))):
                    g = dataclasses.replace(g, a_direct=True, a_stage=True, a_runs=d)  # kernel/a_runs.py
    if (epi is not None and g.a_direct and g.b_const and len(nv) == 1 and None not in ks
            and _prod(ks) <= g.kc):  # one k block: the tile is final when the micro-kernel stores it
        ops = match_row_epilogue(epi, Load(c.out, tuple(Var(n) for n in names), F32), nv[0],
                                 lambda n: program.buffers[n].shape, self_products=True)
        g = dataclasses.replace(g, col_ops=ops)
    # A may have batch vars here (a grouped conv's group, ops/conv_grouped.py): it is
    # prepacked per batch, [batch, M panels, K, mr], which only the window tasks read
    if not g.b_const and target.gemm_window and _reads_const_only(a, program):
        w = match_conv_window(b, g.n, [(v.name, k) for (v, _), k in zip(r.vars, ks)], g.b_batch_vars, ext)
        if w is not None:
            src = in_place_source(w, g.b_batch_vars, [ext[v] for v in g.b_batch_vars],
                                  lambda n: program.buffers[n].shape)
            w = dataclasses.replace(w, source=src)
        # a copy as big as the packing (a 1x1 conv whose input is not read in place) does not pay;
        # the weights are prepacked (mr-wide rows, even where A could be read in place)
        if w is not None and (w.ky or w.kx or w.source):
            gw = dataclasses.replace(g, a_direct=False, window=w, kc=max(g.kc, _prod(ks)))  # type: ignore[arg-type]
            packed = prepack_a(c, gw, program)
            if packed is not None:
                g = dataclasses.replace(gw, a_packed=packed)
                if epi is not None and len(mv) == 1:
                    ops = match_row_epilogue(epi, Load(c.out, tuple(Var(n) for n in names), F32), mv[0],
                                             lambda n: program.buffers[n].shape)
                    g = dataclasses.replace(g, row_ops=ops)
    if not g.a_direct and not g.a_batch and not g.a_const and _reads_const_only(a, program):
        packed = prepack_a(c, g, program)
        if packed is not None:
            g = dataclasses.replace(g, a_packed=packed)
    return g


DENSE_MIN_WORK = 1 << 15
"""the fewest multiply-adds per row (N x K) of a dense layer: a task of one row panel is then
at least ~20k FMA cycles, past which its own overhead does not show (a channels-last 1x1
conv of 16 -> 96 channels, 1.5k per pixel, keeps its blocks of 8 panels)"""
ONE_BLOCK_MAX_K = 512
"""the longest static k a dense layer (B prepacked, A not) multiplies in one k block: the
tile is final when the micro-kernel stores it (its bias / ReLU / residual in registers,
`GemmPlan.col_ops`), and C is not read back per block. 12 rows x 512 k of A is 24 KiB,
which stays in L1 while the tile's row of B panels streams by (see codegen/cpu/gemm_static.py `rows_outer`)"""
L1_SET_SPAN = 4096
"""bytes after which addresses map to the same L1 set again (64 sets x 64-byte lines: every
x86 L1D of 32 KiB x 8 ways or 48 KiB x 12 ways)"""
A_STAGE_MIN_N = 128
"""the fewest static columns for which a dense layer stages aliasing A rows (`a_stage`):
below it each row block meets few B panels, and the copy is not paid back"""


def _a_row_stride(a: Expr, m: Sequence[str], program: KernelProgram) -> int | None:
    """Elements between A's consecutive rows when A is read in place (`_a_direct`): the
    product of its buffer's dims after the last m index (None: not static)."""
    assert isinstance(a, Load)
    names = [i.name if isinstance(i, Var) else None for i in a.indices]
    last = max(names.index(v) for v in m if v in names)
    stride = 1
    for d in program.buffers[a.buffer].shape[last + 1:]:
        v = _static(d)
        if v is None:
            return None
        stride *= v
    return stride


def _dense_blocking(g: GemmPlan, a: Expr, ks: list, n_static: int | None, program: KernelProgram) -> GemmPlan:
    """A dense layer (`GemmPlan.dense`) with its k block and A staging: one k block up to
    ONE_BLOCK_MAX_K (measured on the MLP's x[M, 512] @ W[512, 2048], M = 128 / 512:
    0.94-0.97x the time of two blocks of 256), and `a_stage` where A's rows alias in L1
    (x[M, 2048] @ W[2048, 512]: 0.85-0.9x)."""
    if len(ks) != 1 or ks[0] is None or n_static is None or n_static * ks[0] < DENSE_MIN_WORK:
        return g
    g = dataclasses.replace(g, dense=True)
    if g.kc < ks[0] <= ONE_BLOCK_MAX_K:
        g = dataclasses.replace(g, kc=ks[0])
    if g.a_direct and n_static is not None and n_static >= A_STAGE_MIN_N:
        lda = _a_row_stride(a, g.m, program)
        if lda is not None and lda * 4 % L1_SET_SPAN == 0:
            g = dataclasses.replace(g, a_stage=True)
    return g


def gemm_tile(target: TargetInfo, m: int | None, n: int | None = None) -> dict:
    """The micro-kernel tile {"mr": rows, "nr": columns} for a GEMM with M rows (None: not
    static). The target's tile, except when a static M is a multiple of 8 but not of the
    target's mr (a conv's 16, 32 or 64 output channels against AVX-512's 12): then 8 rows
    with as many accumulator registers (8 x 48 for 12 x 32), so every panel is full. With
    12 rows those Ms end in a 4- or 8-row remainder whose micro-kernel is bound by its B
    loads (measured 5-10% on 3x3 convs with 16 and 32 channels, up to 2x at batch 1); not
    where the wider tile pads a static N by more FMAs than it saves (`_pads_columns_more`).
    A static N of at most one vector (attention's P @ V with heads of 8 or 16, N the head)
    gets one-vector-wide tiles with as many rows as the target's tile has accumulators
    (24 x 16 for 12 x 32): a 32-wide tile would spend half or three quarters of its FMAs on
    padding (measured 2x faster on [S, S] @ [S, 8] and [S, 16], S = 159 to 1599). An N of at
    most half a 16-lane vector gets half-width vectors too (24 x 8 in 8-lane vectors: where a
    16-lane FMA costs two 8-lane ones, Zen 4, half of it was padding; 0.6-0.85x the time on
    [S, S] @ [S, 8], S = 159 to 1599). Returns the vector width ("vl") when it is not the
    target's."""
    mr, nr, vl = target.gemm_mr, target.gemm_nr, min(target.vector_width, target.gemm_nr)
    regs = mr * (nr // vl)
    if n is not None and n <= vl // 2 and vl > 8:
        return {"mr": regs, "nr": vl // 2, "vl": vl // 2}
    if n is not None and n <= vl < nr:
        return {"mr": regs, "nr": vl}
    if m is not None and m % mr and m % 8 == 0 and regs % 8 == 0 and nr % vl == 0 \
            and not _pads_columns_more(m, n, mr, nr, regs // 8 * vl):
        return {"mr": 8, "nr": regs // 8 * vl}
    if n is not None and n <= 2 * nr and nr % vl == 0 and _pad(n, nr) * 8 > n * 9:
        # a static N of at most two tiles that pads more than 1/8 of the columns (a
        # channels-last 1x1 conv's N is its output channels: 40, 48): the tile of the same
        # accumulator count that pads least, the wider on a tie (40 and 48 -> 8 x 48)
        shapes = [(regs // k, k * vl) for k in range(regs, 0, -1) if regs % k == 0 and regs // k >= 4]
        shapes = [(r, c) for r, c in shapes if c <= 3 * vl]
        best = min(shapes, key=lambda rc: (_pad(n, rc[1]), -rc[1]))
        if _pad(n, best[1]) < _pad(n, nr):
            return {"mr": best[0], "nr": best[1]}
    return {"mr": mr, "nr": nr}


def _pads_columns_more(m: int, n: int | None, mr: int, nr: int, nr8: int) -> bool:
    """Whether 8-row tiles nr8 wide cost more FMAs than the mr x nr tiles once both are
    padded to whole tiles (a remainder row tile counted as a full one). A channels-last 1x1
    conv's M is its pixels and N its output channels: at 8 x 48 the 32 or 64 channels of a
    mobile net's pointwise convs padded to 48 or 96 (a third of the FMAs spent on padding,
    where 12 x 32 wasted at most one partial row tile of thousands), 128 and 256 to 144 and
    288; an NCHW conv's small M (16 or 32 output channels) against its many pixels keeps 8
    rows."""
    return n is not None and _pad(m, 8) * _pad(n, nr8) > _pad(m, mr) * _pad(n, nr)


def _pad(n: int, nr: int) -> int:
    """n rounded up to whole tiles of nr columns"""
    return -(-n // nr) * nr


# ---- packing constant operands at compile time ----------------------------------------------

_PREPACK_LIMIT = 1 << 26  # bytes


class _NoEval(Exception):
    pass


def prepack_b(c: Compute, g: GemmPlan, program: KernelProgram) -> np.ndarray | None:
    """B evaluated with numpy and laid out as the packer would: [Bt or 1, panels, K, nr]."""
    ext = dict(zip(c.var_names, c.extents))
    bvars = list(g.b_batch_vars)
    kvars = [(v.name, x) for v, x in g.reduce.vars]
    dims = [_static(ext[v]) for v in bvars] + [x.value if isinstance(x, Const) else None for _, x in kvars] \
        + [_static(ext[v]) for v in g.n]
    if any(d is None for d in dims):
        return None
    nb, kk, nn = _prod(dims[:len(bvars)]), _prod(dims[len(bvars):len(bvars) + len(kvars)]), \
        _prod(dims[len(bvars) + len(kvars):])
    panels = -(-nn // g.nr)
    if nb * panels * g.nr * kk * 4 > _PREPACK_LIMIT or nb * kk * nn == 0:
        return None
    names = bvars + [n for n, _ in kvars] + list(g.n)
    grids = np.meshgrid(*[np.arange(d, dtype=np.int64) for d in dims], indexing="ij", sparse=True)
    env = dict(zip(names, grids))
    try:
        vals = _np_eval(g.b, env, program)
    except _NoEval:
        return None
    vals = np.broadcast_to(np.asarray(vals, dtype=np.float32), tuple(dims)).reshape(nb, kk, nn)
    out = np.zeros((nb, kk, panels * g.nr), np.float32)
    out[:, :, :nn] = vals
    return np.ascontiguousarray(out.reshape(nb, kk, panels, g.nr).transpose(0, 2, 1, 3))


def prepack_a(c: Compute, g: GemmPlan, program: KernelProgram) -> np.ndarray | None:
    """A evaluated with numpy and laid out as the task packer would, for the whole of K:
    [M panels, K, mr]; a k block starting at k0 is the slice [:, k0:]. With batch vars
    (static extents, window mode only) one such block per batch, row-major over
    `g.a_batch_vars`: [batches * M panels, K, mr]."""
    ext = dict(zip(c.var_names, c.extents))
    kvars = [(v.name, x) for v, x in g.reduce.vars]
    bvars = list(g.a_batch_vars)
    dims = [_static(ext[v]) for v in bvars] + [_static(ext[v]) for v in g.m] \
        + [x.value if isinstance(x, Const) else None for _, x in kvars]
    if any(d is None for d in dims):
        return None
    nb = _prod(dims[:len(bvars)])
    mm, kk = _prod(dims[len(bvars):len(bvars) + len(g.m)]), _prod(dims[len(bvars) + len(g.m):])
    panels = -(-mm // g.mr)
    if nb * panels * g.mr * kk * 4 > _PREPACK_LIMIT or nb * mm * kk == 0:
        return None
    names = bvars + list(g.m) + [n for n, _ in kvars]
    grids = np.meshgrid(*[np.arange(d, dtype=np.int64) for d in dims], indexing="ij", sparse=True)
    try:
        vals = _np_eval(g.a, dict(zip(names, grids)), program)
    except _NoEval:
        return None
    vals = np.broadcast_to(np.asarray(vals, dtype=np.float32), tuple(dims)).reshape(nb, mm, kk)
    out = np.zeros((nb, panels * g.mr, kk), np.float32)
    out[:, :mm] = vals
    return np.ascontiguousarray(out.reshape(nb * panels, g.mr, kk).transpose(0, 2, 1))


_NP_BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "max": np.maximum, "min": np.minimum,
    "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal, "eq": np.equal,
    "ne": np.not_equal, "and": np.logical_and, "or": np.logical_or,
}


def _np_eval(e: Expr, env: Mapping[str, np.ndarray], program: KernelProgram):
    """numpy value of a side-effect-free expression over const buffers (arrays broadcast
    over the vars in `env`); raises _NoEval on anything else."""
    memo: dict[Expr, object] = {}
    for n in walk(e):
        if isinstance(n, Var):
            if n.name not in env:
                raise _NoEval
            v = env[n.name]
        elif isinstance(n, Const):
            v = np.array(n.value, dtype=n.dtype.np)
        elif isinstance(n, Load):
            buf = program.buffers[n.buffer]
            if buf.kind != "const" or buf.dtype is DType.bf16 or buf.dtype.is_small:
                raise _NoEval  # their data are bit patterns, not values
            data = buf.data
            # NOTE: clipped, so the arm of a select that is not taken reads something valid
            idx = tuple(np.clip(memo[i], 0, max(0, s - 1)) for i, s in zip(n.indices, data.shape))
            v = data[idx] if idx else data[()]
        elif isinstance(n, Binary):
            a, b = memo[n.a], memo[n.b]
            if n.op in _NP_BINARY:
                v = _NP_BINARY[n.op](a, b)
            elif n.op == "div" and n.dtype.is_float:
                v = np.divide(a, b)
            elif n.op in ("floordiv", "div") and n.dtype.is_int:
                v = np.floor_divide(a, np.where(b == 0, 1, b))
            elif n.op == "mod" and n.dtype.is_int:
                v = np.mod(a, np.where(b == 0, 1, b))
            else:
                raise _NoEval
            if n.dtype.is_float:
                v = np.asarray(v, dtype=n.dtype.np)
        elif isinstance(n, Unary) and n.op in ("neg", "abs"):
            v = np.negative(memo[n.a]) if n.op == "neg" else np.abs(memo[n.a])
        elif isinstance(n, Cast) and not any(d is DType.bf16 or d.is_small for d in (n.dtype, n.a.dtype)):
            v = np.asarray(memo[n.a]).astype(n.dtype.np)
        elif isinstance(n, Select):
            v = np.where(memo[n.cond], memo[n.a], memo[n.b])
        else:
            raise _NoEval
        memo[n] = v
    return memo[e]


def _static(d: Dim) -> int | None:
    d = canon(d)
    return d if isinstance(d, int) else None


def _prod(xs) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


def gemm_scratch_bytes(c: Compute, g: GemmPlan) -> Dim:
    """Bytes of packed B: [B batches][N panels][K][nr] floats (0 when packed at compile time)."""
    if g.b_const:
        return 0
    ext = dict(zip(c.var_names, c.extents))
    if g.window is not None and g.window.source is not None:
        return 0  # read in place
    if g.window is not None:  # the padded planes, and a tile's over-read past the last one
        nbw: Dim = g.window.planes * 4
        for v in g.b_batch_vars:
            nbw = canon(nbw * ext[v])
        return canon(nbw * g.window.y_ext * g.window.x_ext + (g.window.x_ext + g.nr + 16) * 4)
    n: Dim = 1
    for v in g.n:
        n = canon(n * ext[v])
    k: Dim = 1
    for _, x in g.reduce.vars:
        d = expr_to_dim(x)  # floor divisions too: a reduce over `samples // 5 // 2 - 1`
        if d is None:
            return None  # type: ignore[return-value]
        k = canon(k * d)
    nb: Dim = 1
    for v in g.b_batch_vars:
        nb = canon(nb * ext[v])
    panels = canon(sympy.ceiling(sympy.sympify(n) / g.nr)) if not isinstance(n, int) else -(-n // g.nr)
    return canon(nb * panels * g.nr * k * 4)


# ---- the scheduler ------------------------------------------------------------------------

def vectorizable(e: Expr) -> bool:
    """Whether a body can run as vector code: no index checks (an early exit) or integer
    divisions by a non-constant (a zero check). Transcendental functions are the vmath
    library's branch-free inline functions (f32 and f64), which widen like any arithmetic."""
    for n in walk(e):
        if isinstance(n, Check):
            return False
        if isinstance(n, Binary) and n.op in ("div", "floordiv", "mod", "truncdiv", "rem") \
                and not n.dtype.is_float and not isinstance(n.b, Const):
            return False
    return True



def schedule_compute(c: Compute, program: KernelProgram, target: TargetInfo,
                     facts: Mapping[str, int] | None = None) -> Schedule:
    facts = facts or {}
    rn = match_row_norm(c, program.buffers[c.out].dtype) if c.vars else None
    if rn is not None and not vectorizable(rn.numer):
        rn = None
    work = compute_work(c, row_norm=rn is not None)
    if isinstance(work, int):
        parallel: bool | None = target.parallel and work >= target.min_parallel_work
    else:
        parallel = None if target.parallel else False
    fl = match_flash(c)
    if fl is not None:
        # one query row per iteration of the outer loops: rows run in parallel
        return Schedule(vector_width=target.vector_width, strip_mine=False, flash=fl,
                        reduce_vector_width=target.vector_width, parallel=parallel if len(c.vars) > 1 else False,
                        rows_per_item=rows_per_item(fl) if len(c.vars) >= 3 else None)
    g = match_gemm(c, program, target)
    if g is not None:
        scratch = gemm_scratch_bytes(c, g)
        if scratch is not None:
            return Schedule(parallel=target.parallel, gemm=g, scratch_bytes=scratch)
    if not c.vars:
        return Schedule(parallel=False)
    vw = target.vector_width
    if rn is not None:
        # two passes over each row (a hint to LLVM's vectorizer, no strip-mining); one row
        # cannot be split over threads, so a rank-1 compute stays serial
        return Schedule(vector_width=vw, strip_mine=False, row_norm=rn, reduce_vector_width=vw,
                        parallel=parallel if len(c.vars) > 1 else False)
    rs = match_row_stage(c, program.buffers[c.out].dtype)
    if rs is not None and vectorizable(rs.stage) and vectorizable(rs.body):
        # two passes over each row, like a row norm (one row cannot be split over threads)
        return Schedule(vector_width=vw, strip_mine=False, row_stage=rs, reduce_vector_width=vw,
                        parallel=parallel if len(c.vars) > 1 else False)
    inner_var, ext = c.vars[-1]
    inner = inner_var.name
    sext = _static(ext)
    use_vec = not (sext is not None and sext < vw) and vectorizable(c.body)
    # a reduction that runs per element of the inner axis keeps the inner loop scalar: its
    # own loop is the one LLVM vectorises (k innermost)
    for n in walk(c.body):
        if isinstance(n, Reduce) and inner in free_vars(n):
            use_vec = False
            break
    if not use_vec:
        return Schedule(parallel=parallel, reduce_vector_width=vw)
    tail = "none" if proves_multiple(ext, vw, facts) else "scalar"
    return Schedule(vector_width=vw, vector_tail=tail, parallel=parallel, reduce_vector_width=vw)


def schedule_program(program: KernelProgram, target: TargetInfo | None = None,
                     facts: Mapping[str, int] | None = None) -> None:
    """Attach a Schedule to every compute of `program` (in place)."""
    target = target or TargetInfo()
    body = []
    for s in program.body:
        if isinstance(s, Compute):
            s = dataclasses.replace(s, schedule=schedule_compute(s, program, target, facts))
        body.append(s)
    program.body[:] = body


def scratch_bytes(program: KernelProgram) -> Dim:
    """The scratch region the scheduled computes share (they run one after another, those
    in control-flow bodies included): the biggest of their needs."""
    def computes(stmts):
        for st in stmts:
            if isinstance(st, Compute):
                yield st
            for body in st.bodies():  # computes inside control statements run one at a time too
                yield from computes(body)

    sizes = [canon(s.schedule.scratch_bytes) for s in computes(program.body)
             if getattr(s.schedule, "scratch_bytes", 0) not in (0, None)]
    if not sizes:
        return 0
    if all(isinstance(x, int) for x in sizes):
        return max(sizes)
    from .plan_memory import unevaluated_max

    return canon(unevaluated_max(sizes))


def describe_schedules(program: KernelProgram) -> str:
    lines = []
    for c in program.computes():
        sch = c.schedule
        lines.append(f"{c.out}: {sch.describe() if sch is not None else 'default'}")
    return "\n".join(lines)
