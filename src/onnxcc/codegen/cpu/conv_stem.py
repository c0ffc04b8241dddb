"""The small-input-channel conv call (`onnxcc_f32stem_*`, kernel/conv_stem_call.py; the sizes
and buffers of kernel/conv_call.py's contract), defined in LLVM where the CPU emitter
(extern.py) meets its CallStmt.

An image stem (3 input channels, K = KH x C x KW = 27 for a 3x3) as the implicit GEMM's
12 x 16 tile (output channels in the lanes) pays per tile for 12 window pointers, 9 short
segments and 12 row stores against its 324 FMAs: 78% of one core's FMA roof on plain's stem
(benchmarks/region_profile.py; the roof, 32 flops a cycle, measured at 116 GFLOP/s).
Here the output pixels sit in the lanes instead: 16 consecutive output pixels of one row,
one accumulator vector per output channel (16 of the 32 zmm). Each tap (kh, c, kw) is one
contiguous masked load from the planar input P ([N, C, H, W], read in place, unpadded: a
lane whose column is padding is masked off, a kernel row in the padding branched around;
at stride 2 two loads and the even lanes picked), times each channel's weight broadcast
from the packed
panel (an embedded-broadcast FMA operand): 16 FMAs per load, no pointer per pixel. The
16 x 16 block is then transposed in registers to the channels-last rows C takes (pixel p's
16 channels one vector), the bias added and the activation applied, and the rows stored
(masked past the channels and the row's last pixel). With a fused 2x2 MaxPool (the name's
`p1`) a stored row is two conv rows: their sums maxed per channel, one transpose, the pixel
pairs maxed, then bias and activation (both monotone: the same values), NaN-propagating as
the GEMM call's pool. Plain's stem 484 -> 422 us at 224x224 on one thread (88% of the
roof), mobile's (stride 2, no pool) 126 -> 116 us. Reading the input in place removed the
padded copy (plain 1x224x224: 38 us of copy gone, the stem 425 -> 429 us). At stride 2
without a pool, rows whose last block would hold at most 8 pixels (56-pixel rows: mobile at
4x112x112) go two to an item, the two tails one block (`PAIR_TAILS`, one group of 16
output channels only): mobile's stem there 132 -> 119 us (benchmarks/region_profile.py, 1
thread, A/B in one run).

Work is split over (batch, stored row or row pair) items through onnxcc_parallel_for when it is big
(gemm_call.PAR_MIN_WORK); C's border, where it is a padded map, is zeroed first
(conv_out_rows.py `define_with_border`). The kernel's extents, input channels and strides
are in the callee's name: the taps of a kernel row are unrolled, and so are the rows of a
window of up to UNROLL_TAPS taps."""

from __future__ import annotations

from llvmlite import ir

from onnxcc.kernel.conv_call import BUFFERS, NR, SIZES
from onnxcc.kernel.conv_stem_call import PREFIX, StemSpec, parse

from ..llvm.exprs import F32
from ..llvm.helpers import I32, I64, PTR, VOID, for_range, get_or_declare, i32, i64, if_then
from . import conv_out_rows as out_rows
from . import gemm_call as gcall
from .gemm_ir import add, ceildiv, ceildiv_v, mul, umin

LANES = 16
"""output pixels per vector, and output channels per group (one accumulator per channel)"""
_V = ir.VectorType(F32, LANES)
I16 = ir.IntType(16)
UNROLL_TAPS = 36
"""windows of at most this many taps (3x3 of up to 4 channels) are one straight run of code;
larger ones a loop over the kernel rows (unrolled, a 7x7 of 4 channels with its pool, 12544
FMAs in one block, took LLVM 90 s)"""
_MASK = gcall.MASK


def _intrinsics(module: ir.Module) -> dict[str, ir.Function]:
    return {
        "fma": get_or_declare(module, "llvm.fma.v16f32", ir.FunctionType(_V, [_V, _V, _V])),
        "load": get_or_declare(module, "llvm.masked.load.v16f32.p0", ir.FunctionType(_V, [PTR, I32, _MASK, _V])),
        "store": get_or_declare(module, "llvm.masked.store.v16f32.p0",
                                ir.FunctionType(VOID, [_V, PTR, I32, _MASK])),
        "maxps": get_or_declare(module, "llvm.x86.avx512.max.ps.512", ir.FunctionType(_V, [_V, _V, I32])),
    }


def _lanes_below(b: ir.IRBuilder, n: ir.Value, first: int, name: str) -> ir.Value:
    """the mask of lanes l with first + l < n (n an i64)"""
    return gcall.column_mask(b, b.sub(n, i64(first), name=f"{name}.n"), 0) if first else gcall.column_mask(b, n, 0)


def _below16(b: ir.IRBuilder, n: ir.Value) -> ir.Value:
    """the i32 of bits l < n, n clamped to [0, 16]"""
    n = b.select(b.icmp_signed("<", n, i64(0), name="n.neg"), i64(0), n, name="n.lo")
    n = b.select(b.icmp_signed(">", n, i64(LANES), name="n.big"), i64(LANES), n, name="n.hi")
    return b.sub(b.shl(i32(1), b.trunc(n, I32, name="n.32"), name="bit"), i32(1), name="bits")


def _lane_range(b: ir.IRBuilder, lo: ir.Value, hi: ir.Value) -> ir.Value:
    """the i16 mask of lanes l with lo <= l < hi (signed i64 bounds): integer bit arithmetic,
    a few scalar instructions per tap column instead of a vector compare"""
    m = b.and_(_below16(b, hi), b.xor(_below16(b, lo), i32(-1), name="not.lo"), name="range")
    return b.trunc(m, I16, name="range.16")


def transpose16(b: ir.IRBuilder, rows: list[ir.Value]) -> list[ir.Value]:
    """the 16 x 16 transpose of 16 vectors: out[p][o] = rows[o][p]. Four rounds, round j
    swapping bit j of the vector's index with bit j of the lane's (two-source shuffles)."""
    out = list(rows)
    for j in range(4):
        bit = 1 << j
        lo_idx = [p if not p & bit else LANES + p - bit for p in range(LANES)]
        hi_idx = [p + bit if not p & bit else LANES + p for p in range(LANES)]
        nxt = list(out)
        for o in range(LANES):
            if o & bit:
                continue
            u, w = out[o], out[o | bit]
            nxt[o] = b.shuffle_vector(u, w, ir.Constant(ir.VectorType(I32, LANES), lo_idx), name=f"tr{j}.lo")
            nxt[o | bit] = b.shuffle_vector(u, w, ir.Constant(ir.VectorType(I32, LANES), hi_idx), name=f"tr{j}.hi")
        out = nxt
    return out


class _Row:
    """One conv row's block of 16 output pixels for one group of 16 output channels, read from
    the planar input itself ([N, C, H, W], no padded copy): per channel a vector of the pixels'
    sums; then, as pixel rows, plus bias, activated. The padding is never read: a tap's lanes
    whose input column falls outside [0, W) are masked off its load, and a kernel row outside
    [0, H) has every lane masked (its FMAs add zeros)."""

    def __init__(self, b: ir.IRBuilder, spec: StemSpec, intr: dict[str, ir.Function], geom: dict[str, ir.Value],
                 bias: ir.Value, lo: ir.Value) -> None:
        self.b, self.spec, self.intr, self.bias, self.lo = b, spec, intr, bias, lo
        self.g = geom  # the input's H, W, plane step, top and left pads
        self.planes = [mul(b, geom["plane"], c, "tap.c") for c in range(spec.cin)]
        self.slots: list[ir.Value] = []

    def col_masks(self, x0: ir.Value, npix: ir.Value) -> list[list[ir.Value]]:
        """per tap column j, per load h (two at stride 2), its lanes' mask: element e = 16h + l
        of the load starting at input column x0 + j is inside the row (0 <= x0 + j + e < W)
        and one of the block's pixels' (e < npix, or 2 npix - 1 at stride 2). A block whose
        windows all lie inside the row (all but the first and last on a wide image) takes the
        pixels' masks without the per-tap bit arithmetic (a branch: 9% of plain's stem time
        when every block computed them)."""
        b, spec = self.b, self.spec
        limit = npix if spec.sw == 1 else b.sub(add(b, npix, npix, "px2"), i64(1), name="px.e")
        # the block's last window ends at x0 + (npix - 1) SW + KW - 1 < W
        reach = add(b, add(b, x0, mul(b, b.sub(npix, i64(1), name="px.l"), spec.sw, "reach.p"), "reach.l"),
                    spec.kw, "reach")
        inside = b.and_(b.icmp_signed(">=", x0, i64(0), name="in.l"), b.icmp_signed("<=", reach, self.g["w"],
                                                                                     name="in.r"), name="in.row")
        plain = [_lanes_below(b, limit, LANES * h, "px") for h in range(spec.sw)]
        pre = b.block
        edge = b.append_basic_block("cols.edge")
        merge = b.append_basic_block("cols.end")
        b.cbranch(inside, merge, edge)
        b.position_at_end(edge)
        cut = []
        for j in range(spec.kw):
            start = add(b, x0, j, "col.j")  # signed: negative in the left pad
            right = b.sub(self.g["w"], start, name="col.right")
            hi = b.select(b.icmp_signed("<", right, limit, name="col.cut"), right, limit, name="col.hi")
            lo = b.sub(i64(0), start, name="col.lo")
            cut.append([b.bitcast(_lane_range(b, b.sub(lo, i64(LANES * h), name="lo.h"),
                                              b.sub(hi, i64(LANES * h), name="hi.h")), _MASK, name="col.m")
                        for h in range(spec.sw)])
        edge_end = b.block
        b.branch(merge)
        b.position_at_end(merge)
        out = []
        for j in range(spec.kw):
            row = []
            for h in range(spec.sw):
                phi = b.phi(_MASK, name="tap.m")
                phi.add_incoming(plain[h], pre)
                phi.add_incoming(cut[j][h], edge_end)
                row.append(phi)
            out.append(row)
        return out

    def channels(self, plane0: ir.Value, y: ir.Value, x0: ir.Value, q: ir.Value,
                 cols: list[list[ir.Value]], pair: ir.Value | None = None) -> list[ir.Value]:
        """channel o's (o < 16) sums of pixels p < 16 (lane p) of conv row y, whose windows
        start at (y * SH - pad top, x0 + p * SW) in the input (`plane0`: the batch's channel 0),
        `cols` the tap columns' masks (`col_masks`). A kernel row in the top or bottom pad is
        branched around (per item, so always predicted). With `pair` (stride 2 only: a row's
        tail of at most 8 pixels), lanes 0..7 are row y's pixels p and lanes 8..15 row y + 1's
        pixels p - 8 where `pair` is true (else none): the second load of each tap is the same
        columns one conv row down."""
        b, spec = self.b, self.spec
        zero = ir.Constant(_V, [0.0] * LANES)
        r0 = b.sub(mul(b, y, spec.sh, "row.y"), self.g["pt"], name="row.0")  # signed: the top pad
        per_row = spec.cin * spec.kw * NR  # packed weights per kernel row

        def kernel_row(i: ir.Value | int, qi: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
            r = add(b, r0, i, "row.i")
            inside = b.icmp_unsigned("<", r, self.g["h"], name="row.in")  # negative r wraps above H
            masks, second = cols, None
            if pair is not None:
                down = b.and_(pair, b.icmp_unsigned("<", add(b, r, spec.sh, "row.dn"), self.g["h"], name="dn.in"),
                              name="dn.on")
                none = ir.Constant(_MASK, [0] * LANES)
                masks = [[b.select(inside, m[0], none, name="m.up"), b.select(down, m[0], none, name="m.dn")]
                         for m in cols]
                second = mul(b, self.g["w"], spec.sh, "dn.off")
                inside = b.or_(inside, down, name="rows.in")
            pre = b.block
            taps = b.append_basic_block("row.taps")
            merge = b.append_basic_block("row.end")
            b.cbranch(inside, taps, merge)
            b.position_at_end(taps)
            base = b.gep(plane0, [add(b, mul(b, r, self.g["w"], "row.off"), x0, "row.x")], name="tap.r",
                         source_etype=F32)  # not inbounds: a left-pad column is formed, never loaded
            summed = self._kernel_row(base, qi, masks, list(acc), second)
            taps_end = b.block
            b.branch(merge)
            b.position_at_end(merge)
            out = []
            for o in range(LANES):
                phi = b.phi(_V, name="acc.r")
                phi.add_incoming(acc[o], pre)
                phi.add_incoming(summed[o], taps_end)
                out.append(phi)
            return out

        acc: list[ir.Value] = [zero] * LANES
        if spec.kh * spec.cin * spec.kw <= UNROLL_TAPS:
            for i in range(spec.kh):
                acc = kernel_row(i, gcall.gep(b, q, i * per_row, F32, "q.i"), acc)
            return acc
        if not self.slots:  # the accumulators across the kernel-row loop (SROA: phis)
            with b.goto_entry_block():
                self.slots = [b.alloca(_V, name=f"acc.{o}") for o in range(LANES)]
        for slot in self.slots:
            b.store(zero, slot)
        with for_range(b, i64(spec.kh), "kh", guard=False) as i:
            acc = [b.load(slot, name="acc", typ=_V) for slot in self.slots]
            acc = kernel_row(i, gcall.gep(b, q, mul(b, i, per_row, "q.i"), F32, "q.i"), acc)
            for slot, v in zip(self.slots, acc, strict=True):
                b.store(v, slot)
        return [b.load(slot, name="acc", typ=_V) for slot in self.slots]

    def _kernel_row(self, base: ir.Value, q: ir.Value, masks: list[list[ir.Value]],
                    acc: list[ir.Value], second: ir.Value | None = None) -> list[ir.Value]:
        """`acc` plus one kernel row's C x KW taps (`base`: its first in channel 0's plane, `q`:
        its packed weights, `masks` the tap columns'); at stride 2 a tap's second load is 16
        elements on, or `second` elements on (a paired tail's row below)"""
        b, spec = self.b, self.spec
        zero = ir.Constant(_V, [0.0] * LANES)
        evens = ir.Constant(ir.VectorType(I32, LANES), list(range(0, 2 * LANES, 2)))
        for c in range(spec.cin):
            row = b.gep(base, [self.planes[c]], name="tap.row", source_etype=F32) if c else base
            for j in range(spec.kw):
                offs = [i64(j + LANES * h) for h in range(spec.sw)]
                if second is not None:
                    offs[1] = add(b, second, j, "tap.dn")
                parts = [b.call(self.intr["load"], [b.gep(row, [offs[h]], name="tap.p", source_etype=F32),
                                                    i32(4), m, zero], name="x") for h, m in enumerate(masks[j])]
                x = parts[0] if spec.sw == 1 else b.shuffle_vector(parts[0], parts[1], evens, name="x.even")
                k = c * spec.kw + j
                for o in range(LANES):
                    w = b.load(gcall.gep(b, q, k * NR + o, F32, "w.p"), name="w", typ=F32, align=4)
                    acc[o] = b.call(self.intr["fma"], [x, gcall.splat(b, w, "w.v"), acc[o]], name="acc")
                acc = _pinned(b, acc)
        return acc

    def activated(self, px: list[ir.Value]) -> list[ir.Value]:
        """act(v + bias) of pixel rows (lanes: the group's channels)"""
        b = self.b
        out = []
        for p, v in enumerate(px):
            s = b.fadd(v, self.bias, name=f"biased{p}")
            below = b.fcmp_ordered("<", s, self.lo, name="below")  # a select keeps NaN, as np.maximum
            below.type = _MASK
            out.append(b.select(below, self.lo, s, name=f"act{p}"))
        return out


def _pinned(b: ir.IRBuilder, acc: list[ir.Value]) -> list[ir.Value]:
    """the accumulators through an empty side-effecting asm ("+v" each): a tap's FMAs stay
    before it and the next tap's loads after it. Without it the scheduler hoisted a block's 27
    input loads to its start and spilled them all (a barrier without operands kept the loads
    in place but let the FMAs sink past it, the same spills)."""
    st = ir.LiteralStructType([_V] * len(acc))
    cons = ",".join(["=v"] * len(acc) + [str(i) for i in range(len(acc))])
    out = b.asm(ir.FunctionType(st, [_V] * len(acc)), "", cons, acc, True, name="pin")
    return [b.extract_value(out, i, name=f"acc{i}") for i in range(len(acc))]


def _max(b: ir.IRBuilder, intr: dict[str, ir.Function], x: ir.Value, y: ir.Value) -> ir.Value:
    """max(x, y), NaN where either is (as the GEMM call's pool): vmaxps gives y where
    unordered, then x where x is NaN. Three instructions; llvm.maximum's lowering, which
    also orders -0 below +0, took five (a pooled block has 24 maxima)."""
    m = b.call(intr["maxps"], [x, y, i32(4)], name="max")
    nan = b.fcmp_unordered("uno", x, x, name="x.nan")
    nan.type = _MASK
    return b.select(nan, x, m, name="max.nan")


def _pairs(b: ir.IRBuilder, intr: dict[str, ir.Function], px: list[ir.Value]) -> list[ir.Value]:
    """max of pixels 2p and 2p + 1: a 2-wide pooling window's columns"""
    return [_max(b, intr, px[2 * p], px[2 * p + 1]) for p in range(LANES // 2)]


PAIR_TAILS = True
"""at stride 2 without a pool, rows whose last block of 16 pixels holds at most 8 (56-pixel
rows: mobile / resnet stems at 112x112) are taken two at a time, their tails one block"""


def _pairing(b: ir.IRBuilder, spec: StemSpec, ow: ir.Value, n: ir.Value) -> tuple[ir.Value | None, ir.Value]:
    """(whether rows go in pairs with their tails in one block, None where the spec never
    pairs; rows per item, an i64). Only stems of one group of 16 output channels pair: on
    resnet's 32-channel stem at 4x112x112 pairing cost 269 -> 295 us (mobile's 16-channel
    one gained 132 -> 119 us; a lone 32-channel stem at that shape gained 266 -> 253 us, so
    the rule is measured on the nets, not understood)."""
    if not (PAIR_TAILS and spec.sw == 2 and not spec.pool):
        return None, i64(1)
    rem = b.urem(ow, i64(LANES), name="tail")
    pairs = b.and_(b.icmp_unsigned("!=", rem, i64(0), name="tail.some"),
                   b.icmp_unsigned("<=", rem, i64(LANES // 2), name="tail.half"), name="pairs")
    pairs = b.and_(pairs, b.icmp_unsigned("<=", n, i64(LANES), name="one.group"), name="pairs.g")
    return pairs, b.select(pairs, i64(2), i64(1), name="per.item")


def _body(module: ir.Module, name: str, spec: StemSpec) -> ir.Function:
    """`void body(i64 begin, i64 end, ptr ctx)`: items [begin, end) of the (batch, stored row)
    grid, ctx = {sizes, bufs}"""
    fn = gcall.internal_function(module, name, gcall.BODY_FNTY, ("begin", "end", "ctx"))
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    intr = _intrinsics(module)
    ctx = fn.args[2]
    sizes = b.load(ctx, name="sizes", typ=PTR, align=8)
    bufs = b.load(gcall.gep(b, ctx, 1, PTR, "bufs.p"), name="bufs", typ=PTR, align=8)
    sz = {nm: b.load(gcall.gep(b, sizes, SIZES.index(nm), I64, "s.p"), name=nm, typ=I64, align=8)
          for nm in ("n", "s0", "s1", "ss1", "l", "sp", "ldc", "sc", "relu", "oh", "ow", "wpo", "opt", "opl", "tb",
                     "c0")}
    # the stem's reading of the contract's window sizes (kernel/conv_stem_call.py)
    geom = dict(h=sz["tb"], w=sz["l"], plane=sz["ss1"], pt=sz["s0"], pl=sz["s1"])
    buf = {nm: b.load(gcall.gep(b, bufs, BUFFERS.index(nm), PTR, "buf.p"), name=nm, typ=PTR, align=8)
           for nm in ("P", "Q", "C", "B")}
    kk = spec.kh * spec.cin * spec.kw
    lo = gcall.splat(b, b.select(b.icmp_unsigned("!=", sz["relu"], i64(0), name="relu.on"), ir.Constant(F32, 0.0),
                                 ir.Constant(F32, float("-inf")), name="lo"), "lo.v")
    per_blk = LANES // 2 if spec.pool else LANES  # stored pixels per block
    pairs, per_item = _pairing(b, spec, sz["ow"], sz["n"])
    # with pairs, the blocks of 16 whole ones, the tails one paired block per item
    blocks = ceildiv(b, sz["ow"], per_blk, "blocks")
    if pairs is not None:
        blocks = b.select(pairs, b.udiv(sz["ow"], i64(per_blk), name="whole"), blocks, name="blocks.p")
    rows_per = ceildiv_v(b, sz["oh"], per_item, "rows.per")  # items per image
    groups = ceildiv(b, sz["n"], LANES, "groups")
    zero_mask = ir.Constant(_MASK, [0] * LANES)
    with for_range(b, fn.args[1], "t", start=fn.args[0], guard=True) as t:
        bi = b.udiv(t, rows_per, name="bi")
        h0 = mul(b, b.sub(t, mul(b, bi, rows_per, "bi.h"), name="item"), per_item, "h0")
        nrows = umin(b, b.sub(sz["oh"], h0, name="rows.left"), per_item, "nrows")
        pbat = gcall.gep(b, buf["P"], mul(b, bi, sz["sp"], "p.b"), F32, "p.bat")

        def c_row(h: ir.Value) -> ir.Value:
            """stored row h's first pixel in C (a padded map's interior), from channel c0"""
            at = mul(b, add(b, mul(b, add(b, h, sz["opt"], "c.h"), sz["wpo"], "c.r"), sz["opl"], "c.l"), sz["ldc"],
                     "c.at")
            return gcall.gep(b, buf["C"], add(b, add(b, mul(b, bi, sz["sc"], "c.b"), at, "c.off"), sz["c0"], "c.c0"),
                             F32, "c.row")

        with for_range(b, groups, "g", guard=True) as g:
            col = mul(b, g, LANES, "col")
            # the packed panel's column col: panel col // NR, its lane col % NR
            qg = gcall.gep(b, buf["Q"], add(b, mul(b, b.udiv(col, i64(NR), name="panel"), kk * NR, "q.pan"),
                                            b.urem(col, i64(NR), name="q.lane"), "q.off"), F32, "q.g")
            chmask = _lanes_below(b, b.sub(sz["n"], col, name="nch"), 0, "ch")
            bias = b.call(intr["load"], [gcall.gep(b, buf["B"], col, F32, "bias.p"), i32(4), chmask,
                                         ir.Constant(_V, [0.0] * LANES)], name="bias")
            row = _Row(b, spec, intr, geom, bias, lo)
            with for_range(b, nrows, "r", guard=False) as r:
                h = add(b, h0, r, "h")
                conv_y = mul(b, h, 2, "y2") if spec.pool else h
                cg = gcall.gep(b, c_row(h), col, F32, "c.g")
                with for_range(b, blocks, "blk", guard=True) as blk:
                    s0 = mul(b, blk, per_blk, "s0")
                    nst = umin(b, b.sub(sz["ow"], s0, name="left"), i64(per_blk), "nst")
                    # the block's first window's first column in the input (signed: the left pad)
                    x0 = b.sub(mul(b, s0, (2 if spec.pool else 1) * spec.sw, "x0.p"), geom["pl"], name="x0")
                    if spec.pool:
                        npix = add(b, nst, nst, "npix")
                        # the two rows' sums maxed per channel, one transpose, the pixel pairs maxed,
                        # then bias and activation: x + bias and the activation are monotone, so
                        # act(max(a, b) + bias) = max(act(a + bias), act(b + bias)), rounding and
                        # NaNs included (up to a zero's sign), for half the transposes and a quarter
                        # of the epilogue
                        cols = row.col_masks(x0, npix)
                        top = row.channels(pbat, conv_y, x0, qg, cols)
                        bottom = row.channels(pbat, add(b, conv_y, 1, "y.down"), x0, qg, cols)
                        rows = [_max(b, intr, u, d) for u, d in zip(top, bottom, strict=True)]
                        vals = row.activated(_pairs(b, intr, transpose16(b, rows)))
                    else:
                        vals = row.activated(transpose16(b, row.channels(pbat, conv_y, x0, qg, row.col_masks(x0, nst))))
                    cblk = gcall.gep(b, cg, mul(b, s0, sz["ldc"], "c.s0"), F32, "c.blk")
                    for p, v in enumerate(vals):
                        live = b.icmp_unsigned("<", i64(p), nst, name="p.in")
                        m = b.select(live, chmask, zero_mask, name="st.mask")
                        b.call(intr["store"], [v, gcall.gep(b, cblk, mul(b, sz["ldc"], p, "c.p"), F32, "c.px"), i32(4),
                                               m])
            if pairs is not None:  # the two rows' tails (up to 8 pixels each) as one block
                with if_then(b, pairs, name="tails"):
                    s0 = mul(b, blocks, LANES, "t.s0")
                    nst = b.sub(sz["ow"], s0, name="t.n")
                    x0 = b.sub(mul(b, s0, spec.sw, "t.x0p"), geom["pl"], name="t.x0")
                    two = b.icmp_unsigned(">", nrows, i64(1), name="two")
                    vals = row.activated(transpose16(b, row.channels(pbat, h0, x0, qg, row.col_masks(x0, nst), two)))
                    for half in range(2):
                        cblk = gcall.gep(b, gcall.gep(b, c_row(add(b, h0, half, "t.h")), col, F32, "t.g"),
                                         mul(b, s0, sz["ldc"], "t.c0"), F32, "t.blk")
                        for p in range(LANES // 2):
                            live = b.icmp_unsigned("<", i64(p), nst, name="t.in")
                            if half:
                                live = b.and_(live, two, name="t.in2")
                            m = b.select(live, chmask, zero_mask, name="t.mask")
                            b.call(intr["store"], [vals[half * LANES // 2 + p],
                                                   gcall.gep(b, cblk, mul(b, sz["ldc"], p, "t.p"), F32, "t.px"),
                                                   i32(4), m])
    b.ret_void()
    return fn


def _entry(module: ir.Module, name: str, spec: StemSpec) -> ir.Function:
    """`i32 name(const i64 *sizes, void *const *bufs)`: the (batch, stored row) items on the
    calling thread, or through onnxcc_parallel_for when the work is big"""
    fn = gcall.internal_function(module, name, gcall.CALL_FNTY, ("sizes", "bufs"), noinline=True)
    sizes, bufs = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    ctx = b.alloca(ir.ArrayType(PTR, 2), name="ctx")
    b.store(sizes, b.gep(ctx, [i64(0), i64(0)], inbounds=True, name="ctx.s"))
    b.store(bufs, b.gep(ctx, [i64(0), i64(1)], inbounds=True, name="ctx.b"))

    def size(nm: str) -> ir.Value:
        return b.load(gcall.gep(b, sizes, SIZES.index(nm), I64, f"{nm}.p"), name=nm, typ=I64, align=8)

    _, per_item = _pairing(b, spec, size("ow"), size("n"))
    items = mul(b, size("batch"), ceildiv_v(b, size("oh"), per_item, "rows.per"), "items")
    work = mul(b, mul(b, mul(b, size("batch"), size("m"), "w"), size("n"), "w"), spec.kh * spec.kw * spec.cin, "work")
    body = _body(module, f"{name}.rows", spec)
    gcall.run_items(b, module, items, body, ctx, work)
    b.ret(i32(0))
    return fn


def define_callee(module: ir.Module, call_name: str) -> ir.Function:
    """The LLVM definition of stem CallStmt callee `call_name` (kernel/conv_stem_call.py) in `module`."""
    spec = parse(call_name)
    assert spec is not None and spec.supported(), call_name
    name = f"onnxcc.f32stem.{call_name.removeprefix(PREFIX)}"
    fn = module.globals.get(name)
    if fn is not None:
        return fn
    return out_rows.define_with_border(module, name, _entry(module, f"{name}.grid", spec))


__all__ = ["LANES", "define_callee", "transpose16"]
