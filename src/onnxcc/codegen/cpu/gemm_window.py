"""Window mode of the GEMM codegen (kernel/conv_window.py says what it is): the padded copy
of a conv's input into the scratch region, and the micro-kernel's table of row offsets.

gemm.py drives it: one parallel call of `pad_function` (items: batch x plane), then the
tasks, whose tiles the micro-kernel reads straight from the copy through `offsets_table`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from llvmlite import ir

from onnxcc.ir import canon
from onnxcc.kernel.conv_window import POS_X, POS_Y, ConvWindow
from onnxcc.kernel.program import Compute
from onnxcc.kernel.schedule import GemmPlan

from ..llvm.exprs import F32, ExprEmitter
from ..llvm.helpers import I64, PTR, for_range, i64, loop_metadata
from .gemm_ir import unflatten as _unflatten

if TYPE_CHECKING:
    from .emit import FnCtx, KernelEmitter


def scratch_base(kem: KernelEmitter, fctx: FnCtx) -> ir.Value:
    """Where the padded planes start (the GEMM's scratch region)."""
    return fctx.workspace_at(kem.plan.scratch_offset, ("scratch",), "win.base")


def plane_floats(fctx: FnCtx, w: ConvWindow) -> ir.Value:
    """Floats of one padded plane (Y x X), at the function's entry."""
    return fctx.eb.mul(fctx.dim(w.y_ext), fctx.dim(w.x_ext), name="win.plane")


def pad_function(kem: KernelEmitter, c: Compute, g: GemmPlan,
                 item_offset: Callable[[ir.IRBuilder, ir.Value], ir.Value]) -> ir.Function:
    """Items (bb, plane): Xp[bb][plane][y][x] = tap(batch vars of bb, plane vars, y + ey,
    x + ex) over the whole padded box: the guards of the conv's padding run here once per
    input element instead of once per (tap, output). `item_offset(builder, ctx)` is added
    to the items' values but not to where they are written (one batch at a time: its
    planes go to batch 0's place)."""
    w = g.window
    assert w is not None
    fn, fctx = kem.body_function(f"gemm.pad.{c.out}")
    b = fctx.b
    begin, end, pctx = fn.args
    off = item_offset(fctx.eb, pctx)
    ext = dict(zip(c.var_names, c.extents))
    Y, X = fctx.dim(w.y_ext), fctx.dim(w.x_ext)
    plane = plane_floats(fctx, w)
    base = scratch_base(kem, fctx)
    bb_ext = [fctx.dim(ext[v]) for v in g.b_batch_vars]
    planes = i64(w.planes)
    y_hull, x_hull = fctx.dim(w.y_hull), fctx.dim(w.x_hull)
    zero = ir.Constant(F32, 0.0)
    em = ExprEmitter(fctx, b)
    with for_range(b, end, "it", start=begin, guard=True) as it:
        item = b.add(it, off, name="item")
        bb = b.udiv(item, planes, name="bb")
        pl = b.urem(item, planes, name="pl")
        px = b.urem(pl, i64(w.sx), name="px")
        py = b.urem(b.udiv(pl, i64(w.sx), name="pl.y"), i64(w.sy), name="py")
        ch = b.udiv(pl, i64(w.sx * w.sy), name="ch")
        vals = _unflatten(b, bb, bb_ext, g.b_batch_vars)
        vals.update(_unflatten(b, ch, [i64(e) for e in w.plane_exts], w.plane_vars))
        em.push(vals, {v: ext[v] for v in g.b_batch_vars})
        em.hoist(w.tap, guarded=True)
        dst = b.gep(base, [b.mul(it, plane, name="pdst.off")], inbounds=True, name="pdst", source_etype=F32)
        # the phase plane's columns inside the box the conv reads: q*sx + px < x_hull
        ncx = b.udiv(b.sub(b.add(x_hull, i64(w.sx - 1), name="ncx.up"), px, name="ncx.n"), i64(w.sx), name="ncx")
        ncx = b.select(b.icmp_unsigned("<", ncx, X, name="ncx.lt"), ncx, X, name="ncx")
        with for_range(b, Y, "y", guard=True) as r:
            ypos = b.add(b.mul(r, i64(w.sy), name="y.s"), py, name="y.abs")
            row = b.gep(dst, [b.mul(r, X, name="prow.off")], inbounds=True, name="prow", source_etype=F32)
            inside = b.icmp_unsigned("<", ypos, y_hull, name="y.in")
            nx = b.select(inside, ncx, i64(0), name="nx")
            em.push({POS_Y: b.add(ypos, i64(w.ey), name="win.y")})
            with for_range(b, nx, "x", guard=True, metadata=loop_metadata(kem.module, vector_width=g.vl)) as q:
                xpos = b.add(b.mul(q, i64(w.sx), name="x.s"), px, name="x.abs")
                em.push({POS_X: b.add(xpos, i64(w.ex), name="win.x")})
                b.store(em.emit(w.tap), b.gep(row, [q], inbounds=True, name="pdst.x", source_etype=F32), align=4)
                em.pop()
            em.pop()
            # past the box (the last phase rows and columns): zeros, never read by an output kept
            with for_range(b, X, "xz", start=nx, guard=True) as q:
                b.store(zero, b.gep(row, [q], inbounds=True, name="pzero", source_etype=F32), align=4)
        em.pop()
    b.ret_void()
    fctx.finish()
    return fn


def zero_slack(b: ir.IRBuilder, base: ir.Value, plane: ir.Value, nplanes: ir.Value, floats: ir.Value) -> None:
    """Zero the `floats` past the last plane, which the last tiles read (and drop): garbage
    there could be denormal or NaN, which slows the FMAs of the dropped lanes down."""
    end = b.gep(base, [b.mul(plane, nplanes, name="slack.off")], inbounds=True, name="slack", source_etype=F32)
    with for_range(b, floats, "sz", guard=True) as i:
        b.store(ir.Constant(F32, 0.0), b.gep(end, [i], inbounds=True, name="slack.p", source_etype=F32), align=4)


def slack_floats(fctx: FnCtx, g: GemmPlan) -> ir.Value:
    """Floats past the last plane that tiles may read (see `gemm_scratch_bytes`)."""
    assert g.window is not None
    return fctx.eb.add(fctx.dim(g.window.x_ext), i64(g.nr + 16), name="win.slack")


def offsets_table(fctx: FnCtx, g: GemmPlan) -> ir.Value:
    """An i64 [K] stack array: off[k], where tap k (row-major over the reduce vars) of
    output (0, 0) is in a batch's copy, filled at the builder's position."""
    w = g.window
    assert w is not None
    b = fctx.b
    exts = [int(x.value) for _, x in g.reduce.vars]  # type: ignore[attr-defined]
    names = [v.name for v, _ in g.reduce.vars]
    kk = 1
    for e in exts:
        kk *= e
    X = fctx.dim(w.x_ext)
    plane = plane_floats(fctx, w)
    table = fctx.eb.alloca(ir.ArrayType(I64, kk), name="win.offs")
    table.type = PTR  # NOTE: llvmlite types allocas as typed pointers; the IR is opaque
    with for_range(b, i64(kk), "wk", guard=False) as k:
        idx = _unflatten(b, k, [i64(e) for e in exts], names)
        ch: ir.Value = i64(0)
        for v, e in zip(w.plane_vars, w.plane_exts):
            ch = b.add(b.mul(ch, i64(e), name="wch"), idx[v], name="wch")
        ty = b.mul(idx[w.ky], i64(w.dy), name="wty") if w.ky else i64(0)
        tx = b.mul(idx[w.kx], i64(w.dx), name="wtx") if w.kx else i64(0)
        # the tap's phase plane, then its row and column in it (kernel/conv_window.py `tap_offset`)
        pp = b.add(b.mul(b.add(b.mul(ch, i64(w.sy), name="wpp"), b.urem(ty, i64(w.sy), name="wpy"), name="wpp"),
                         i64(w.sx), name="wpp"), b.urem(tx, i64(w.sx), name="wpx"), name="wpp")
        off = b.add(b.add(b.mul(pp, plane, name="woff.p"), b.mul(b.udiv(ty, i64(w.sy), name="wry"), X, name="woff.r"),
                          name="woff"), b.udiv(tx, i64(w.sx), name="wrx"), name="woff")
        b.store(off, b.gep(table, [k], inbounds=True, name="woff.p", source_etype=I64), align=8)
    return table


def a_batch_index(b: ir.IRBuilder, g: GemmPlan, batch_vals: dict, ext: dict) -> ir.Value:
    """Which of a prepacked A's per-batch blocks a window task reads (row-major over
    `g.a_batch_vars`, static extents: kernel/schedule.py `prepack_a`); 0 without batch vars."""
    out: ir.Value = i64(0)
    for v in g.a_batch_vars:
        out = b.add(b.mul(out, i64(int(canon(ext[v]))), name="abatch"), batch_vals[v], name="abatch")
    return out
