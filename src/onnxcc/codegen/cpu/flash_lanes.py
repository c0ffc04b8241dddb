"""Fused attention with the query rows in vector lanes: narrow heads over long key rows.

codegen/cpu/flash.py runs four query rows at a time with each row's dot products along the
head dim in vector lanes: a head of 8 or 16 fills at most one vector, so every score costs a
horizontal sum of shuffles and the softmax steps run per row. Here a block of LANES query
rows (one vector, 16 f32 lanes on AVX-512) shares every instruction instead:

    QT[e][r] = Q(row s0 + r, e)                            once per row block (transposed)
    m[r] = -inf; l[r] = 0; acc[w][r] = 0
    for each block of BLOCK keys t0 .. t0 + cnt - 1:
        s[j][r] = sum_e QT[e][r] * K(t0 + j, e)             K's scalars broadcast over rows
        s[j][r] = X(row, key) given the dot s[j][r]         the score's scale, masks, causal
        mx[r] = max(m[r], max_j s[j][r])                     maxnum: elementwise, no shuffles
        live = mx != -inf;  alpha = live ? exp(m - mx) : 1;  use = live ? mx : 0
        l *= alpha;  acc[w] *= alpha;  m = live ? mx : m
        p = exp(s[j] - use);  l += p;  acc[w] += p * V(t0 + j, w)   one exp per score
    out(row s0 + r, w) = body with the core := acc[w][r] / select(l[r] == 0, 1, l[r])

The dots and P @ V are explicit vectors of the LANES rows (the query tile and the row
sums and accumulators in registers across the block's keys, K's and V's scalars
broadcast): D fused multiply-adds per LANES scores each, as in a GEMM. The rest (the
score's epilogue through the expression emitter, the rescale, the exp) are loops over the
rows with vectorize metadata, which the vectorizer widens into one vector per key.
Rows past the last whole block go row by row through flash.py (a decoder step's one query
row would fill one lane of sixteen). Semantics are flash.py's (kernel/flash.py's module
doc): a block whose running max is still -inf adds exp(-inf) = 0; a NaN score is skipped
by maxnum but reaches its row's sum and accumulator through `p`, so the row is NaN as
unfused. Causal attention stops the keys at the block's last row's limit where
flash_guard.py proves the keys past it add nothing, else visits every key.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir

from onnxcc.kernel.expr import Binary, Expr, Load, Var, free_vars

from ..llvm.exprs import ExprEmitter, compute_type
from ..llvm.helpers import PTR, for_range, get_or_declare, i64, loop_metadata

if TYPE_CHECKING:
    from onnxcc.kernel.program import Compute

    from .emit import FnCtx, KernelEmitter, NestPlan
    from .flash_guard import CausalGuard

BLOCK = 64
"""keys per block: the block's [BLOCK x LANES] scores stay in L1 between the steps"""
SUM_FLAGS = ("reassoc", "contract", "nsz")
"""the dot's and the sums' adds may be reordered and fused, as any reduction's are (the
fused-attention kernels' sums: flash.py, flash_tiles.py)"""
CHAINS = 4
"""partial sums per dot product (the adds' latency hidden behind each other)"""
CHAIN_FLAGS = ("contract", "nsz")
"""the dot's partial sums: products fused into the adds but not reassociated, which would
let LLVM fold the CHAINS partial sums back into one chain of D dependent FMAs"""


class LaneRows:
    """The row blocks of one fused compute from its rows var on (module doc)."""

    def __init__(self, owner: KernelEmitter, em: ExprEmitter, ctx: FnCtx, c: Compute, plan: NestPlan,
                 guard: CausalGuard | None, vectors: int = 1):
        """`vectors`: row vectors per block (flash_tiles.py runs two)."""
        fl = plan.flash
        assert fl is not None and fl.dot is not None and fl.rows_var is not None
        self.owner, self.em, self.ctx, self.c, self.fl, self.b = owner, em, ctx, c, fl, ctx.b
        self.guard = guard
        self.dt = fl.core.dtype
        self.ty = ty = compute_type(self.dt)
        self.lanes = plan.vector_width or 8
        self.nrows = n = self.lanes * vectors  # query rows per block
        self.rv, self.key, self.w = fl.rows_var, fl.key.name, c.var_names[-1]
        (e, ext), = fl.dot.vars
        self.e, self.e_ext, self.d = e.name, ext, int(ext.value)  # type: ignore[attr-defined]
        self.dv = fl.row

        def arr(size: int, name: str) -> ir.Value:
            a = ctx.alloca(ir.ArrayType(ty, size), name)
            a.type = PTR  # NOTE: llvmlite types allocas as typed pointers; the IR is opaque
            return a

        self.qt, self.s = arr(self.d * n, "lanes.qt"), arr(BLOCK * n, "lanes.s")
        self.acc, self.m, self.l = arr(self.dv * n, "lanes.acc"), arr(n, "lanes.m"), arr(n, "lanes.l")
        self.mx, self.use = arr(n, "lanes.mx"), arr(n, "lanes.use")
        self.neg_inf, self.zero, self.one = (ir.Constant(ty, x) for x in (float("-inf"), 0.0, 1.0))
        self.epilogue = fl.score != fl.dot
        self.vty = ir.VectorType(ty, self.lanes)
        # acc[w]..., l, and the running max while the dots are taken
        self.regs = [ctx.alloca(self.vty, f"lanes.reg{w}") for w in range(self.dv + 2)]

    # ---- helpers ---------------------------------------------------------------------------
    def slot(self, arr: ir.Value, i: ir.Value | int, r: ir.Value) -> ir.Value:
        """Element [i][r] of a [* x nrows] stack array."""
        b = self.b
        base = i64(i * self.nrows) if isinstance(i, int) else b.mul(i, i64(self.nrows), name="lanes.ib",
                                                                      flags=("nuw", "nsw"))
        ix = b.add(base, r, name="lanes.ix", flags=("nuw", "nsw"))
        return b.gep(arr, [ix], inbounds=True, name="lanes.slot", source_etype=self.ty)

    def load(self, ptr: ir.Value) -> ir.Value:
        return self.b.load(ptr, name="lanes.ld", typ=self.ty)

    def rows(self, body, name: str) -> None:
        """`body(r)` for r < nrows, the loop the vectorizer widens into vectors of LANES."""
        md = loop_metadata(self.owner.module, self.lanes, None, no_unroll=True)
        with for_range(self.b, i64(self.nrows), name, guard=False, metadata=md) as r:
            body(r)

    def row_of(self, r: ir.Value) -> ir.Value:
        """The query row lane r stands for."""
        return self.b.add(self.s0, r, name="lanes.row", flags=("nuw", "nsw"))

    def emit_at(self, e: Expr, binds: dict[str, ir.Value]) -> ir.Value:
        """`e` with `binds` pushed as a frame of their own."""
        self.push(binds)
        v = self.em.emit(e)
        self.em.pop()
        return v

    def push(self, binds: dict[str, ir.Value]) -> None:
        """A frame of the emitter binding some of the head, key, value column and rows vars."""
        exts = {self.e: self.e_ext, self.key: self.fl.kv_len, self.w: self.c.extents[-1],
                self.rv: self.c.extents[-2]}
        self.em.push(binds, {k: exts[k] for k in binds})

    # ---- the row blocks --------------------------------------------------------------------
    def run(self, vals: dict[str, ir.Value], rows: tuple[ir.Value, ir.Value] | None = None) -> ir.Value:
        """The whole blocks of nrows rows of [start, end) (`rows`; None: all rows); returns
        the row after the last one done (the caller runs the rest row by row: a decoder's one
        new row would fill one lane of sixteen)."""
        b, em, n = self.b, self.em, self.nrows
        self.vals = vals
        start, end = rows if rows is not None else (i64(0), self.ctx.dim(self.c.extents[-2]))
        span = b.sub(end, start, name="lanes.span")
        nrb = b.udiv(span, i64(n), name="lanes.rowblocks")
        kv = em.emit(self.fl.kv_len)
        with for_range(b, nrb, "lanes.rb", guard=True) as rb:
            off = b.mul(rb, i64(n), name="lanes.s0.off", flags=("nuw", "nsw"))
            self.s0 = b.add(start, off, name="lanes.s0", flags=("nuw", "nsw"))
            self.last = b.add(self.s0, i64(n - 1), name="lanes.last", flags=("nuw", "nsw"))
            self.block_rows(kv)
        return b.add(start, b.mul(nrb, i64(n), name="lanes.done.off", flags=("nuw", "nsw")), name="lanes.done")

    def block_rows(self, kv: ir.Value) -> None:
        b, fl, g = self.b, self.fl, self.guard
        self.load_queries()
        if g is None:
            self.keys(kv)
        else:  # keys past the last row's limit add nothing where the guard proves it
            lim = b.add(self.emit_at(fl.causal, {self.rv: self.last}), i64(1), name="lanes.causal.end")  # type: ignore[arg-type]
            n = b.select(b.icmp_signed("<", lim, kv), lim, kv, name="lanes.causal.n")
            n = b.select(b.icmp_signed("<", n, i64(0)), i64(0), n, name="lanes.causal.n0")
            mty = ir.VectorType(self.ty, self.nrows)  # every row's max at once
            g.run(n, kv, g.skip_ok(n, self.query_sum(g)), self.keys,
                  lambda: g.rows_ok(b.load(self.vec(self.m, 0), name="lanes.m.end", typ=mty, align=4)))
        self.finish()

    def query_sum(self, g: CausalGuard) -> ir.Value | None:
        """The block's rows' query norms summed (the guard's bound on their dots)."""
        qn = g.query_norm()
        if qn is None:
            return None
        b = self.b
        acc = self.ctx.alloca(self.ty, "lanes.qsum")
        b.store(self.zero, acc)
        with for_range(b, i64(self.nrows), "lanes.qn", guard=False) as r:
            b.store(b.fadd(b.load(acc), self.emit_at(qn, {self.rv: self.row_of(r)}), name="lanes.qsum"), acc)
        return b.load(acc, name="lanes.qsum")

    def keys(self, n: ir.Value) -> None:
        """The rows' state from the start, then their keys below n, block by block."""
        b = self.b
        self.rows(self.start_rows, "lanes.init")
        nblk = b.sdiv(b.add(n, i64(BLOCK - 1), name="lanes.n.up"), i64(BLOCK), name="lanes.blocks")
        with for_range(b, nblk, "lanes.kb", guard=True) as kb:
            t0 = b.mul(kb, i64(BLOCK), name="lanes.t0", flags=("nuw", "nsw"))
            left = b.sub(n, t0, name="lanes.left", flags=("nsw",))
            cnt = b.select(b.icmp_signed("<", left, i64(BLOCK)), left, i64(BLOCK), name="lanes.cnt")
            self.block(t0, cnt)

    def load_queries(self) -> None:
        """QT[e][r]: the block's query rows transposed, once per row block."""
        b = self.b
        with for_range(b, i64(self.nrows), "lanes.q", guard=False) as r:
            row = self.row_of(r)
            for k in range(self.d):
                q = self.emit_at(self.fl.query, {self.rv: row, self.e: i64(k)})  # type: ignore[arg-type]
                b.store(q, self.slot(self.qt, k, r))

    def start_rows(self, r: ir.Value) -> None:
        b = self.b
        b.store(self.neg_inf, self.slot(self.m, 0, r))
        b.store(self.zero, self.slot(self.l, 0, r))
        for w in range(self.dv):
            b.store(self.zero, self.slot(self.acc, w, r))

    def block(self, t0: ir.Value, cnt: ir.Value) -> None:
        """One block of `cnt` keys from t0: two passes, the scores (with the block max) and,
        after the rescale, the probabilities into the sums and accumulators."""
        b, em, fl = self.b, self.em, self.fl
        self.dots(t0, cnt)
        if self.epilogue:  # the rest of the score (scale, masks, causal) per (key, row), given its dot
            # NOTE: a loop of its own, reading the dot from the block: a mask read along the
            # rows has a symbolic stride, for which the vectorizer keeps a scalar copy of the
            # loop; with the dot in it, that copy summed each dot across the lanes (bert 3x)
            self.rows(lambda r: b.store(self.load(self.slot(self.m, 0, r)), self.slot(self.mx, 0, r)), "lanes.mx0")
            with for_range(b, cnt, "lanes.ep", guard=True) as j:
                t = b.add(t0, j, name="lanes.t", flags=("nuw", "nsw"))

                def score(r: ir.Value) -> None:
                    sp = self.slot(self.s, j, r)
                    em.push({self.key: t, self.rv: self.row_of(r)},
                            {self.key: fl.kv_len, self.rv: self.c.extents[-2]})
                    em.frames[-1].cache[fl.dot] = self.load(sp)  # type: ignore[index]
                    x = em.emit(fl.score)
                    em.pop()
                    b.store(x, sp)
                    mp = self.slot(self.mx, 0, r)
                    b.store(self.maxnum(self.load(mp), x), mp)
                self.rows(score, "lanes.er")
        self.rows(self.rescale, "lanes.rs")
        # p = exp(s - use) in place: one exp per score, the vectorizer's loop over the rows
        with for_range(b, cnt, "lanes.p", guard=True) as j:
            def prob(r: ir.Value) -> None:
                sp = self.slot(self.s, j, r)
                x = b.fsub(self.load(sp), self.load(self.slot(self.use, 0, r)), name="lanes.sm")
                b.store(em.math("exp", x), sp)
            self.rows(prob, "lanes.pr")
        self.accumulate(t0, cnt)

    def dots(self, t0: ir.Value, cnt: ir.Value) -> None:
        """s[j] = the raw dots of the LANES rows with key t0 + j, explicit vectors: the query
        tile in registers, each of K's D scalars broadcast, CHAINS partial sums (one chain of
        D dependent adds per key would wait on the add's latency). Without an epilogue the
        block max is taken here too, into mx."""
        b, fl, vty = self.b, self.fl, self.vty
        qs = [b.load(self.vec(self.qt, k), name="lanes.q", typ=vty, align=4) for k in range(self.d)]
        mreg = self.regs[-1]
        if not self.epilogue:
            b.store(b.load(self.vec(self.m, 0), name="lanes.m", typ=vty, align=4), mreg)
        with for_range(b, cnt, "lanes.dot", guard=True) as j:
            t = b.add(t0, j, name="lanes.t", flags=("nuw", "nsw"))
            part: list = [None] * min(CHAINS, self.d)
            for k, q in enumerate(qs):
                kv = self.splat(self.emit_at(fl.keyed, {self.key: t, self.e: i64(k)}))  # type: ignore[arg-type]
                prod = b.fmul(q, kv, name="lanes.qk", flags=CHAIN_FLAGS)
                c = k % len(part)
                part[c] = prod if part[c] is None else b.fadd(part[c], prod, name="lanes.dot", flags=CHAIN_FLAGS)
            while len(part) > 1:
                part = [b.fadd(part[i], part[i + 1], name="lanes.dots", flags=CHAIN_FLAGS) if i + 1 < len(part)
                        else part[i] for i in range(0, len(part), 2)]
            b.store(part[0], self.vec(self.s, j), align=4)
            if not self.epilogue:
                b.store(self.maxnum(b.load(mreg, name="lanes.mx", typ=vty), part[0]), mreg)
        if not self.epilogue:
            b.store(b.load(mreg, name="lanes.mx", typ=vty), self.vec(self.mx, 0), align=4)

    def vec(self, arr: ir.Value, i: int | ir.Value, h: int = 0) -> ir.Value:
        """The pointer to the h-th vector of LANES in row i of a [* x nrows] stack array."""
        return self.slot(arr, i, i64(h * self.lanes))

    def accumulate(self, t0: ir.Value, cnt: ir.Value) -> None:
        """l += p and acc[w] += p * V(key, w) over the block's keys with explicit vectors of
        the LANES rows, the sums in registers across the keys (promoted allocas; stores to
        the stack arrays every key would bound the loop)."""
        b, fl, vty = self.b, self.fl, self.vty
        regs = self.regs
        for w in range(self.dv):
            b.store(b.load(self.vec(self.acc, w), name="lanes.accv", typ=vty, align=4), regs[w])
        lreg = regs[self.dv]
        b.store(b.load(self.vec(self.l, 0), name="lanes.lv", typ=vty, align=4), lreg)
        with for_range(b, cnt, "lanes.pv", guard=True) as j:
            t = b.add(t0, j, name="lanes.t", flags=("nuw", "nsw"))
            p = b.load(self.vec(self.s, j), name="lanes.p", typ=vty, align=4)
            b.store(b.fadd(b.load(lreg, name="lanes.l", typ=vty), p, name="lanes.l.new", flags=SUM_FLAGS), lreg)
            for w in range(self.dv):
                v = self.emit_at(fl.value, {self.key: t, self.w: i64(w)})
                vb = self.splat(v)
                a = b.load(regs[w], name="lanes.a", typ=vty)
                prod = b.fmul(p, vb, name="lanes.pv", flags=SUM_FLAGS)
                b.store(b.fadd(a, prod, name="lanes.acc", flags=SUM_FLAGS), regs[w])
        for w in range(self.dv):
            b.store(b.load(regs[w], name="lanes.a", typ=vty), self.vec(self.acc, w), align=4)
        b.store(b.load(lreg, name="lanes.l", typ=vty), self.vec(self.l, 0), align=4)

    def splat(self, x: ir.Value) -> ir.Value:
        """x in every lane."""
        b, n = self.b, self.lanes
        one = b.insert_element(ir.Constant(self.vty, None), x, ir.Constant(ir.IntType(32), 0), name="lanes.ins")
        zeros = ir.Constant(ir.VectorType(ir.IntType(32), n), [0] * n)
        return b.shuffle_vector(one, ir.Constant(self.vty, None), zeros, name="lanes.splat")

    def maxnum(self, a: ir.Value, x: ir.Value) -> ir.Value:
        """max(a, x), x skipped where NaN (its `p` carries the NaN into the row)."""
        ty = a.type
        tag = f"v{self.lanes}{self.ty.intrinsic_name}" if isinstance(ty, ir.VectorType) else self.ty.intrinsic_name
        fn = get_or_declare(self.owner.module, f"llvm.maxnum.{tag}", ir.FunctionType(ty, [ty, ty]))
        return self.b.call(fn, [a, x], name="lanes.max")

    def rescale(self, r: ir.Value) -> None:
        """After the block max: alpha, the exp's offset, the running max, l and acc rescaled."""
        b, em = self.b, self.em
        m_old = self.load(self.slot(self.m, 0, r))
        m_new = self.load(self.slot(self.mx, 0, r))
        live = b.fcmp_ordered("!=", m_new, self.neg_inf, name="lanes.live")
        alpha = b.select(live, em.math("exp", b.fsub(m_old, m_new, name="lanes.dm")), self.one, name="lanes.alpha")
        b.store(b.select(live, m_new, self.zero, name="lanes.use"), self.slot(self.use, 0, r))
        b.store(b.select(live, m_new, m_old, name="lanes.m.next"), self.slot(self.m, 0, r))
        lp = self.slot(self.l, 0, r)
        b.store(b.fmul(self.load(lp), alpha, name="lanes.l.scaled"), lp)
        for w in range(self.dv):
            ap = self.slot(self.acc, w, r)
            b.store(b.fmul(self.load(ap), alpha, name="lanes.a.scaled"), ap)

    def finish(self) -> None:
        """The block's rows: the body with the core := acc[w][r] / l[r]."""
        b, em, c, fl = self.b, self.em, self.c, self.fl
        end = b.add(self.last, i64(1), name="lanes.end", flags=("nuw", "nsw"))
        with for_range(b, end, "lanes.out", start=self.s0, guard=False) as s:
            r = b.sub(s, self.s0, name="lanes.r", flags=("nuw", "nsw"))
            total = self.load(self.slot(self.l, 0, r))
            denom = b.select(b.fcmp_ordered("==", total, self.zero, name="lanes.empty"), self.one, total,
                             name="lanes.denom") if fl.guarded else total
            em.push({self.rv: s}, {self.rv: c.extents[-2]})
            em.hoist(fl.without_core(c.body))
            md = loop_metadata(self.owner.module, self.lanes, None)
            with for_range(b, i64(fl.row), self.w, guard=False, metadata=md) as w:
                em.push({self.w: w}, {self.w: c.extents[-1]})
                em.frames[-1].cache[fl.core] = b.fdiv(self.load(self.slot(self.acc, w, r)), denom, name="lanes.y")
                idx = {**self.vals, self.rv: s, self.w: w}
                em.store(c.out, [idx[m] for m in c.var_names], em.emit(c.body))
                em.pop()
            em.pop()


def contiguous(x: Expr, e: str, dt) -> bool:
    """Whether `x` is a load of `dt` whose only index reading `e` is its last, `e` or
    `e + (something free of e)`: consecutive `e` are consecutive elements (flash.py's
    vector loads, flash_tiles.py's row addresses)."""
    if not (isinstance(x, Load) and x.dtype is dt) or not x.indices:
        return False
    if any(e in free_vars(ix) for ix in x.indices[:-1]):
        return False
    last = x.indices[-1]
    if isinstance(last, Var):
        return last.name == e
    return isinstance(last, Binary) and last.op == "add" and any(
        isinstance(side, Var) and side.name == e and e not in free_vars(other)
        for side, other in ((last.a, last.b), (last.b, last.a)))
