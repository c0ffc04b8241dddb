"""Query rows of fused attention (kernel/flash.py) over blocks of keys, scores never stored.

For ROWS query rows at once (the rows var bound to s0 .. s0+ROWS-1; one row where the keys
or values read it, and for the rows left over), the innermost var `w` over the value head:

    m_r = -inf; l_r = 0; acc_r[w] = 0
    for each block of BLOCK keys (the last one shorter):
        s_r[i] = X_r(t0 + i)                     every row's scores, sharing each key load
        m_new = max(m_r, max_i s_r[i])           (maxnum and a NaN flag: both vectorize)
        live = m_new != -inf                     (a row still all -inf adds nothing)
        alpha = live ? exp(m_r - m_new) : 1      0 while m_r is -inf
        p_r[i] = exp(s_r[i] - (live ? m_new : 0));  l_r = l_r * alpha + sum_i p_r[i]
        acc_r[w] = acc_r[w] * alpha + sum_i p_r[i] * V(t0 + i, w)   (each V load shared)
        m_r = live ? m_new : m_r
    for w: out[..., w] = body with the core := acc_r[w] / select(l_r == 0, 1, l_r)

Causal attention (`Flash.causal`: scores of their own, `masked`, after a limit R that grows
with the row) stops each block of rows at its last row's R + 1 where flash_guard.py proves
the keys past it add nothing (finite there, the rows' maxes far above a finite fill): the
blocks above the diagonal are never computed; elsewhere the block's rows visit every key.

The dots and P @ V unroll the rows (each key load serves all of them); the per-row steps
(the score's epilogue, the block max, the probabilities, the rescale, the output) are one
loop over the rows, not a copy per row (`_Rows.each_row`): as copies they were most of the
attention module's LLVM time (the vectorizer's checks of each copy's loops).

Branch-free: a row that is not live has only -inf scores, so its `p` are exp(-inf) = 0.
Keys go GROUP at a time: their dot products share one loop over the head dim (each query
factor loaded once for all of them) and their P @ V terms one pass over the accumulator rows.
The scores and probabilities live in stack arrays of BLOCK lanes per row, the accumulators
in arrays of the value head's size: the [q, kv] score matrix never exists. A NaN score makes
its row's `m_new` NaN, which counts as live, so NaN reaches the result as it does unfused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir

from onnxcc.kernel.expr import Const, Expr, Load, Var, substitute
from onnxcc.kernel.flash import lanes_fit

from ..llvm.exprs import REDUCE_COMBINE, ExprEmitter, compute_type
from ..llvm.helpers import PTR, for_range, get_or_declare, i64, loop_metadata, scalar_loop_metadata
from .flash_guard import CausalGuard
from .flash_lanes import SUM_FLAGS, LaneRows, contiguous
from .flash_tiles import TileRows, tiles_fit

if TYPE_CHECKING:
    from onnxcc.kernel.flash import Flash
    from onnxcc.kernel.program import Compute

    from .emit import FnCtx, KernelEmitter, NestPlan

BLOCK = 64
"""keys per block: the block's scores stay in L1 while they become probabilities and are
spread over the accumulator row"""
ROWS = 4
"""query rows run together: each key and value load serves all of them (one row at a time
streams the whole K and V from L2 per row, which bounds it at a third of the GEMM path)"""
GROUP = 4
"""keys whose dot products share one loop over the head dim (the query factor loaded once
for all of them), and whose P @ V terms share one pass over the accumulator row"""
PV_REGS = 16
"""the most accumulator vectors (rows x value-head chunks) P @ V keeps in registers across a
block's keys: 4 rows of a head of 64 in 16-lane vectors, with the V vectors and broadcasts
beside them in the 32 registers"""


def emit_flash(owner: KernelEmitter, em: ExprEmitter, ctx: FnCtx, c: Compute, plan: NestPlan, v: int,
               vals: dict[str, ir.Value], rows: tuple[ir.Value, ir.Value] | None = None) -> None:
    """From var `v` of `c` on: the rows var and the innermost one (`plan.flash.rows_var`
    set), or the innermost alone; the outer vars are bound in `vals`. `rows`: only the query
    rows [lo, hi) (a parallel item's: the schedule's `rows_per_item`), else all of them."""
    fl = plan.flash
    assert fl is not None
    b = ctx.b
    guard = None
    if fl.causal is not None:
        guard = CausalGuard(em, ctx, c, fl, compute_type(fl.core.dtype), _scan_lanes(fl, c, plan))
    if fl.rows_var is None or v + 1 == len(c.vars):
        if guard is not None:  # one row: its own skipped keys
            _scan(b, em, fl, guard, None, c)
        _Rows(owner, em, ctx, c, plan, 1, guard).run(None, vals)
        return
    if rows is not None:
        start, n = rows
    else:
        n = ctx.dim(c.extents[v])
        start = i64(0)
    if guard is not None:  # the keys any of these rows may skip: after the first row's limit
        _scan(b, em, fl, guard, start, c)
    if rows is None and lanes_fit(fl):
        # narrow heads: whole blocks of rows in vector lanes first (flash_lanes.py), the rest here
        start = LaneRows(owner, em, ctx, c, plan, guard).run(vals)
    elif tiles_fit(fl, plan.vector_width):  # wide heads: register tiles of 32 rows (flash_tiles.py)
        start = TileRows(owner, em, ctx, c, plan, guard).run(vals, (start, n))
    full = b.udiv(b.sub(n, start, name="flash.rows.left"), i64(ROWS), name="flash.rowblocks")
    with for_range(b, full, "flash.rb", guard=True) as rb:
        s0 = b.add(start, b.mul(rb, i64(ROWS), name="flash.s0.off", flags=("nuw", "nsw")), name="flash.s0")
        _Rows(owner, em, ctx, c, plan, ROWS, guard).run(s0, vals)
    done = b.add(start, b.mul(full, i64(ROWS), name="flash.rdone.off"), name="flash.rdone")
    with for_range(b, n, "flash.rr", start=done, guard=True) as r:
        _Rows(owner, em, ctx, c, plan, 1, guard).run(r, vals)


def _scan_lanes(fl: Flash, c: Compute, plan: NestPlan) -> tuple[int, int]:
    """The vector widths the guard's scan reads K's and V's rows with: both loads contiguous
    along the head and the heads whole vectors (K's only where the masked score reads the
    dot), else (0, 0)."""
    width = plan.vector_width or 8
    vv = _lanes(fl.row, width) if contiguous(fl.value, c.var_names[-1], fl.core.dtype) else 0
    if fl.masked[0] == 0.0:
        return (vv, vv) if vv else (0, 0)
    if fl.dot is None or fl.keyed is None:
        return (0, 0)
    (e, ext), = fl.dot.vars
    kv = _lanes(int(ext.value), width) if isinstance(ext, Const) and contiguous(fl.keyed, e.name, fl.core.dtype) else 0
    return (kv, vv) if kv and vv else (0, 0)


def _scan(b: ir.IRBuilder, em: ExprEmitter, fl: Flash, guard: CausalGuard, first: ir.Value | None,
          c: Compute) -> None:
    """guard.scan over the keys after row `first`'s limit (None: the bound row's)."""
    assert fl.causal is not None
    if first is not None:
        em.push({fl.rows_var: first}, {fl.rows_var: c.extents[-2]})  # type: ignore[dict-item]
    lim = b.add(em.emit(fl.causal), i64(1), name="flash.guard.lo")
    if first is not None:
        em.pop()
    n = em.emit(fl.kv_len)
    lo = b.select(b.icmp_signed("<", lim, n), lim, n, name="flash.guard.lo.n")
    lo = b.select(b.icmp_signed("<", lo, i64(0)), i64(0), lo, name="flash.guard.lo0")
    guard.scan(lo, n)


class _Rows:
    """One emission of `nrows` rows (module doc): their stack arrays and the block steps."""

    def __init__(self, owner: KernelEmitter, em: ExprEmitter, ctx: FnCtx, c: Compute, plan: NestPlan, nrows: int,
                 guard: CausalGuard | None):
        fl = plan.flash
        assert fl is not None
        self.owner, self.em, self.ctx, self.c, self.fl, self.b = owner, em, ctx, c, fl, ctx.b
        self.guard = guard
        self.dt = fl.core.dtype
        self.ty = ty = compute_type(self.dt)
        self.w, self.w_ext = c.var_names[-1], c.extents[-1]
        w = plan.vector_width or 8
        self.width = w if w <= BLOCK and BLOCK % w == 0 else 8  # lanes of the explicit vectors
        self.key = fl.key.name
        self.nrows = nrows
        self.acc = ctx.alloca(ir.ArrayType(ty, fl.row * nrows), "flash.acc")
        self.blk = ctx.alloca(ir.ArrayType(ty, BLOCK * nrows), "flash.s")
        self.acc.type = self.blk.type = PTR  # NOTE: llvmlite types allocas as typed pointers; the IR is opaque
        if nrows == 1:
            self.m_arr, self.l_arr = ctx.alloca(ty, "flash.m"), ctx.alloca(ty, "flash.l")
        else:  # indexed by a loop over the rows (`each_row`)
            self.m_arr, self.l_arr = (ctx.alloca(ir.ArrayType(ty, nrows), x) for x in ("flash.m", "flash.l"))
            self.m_arr.type = self.l_arr.type = PTR
        self.bsum_p = ctx.alloca(ty, "flash.bsum")
        self.dots = [[ctx.alloca(ty, f"flash.dot{r}.{j}") for j in range(GROUP)] for r in range(nrows)]
        self.neg_inf, self.zero, self.one = (ir.Constant(ty, x) for x in (float("-inf"), 0.0, 1.0))
        # the key var renamed per lane of a group (lane j reads key t + j), the rows var per row
        self.lanes = [Var(f"{self.key}.{j}") for j in range(GROUP)]
        rv = fl.rows_var
        self.rows = [Var(f"{rv}.{r}") for r in range(nrows)] if rv is not None and nrows > 1 else []

        def at(e: Expr, r: int, j: int | None) -> Expr:
            m = {} if j is None else {self.key: self.lanes[j]}
            if self.rows:
                m[rv] = self.rows[r]  # type: ignore[index]
            return substitute(e, m) if m else e

        self.score1 = [at(fl.score, r, None) for r in range(nrows)]
        self.scores = [[at(fl.score, r, j) for j in range(GROUP)] for r in range(nrows)]
        self.values = [at(fl.value, 0, j) for j in range(GROUP)]
        if fl.dot is not None:
            self.dot1 = [at(fl.dot, r, None) for r in range(nrows)]
            self.query = [at(fl.query, r, None) for r in range(nrows)]  # type: ignore[arg-type]
            self.keyed = [at(fl.keyed, 0, j) for j in range(GROUP)]  # type: ignore[arg-type]

    # ---- helpers ---------------------------------------------------------------------------
    def slot(self, arr: ir.Value, i: ir.Value) -> ir.Value:
        return self.b.gep(arr, [i], inbounds=True, name="flash.slot", source_etype=self.ty)

    def at(self, arr: ir.Value, r: int | ir.Value, size: int, i: ir.Value) -> ir.Value:
        """Element i of row r of a [nrows x size] stack array."""
        b = self.b
        if isinstance(r, int):
            return self.slot(arr, b.add(i, i64(r * size), name="flash.ri", flags=("nuw", "nsw")) if r else i)
        off = b.mul(r, i64(size), name="flash.roff", flags=("nuw", "nsw"))
        return self.slot(arr, b.add(i, off, name="flash.ri", flags=("nuw", "nsw")))

    def m_p(self, r: int | ir.Value) -> ir.Value:
        """Row r's running max."""
        return self.m_arr if self.nrows == 1 else self.slot(self.m_arr, i64(r) if isinstance(r, int) else r)

    def l_p(self, r: int | ir.Value) -> ir.Value:
        """Row r's running sum."""
        return self.l_arr if self.nrows == 1 else self.slot(self.l_arr, i64(r) if isinstance(r, int) else r)

    def each_row(self, body) -> None:
        """`body(r)` for every row: row 0 as a constant for one row, else a loop over the rows
        kept rolled (a copy per row of the softmax steps, the score's epilogue and the output
        cost the transformer's attention module about 0.2 s of LLVM -O3; only the dots and
        P @ V, which share each key load, unroll the rows)."""
        if self.nrows == 1:
            body(0)
            return
        md = scalar_loop_metadata(self.owner.module)
        with for_range(self.b, i64(self.nrows), "flash.row", guard=False, metadata=md) as r:
            body(r)

    def load(self, ptr: ir.Value) -> ir.Value:
        return self.b.load(ptr, name="flash.ld", typ=self.ty)

    def vec_md(self):
        return loop_metadata(self.owner.module, self.width, None)

    def plus(self, t: ir.Value, j: int) -> ir.Value:
        return t if j == 0 else self.b.add(t, i64(j), name="flash.plus", flags=("nuw", "nsw"))

    def bind_lanes(self, t: ir.Value) -> None:
        """A frame binding the lanes' key vars to keys t .. t + GROUP - 1."""
        self.em.push({k.name: self.plus(t, j) for j, k in enumerate(self.lanes)},
                     {k.name: self.fl.kv_len for k in self.lanes})

    def bind_key(self, t: ir.Value) -> None:
        self.em.push({self.key: t}, {self.key: self.fl.kv_len})

    def groups(self, cnt: ir.Value, body, one) -> None:
        """`body(i)` for i = 0, GROUP, ... while a whole group fits in `cnt`, then `one(i)`
        for the keys left over."""
        b = self.b
        ng = b.udiv(cnt, i64(GROUP), name="flash.groups")
        with for_range(b, ng, "flash.g", guard=True) as g:
            body(b.mul(g, i64(GROUP), name="flash.gi", flags=("nuw", "nsw")))
        done = b.mul(ng, i64(GROUP), name="flash.done", flags=("nuw", "nsw"))
        with for_range(b, cnt, "flash.r", start=done, guard=True) as i:
            one(i)

    # ---- the row(s) --------------------------------------------------------------------------
    def run(self, s0: ir.Value | None, vals: dict[str, ir.Value]) -> None:
        """The rows s0 .. s0+nrows-1 (s0 None: the one row whose vars are all in `vals`)."""
        b, em, fl = self.b, self.em, self.fl
        self.s0 = s0
        rv = fl.rows_var
        rows_ext = {} if s0 is None else {rv: self.c.extents[-2]}
        if self.rows:
            em.push({x.name: self.plus(s0, r) for r, x in enumerate(self.rows)},  # type: ignore[arg-type]
                    {x.name: rows_ext[rv] for x in self.rows})
        elif s0 is not None:
            em.push({rv: s0}, rows_ext)  # type: ignore[dict-item]
            em.hoist(fl.without_core(self.c.body))
        for sc in self.score1:  # what no key changes (a causal row's offset): once per row
            em.hoist(sc)
        n = em.emit(fl.kv_len)
        if self.guard is None:
            self.keys(n)
        else:  # keys after the last row's limit add nothing where the guard proves it
            g = self.guard
            qn = g.query_norm()
            q_sum = None
            if qn is not None:
                parts = [em.emit(substitute(qn, {rv: x}) if self.rows else qn) for x in self.rows or [None]]
                q_sum = parts[0]
                for p in parts[1:]:
                    q_sum = b.fadd(q_sum, p, name="flash.guard.qsum")
            fast = self.causal_end(n)
            g.run(fast, n, g.skip_ok(fast, q_sum), self.keys, self.rows_ok)
        self.each_row(lambda r: self.finish(r, s0, vals))
        if self.rows or s0 is not None:
            em.pop()

    def keys(self, n: ir.Value) -> None:
        """The rows' state from the start, then their keys below n, block by block."""
        b, fl = self.b, self.fl
        for r in range(self.nrows):
            b.store(self.neg_inf, self.m_p(r))
            b.store(self.zero, self.l_p(r))
        with for_range(b, i64(fl.row * self.nrows), "flash.w0", guard=False, metadata=self.vec_md()) as j:
            b.store(self.zero, self.slot(self.acc, j))
        nblk = b.sdiv(b.add(n, i64(BLOCK - 1), name="flash.n.up"), i64(BLOCK), name="flash.blocks")
        with for_range(b, nblk, "flash.kb", guard=True) as kb:
            t0 = b.mul(kb, i64(BLOCK), name="flash.t0", flags=("nuw", "nsw"))
            left = b.sub(n, t0, name="flash.left", flags=("nsw",))
            cnt = b.select(b.icmp_signed("<", left, i64(BLOCK)), left, i64(BLOCK), name="flash.cnt")
            self.block(t0, cnt)

    def rows_ok(self) -> ir.Value | None:
        """The guard's check of every row's final max (flash_guard.py)."""
        b, g = self.b, self.guard
        assert g is not None
        oks = [g.rows_ok(b.load(self.m_p(r), name="flash.m.end", typ=self.ty)) for r in range(self.nrows)]
        if any(x is None for x in oks):
            return None
        ok = oks[0]
        for x in oks[1:]:
            ok = b.and_(ok, x, name="flash.guard.rows")
        return ok

    def causal_end(self, n: ir.Value) -> ir.Value:
        """min(n, R + 1) at the block's last row (at least 0): the keys past it score -inf
        in every row of the block, so their blocks are never computed."""
        b, fl = self.b, self.fl
        assert fl.causal is not None
        last = substitute(fl.causal, {fl.rows_var: self.rows[-1]}) if self.rows else fl.causal  # type: ignore[dict-item]
        end = b.add(self.em.emit(last), i64(1), name="flash.causal.end")
        end = b.select(b.icmp_signed("<", end, n), end, n, name="flash.causal.n")
        return b.select(b.icmp_signed("<", end, i64(0)), i64(0), end, name="flash.causal.n0")

    def finish(self, r: int | ir.Value, s0: ir.Value | None, vals: dict[str, ir.Value]) -> None:
        """Row r's outputs: the body with the core := acc[w] / l."""
        b, em, c, fl = self.b, self.em, self.c, self.fl
        total = b.load(self.l_p(r), name="flash.total", typ=self.ty)
        denom = b.select(b.fcmp_ordered("==", total, self.zero, name="flash.empty"), self.one, total,
                         name="flash.denom") if fl.guarded else total  # unguarded: an all -inf row is 0/0
        row_vals = dict(vals)
        rv = fl.rows_var
        if s0 is not None:
            assert rv is not None
            row_vals[rv] = self.plus(s0, r) if isinstance(r, int) else b.add(s0, r, name="flash.row.s",
                                                                               flags=("nuw", "nsw"))
        if self.rows:  # several rows: bind the row's own var (one row: `run` bound it)
            em.push({rv: row_vals[rv]}, {rv: c.extents[-2]})  # type: ignore[dict-item]
            em.hoist(fl.without_core(c.body))
        with for_range(b, i64(fl.row), self.w, guard=False, metadata=self.vec_md()) as j:
            em.push({self.w: j}, {self.w: self.w_ext})
            em.frames[-1].cache[fl.core] = b.fdiv(self.load(self.at(self.acc, r, fl.row, j)), denom, name="flash.y")
            em.store(c.out, [j if m == self.w else row_vals[m] for m in c.var_names], em.emit(c.body))
            em.pop()
        if self.rows:
            em.pop()

    def block(self, t0: ir.Value, cnt: ir.Value) -> None:
        """One block of `cnt` keys from t0: scores, running maxes, sums and accumulators."""
        if self.fl.dot is None:
            self.groups(cnt, lambda i: self.score_group(t0, i), lambda i: self.score_one(t0, i))
        else:  # the raw dots first (they share loads), then each score's epilogue (it vectorizes)
            self.groups(cnt, lambda i: self.dot_group(t0, i), lambda i: self.dot_one(t0, i))
            self.epilogue(t0, cnt)
        self.cnt = cnt
        self.each_row(self.softmax)
        if not self.pv_vectors(t0, cnt):
            self.groups(cnt, lambda i: self.pv_group(t0, i), lambda i: self.pv_one(t0, i))

    def softmax(self, r: int | ir.Value) -> None:
        """Row r's block max, rescale and probabilities (module doc), the block's cnt keys."""
        b, em, cnt = self.b, self.em, self.cnt
        m_old = b.load(self.m_p(r), name="flash.m.old", typ=self.ty)
        m_new = REDUCE_COMBINE["max"](em, m_old, self.block_max(r, cnt), self.dt)
        live = b.fcmp_unordered("!=", m_new, self.neg_inf, name="flash.live")
        alpha = b.select(live, em.math("exp", b.fsub(m_old, m_new, name="flash.dm")), self.one, name="flash.alpha")
        m_use = b.select(live, m_new, self.zero, name="flash.m.use")
        b.store(self.zero, self.bsum_p)
        with for_range(b, cnt, "flash.p", guard=True, metadata=self.vec_md()) as i:
            ptr = self.at(self.blk, r, BLOCK, i)
            p = em.math("exp", b.fsub(self.load(ptr), m_use, name="flash.sm"))
            b.store(p, ptr)
            b.store(REDUCE_COMBINE["sum"](em, b.load(self.bsum_p, name="flash.bsum"), p, self.dt), self.bsum_p)
        l_new = b.fadd(b.fmul(b.load(self.l_p(r), name="flash.l", typ=self.ty), alpha, name="flash.l.scaled"),
                       b.load(self.bsum_p, name="flash.bsum"), name="flash.l.new")
        b.store(l_new, self.l_p(r))
        b.store(b.select(live, m_new, m_old, name="flash.m.next"), self.m_p(r))
        with for_range(b, i64(self.fl.row), "flash.w1", guard=False, metadata=self.vec_md()) as j:
            ptr = self.at(self.acc, r, self.fl.row, j)
            b.store(b.fmul(self.load(ptr), alpha, name="flash.a.scaled"), ptr)

    def pv_vectors(self, t0: ir.Value, cnt: ir.Value) -> bool:
        """acc_r[w] += sum_i p_r[i] * V(t0 + i, w) with explicit vectors, one chunk of the
        row at a time with the rows' accumulators in registers across the block's keys
        (each V vector loaded once for all rows), where V is a load contiguous in w and the
        row a whole number of vectors. False: not that shape (nothing emitted)."""
        b, em, fl = self.b, self.em, self.fl
        row = fl.row
        vl = _lanes(row, self.width)
        if vl < 4 or row // vl > 16 or not contiguous(fl.value, self.w, self.dt):
            return False
        vty = ir.VectorType(self.ty, vl)
        v = fl.value
        assert isinstance(v, Load)
        if self.nrows * (row // vl) <= PV_REGS:
            self.pv_all_chunks(t0, cnt, vty, vl, v)
            return True
        regs = [self.ctx.alloca(vty, f"flash.reg{r}") for r in range(self.nrows)]
        for c in range(row // vl):
            base = i64(c * vl)
            ptrs = [self.at(self.acc, r, row, base) for r in range(self.nrows)]
            for reg, ptr in zip(regs, ptrs, strict=True):
                b.store(b.load(ptr, name="flash.accv", typ=vty, align=self.dt.itemsize), reg)
            with for_range(b, cnt, f"flash.pv{c}", guard=True) as i:
                self.bind_key(b.add(t0, i, name=self.key, flags=("nuw", "nsw")))
                em.push({self.w: base}, {self.w: self.w_ext})
                vv = b.load(em.address(v.buffer, [em.emit(ix) for ix in v.indices]), name="flash.v", typ=vty,
                            align=self.dt.itemsize)
                em.pop()
                em.pop()
                for r, reg in enumerate(regs):
                    p = self.load(self.at(self.blk, r, BLOCK, i))
                    one = b.insert_element(ir.Constant(vty, None), p, ir.Constant(ir.IntType(32), 0))
                    pb = b.shuffle_vector(one, ir.Constant(vty, None),
                                          ir.Constant(ir.VectorType(ir.IntType(32), vl), [0] * vl), name="flash.pb")
                    acc = b.load(reg, name="flash.r", typ=vty)
                    prod = b.fmul(pb, vv, name="flash.pv", flags=SUM_FLAGS)
                    b.store(b.fadd(acc, prod, name="flash.acc", flags=SUM_FLAGS), reg)
            for reg, ptr in zip(regs, ptrs, strict=True):
                b.store(b.load(reg, name="flash.r", typ=vty), ptr, align=self.dt.itemsize)
        return True

    def pv_all_chunks(self, t0: ir.Value, cnt: ir.Value, vty: ir.VectorType, vl: int, v: Load) -> None:
        """pv_vectors with every row's whole accumulator row in registers across the block's
        keys: per key, the row's V vectors loaded once and one FMA per (row, chunk), all of
        them independent (chunk by chunk, each row's FMAs wait on the previous key's)."""
        b, em, fl = self.b, self.em, self.fl
        row = fl.row
        chunks = row // vl
        regs = [[self.ctx.alloca(vty, f"flash.reg{r}.{c}") for c in range(chunks)] for r in range(self.nrows)]
        for r in range(self.nrows):
            for c in range(chunks):
                ptr = self.at(self.acc, r, row, i64(c * vl))
                b.store(b.load(ptr, name="flash.accv", typ=vty, align=self.dt.itemsize), regs[r][c])
        with for_range(b, cnt, "flash.pv", guard=True) as i:
            self.bind_key(b.add(t0, i, name=self.key, flags=("nuw", "nsw")))
            vvs = []
            for c in range(chunks):
                em.push({self.w: i64(c * vl)}, {self.w: self.w_ext})
                vvs.append(b.load(em.address(v.buffer, [em.emit(ix) for ix in v.indices]), name="flash.v", typ=vty,
                                  align=self.dt.itemsize))
                em.pop()
            em.pop()
            for r in range(self.nrows):
                p = self.load(self.at(self.blk, r, BLOCK, i))
                one = b.insert_element(ir.Constant(vty, None), p, ir.Constant(ir.IntType(32), 0))
                pb = b.shuffle_vector(one, ir.Constant(vty, None),
                                      ir.Constant(ir.VectorType(ir.IntType(32), vl), [0] * vl), name="flash.pb")
                for c, vv in enumerate(vvs):
                    acc = b.load(regs[r][c], name="flash.r", typ=vty)
                    prod = b.fmul(pb, vv, name="flash.pv", flags=SUM_FLAGS)
                    b.store(b.fadd(acc, prod, name="flash.acc", flags=SUM_FLAGS),
                            regs[r][c])
        for r in range(self.nrows):
            for c in range(chunks):
                ptr = self.at(self.acc, r, row, i64(c * vl))
                b.store(b.load(regs[r][c], name="flash.r", typ=vty), ptr, align=self.dt.itemsize)

    def block_max(self, r: int | ir.Value, cnt: ir.Value) -> ir.Value:
        """Row r's max score in the block, NaN if one is NaN (as the unfused row max gives):
        maxnum (which skips NaN) and a NaN flag over explicit vectors of the whole block,
        whose lanes past `cnt` hold -inf (a NaN-propagating scalar max waits on every step)."""
        b, vl = self.b, self.width
        with for_range(b, i64(BLOCK), "flash.pad", start=cnt, guard=True) as i:
            b.store(self.neg_inf, self.at(self.blk, r, BLOCK, i))
        vty = ir.VectorType(self.ty, vl)
        bty = ir.VectorType(ir.IntType(1), vl)
        m = self.owner.module
        vname = f"v{vl}{self.ty.intrinsic_name}"  # NOTE: llvmlite's vector types have no intrinsic_name
        maxnum = get_or_declare(m, f"llvm.maxnum.{vname}", ir.FunctionType(vty, [vty, vty]))
        mx, nan = None, None
        for k in range(BLOCK // vl):
            v = b.load(self.at(self.blk, r, BLOCK, i64(k * vl)), name="flash.sv", typ=vty, align=self.dt.itemsize)
            isnan = b.fcmp_unordered("uno", v, v, name="flash.isnan")
            mx = v if mx is None else b.call(maxnum, [mx, v], name="flash.vmax")
            nan = isnan if nan is None else b.or_(nan, isnan, name="flash.nan")
        assert mx is not None and nan is not None
        # nnan: a NaN lane only matters where `any_nan` already picks NaN (without the flag
        # the reduction is a chain of 16 NaN-checked scalar maxes per row and block)
        top = b.call(get_or_declare(m, f"llvm.vector.reduce.fmax.{vname}", ir.FunctionType(self.ty, [vty])), [mx],
                     name="flash.bmax", fastmath=("nnan",))
        any_nan = b.call(get_or_declare(m, f"llvm.vector.reduce.or.v{vl}i1", ir.FunctionType(ir.IntType(1), [bty])),
                         [nan], name="flash.anynan")
        return b.select(any_nan, ir.Constant(self.ty, float("nan")), top, name="flash.bmax")

    def score_group(self, t0: ir.Value, i: ir.Value) -> None:
        """Scores of keys t0+i .. t0+i+GROUP-1 for every row, each as it stands (no dot)."""
        b, em = self.b, self.em
        self.bind_lanes(b.add(t0, i, name="flash.t", flags=("nuw", "nsw")))
        for r, row in enumerate(self.scores):
            for j, sc in enumerate(row):
                b.store(em.emit(sc), self.at(self.blk, r, BLOCK, self.plus(i, j)))
        em.pop()

    def dot_group(self, t0: ir.Value, i: ir.Value) -> None:
        """The raw dots of keys t0+i .. t0+i+GROUP-1 for every row into the block: in one
        pass over the dot's var, each query and key factor loaded once."""
        b, em, fl = self.b, self.em, self.fl
        assert fl.dot is not None
        self.bind_lanes(b.add(t0, i, name="flash.t", flags=("nuw", "nsw")))
        for x in self.keyed:
            em.hoist(x)
        sums = self.vector_dots()
        if sums is None:  # a loop LLVM vectorizes, one horizontal sum per dot
            (e, ext), = fl.dot.vars
            for row in self.dots:
                for p in row:
                    b.store(self.zero, p)
            with for_range(b, em.emit(ext), e.name, guard=True) as ei:
                em.push({e.name: ei}, {e.name: ext})
                qs = [em.emit(q) for q in self.query]
                ks = [em.emit(x) for x in self.keyed]
                for q, row in zip(qs, self.dots, strict=True):
                    for k, p in zip(ks, row, strict=True):
                        prod = b.fmul(q, k, name="flash.qk", flags=SUM_FLAGS)
                        b.store(b.fadd(self.load(p), prod, name="flash.dot", flags=SUM_FLAGS), p)
                em.pop()
            sums = [[self.load(p) for p in row] for row in self.dots]
        for r, row in enumerate(sums):
            for j, d in enumerate(row):
                b.store(d, self.at(self.blk, r, BLOCK, self.plus(i, j)))
        em.pop()

    def vector_dots(self) -> list[list[ir.Value]] | None:
        """The group's dots with explicit vectors where both factors are loads contiguous in
        the dot's var (static extent, a multiple of the vector width): products summed per
        lane, then all dots' lanes reduced together by halving shuffles (log2(width) steps
        for the whole group instead of a horizontal sum per dot). None: not that shape."""
        b, em, fl = self.b, self.em, self.fl
        assert fl.dot is not None
        (e, ext), = fl.dot.vars
        vl = _lanes(ext.value, self.width) if isinstance(ext, Const) else 0
        if not (isinstance(ext, Const) and vl >= 4 and 0 < ext.value // vl <= 16):
            return None
        loads = [*self.query, *self.keyed]
        if not all(contiguous(x, e.name, self.dt) for x in loads):
            return None
        vty = ir.VectorType(self.ty, vl)
        acc: list[list[ir.Value | None]] = [[None] * GROUP for _ in range(self.nrows)]
        for k in range(ext.value // vl):
            em.push({e.name: i64(k * vl)}, {e.name: ext})
            vecs = []
            for x in loads:
                assert isinstance(x, Load)
                ptr = em.address(x.buffer, [em.emit(ix) for ix in x.indices])
                vecs.append(b.load(ptr, name="flash.vec", typ=vty, align=self.dt.itemsize))
            em.pop()
            qs, ks = vecs[:self.nrows], vecs[self.nrows:]
            for r, q in enumerate(qs):
                for j, kv in enumerate(ks):
                    prod = b.fmul(q, kv, name="flash.qk", flags=SUM_FLAGS)
                    a = acc[r][j]
                    acc[r][j] = prod if a is None else b.fadd(a, prod, name="flash.dot", flags=SUM_FLAGS)
        flat = [(r, j, v) for r, row in enumerate(acc) for j, v in enumerate(row)]
        return _reduce_lanes(b, [v for *_, v in flat], [(r, j) for r, j, _ in flat], vl, self.nrows)

    def dot_one(self, t0: ir.Value, i: ir.Value) -> None:
        b, em = self.b, self.em
        self.bind_key(b.add(t0, i, name=self.key, flags=("nuw", "nsw")))

        def row(r: int | ir.Value) -> None:
            looped = self.bind_row(r)
            b.store(em.emit(self.fl.dot if looped else self.dot1[r]), self.at(self.blk, r, BLOCK, i))  # type: ignore[arg-type,index]
            if looped:
                em.pop()
        self.each_row(row)
        em.pop()

    def bind_row(self, r: int | ir.Value) -> bool:
        """For `each_row`'s loop variable r: a frame binding the rows var itself to s0 + r
        (the unrolled rows' own vars are bound by `run`), so that the unrenamed expressions
        apply; True where pushed (the caller pops)."""
        if isinstance(r, int):
            return False
        rv = self.fl.rows_var
        self.em.push({rv: self.b.add(self.s0, r, name="flash.row.s", flags=("nuw", "nsw"))},  # type: ignore[dict-item]
                     {rv: self.c.extents[-2]})  # type: ignore[dict-item]
        return True

    def epilogue(self, t0: ir.Value, cnt: ir.Value) -> None:
        """blk[r][i] = the score of row r at key t0+i, given its raw dot there."""
        b, em = self.b, self.em
        fl = self.fl

        def row(r: int | ir.Value) -> None:
            looped = self.bind_row(r)
            dot, score = (fl.dot, fl.score) if looped else (self.dot1[r], self.score1[r])  # type: ignore[index]
            if looped:  # what no key changes, once per row and block
                em.hoist(score)
            with for_range(b, cnt, "flash.epi", guard=True, metadata=self.vec_md()) as i:
                self.bind_key(b.add(t0, i, name=self.key, flags=("nuw", "nsw")))
                ptr = self.at(self.blk, r, BLOCK, i)
                em.frames[-1].cache[dot] = self.load(ptr)
                b.store(em.emit(score), ptr)
                em.pop()
            if looped:
                em.pop()
        self.each_row(row)

    def score_one(self, t0: ir.Value, i: ir.Value) -> None:
        b, em = self.b, self.em
        self.bind_key(b.add(t0, i, name=self.key, flags=("nuw", "nsw")))
        for r, sc in enumerate(self.score1):
            b.store(em.emit(sc), self.at(self.blk, r, BLOCK, i))
        em.pop()

    def pv_group(self, t0: ir.Value, i: ir.Value) -> None:
        """acc_r[w] += sum over the group's keys of p_r * V(key, w), every row in one pass."""
        b, em = self.b, self.em
        ps = [[self.load(self.at(self.blk, r, BLOCK, self.plus(i, j))) for j in range(GROUP)]
              for r in range(self.nrows)]
        self.bind_lanes(b.add(t0, i, name="flash.t", flags=("nuw", "nsw")))
        for x in self.values:
            em.hoist(x)
        self.accumulate(ps, self.values)
        em.pop()

    def pv_one(self, t0: ir.Value, i: ir.Value) -> None:
        b, em = self.b, self.em
        ps = [[self.load(self.at(self.blk, r, BLOCK, i))] for r in range(self.nrows)]
        self.bind_key(b.add(t0, i, name=self.key, flags=("nuw", "nsw")))
        em.hoist(self.fl.value)
        self.accumulate(ps, [self.fl.value])
        em.pop()

    def accumulate(self, ps: list[list[ir.Value]], values: list[Expr]) -> None:
        """One vectorizable pass over w: acc_r[w] += sum_j ps[r][j] * values[j] at w."""
        b, em, row = self.b, self.em, self.fl.row
        with for_range(b, i64(row), "flash.w2", guard=False, metadata=self.vec_md()) as j:
            em.push({self.w: j}, {self.w: self.w_ext})
            xs = [em.emit(x) for x in values]
            for r, pr in enumerate(ps):
                ptr = self.at(self.acc, r, row, j)
                a = self.load(ptr)
                for p, x in zip(pr, xs, strict=True):
                    a = b.fadd(a, b.fmul(p, x, name="flash.pv", flags=SUM_FLAGS), name="flash.acc", flags=SUM_FLAGS)
                b.store(a, ptr)
            em.pop()


def _lanes(n: int, width: int) -> int:
    """The widest vector of at most `width` lanes (a power of two) that divides `n`: a head of
    8 under 16-lane vectors still runs on explicit 8-lane vectors (0: none of 4 or more)."""
    vl = width
    while vl >= 4 and n % vl:
        vl //= 2
    return vl if vl >= 4 and n > 0 else 0


def _reduce_lanes(b: ir.IRBuilder, vecs: list[ir.Value], labels: list, width: int, nrows: int) -> list[list[ir.Value]]:
    """The lane sums of `vecs` (each `width` lanes), as [row][lane of the group]: pairs of
    vectors are folded into one by adding their halves (each vector's segments halve in
    width and the pair's segments share one vector) until every segment is one lane."""
    segs = [[lab] for lab in labels]  # per vector: its segments' labels, in lane order
    seg_w = width
    while len(vecs) > 1 and seg_w > 1:
        half = seg_w // 2
        nxt, nsegs = [], []
        for k in range(0, len(vecs) - 1, 2):
            a, c = vecs[k], vecs[k + 1]
            lo = [s * seg_w + x for s in range(len(segs[k])) for x in range(half)] + \
                 [width + s * seg_w + x for s in range(len(segs[k + 1])) for x in range(half)]
            hi = [i + half for i in lo]
            mlo = ir.Constant(ir.VectorType(ir.IntType(32), width), lo)
            mhi = ir.Constant(ir.VectorType(ir.IntType(32), width), hi)
            nxt.append(b.fadd(b.shuffle_vector(a, c, mlo, name="flash.lo"),
                              b.shuffle_vector(a, c, mhi, name="flash.hi"), name="flash.fold", flags=SUM_FLAGS))
            nsegs.append(segs[k] + segs[k + 1])
        if len(vecs) % 2:  # an odd one out waits for the next round, folded on itself
            a = vecs[-1]
            n = len(segs[-1])
            lo = [s * seg_w + x for s in range(n) for x in range(half)]
            lo += lo  # the upper half repeats (ignored)
            hi = [i + half for i in lo]
            nxt.append(b.fadd(b.shuffle_vector(a, a, ir.Constant(ir.VectorType(ir.IntType(32), width), lo)),
                              b.shuffle_vector(a, a, ir.Constant(ir.VectorType(ir.IntType(32), width), hi)),
                              name="flash.fold", flags=SUM_FLAGS))
            nsegs.append(segs[-1] + [None] * n)  # the repeated half's labels are unused
        vecs, segs, seg_w = nxt, nsegs, half
    out: dict = {}
    for v, labs in zip(vecs, segs, strict=True):
        for s_i, lab in enumerate(labs):
            if lab is None:
                continue
            total = None
            for x in range(seg_w):  # what is left of a segment (one lane, unless few dots)
                lane = b.extract_element(v, ir.Constant(ir.IntType(32), s_i * seg_w + x), name="flash.sum")
                total = lane if total is None else b.fadd(total, lane, name="flash.sum", flags=SUM_FLAGS)
            out[lab] = total
    return [[out[(r, j)] for j in range(GROUP)] for r in range(nrows)]
