"""Fused attention for wide heads with the query rows in vector lanes, as register tiles.

flash.py runs four query rows at a time with each dot product along the head in vector
lanes: every score then costs a horizontal sum (~45 shuffles and adds per 64 FMAs at a
head of 64). flash_lanes.py puts the rows in lanes instead, but keeps one vector of rows
against the whole head in registers, which spills past a head of 16. Here a block of two
vectors of rows (32 f32 on AVX-512) goes through flash_lanes.py's steps (the transposed
query tile, the score's epilogue, the lane-wise softmax, the output), with the two
products as GEMM register tiles over the block's keys:

    Q @ K^T: per group of KEYS keys, for each head element e: the rows' two query vectors
             QT[e] and KEYS broadcast K(t + j, e) give 2 x KEYS FMAs into 2 x KEYS
             accumulators (one chain per score, no horizontal sums; a loop over the head)
    P @ V:   per chunk of COLS value columns (a loop over the chunks): the chunk's 2 x COLS
             accumulator vectors in registers across the block's keys, each key's two P
             vectors and COLS broadcast V(t, w) give 2 x COLS FMAs

Both keep 16 accumulators, 2 loads and 8 broadcasts per 16 FMAs (FMA-bound; 32 zmm
registers). Keys left over after the whole groups take CHAINS chains of their own per
vector. The block's rescale of the accumulators is applied as P @ V loads them into
registers, and they are zeroed with explicit vectors, so no loop over the rows touches
the whole [value head x rows] array.

What LLVM gets is kept small: every step over the head, the value chunks or the query
transpose is a loop (STEP, CHAINS or QROW elements an iteration), not a copy per element,
the explicit-vector loops are marked for the vectorizer to skip, and a contiguous Q, K or
V row is addressed once per row. Unrolled per element, a head of 64 made the transformer's
attention function four times its size (7,700 instructions against 1,900 without this
path) and its -O3 0.8 s longer (the vectorizer's and load elimination's dependence checks
over hundreds of accesses, GVN), for the same inner loops.
Semantics, the causal guard and the rows left over (row by row through flash.py) are
flash_lanes.py's.
"""

from __future__ import annotations

from llvmlite import ir

from onnxcc.ir.types import DType
from onnxcc.kernel.expr import Binary, Const, Expr, Load, free_vars
from onnxcc.kernel.flash import Flash

from ..llvm.helpers import I32, PTR, VOID, for_range, get_or_declare, i64, scalar_loop_metadata
from .flash_lanes import CHAIN_FLAGS, CHAINS, SUM_FLAGS, LaneRows, contiguous

VECTORS = 2
"""row vectors per block: the query tile's two loads per head element serve KEYS FMAs each"""
KEYS = 8
"""keys per Q @ K^T register tile (2 x 8 accumulators and their broadcasts in 32 registers)"""
STEP = 4
"""head elements per iteration of the Q @ K^T tile's loop over the head"""
COLS = 8
"""value columns per P @ V register tile"""
QROW = 16
"""query elements per iteration of the loop that transposes a query row (rolled: a whole
row of stores is one more block of accesses for the vectorizer's checks; one a step: the
loop's own increment and branch per store)"""
MAX_HEAD = 128
"""the widest head run this way: the transposed query tile (head x 32 rows) stays in L1"""


def score_scale(fl: Flash, row_vars: set[str]) -> tuple[str, Expr] | None:
    """(op, c) where the score is the dot times or over c (`dot * c`, `c * dot`, `dot / c`)
    and c reads none of `row_vars` (the key, rows, head and value vars): the exporters'
    1 / sqrt(head) scale, which `TileRows.keep` applies to each dot vector in registers
    instead of a pass of the expression emitter over the block (a store and reload of
    every score and of the running max per key). None: any other score."""
    x, dot = fl.score, fl.dot
    if dot is None or fl.causal is not None or not isinstance(x, Binary) or x.op not in ("mul", "div"):
        return None
    if x.a == dot:
        c = x.b
    elif x.op == "mul" and x.b == dot:
        c = x.a
    else:
        return None
    return None if free_vars(c) & row_vars else (x.op, c)


def tiles_fit(fl: Flash, width: int | None) -> bool:
    """Whether a fused core runs here: f32, rows that share keys, a static dot head and a
    value row that are multiples of 16 up to MAX_HEAD, and 16-lane vectors (narrower ones
    would halve the tile and were not measured)."""
    if fl.rows_var is None or fl.dot is None or fl.query is None or fl.keyed is None or width != 16:
        return False
    if fl.core.dtype is not DType.f32:
        return False
    (_, ext), = fl.dot.vars
    if not isinstance(ext, Const):
        return False
    d = int(ext.value)
    return 0 < d <= MAX_HEAD and d % 16 == 0 and 0 < fl.row <= MAX_HEAD and fl.row % 16 == 0


class TileRows(LaneRows):
    """Blocks of VECTORS x LANES query rows (module doc)."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw, vectors=VECTORS)
        self.alpha = self.ctx.alloca(ir.ArrayType(self.ty, self.nrows), "tiles.alpha")
        self.alpha.type = PTR  # NOTE: llvmlite types allocas as typed pointers; the IR is opaque
        self.scale = score_scale(self.fl, {self.key, self.rv, self.e, self.w})
        if self.scale is not None:  # the whole epilogue is the scale: keep applies it
            self.epilogue = False

    def dots(self, t0: ir.Value, cnt: ir.Value) -> None:
        """s[j] = the raw dots of the block's rows with key t0 + j (module doc); without an
        epilogue the block max is taken here too, into mx."""
        b = self.b
        self.mregs = [self.ctx.alloca(self.vty, f"tiles.mx{h}") for h in range(VECTORS)]
        if self.scale is not None:
            self.scale_v = self.splat(self.emit_at(self.scale[1], {}))
        if not self.epilogue:
            for h, reg in enumerate(self.mregs):
                b.store(b.load(self.vec(self.m, 0, h), name="tiles.m", typ=self.vty, align=4), reg)
        ng = b.udiv(cnt, i64(KEYS), name="tiles.groups")
        with for_range(b, ng, "tiles.g", guard=True) as g:
            j0 = b.mul(g, i64(KEYS), name="tiles.j0", flags=("nuw", "nsw"))
            self.dot_tile(t0, j0)
        done = b.mul(ng, i64(KEYS), name="tiles.gdone", flags=("nuw", "nsw"))
        with for_range(b, cnt, "tiles.one", start=done, guard=True) as j:
            self.dot_one(t0, j)
        if not self.epilogue:
            for h, reg in enumerate(self.mregs):
                b.store(b.load(reg, name="tiles.mx", typ=self.vty), self.vec(self.mx, 0, h), align=4)

    def keep(self, j: ir.Value, h: int, x: ir.Value) -> None:
        """The raw dot vector x of key j, half h, into the block (and the max)."""
        b = self.b
        if self.scale is not None:  # the score's own op (exprs.py's FLOAT_BINARY) on the whole vector
            x = (b.fdiv(x, self.scale_v, name="tiles.score") if self.scale[0] == "div"
                 else b.fmul(x, self.scale_v, name="tiles.score", flags=("contract",)))
        b.store(x, self.vec(self.s, j, h), align=4)
        if not self.epilogue:
            reg = self.mregs[h]
            b.store(self.maxnum(b.load(reg, name="tiles.mx", typ=self.vty), x), reg)

    def row_start(self, x: Expr, var: str, binds: dict[str, ir.Value]) -> ir.Value | None:
        """The address of `x` at `var` = 0 under `binds` where `x` is a load contiguous along
        `var` (Q's, K's and V's rows: one address per row, its elements a GEP each), else
        None (`elem` emits the whole expression per element)."""
        if not contiguous(x, var, self.dt):
            return None
        assert isinstance(x, Load)
        self.push({**binds, var: i64(0)})
        ptr = self.em.address(x.buffer, [self.em.emit(ix) for ix in x.indices])
        self.em.pop()
        return ptr

    def elem(self, x: Expr, var: str, start: ir.Value | None, binds: dict[str, ir.Value],
             k: int | ir.Value) -> ir.Value:
        """`x` at `var` = k under `binds`, from its row's address `start` (`row_start`) if any."""
        k = i64(k) if isinstance(k, int) else k
        if start is None:
            return self.emit_at(x, {**binds, var: k})
        ptr = self.b.gep(start, [k], inbounds=True, name="tiles.elem", source_etype=self.ty)
        return self.b.load(ptr, name="tiles.ld", typ=self.ty, align=self.dt.itemsize)

    def key_elem(self, t: ir.Value, start: ir.Value | None, k: int | ir.Value) -> ir.Value:
        """K(t, k) in every lane (`start`: K's row t, `row_start`)."""
        return self.splat(self.elem(self.fl.keyed, self.e, start, {self.key: t}, k))  # type: ignore[arg-type]

    def key_row(self, t: ir.Value) -> ir.Value | None:
        return self.row_start(self.fl.keyed, self.e, {self.key: t})  # type: ignore[arg-type]

    def zeroed_regs(self, cols: int, name: str) -> list[list[ir.Value]]:
        """VECTORS x `cols` accumulator slots (allocas mem2reg promotes to registers), each
        set to zero here; slot [h][c] is named `name` + "{h}.{c}"."""
        zero = ir.Constant(self.vty, [0.0] * self.lanes)
        regs = [[self.ctx.alloca(self.vty, f"{name}{h}.{c}") for c in range(cols)] for h in range(VECTORS)]
        for row in regs:
            for reg in row:
                self.b.store(zero, reg)
        return regs

    def dot_tile(self, t0: ir.Value, j0: ir.Value) -> None:
        """The 2 x KEYS tile of keys t0 + j0 ..: a loop over the head, STEP elements an
        iteration, the accumulators in registers across it (promoted allocas); fully
        unrolled, LLVM's scheduler hoisted all the broadcasts and spilled them."""
        b, vty = self.b, self.vty
        ts = [b.add(t0, b.add(j0, i64(j), name="tiles.jj", flags=("nuw", "nsw")), name="tiles.t",
                    flags=("nuw", "nsw")) for j in range(KEYS)]
        krows = [self.key_row(t) for t in ts]
        regs = self.zeroed_regs(KEYS, "tiles.d")
        md = scalar_loop_metadata(self.owner.module)
        with for_range(b, i64(self.d // STEP), "tiles.e", guard=False, metadata=md) as e:
            e0 = b.mul(e, i64(STEP), name="tiles.e0", flags=("nuw", "nsw"))
            acc = [[b.load(reg, name="tiles.acc", typ=vty) for reg in row] for row in regs]
            for u in range(STEP):
                k = b.add(e0, i64(u), name="tiles.k", flags=("nuw", "nsw")) if u else e0
                qs = [b.load(self.vec(self.qt, k, h), name="tiles.q", typ=vty, align=4) for h in range(VECTORS)]
                for j, (t, krow) in enumerate(zip(ts, krows, strict=True)):
                    kv = self.key_elem(t, krow, k)
                    for h, q in enumerate(qs):
                        prod = b.fmul(q, kv, name="tiles.qk", flags=CHAIN_FLAGS)
                        acc[h][j] = b.fadd(acc[h][j], prod, name="tiles.dot", flags=CHAIN_FLAGS)
            for h, row in enumerate(regs):
                for j, reg in enumerate(row):
                    b.store(acc[h][j], reg)
        for j in range(KEYS):
            jj = b.add(j0, i64(j), name="tiles.js", flags=("nuw", "nsw"))
            for h in range(VECTORS):
                self.keep(jj, h, b.load(regs[h][j], name="tiles.dsum", typ=vty))

    def dot_one(self, t0: ir.Value, j: ir.Value) -> None:
        """A key after the whole groups: CHAINS partial sums per row vector, over a loop of
        the head CHAINS elements at a time (rare: only a block's last cnt % KEYS keys)."""
        b, vty = self.b, self.vty
        t = b.add(t0, j, name="tiles.t", flags=("nuw", "nsw"))
        krow = self.key_row(t)
        parts = self.zeroed_regs(CHAINS, "tiles.p")
        md = scalar_loop_metadata(self.owner.module)
        with for_range(b, i64(self.d // CHAINS), "tiles.oe", guard=False, metadata=md) as e:
            e0 = b.mul(e, i64(CHAINS), name="tiles.oe0", flags=("nuw", "nsw"))
            for c in range(CHAINS):
                k = b.add(e0, i64(c), name="tiles.ok", flags=("nuw", "nsw")) if c else e0
                kv = self.key_elem(t, krow, k)
                for h in range(VECTORS):
                    q = b.load(self.vec(self.qt, k, h), name="tiles.q", typ=vty, align=4)
                    prod = b.fmul(q, kv, name="tiles.qk", flags=CHAIN_FLAGS)
                    reg = parts[h][c]
                    b.store(b.fadd(b.load(reg, name="tiles.part", typ=vty), prod, name="tiles.dot", flags=CHAIN_FLAGS),
                            reg)
        for h, row in enumerate(parts):
            part = [b.load(reg, name="tiles.part", typ=vty) for reg in row]
            while len(part) > 1:
                part = [b.fadd(part[i], part[i + 1], name="tiles.dots", flags=CHAIN_FLAGS) if i + 1 < len(part)
                        else part[i] for i in range(0, len(part), 2)]
            self.keep(j, h, part[0])

    def accumulate(self, t0: ir.Value, cnt: ir.Value) -> None:
        """l += p, then acc[w] += p * V(key, w) one chunk of COLS columns at a time, the
        chunk's accumulators in registers across the block's keys (promoted allocas)."""
        b, fl, vty = self.b, self.fl, self.vty
        lregs = [self.ctx.alloca(vty, f"tiles.l{h}") for h in range(VECTORS)]
        for h, reg in enumerate(lregs):
            b.store(b.load(self.vec(self.l, 0, h), name="tiles.lv", typ=vty, align=4), reg)
        with for_range(b, cnt, "tiles.ls", guard=True, metadata=scalar_loop_metadata(self.owner.module)) as j:
            for h, reg in enumerate(lregs):
                p = b.load(self.vec(self.s, j, h), name="tiles.p", typ=vty, align=4)
                b.store(b.fadd(b.load(reg, name="tiles.l", typ=vty), p, name="tiles.l.new", flags=SUM_FLAGS), reg)
        for h, reg in enumerate(lregs):
            b.store(b.load(reg, name="tiles.l", typ=vty), self.vec(self.l, 0, h), align=4)
        regs = [[self.ctx.alloca(vty, f"tiles.a{h}.{x}") for x in range(COLS)] for h in range(VECTORS)]
        alphas = [b.load(self.vec(self.alpha, 0, h), name="tiles.alpha", typ=vty, align=4) for h in range(VECTORS)]
        md = scalar_loop_metadata(self.owner.module)
        with for_range(b, i64(self.dv // COLS), "tiles.w", guard=False, metadata=md) as chunk:
            w0 = b.mul(chunk, i64(COLS), name="tiles.w0", flags=("nuw", "nsw"))
            ws = [b.add(w0, i64(x), name="tiles.wx", flags=("nuw", "nsw")) if x else w0 for x in range(COLS)]
            for h in range(VECTORS):  # the block's rescale (rescale below) on the way into registers
                for x, w in enumerate(ws):
                    a = b.load(self.vec(self.acc, w, h), name="tiles.accv", typ=vty, align=4)
                    b.store(b.fmul(a, alphas[h], name="tiles.a.scaled"), regs[h][x])
            with for_range(b, cnt, "tiles.pv", guard=True, metadata=scalar_loop_metadata(self.owner.module)) as j:
                t = b.add(t0, j, name="tiles.t", flags=("nuw", "nsw"))
                ps = [b.load(self.vec(self.s, j, h), name="tiles.p", typ=vty, align=4) for h in range(VECTORS)]
                vrow = self.row_start(fl.value, self.w, {self.key: t})
                for x, w in enumerate(ws):
                    vb = self.splat(self.elem(fl.value, self.w, vrow, {self.key: t}, w))
                    for h, p in enumerate(ps):
                        a = b.load(regs[h][x], name="tiles.a", typ=vty)
                        prod = b.fmul(p, vb, name="tiles.pv", flags=SUM_FLAGS)
                        b.store(b.fadd(a, prod, name="tiles.acc", flags=SUM_FLAGS), regs[h][x])
            for h in range(VECTORS):
                for x, w in enumerate(ws):
                    b.store(b.load(regs[h][x], name="tiles.a", typ=vty), self.vec(self.acc, w, h), align=4)

    def start_rows(self, r: ir.Value) -> None:
        """m and l per row (the vectorizer's loop); the accumulators by zero_acc."""
        b = self.b
        b.store(self.neg_inf, self.slot(self.m, 0, r))
        b.store(self.zero, self.slot(self.l, 0, r))

    def keys(self, n: ir.Value) -> None:
        self.zero_acc()
        super().keys(n)

    def zero_acc(self) -> None:
        """acc = 0 as explicit vectors, a loop over the value head (in flash_lanes.py's loop
        over the rows, DV stores per row for the vectorizer to check against each other)."""
        b = self.b
        zero = ir.Constant(self.vty, [0.0] * self.lanes)
        with for_range(b, i64(self.dv), "tiles.z", guard=False, metadata=scalar_loop_metadata(self.owner.module)) as w:
            for h in range(VECTORS):
                b.store(zero, self.vec(self.acc, w, h), align=4)

    def rescale(self, r: ir.Value) -> None:
        """flash_lanes.py's rescale less the accumulators': alpha kept per row, applied to
        them as accumulate loads them."""
        b, em = self.b, self.em
        m_old = self.load(self.slot(self.m, 0, r))
        m_new = self.load(self.slot(self.mx, 0, r))
        live = b.fcmp_ordered("!=", m_new, self.neg_inf, name="lanes.live")
        alpha = b.select(live, em.math("exp", b.fsub(m_old, m_new, name="lanes.dm")), self.one, name="lanes.alpha")
        b.store(alpha, self.slot(self.alpha, 0, r))
        b.store(b.select(live, m_new, self.zero, name="lanes.use"), self.slot(self.use, 0, r))
        b.store(b.select(live, m_new, m_old, name="lanes.m.next"), self.slot(self.m, 0, r))
        lp = self.slot(self.l, 0, r)
        b.store(b.fmul(self.load(lp), alpha, name="lanes.l.scaled"), lp)

    def load_queries(self) -> None:
        """QT[e][r], as flash_lanes.py's but over a loop of the head per row, QROW elements
        an iteration (flash_lanes.py unrolls the whole head: D stores per row)."""
        b = self.b
        self.prefetch_queries()
        if self.transpose_queries():
            return
        with for_range(b, i64(self.nrows), "lanes.q", guard=False) as r:
            row = self.row_of(r)
            query = self.fl.query
            assert query is not None
            start = self.row_start(query, self.e, {self.rv: row})
            with for_range(b, i64(self.d // QROW), "tiles.qe", guard=False,
                           metadata=scalar_loop_metadata(self.owner.module)) as e:
                e0 = b.mul(e, i64(QROW), name="tiles.qe0", flags=("nuw", "nsw"))
                for u in range(QROW):
                    k = b.add(e0, i64(u), name="tiles.qk", flags=("nuw", "nsw")) if u else e0
                    q = self.elem(query, self.e, start, {self.rv: row}, k)
                    b.store(q, self.slot(self.qt, k, r))

    def prefetch_queries(self) -> None:
        """The query rows of this block and the next fetched before the transpose reads them:
        the projection wrote Q long before (out of L2 at batch 4 x 512), and the transpose's
        scalar loads missed one line at a time (8% of the attention's time); the next block's
        rows (past the item's too: the same thread's next item, mostly) arrive while this one
        runs. A row past the last is clamped to it (a prefetch never faults, but stays in the
        buffer)."""
        b, query = self.b, self.fl.query
        assert query is not None
        if self.row_start(query, self.e, {self.rv: self.s0}) is None:
            return
        pf = get_or_declare(self.owner.module, "llvm.prefetch.p0", ir.FunctionType(VOID, [PTR, I32, I32, I32]))
        top = b.sub(self.ctx.dim(self.c.extents[-2]), i64(1), name="tiles.pf.top")
        lines = -(-self.d * self.dt.itemsize // 64)
        with for_range(b, i64(2 * self.nrows), "tiles.pf", guard=False,
                       metadata=scalar_loop_metadata(self.owner.module)) as r:
            row = b.add(self.s0, r, name="tiles.pf.row", flags=("nuw", "nsw"))
            row = b.select(b.icmp_signed(">", row, top), top, row, name="tiles.pf.clamped")
            start = self.row_start(query, self.e, {self.rv: row})
            assert start is not None
            for v in range(lines):
                at = b.gep(start, [i64(v * 64 // self.dt.itemsize)], inbounds=False, name="tiles.pf.at",
                           source_etype=self.ty) if v else start
                b.call(pf, [at, ir.Constant(I32, 0), ir.Constant(I32, 3), ir.Constant(I32, 1)])

    def transpose_queries(self) -> bool:
        """QT[e][r] from contiguous query rows as 16 x 16 tiles transposed in registers: each
        vector of rows' head chunk loaded whole, four rounds of two-source shuffles
        (`transposed`), a vector stored per head element (the scalar copy's two accesses per
        element measured 3.4 cycles each, 4% of the attention at batch 4 x 512). False where
        the rows are not contiguous (the caller copies element by element)."""
        b, query, n = self.b, self.fl.query, self.lanes
        assert query is not None
        if self.row_start(query, self.e, {self.rv: self.s0}) is None or self.d % n:
            return False
        md = scalar_loop_metadata(self.owner.module)
        for h in range(VECTORS):
            starts = [self.row_start(query, self.e, {self.rv: self.row_of(i64(h * n + i))}) for i in range(n)]
            with for_range(b, i64(self.d // n), "tiles.qt", guard=False, metadata=md) as chunk:
                e0 = b.mul(chunk, i64(n), name="tiles.qt.e0", flags=("nuw", "nsw"))
                rows = [b.load(b.gep(st, [e0], inbounds=True, name="tiles.qt.at", source_etype=self.ty),
                               name="tiles.qt.row", typ=self.vty, align=self.dt.itemsize) for st in starts]
                for j, col in enumerate(transposed(b, rows)):
                    k = b.add(e0, i64(j), name="tiles.qt.k", flags=("nuw", "nsw")) if j else e0
                    b.store(col, self.vec(self.qt, k, h), align=4)
        return True


def transposed(b: ir.IRBuilder, rows: list[ir.Value]) -> list[ir.Value]:
    """The n x n transpose of n vectors of n lanes (n a power of two): for h = n/2 .. 1, rows
    r and r + h (r without bit h) swap their h-blocks, lane c of the pair taken from the
    other row where c has bit h."""
    n = len(rows)
    rows = list(rows)
    h = n // 2
    while h:
        mty = ir.VectorType(I32, n)
        lo_mask = ir.Constant(mty, [c if not c & h else n + c - h for c in range(n)])
        hi_mask = ir.Constant(mty, [c + h if not c & h else n + c for c in range(n)])
        for r in range(n):
            if not r & h:
                a, z = rows[r], rows[r + h]
                rows[r] = b.shuffle_vector(a, z, lo_mask, name="tiles.tr.lo")
                rows[r + h] = b.shuffle_vector(a, z, hi_mask, name="tiles.tr.hi")
        h //= 2
    return rows
