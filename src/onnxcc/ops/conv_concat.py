"""Convs that write their slices of a channel Concat in place (squeezenet's Fire modules:
expand 1x1 | expand 3x3 -> Concat).

Lowered as it comes, each conv call (kernel/conv_call.py) writes a map of its own and the
Concat's compute copies both into the wider map: a read and a write of the whole fire
output per module, a parallel region of its own, about 5% of squeezenet's run at one thread.
Here, after a version is lowered, every channels-last Concat compute whose parts are each the
whole result of one f32 conv call, read by the Concat alone, is removed, and those calls
write the Concat's buffer instead: row stride the Concat's channels, their first channel
the part's offset (`c0`). A part that is not such a call's (another op's result, a call with
a residual, out pads or a view of its map) leaves the Concat as it was."""

from __future__ import annotations

from ..ir import canon
from ..kernel import Buffer, CallStmt, Compute, KernelProgram, Var
from ..kernel.conv_call import CALLEE, SIZES, Buffers, Sizes
from ..kernel.conv_wino_call import PREFIX as WINO_PREFIX
from ..kernel.expr import Const, Expr, Load, Select, dim_to_expr
from .shape import concat_offsets, concat_select

_FLAT = ("opt", "opl", "opb", "opr", "res", "rpad", "c0")
"""sizes that must be 0 for a call to write into a Concat: a flat C of its own, no residual
read like C"""


def _leaves(e: Expr) -> list[Load] | None:
    """the loads at the leaves of a select tree, in order; None if a leaf is anything else"""
    if isinstance(e, Select):
        a, b = _leaves(e.a), _leaves(e.b)
        return None if a is None or b is None else a + b
    return [e] if isinstance(e, Load) else None


def _walk(body: list) -> list:
    """every statement, nested bodies included"""
    out = []
    for s in body:
        out.append(s)
        for inner in s.bodies():
            out.extend(_walk(inner))
    return out


def _zero(e: Expr) -> bool:
    return isinstance(e, Const) and e.value == 0


def _writer(p: KernelProgram, part: Buffer, stmts: list, cat_stmt: Compute) -> int | None:
    """the index in p.body of the one f32 conv call that writes all of `part` (flat, no
    residual) and that only `cat_stmt` reads, or None"""
    if part.kind != "temp" or part.alias_of is not None or part.rank != 4:
        return None
    if any(b.alias_of == part.name for b in p.buffers.values()):
        return None
    writers = [s for s in stmts if part.name in s.writes()]
    readers = [s for s in stmts if part.name in s.reads()]
    if len(writers) != 1 or readers != [cat_stmt]:
        return None
    call = writers[0]
    # the Winograd call (a 3x3 expand) stores its pixels through ldc and c0 as the GEMM call does
    if not (isinstance(call, CallStmt) and (call.fn == CALLEE or call.fn.startswith(WINO_PREFIX))
            and call.outs == (part.name,)):
        return None
    sizes = dict(zip(SIZES, call.sizes, strict=True))
    bufs = dict(zip(Buffers.__dataclass_fields__, call.buffers, strict=True))
    if bufs["C"] != part.name or not all(_zero(sizes[k]) for k in _FLAT):
        return None
    ldc = sizes["ldc"]
    if not (isinstance(ldc, Const) and isinstance(part.shape[3], int) and ldc.value == part.shape[3]):
        return None
    top = [k for k, s in enumerate(p.body) if s is call]
    return top[0] if top else None


def _retarget(call: CallStmt, cat: Buffer, c0) -> CallStmt:
    """`call` writing channels [c0, c0 + N) of `cat` instead of its own map"""
    sizes = dict(zip(SIZES, call.sizes, strict=True))
    sizes.update(ldc=dim_to_expr(cat.shape[3]), sc=dim_to_expr(canon(cat.shape[1] * cat.shape[2] * cat.shape[3])),
                 c0=dim_to_expr(c0))
    bufs = dict(zip(Buffers.__dataclass_fields__, call.buffers, strict=True))
    bufs["C"] = cat.name
    return CallStmt(call.fn, Sizes(**sizes).values(), Buffers(**bufs).values(), (cat.name,))


def convs_into_concats(p: KernelProgram) -> int:
    """Rewrite `p` in place (top-level statements only); returns the Concats removed."""
    removed = 0
    k = 0
    while k < len(p.body):
        st = p.body[k]
        k += 1
        if not isinstance(st, Compute) or len(st.vars) != 4:
            continue
        cat = p.buffers[st.out]
        leaves = _leaves(st.body)
        if cat.alias_of is not None or leaves is None or len(leaves) < 2:
            continue
        names = [ld.buffer for ld in leaves]
        if len(set(names)) != len(names):
            continue
        parts = [p.buffers[n] for n in names]
        if any(b.rank != 4 for b in parts):  # an 8-bit Concat's select tree holds other loads
            continue
        if st.body != concat_select(parts, 3, tuple(Var(n) for n in st.var_names)):
            continue
        stmts = _walk(p.body)
        at = [_writer(p, part, stmts, st) for part in parts]
        if any(a is None or a >= k - 1 for a in at):
            continue
        for part, a, off in zip(parts, at, concat_offsets(parts, 3), strict=False):
            p.body[a] = _retarget(p.body[a], cat, off)  # type: ignore[index, arg-type]
            del p.buffers[part.name]
        del p.body[k - 1]
        k -= 1
        removed += 1
    return removed


__all__ = ["convs_into_concats"]
