"""The Winograd conv call (`onnxcc_f32wino_*`, kernel/conv_wino_call.py; the sizes and buffers
of kernel/conv_call.py's contract), defined in LLVM where the CPU emitter (extern.py) meets
its CallStmt.

A dense 3x3 stride-1 conv as F(2x2, 3x3): 16 products per 2x2 output tile and input channel
against the direct conv's 36, for a transform of each 4x4 input tile (V = B^T d B) and of
each tile's 16 sums (Y = A^T M A). The work is cut into blocks of TILES consecutive output
tiles of one image (row-major over the tile grid, so a small plane's block spans tile
rows); a block, all on the stack (L1 / L2):

1. V: each tile's 4x4 input pixels, a vector of channels each (masked past C; a tile's
   last row and column read zeros past P's extent (oh + 2) x (ow + 2), where an odd OH or
   OW leaves half a tile: their outputs are not stored), transformed by adds, stored as
   [16][TILES][C]; their sum times zero (NaN where any is Inf or NaN) kept aside;
2. M: for each of the 16 positions the GEMM [TILES x C] . [C x M] in registers, 12 x 2
   vectors of accumulators per panel of 32 output channels (a block of fewer tiles, a small
   plane's, 1, 2, 4 or 8 rows: `ROWS`), one broadcast of V per tile and
   two loads of the packed U per input channel (an empty side-effecting asm closes each
   step, as gemm_ukr.py's k loop, so the broadcasts are not hoisted and spilled);
3. Y: each tile's 16 product vectors transformed by adds to its 4 pixels, then bias,
   residual, activation, and stored (masked past the stored pixels and channels) into C's
   rows as the GEMM call stores them (a padded C's interior, from channel c0).

A block whose V is not all finite is computed by the direct conv instead (the packed direct
weights after U in Q): Winograd mixes a tile's pixels, so an Inf input gives NaN where the
direct conv gives +-Inf (and a Relu would make the difference 0 vs NaN). The blocks are
items of onnxcc_parallel_for when the work is big (gemm_call.PAR_MIN_WORK); C's border,
where C is a padded map, is zeroed first (conv_out_rows.py `define_with_border`)."""

from __future__ import annotations

from llvmlite import ir

from onnxcc.kernel.conv_call import BUFFERS, NR, SIZES, panels
from onnxcc.kernel.conv_wino_call import PREFIX, TILES, WinoSpec, parse

from ..llvm.exprs import F32
from ..llvm.helpers import I1, I32, I64, PTR, VOID, for_range, get_or_declare, i32, i64, if_else, if_then
from . import conv_out_rows as out_rows
from . import gemm_call as gcall
from .gemm_ir import add, ceildiv, mul, umin

LANES = 16
_V = ir.VectorType(F32, LANES)
_MASK = gcall.MASK
_ZERO = ir.Constant(_V, [0.0] * LANES)
_NONE = ir.Constant(_MASK, [0] * LANES)


def _intrinsics(module: ir.Module) -> dict[str, ir.Function]:
    return {
        "fma": get_or_declare(module, "llvm.fma.v16f32", ir.FunctionType(_V, [_V, _V, _V])),
        "load": get_or_declare(module, "llvm.masked.load.v16f32.p0", ir.FunctionType(_V, [PTR, I32, _MASK, _V])),
        "store": get_or_declare(module, "llvm.masked.store.v16f32.p0",
                                ir.FunctionType(VOID, [_V, PTR, I32, _MASK])),
    }


def _lanes(n: int) -> ir.Constant:
    """the constant mask of lanes l < n"""
    return ir.Constant(_MASK, [int(lane < n) for lane in range(LANES)])


def _ptr(b: ir.IRBuilder, base: ir.Value, off: ir.Value | int, name: str) -> ir.Value:
    """base + off f32 elements, not inbounds: a masked-off load's address may lie outside P"""
    return b.gep(base, [i64(off) if isinstance(off, int) else off], name=name, source_etype=F32)


def _in_transform(b: ir.IRBuilder, d: list[list[ir.Value]]) -> list[list[ir.Value]]:
    """V = B^T d B of a 4x4 tile of vectors"""

    def comb(x: list[ir.Value], nm: str) -> list[ir.Value]:
        return [b.fsub(x[0], x[2], name=f"{nm}0"), b.fadd(x[1], x[2], name=f"{nm}1"),
                b.fsub(x[2], x[1], name=f"{nm}2"), b.fsub(x[1], x[3], name=f"{nm}3")]

    cols = [comb([d[r][c] for r in range(4)], "bt") for c in range(4)]  # cols[c][a] = (B^T d)[a][c]
    return [comb([cols[c][a] for c in range(4)], "v") for a in range(4)]


def _out_transform(b: ir.IRBuilder, m: list[list[ir.Value]]) -> list[list[ir.Value]]:
    """Y = A^T m A of a 4x4 tile of vectors: the 2x2 pixels"""

    def comb(x: list[ir.Value], nm: str) -> list[ir.Value]:
        s = b.fadd(x[1], x[2], name=f"{nm}.s")
        return [b.fadd(x[0], s, name=f"{nm}0"), b.fsub(b.fsub(x[1], x[2], name=f"{nm}.d"), x[3], name=f"{nm}1")]

    cols = [comb([m[a][c] for a in range(4)], "at") for c in range(4)]  # cols[c][i] = (A^T m)[i][c]
    return [comb([cols[c][i] for c in range(4)], "y") for i in range(2)]


class _Block:
    """One item's block of tiles: the geometry the three stages share, and the stores."""

    def __init__(self, b: ir.IRBuilder, spec: WinoSpec, intr: dict[str, ir.Function], sz: dict[str, ir.Value],
                 buf: dict[str, ir.Value], bi: ir.Value, t0: ir.Value, nt: ir.Value, tw: ir.Value,
                 bias: list[ir.Value], lo: ir.Value) -> None:
        self.b, self.spec, self.intr, self.sz, self.buf = b, spec, intr, sz, buf
        self.bi, self.t0, self.nt, self.tw, self.bias, self.lo = bi, t0, nt, tw, bias, lo
        self.nvec = -(-spec.cout // LANES)
        self.pbat = _ptr(b, buf["P"], mul(b, bi, sz["sp"], "p.b"), "p.bat")
        self.cbat = _ptr(b, buf["C"], add(b, mul(b, bi, sz["sc"], "c.b"), sz["c0"], "c.b0"), "c.bat")
        self.rbat = _ptr(b, buf["R"], mul(b, bi, sz["sr"], "r.b"), "r.bat")

    def tile(self, i: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value]:
        """(tile i's first output row and column, whether i < nt); i clamped to the block's
        first tile past nt"""
        b = self.b
        valid = b.icmp_unsigned("<", i, self.nt, name="t.valid")
        t = add(b, self.t0, b.select(valid, i, i64(0), name="t.i"), "t")
        ty = b.udiv(t, self.tw, name="ty")
        tx = b.sub(t, mul(b, ty, self.tw, "ty.w"), name="tx")
        return mul(b, ty, 2, "oy"), mul(b, tx, 2, "ox"), valid

    def pixel_out(self, y: ir.Value, x: ir.Value) -> ir.Value:
        """output pixel (y, x)'s first channel in C"""
        b, sz = self.b, self.sz
        row = mul(b, add(b, y, sz["opt"], "c.y"), sz["wpo"], "c.r")
        return _ptr(b, self.cbat, mul(b, add(b, add(b, row, x, "c.x"), sz["opl"], "c.l"), sz["ldc"], "c.at"), "c.px")

    def pixel_res(self, y: ir.Value, x: ir.Value, valid: ir.Value) -> ir.Value:
        """pixel (y, x)'s residual row in R: flat, or through V where R is padded (rpad); an
        invalid pixel's clamped to the last"""
        b, sz = self.b, self.sz
        j = add(b, mul(b, y, sz["ow"], "r.y"), x, "r.j")
        j = b.select(valid, j, b.sub(sz["m"], i64(1), name="r.last"), name="r.jc")
        with b.goto_entry_block():
            slot = b.alloca(I64, name="r.off.slot")
        with if_else(b, b.icmp_unsigned("!=", sz["rpad"], i64(0), name="rpadded"), name="rpad") as (padded, flat):
            with padded:
                b.store(b.load(gcall.gep(b, self.buf["V"], j, I64, "v.p"), name="v", typ=I64, align=8), slot)
            with flat:
                b.store(mul(b, j, sz["ldc"], "r.flat"), slot)
        return _ptr(b, self.rbat, b.load(slot, name="r.off", typ=I64), "r.px")

    def store(self, y: ir.Value, x: ir.Value, valid: ir.Value, vals: list[ir.Value], with_res: bool) -> None:
        """act(vals[v] + bias[v] (+ residual)) stored at output pixel (y, x) when `valid`,
        vals one vector per 16 output channels"""
        b = self.b
        cpx = self.pixel_out(y, x)
        rpx = self.pixel_res(y, x, valid) if with_res else None
        for v, val in enumerate(vals):
            mask = b.select(valid, _lanes(self.spec.cout - LANES * v), _NONE, name="st.mask")
            s = b.fadd(val, self.bias[v], name="biased")
            if rpx is not None:
                r = b.call(self.intr["load"], [_ptr(b, rpx, LANES * v, "r.v"), i32(4), mask, _ZERO], name="res")
                s = b.fadd(s, r, name="resd")
            below = b.fcmp_ordered("<", s, self.lo, name="below")  # a select keeps NaN, as np.maximum
            below.type = _MASK
            s = b.select(below, self.lo, s, name="act")
            b.call(self.intr["store"], [s, _ptr(b, cpx, LANES * v, "c.v"), i32(4), mask])


def _slots(b: ir.IRBuilder, n: int, name: str) -> list[ir.Value]:
    """n vector allocas in the entry block (SROA makes them registers)"""
    with b.goto_entry_block():
        return [b.alloca(_V, name=f"{name}.{k}") for k in range(n)]


def _transform_inputs(blk: _Block, vs: ir.Value, chk_slot: ir.Value, rows: ir.Value) -> None:
    """stage 1: V of the block's first `rows` tiles (zeros for tiles past nt) into vs
    [16][TILES][C]; chk_slot accumulates V * 0"""
    b, spec, sz = blk.b, blk.spec, blk.sz
    cin = spec.cin
    with for_range(b, rows, "ti", guard=False) as i:
        oy, ox, valid = blk.tile(i)
        base = _ptr(b, blk.pbat, add(b, mul(b, oy, sz["ta"], "d.y"), mul(b, ox, cin, "d.x"), "d.off"), "d.base")
        # rows 0-2 and columns 0-2 of a valid tile lie in P; the 4th only where the tile's
        # second output row / column is a real one (y + 1 < oh)
        row3 = b.and_(valid, b.icmp_unsigned("<", add(b, oy, 1, "oy1"), sz["oh"], name="row3"), name="row3.v")
        col3 = b.icmp_unsigned("<", add(b, ox, 1, "ox1"), sz["ow"], name="col3")
        ok = [[valid, valid, valid, b.and_(valid, col3, name="c3")]] * 3
        ok = [*ok, [row3, row3, row3, b.and_(row3, col3, name="rc3")]]
        for cv in range(-(-cin // LANES)):
            lanes = _lanes(cin - LANES * cv)
            d = []
            for r in range(4):
                rowp = _ptr(b, base, add(b, mul(b, sz["ta"], r, "d.r"), LANES * cv, "d.rc"), "d.row")
                d.append([b.call(blk.intr["load"], [_ptr(b, rowp, c * cin, "d.p"), i32(4),
                                                    b.select(ok[r][c], lanes, _NONE, name="d.m"), _ZERO], name="d")
                          for c in range(4)])
            v = _in_transform(b, d)
            chk = b.load(chk_slot, name="chk", typ=_V)
            for a in range(4):
                for c in range(4):
                    chk = b.call(blk.intr["fma"], [v[a][c], _ZERO, chk], name="chk")
                    at = add(b, mul(b, add(b, i64((a * 4 + c) * TILES), i, "v.pi"), cin, "v.row"), LANES * cv, "v.at")
                    b.call(blk.intr["store"], [v[a][c], gcall.gep(b, vs, at, F32, "v.p"), i32(4), lanes])
            b.store(chk, chk_slot)


ROWS = (1, 2, 4, 8, TILES)
"""the GEMM's row counts: a block of nt tiles computes the least of these >= nt rows (a small
plane's one block of a few tiles does not pay for 12: ppocr_det_v4's 96 -> 24 convs on 2x2
to 8x8 maps)"""


def _products(blk: _Block, vs: ir.Value, ms: ir.Value, rows: int) -> None:
    """stage 2: ms[p][i][n] = sum(c: vs[p][i][c] * U[p][c][n]) for the 16 positions p, i < rows"""
    b, spec = blk.b, blk.spec
    cin, npan = spec.cin, panels(spec.cout)
    q = blk.buf["Q"]
    with for_range(b, i64(16), "pos", guard=False) as p:
        vrow = gcall.gep(b, vs, mul(b, p, TILES * cin, "vs.p"), F32, "vs.pos")
        for pan in range(npan):
            nv = min(2, -(-(spec.cout - NR * pan) // LANES))
            acc = _slots(b, rows * nv, f"acc{rows}.{pan}")
            for s in acc:
                b.store(_ZERO, s)
            upan = gcall.gep(b, q, mul(b, add(b, mul(b, p, npan, "u.p"), pan, "u.pan"), cin * NR, "u.off"), F32, "u")
            with for_range(b, i64(cin), "k", guard=False) as k:
                urow = gcall.gep(b, upan, mul(b, k, NR, "u.k"), F32, "u.row")
                u = [b.load(gcall.gep(b, urow, LANES * v, F32, "u.v"), name="u", typ=_V, align=4) for v in range(nv)]
                for i in range(rows):
                    x = b.load(gcall.gep(b, vrow, add(b, k, i * cin, "x.at"), F32, "x.p"), name="x", typ=F32, align=4)
                    xv = gcall.splat(b, x, "x.v")
                    for v in range(nv):
                        s = acc[i * nv + v]
                        b.store(b.call(blk.intr["fma"], [xv, u[v], b.load(s, name="a", typ=_V)], name="fma"), s)
                b.asm(ir.FunctionType(VOID, []), "", "", [], True, name="")
            for i in range(rows):
                row = mul(b, add(b, mul(b, p, TILES, "m.p"), i, "m.pi"), blk.nvec * LANES, "m.row")
                for v in range(nv):
                    at = add(b, row, (2 * pan + v) * LANES, "m.at")
                    b.store(b.load(acc[i * nv + v], name="a", typ=_V), gcall.gep(b, ms, at, F32, "m.p"), align=4)


def _transform_outputs(blk: _Block, ms: ir.Value, with_res: bool) -> None:
    """stage 3: each valid tile's 2x2 pixels from its 16 product vectors, stored"""
    b, sz = blk.b, blk.sz
    with for_range(b, blk.nt, "to", guard=False) as i:
        oy, ox, valid = blk.tile(i)
        ys = [[[] for _ in range(2)] for _ in range(2)]
        for v in range(blk.nvec):
            m = [[b.load(gcall.gep(b, ms, add(b, mul(b, add(b, i64((a * 4 + c) * TILES), i, "m.pi"), blk.nvec * LANES,
                                                        "m.row"), v * LANES, "m.at"), F32, "m.p"),
                         name="m", typ=_V, align=4) for c in range(4)] for a in range(4)]
            y = _out_transform(b, m)
            for dy in range(2):
                for dx in range(2):
                    ys[dy][dx].append(y[dy][dx])
        y1 = b.icmp_unsigned("<", add(b, oy, 1, "y1"), sz["oh"], name="y1.in")
        x1 = b.icmp_unsigned("<", add(b, ox, 1, "x1"), sz["ow"], name="x1.in")
        for dy in range(2):
            for dx in range(2):
                ok = [valid, x1, y1, b.and_(y1, x1, name="yx1")][2 * dy + dx]
                blk.store(add(b, oy, dy, "py"), add(b, ox, dx, "px"), ok, ys[dy][dx], with_res)


def _direct(blk: _Block, with_res: bool) -> None:
    """the block's pixels by the direct conv (the packed direct weights after U in Q): a block
    whose V is not all finite"""
    b, spec, sz = blk.b, blk.spec, blk.sz
    cin = spec.cin
    kk = 9 * cin
    wd = gcall.gep(b, blk.buf["Q"], 16 * panels(spec.cout) * cin * NR, F32, "wd")
    acc = _slots(b, blk.nvec, "dacc")
    with for_range(b, blk.nt, "td", guard=False) as i:
        oy, ox, _ = blk.tile(i)
        for dy in range(2):
            for dx in range(2):
                py, px = add(b, oy, dy, "dy"), add(b, ox, dx, "dx")
                ok = b.and_(b.icmp_unsigned("<", py, sz["oh"], name="d.yin"),
                            b.icmp_unsigned("<", px, sz["ow"], name="d.xin"), name="d.in")
                with if_then(b, ok, name="dpx"):
                    for s in acc:
                        b.store(_ZERO, s)
                    win = _ptr(b, blk.pbat, add(b, mul(b, py, sz["ta"], "w.y"), mul(b, px, cin, "w.x"), "w.off"),
                               "w.base")
                    with for_range(b, i64(3), "kh", guard=False) as kh:
                        wrow = _ptr(b, win, mul(b, kh, sz["ta"], "w.r"), "w.row")
                        with for_range(b, i64(3 * cin), "kj", guard=False) as j:
                            x = gcall.splat(b, b.load(_ptr(b, wrow, j, "w.xp"), name="x", typ=F32, align=4), "x.v")
                            k = add(b, mul(b, kh, 3 * cin, "w.kh"), j, "w.k")
                            for v, s in enumerate(acc):
                                at = add(b, mul(b, k, NR, "w.kn"), (v // 2) * kk * NR + (v % 2) * LANES, "w.at")
                                w = b.load(gcall.gep(b, wd, at, F32, "w.p"), name="w", typ=_V, align=4)
                                b.store(b.call(blk.intr["fma"], [x, w, b.load(s, name="a", typ=_V)], name="fma"), s)
                    blk.store(py, px, ir.Constant(I1, 1), [b.load(s, name="a", typ=_V) for s in acc], with_res)


def _rows_variants(b: ir.IRBuilder, rows: ir.Value, emit) -> None:
    """`emit(r)` for the one r of ROWS that `rows` equals"""
    if len(ROWS) == 1:
        emit(ROWS[0])
        return
    merge = b.append_basic_block("rows.end")
    sw = b.switch(rows, merge)
    for r in ROWS:
        blk = b.append_basic_block(f"rows{r}")
        sw.add_case(i64(r), blk)
        b.position_at_end(blk)
        emit(r)
        b.branch(merge)
    b.position_at_end(merge)


def _body(module: ir.Module, name: str, spec: WinoSpec) -> ir.Function:
    """`void body(i64 begin, i64 end, ptr ctx)`: items [begin, end) of the (batch, block of
    TILES tiles) grid, ctx = {sizes, bufs}"""
    fn = gcall.internal_function(module, name, gcall.BODY_FNTY, ("begin", "end", "ctx"))
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    intr = _intrinsics(module)
    ctx = fn.args[2]
    sizes = b.load(ctx, name="sizes", typ=PTR, align=8)
    bufs = b.load(gcall.gep(b, ctx, 1, PTR, "bufs.p"), name="bufs", typ=PTR, align=8)
    sz = {nm: b.load(gcall.gep(b, sizes, SIZES.index(nm), I64, "s.p"), name=nm, typ=I64, align=8)
          for nm in ("m", "sp", "ldc", "sc", "relu", "res", "oh", "ow", "wpo", "opt", "opl", "sr", "rpad", "ta",
                     "c0")}
    buf = {nm: b.load(gcall.gep(b, bufs, BUFFERS.index(nm), PTR, "buf.p"), name=nm, typ=PTR, align=8)
           for nm in ("P", "Q", "C", "B", "R", "V")}
    nvec = -(-spec.cout // LANES)
    vs = b.alloca(ir.ArrayType(F32, 16 * TILES * spec.cin), name="vs")
    vs.align = 64
    vs.type = PTR  # NOTE: llvmlite types allocas as typed pointers; the IR is opaque
    ms = b.alloca(ir.ArrayType(F32, 16 * TILES * nvec * LANES), name="ms")
    ms.align = 64
    ms.type = PTR
    chk_slot = b.alloca(_V, name="chk.slot")
    lo = gcall.splat(b, b.select(b.icmp_unsigned("!=", sz["relu"], i64(0), name="relu.on"), ir.Constant(F32, 0.0),
                                 ir.Constant(F32, float("-inf")), name="lo"), "lo.v")
    bias = [b.call(intr["load"], [gcall.gep(b, buf["B"], LANES * v, F32, "bias.p"), i32(4),
                                  _lanes(spec.cout - LANES * v), _ZERO], name="bias") for v in range(nvec)]
    tw = ceildiv(b, sz["ow"], 2, "tw")
    ntiles = mul(b, ceildiv(b, sz["oh"], 2, "th"), tw, "ntiles")
    blocks = ceildiv(b, ntiles, TILES, "blocks")
    with_res = b.icmp_unsigned("!=", sz["res"], i64(0), name="with.res")
    with for_range(b, fn.args[1], "t", start=fn.args[0], guard=True) as t:
        bi = b.udiv(t, blocks, name="bi")
        t0 = mul(b, b.sub(t, mul(b, bi, blocks, "bi.t"), name="blk"), TILES, "t0")
        nt = umin(b, b.sub(ntiles, t0, name="t.left"), i64(TILES), "nt")
        blk = _Block(b, spec, intr, sz, buf, bi, t0, nt, tw, bias, lo)
        rows = i64(TILES)
        for r in reversed(ROWS[:-1]):
            rows = b.select(b.icmp_unsigned("<=", nt, i64(r), name="fits"), i64(r), rows, name="rows")
        b.store(_ZERO, chk_slot)
        _transform_inputs(blk, vs, chk_slot, rows)
        chk = b.load(chk_slot, name="chk", typ=_V)
        bad = b.fcmp_unordered("uno", chk, chk, name="bad")
        bad.type = _MASK
        finite = b.icmp_unsigned("==", b.bitcast(bad, ir.IntType(LANES), name="bad.bits"), ir.Constant(
            ir.IntType(LANES), 0), name="finite")
        with if_else(b, finite, name="wino") as (fast, slow):
            with fast:
                _rows_variants(b, rows, lambda r: _products(blk, vs, ms, r))
                with if_else(b, with_res, name="ores") as (yes, no):
                    with yes:
                        _transform_outputs(blk, ms, True)
                    with no:
                        _transform_outputs(blk, ms, False)
            with slow:
                with if_else(b, with_res, name="dres") as (yes, no):
                    with yes:
                        _direct(blk, True)
                    with no:
                        _direct(blk, False)
    b.ret_void()
    return fn


def _entry(module: ir.Module, name: str, spec: WinoSpec) -> ir.Function:
    """`i32 name(const i64 *sizes, void *const *bufs)`: the (batch, block) items on the
    calling thread, or through onnxcc_parallel_for when the work is big"""
    fn = gcall.internal_function(module, name, gcall.CALL_FNTY, ("sizes", "bufs"), noinline=True)
    sizes, bufs = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    ctx = b.alloca(ir.ArrayType(PTR, 2), name="ctx")
    b.store(sizes, b.gep(ctx, [i64(0), i64(0)], inbounds=True, name="ctx.s"))
    b.store(bufs, b.gep(ctx, [i64(0), i64(1)], inbounds=True, name="ctx.b"))

    def size(nm: str) -> ir.Value:
        return b.load(gcall.gep(b, sizes, SIZES.index(nm), I64, f"{nm}.p"), name=nm, typ=I64, align=8)

    tiles = mul(b, ceildiv(b, size("oh"), 2, "th"), ceildiv(b, size("ow"), 2, "tw"), "tiles")
    items = mul(b, size("batch"), ceildiv(b, tiles, TILES, "blocks"), "items")
    work = mul(b, mul(b, mul(b, size("batch"), size("m"), "w"), spec.cout, "w"), 9 * spec.cin, "work")
    body = _body(module, f"{name}.blocks", spec)
    gcall.run_items(b, module, items, body, ctx, work)
    b.ret(i32(0))
    return fn


def define_callee(module: ir.Module, call_name: str) -> ir.Function:
    """The LLVM definition of Winograd CallStmt callee `call_name` (kernel/conv_wino_call.py) in `module`."""
    spec = parse(call_name)
    assert spec is not None and spec.supported(), call_name
    name = f"onnxcc.f32wino.{call_name.removeprefix(PREFIX)}"
    fn = module.globals.get(name)
    if fn is not None:
        return fn
    return out_rows.define_with_border(module, name, _entry(module, f"{name}.grid", spec))


__all__ = ["define_callee"]
