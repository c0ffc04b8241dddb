"""When fused causal attention may skip the masked keys: a run-time proof, else every key.

A causal score (kernel/flash.py `Flash.causal`) gives the keys after a row's limit R their
own score, `masked`: the constant m (a Where's fill) or `X * a + m` of the raw dot X (an
additive mask), m < 0. The kernel stops each block of rows at its last row's R, which gives
the softmax's answer only where every skipped key adds exactly nothing to every row of the
block: its probability exp(s - max) is exactly 0 and not NaN, it does not hold the max,
and 0 * V(key, w) is 0. That fails for

- a NaN or infinite value V at a skipped key (0 * inf is NaN: the column is NaN);
- `X * a + m` with X NaN or infinite (a NaN or inf in Q or K): NaN + m and inf + -inf are
  NaN, inf + finfo.min is inf, which holds the max and makes the row NaN;
- a finite m where a row's kept scores do not rise far above it (a row of kept scores all
  -inf under a finfo.min mask is the softmax of its masked scores).

So per (batch, head) (per parallel item) one pass over the keys that may be skipped finds the
last key whose V row, and (for `X * a + m`) whose K row, is not finite, and a bound kmax on
the finite K rows (their largest element, or their largest L1 norm where the rows are not
contiguous vectors); per block of rows, before its keys:

    skip = last bad V < end and last bad K < end and |Q rows|_1 * kmax <= BIG

(`end` the block's first skipped key; that bounds every skipped |X|, so X is finite and
s within |a| * bound of m), and after them, for a finite m, every row's max at least
MARGIN above m + |a| * bound, the highest a skipped score can be. Where either fails the
block runs again over every key, computing the masked scores as the graph does: the same
answer as the unfused chain, NaN for NaN. The scans cost one pass over K and V per item
(O(seq * head), against the attention's O(seq^2 * head)).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from llvmlite import ir

from onnxcc.kernel.expr import Expr, Var, rsum, substitute

from ..llvm.helpers import for_range, get_or_declare, i64, move_to_end

if TYPE_CHECKING:
    from onnxcc.kernel.flash import Flash
    from onnxcc.kernel.program import Compute

    from ..llvm.exprs import ExprEmitter
    from .emit import FnCtx

SCAN_GROUP = 8
"""keys per horizontal reduction of the vector scan"""
MARGIN = 1000.0
"""how far below a row's max a skipped score must be: exp(-1000) is 0 in f32 and f64"""
_BIG = {32: 2.0 ** 125, 64: 2.0 ** 1021}
"""the largest |Q|_1 * |K|_1 of the finite dot products the skipped keys may have (a quarter
of the type's largest: the dot's rounding cannot reach inf)"""


class CausalGuard:
    """The run-time check of one fused causal compute (module doc)."""

    def __init__(self, em: ExprEmitter, ctx: FnCtx, c: Compute, fl: Flash, ty: ir.Type, lanes: tuple[int, int]):
        """`lanes`: the vector widths K's and V's rows load with contiguously, (0, 0) where
        they do not (the scan then sums each row through the expression emitter)."""
        assert fl.causal is not None
        self.em, self.ctx, self.c, self.fl, self.b, self.ty = em, ctx, c, fl, ctx.b, ty
        self.lanes = lanes
        self.a, self.m = fl.masked
        self.reads_dot = self.a != 0.0
        w = Var("flash.guard.w")
        self.v_norm = rsum([(w, c.extents[-1])], abs(substitute(fl.value, {c.var_names[-1]: w})))
        self.k_norm = self.q_norm = None
        if self.reads_dot:
            assert fl.dot is not None and fl.keyed is not None and fl.query is not None
            (e, ext), = fl.dot.vars
            self.k_norm = rsum([(e, ext)], abs(fl.keyed))
            self.q_norm = rsum([(e, ext)], abs(fl.query))
        self.last_v = ctx.alloca(ir.IntType(64), "flash.guard.lastv")
        self.last_k = ctx.alloca(ir.IntType(64), "flash.guard.lastk")
        self.k_max = ctx.alloca(ty, "flash.guard.kmax")
        self.bound = ctx.alloca(ty, "flash.guard.bound")
        self.big = ir.Constant(ty, _BIG[32 if ty == ir.FloatType() else 64])

    def scan(self, lo: ir.Value, n: ir.Value) -> None:
        """The keys [lo, n) (those some row served here may skip): the last one with a
        non-finite V row (and K row), and the largest finite K row norm."""
        b = self.b
        b.store(i64(-1), self.last_v)
        b.store(i64(-1), self.last_k)
        b.store(ir.Constant(self.ty, 0.0), self.k_max)
        if all(self.lanes):
            self.scan_vectors(lo, n)
        else:
            self.scan_rows(lo, n)

    def scan_vectors(self, lo: ir.Value, n: ir.Value) -> None:
        """scan with explicit vectors, SCAN_GROUP keys at a time: each element's magnitude
        bits (sign cleared) maxed as unsigned integers across the group's keys (NaN above
        inf above every finite value, no compare per element), one horizontal max per group
        and row kind. A group holding a non-finite element counts as bad at its last key (a
        later last bad key than the true one only sends more rows over every key); `k_max`
        the largest finite |K| element of the good groups, which bounds a dot by |Q row|_1 * it."""
        b, em, fl = self.b, self.em, self.fl
        bits = ir.IntType(64 if self.ty == ir.DoubleType() else 32)
        mag = (1 << (bits.width - 1)) - 1
        inf_bits = 0x7FF0000000000000 if bits.width == 64 else 0x7F800000
        kinds = [(fl.value, self.c.var_names[-1], self.fl.row, self.lanes[1], self.last_v)]
        if self.reads_dot:
            assert fl.dot is not None
            (e, ext), = fl.dot.vars
            kinds.append((fl.keyed, e.name, int(ext.value), self.lanes[0], self.last_k))  # type: ignore[union-attr]
        accs = [self.ctx.alloca(ir.VectorType(bits, vl), "flash.guard.acc") for *_, vl, _ in kinds]
        count = b.sub(n, lo, name="flash.guard.count")
        ngroups = b.sdiv(b.add(count, i64(SCAN_GROUP - 1)), i64(SCAN_GROUP), name="flash.guard.groups")
        with for_range(b, ngroups, "flash.guard.g", guard=True) as g:
            t0 = b.add(lo, b.mul(g, i64(SCAN_GROUP)), name="flash.guard.t0")
            t1 = b.add(t0, i64(SCAN_GROUP))
            t1 = b.select(b.icmp_signed("<", t1, n), t1, n, name="flash.guard.t1")
            for acc, (*_, vl, _) in zip(accs, kinds, strict=True):
                b.store(ir.Constant(ir.VectorType(bits, vl), [0] * vl), acc)
            with for_range(b, t1, "flash.guard.t", start=t0, guard=False) as t:
                em.push({fl.key.name: t}, {fl.key.name: fl.kv_len})
                for acc, (x, var, size, vl, _) in zip(accs, kinds, strict=True):
                    vty, ity = ir.VectorType(self.ty, vl), ir.VectorType(bits, vl)
                    m = b.load(acc)
                    for k in range(size // vl):
                        em.push({var: i64(k * vl)})
                        ptr = em.address(x.buffer, [em.emit(ix) for ix in x.indices])
                        em.pop()
                        v = b.bitcast(b.load(ptr, name="flash.guard.v", typ=vty, align=self.dt_size()), ity)
                        v = b.and_(v, ir.Constant(ity, [mag] * vl))
                        m = self._umax(m, v)
                    b.store(m, acc)
                em.pop()
            last = b.sub(t1, i64(1), name="flash.guard.tl")
            for acc, (*_, vl, slot) in zip(accs, kinds, strict=True):
                ity = ir.VectorType(bits, vl)
                fn = get_or_declare(b.module, f"llvm.vector.reduce.umax.v{vl}i{bits.width}",
                                    ir.FunctionType(bits, [ity]))
                top = b.call(fn, [b.load(acc)], name="flash.guard.top")
                bad = b.icmp_unsigned(">=", top, ir.Constant(bits, inf_bits), name="flash.guard.bad")
                b.store(b.select(bad, last, b.load(slot)), slot)
                if slot is self.last_k:
                    old = b.bitcast(b.load(self.k_max), bits)
                    grow = b.and_(b.not_(bad), b.icmp_unsigned(">", top, old))
                    b.store(b.bitcast(b.select(grow, top, old), self.ty), self.k_max)

    def dt_size(self) -> int:
        return 8 if self.ty == ir.DoubleType() else 4

    def _umax(self, a: ir.Value, x: ir.Value) -> ir.Value:
        ty = a.type
        fn = get_or_declare(self.b.module, f"llvm.umax.v{ty.count}i{ty.element.width}", ir.FunctionType(ty, [ty, ty]))
        return self.b.call(fn, [a, x], name="flash.guard.umax")

    def scan_rows(self, lo: ir.Value, n: ir.Value) -> None:
        """scan through the expression emitter: each row's L1 norm (NaN or inf where the row
        is not finite)."""
        b, em, fl = self.b, self.em, self.fl
        inf = ir.Constant(self.ty, float("inf"))
        with for_range(b, n, "flash.guard.t", start=lo, guard=True) as t:
            em.push({fl.key.name: t}, {fl.key.name: fl.kv_len})
            vbad = b.fcmp_unordered("==", em.emit(self.v_norm), inf, name="flash.guard.vbad")
            b.store(b.select(vbad, t, b.load(self.last_v)), self.last_v)
            if self.k_norm is not None:
                kn = em.emit(self.k_norm)
                kbad = b.fcmp_unordered("==", kn, inf, name="flash.guard.kbad")
                b.store(b.select(kbad, t, b.load(self.last_k)), self.last_k)
                old = b.load(self.k_max)
                grow = b.fcmp_ordered(">", kn, old, name="flash.guard.grow")
                b.store(b.select(b.and_(grow, b.not_(kbad)), kn, old), self.k_max)
            em.pop()

    def query_norm(self) -> Expr | None:
        """|Q(row)|_1 over the head, for the rows' sum the caller emits (None: not needed)."""
        return self.q_norm

    def skip_ok(self, end: ir.Value, q_sum: ir.Value | None) -> ir.Value:
        """Whether the keys from `end` on may be skipped by rows whose query norms sum to
        `q_sum` (before the keys)."""
        b = self.b
        ok = b.icmp_signed("<", b.load(self.last_v), end, name="flash.guard.vok")
        if self.reads_dot:
            assert q_sum is not None
            ok = b.and_(ok, b.icmp_signed("<", b.load(self.last_k), end, name="flash.guard.kok"))
            bound = b.fmul(q_sum, b.load(self.k_max), name="flash.guard.bound")
            b.store(bound, self.bound)
            ok = b.and_(ok, b.fcmp_ordered("<=", bound, self.big, name="flash.guard.small"), name="flash.guard.ok")
        return ok

    def rows_ok(self, maxes: ir.Value) -> ir.Value | None:
        """After the keys: whether every row max in `maxes` (a scalar or a vector) lies
        MARGIN above the highest skipped score; None where m is -inf (a skipped score is
        then -inf whatever the max)."""
        if self.m == float("-inf"):
            return None
        b, ty = self.b, self.ty
        top = ir.Constant(ty, self.m)
        if self.reads_dot:
            reach = b.fmul(b.load(self.bound), ir.Constant(ty, 2 * abs(self.a)), name="flash.guard.reach")
            top = b.fadd(top, reach, name="flash.guard.top")
        if isinstance(maxes.type, ir.VectorType):
            vty = maxes.type
            n = vty.count
            top = b.shuffle_vector(b.insert_element(ir.Constant(vty, None), top, ir.Constant(ir.IntType(32), 0)),
                                   ir.Constant(vty, None), ir.Constant(ir.VectorType(ir.IntType(32), n), [0] * n))
            gap = b.fsub(maxes, top, name="flash.guard.gap")
            far = b.fcmp_ordered(">=", gap, ir.Constant(vty, [MARGIN] * n), name="flash.guard.far")
            fn = get_or_declare(self.ctx.b.module, f"llvm.vector.reduce.and.v{n}i1",
                                ir.FunctionType(ir.IntType(1), [ir.VectorType(ir.IntType(1), n)]))
            return b.call(fn, [far], name="flash.guard.allfar")
        gap = b.fsub(maxes, top, name="flash.guard.gap")
        return b.fcmp_ordered(">=", gap, ir.Constant(ty, MARGIN), name="flash.guard.far")

    def run(self, fast: ir.Value, every: ir.Value, ok: ir.Value, keys: Callable[[ir.Value], None],
            after: Callable[[], ir.Value | None]) -> None:
        """`keys(n)` (the rows' state reset, then their keys below n) with n = `fast` where
        `ok`, else `every`; again with `every` where `after()` (the rows_ok of their maxes)
        is false after the fast try."""
        b = self.b
        first = b.select(ok, fast, every, name="flash.guard.n")
        if self.m == float("-inf"):  # no row max to check: one try
            keys(first)
            return
        slot = self.ctx.alloca(ir.IntType(64), "flash.guard.try")
        b.store(first, slot)
        fn = b.function
        again = fn.append_basic_block("flash.guard.again")
        done = fn.append_basic_block("flash.guard.done")
        b.branch(again)
        b.position_at_end(again)
        cur = b.load(slot, name="flash.guard.cur")
        keys(cur)
        good = after()
        assert good is not None
        whole = b.icmp_signed("==", cur, every, name="flash.guard.whole")
        fin = b.or_(whole, good, name="flash.guard.fin")
        b.store(every, slot)
        b.cbranch(fin, done, again)
        move_to_end(done)
        b.position_at_end(done)
