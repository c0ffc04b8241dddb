"""One query row of fused attention (kernel/flash.py) over blocks of keys, scores never stored.

For the row whose outer vars are bound (the innermost var `w` runs over the value head):

    m = -inf; l = 0; acc[w] = 0
    for each block of BLOCK keys (the last one shorter):
        s[i] = X(t0 + i)                          the block's scores, once each
        m_new = max(m, max_i s[i])
        if m_new != -inf:                         (a block still all -inf adds nothing)
            alpha = exp(m - m_new)                0 while m is -inf
            p[i] = exp(s[i] - m_new); l = l * alpha + sum_i p[i]
            acc[w] = acc[w] * alpha + sum_i p[i] * V(t0 + i, w)
            m = m_new
    for w: out[..., w] = body with the core := acc[w] / select(l == 0, 1, l)

The block's scores and probabilities live in a stack array of BLOCK lanes, the accumulator
row in one of the value head's size: the [q, kv] score matrix never exists. The loops over
a block and over `w` carry the vectorizer hint (the probabilities' exp is vmath's, which
widens). A NaN score makes `m_new` NaN, which the test lets through, so NaN reaches the
result as it does through the unfused softmax.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir

from ..llvm.exprs import REDUCE_COMBINE, ExprEmitter, compute_type
from ..llvm.helpers import PTR, for_range, i64, if_then, loop_metadata

if TYPE_CHECKING:
    from onnxcc.kernel.program import Compute

    from .emit import FnCtx, KernelEmitter, NestPlan

BLOCK = 64
"""keys per block: the block's scores stay in L1 while they become probabilities and are
spread over the accumulator row"""


def emit_flash(owner: KernelEmitter, em: ExprEmitter, ctx: FnCtx, c: Compute, plan: NestPlan, v: int,
               vals: dict[str, ir.Value]) -> None:
    """The innermost var `v` of `c` as one fused-attention row (the outer vars in `vals`)."""
    fl = plan.flash
    assert fl is not None
    b = ctx.b
    dt = fl.core.dtype
    ty = compute_type(dt)
    name, ext = c.var_names[v], c.extents[v]
    width = plan.vector_width or 8
    key = fl.key.name
    acc = ctx.alloca(ir.ArrayType(ty, fl.row), "flash.acc")
    blk = ctx.alloca(ir.ArrayType(ty, BLOCK), "flash.s")
    acc.type = blk.type = PTR  # NOTE: llvmlite types allocas as typed pointers; the IR is opaque
    m_p, l_p, bmax_p, bsum_p = (ctx.alloca(ty, f"flash.{n}") for n in ("m", "l", "bmax", "bsum"))
    neg_inf, zero, one = ir.Constant(ty, float("-inf")), ir.Constant(ty, 0.0), ir.Constant(ty, 1.0)
    row = i64(fl.row)

    def slot(arr: ir.Value, i: ir.Value, what: str) -> ir.Value:
        return b.gep(arr, [i], inbounds=True, name=f"flash.{what}.p", source_etype=ty)

    def vec_md():
        return loop_metadata(owner.module, width, None)

    # what no key changes (the query row's own loads, a causal row's offset) once per row
    em.hoist(fl.score)
    b.store(neg_inf, m_p)
    b.store(zero, l_p)
    with for_range(b, row, "flash.w0", guard=False, metadata=vec_md()) as j:
        b.store(zero, slot(acc, j, "acc"))
    n = em.emit(fl.kv_len)
    nblk = b.sdiv(b.add(n, i64(BLOCK - 1), name="flash.n.up"), i64(BLOCK), name="flash.blocks")
    with for_range(b, nblk, "flash.kb", guard=True) as kb:
        t0 = b.mul(kb, i64(BLOCK), name="flash.t0", flags=("nuw", "nsw"))
        left = b.sub(n, t0, name="flash.left", flags=("nsw",))
        cnt = b.select(b.icmp_signed("<", left, i64(BLOCK)), left, i64(BLOCK), name="flash.cnt")
        b.store(neg_inf, bmax_p)
        with for_range(b, cnt, "flash.i", guard=False) as i:  # the block's scores
            t = b.add(t0, i, name=key, flags=("nuw", "nsw"))
            em.push({key: t}, {key: fl.kv_len})
            s = em.emit(fl.score)
            em.pop()
            b.store(s, slot(blk, i, "s"))
            b.store(REDUCE_COMBINE["max"](em, b.load(bmax_p, name="flash.bmax"), s, dt), bmax_p)
        m_old = b.load(m_p, name="flash.m.old")
        m_new = REDUCE_COMBINE["max"](em, m_old, b.load(bmax_p, name="flash.bmax"), dt)
        live = b.fcmp_unordered("!=", m_new, neg_inf, name="flash.live")
        with if_then(b, live, name="flash.block"):
            alpha = em.math("exp", b.fsub(m_old, m_new, name="flash.dm"))
            b.store(zero, bsum_p)
            with for_range(b, cnt, "flash.p", guard=False, metadata=vec_md()) as i:
                ptr = slot(blk, i, "p")
                p = em.math("exp", b.fsub(b.load(ptr, name="flash.s", typ=ty), m_new, name="flash.sm"))
                b.store(p, ptr)
                b.store(REDUCE_COMBINE["sum"](em, b.load(bsum_p, name="flash.bsum"), p, dt), bsum_p)
            l_new = b.fadd(b.fmul(b.load(l_p, name="flash.l"), alpha, name="flash.l.scaled"),
                           b.load(bsum_p, name="flash.bsum"), name="flash.l.new")
            b.store(l_new, l_p)
            with for_range(b, row, "flash.w1", guard=False, metadata=vec_md()) as j:
                ptr = slot(acc, j, "acc")
                b.store(b.fmul(b.load(ptr, name="flash.a", typ=ty), alpha, name="flash.a.scaled"), ptr)
            with for_range(b, cnt, "flash.pv", guard=False) as i:
                p = b.load(slot(blk, i, "p"), name="flash.prob", typ=ty)
                em.push({key: b.add(t0, i, name=key, flags=("nuw", "nsw"))}, {key: fl.kv_len})
                em.hoist(fl.value)
                with for_range(b, row, "flash.w2", guard=False, metadata=vec_md()) as j:
                    em.push({name: j}, {name: ext})
                    x = em.emit(fl.value)
                    em.pop()
                    ptr = slot(acc, j, "acc")
                    b.store(b.fadd(b.load(ptr, name="flash.a", typ=ty), b.fmul(p, x, name="flash.px"), name="flash.a.new"),
                            ptr)
                em.pop()
            b.store(m_new, m_p)
    total = b.load(l_p, name="flash.total")
    denom = b.select(b.fcmp_ordered("==", total, zero, name="flash.empty"), one, total, name="flash.denom")
    with for_range(b, row, name, guard=False, metadata=vec_md()) as j:
        em.push({name: j}, {name: ext})
        em.frames[-1].cache[fl.core] = b.fdiv(b.load(slot(acc, j, "acc"), name="flash.a", typ=ty), denom, name="flash.y")
        em.store(c.out, [j if m == name else vals[m] for m in c.var_names], em.emit(c.body))
        em.pop()
