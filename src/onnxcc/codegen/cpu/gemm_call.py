"""The call scaffolding the LLVM-defined GEMM calls share (gemm_int8.py's 8-bit VNNI GEMM,
gemm_implicit.py's f32 implicit-GEMM conv): the runtime calls' one signature
`i32 fn(const i64 *sizes, void *const *bufs)`, the split of the work into (batch, row block,
panel) tasks run serially or through onnxcc_parallel_for, and the micro-kernels' common
parts (zeroed accumulators, row pointers, the walk over a window's segments, column masks).

What differs between the calls is a parameter: the element type P and Q are addressed in
(bytes for the 8-bit GEMM, f32 for the conv), the names of the sizes and buffers, the panel
width and the rows per task; the micro-kernels and what a task does with its tile stay in
their files."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from llvmlite import ir

from ..c.link import runtime_define
from ..llvm.helpers import I1, I32, I64, PTR, VOID, for_range, get_or_declare, i32, i64, if_else
from .gemm_ir import add, ceildiv, ceildiv_v, mul, umin

POOL_CHUNKS_PER_THREAD = runtime_define("ONNXCC_CHUNKS_PER_THREAD")
"""the chunks per thread onnxcc_parallel_for cuts its items into: runtime/onnxcc_rt.c's
ONNXCC_CHUNKS_PER_THREAD, read from there (the compile cache's key covers that source)"""
PAR_MIN_WORK = 1 << 18
"""M*N*K below which a call runs on the calling thread (the pool's wake-up costs more)"""

CALL_FNTY = ir.FunctionType(I32, [PTR, PTR])
BODY_FNTY = ir.FunctionType(VOID, [I64, I64, PTR])
MASK = ir.VectorType(I1, 16)


def gep(b: ir.IRBuilder, base: ir.Value, off: ir.Value | int, ety: ir.Type, name: str) -> ir.Value:
    """`base + off` elements of `ety` (inbounds)"""
    return b.gep(base, [i64(off) if isinstance(off, int) else off], inbounds=True, name=name, source_etype=ety)


def splat(b: ir.IRBuilder, x: ir.Value, name: str) -> ir.Value:
    """x in all 16 lanes of a vector of its type"""
    vt = ir.VectorType(x.type, 16)
    undef = ir.Constant(vt, ir.Undefined)
    ins = b.insert_element(undef, x, i32(0), name=f"{name}.ins")
    return b.shuffle_vector(ins, undef, ir.Constant(ir.VectorType(I32, 16), [0] * 16), name=name)


def internal_function(module: ir.Module, name: str, fnty: ir.FunctionType, arg_names: Sequence[str],
                      noinline: bool = False) -> ir.Function:
    """a new module-private nounwind function, its arguments named `arg_names`"""
    fn = ir.Function(module, fnty, name=name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    if noinline:  # a micro-kernel called from several tile variants: one copy, not one per caller
        fn.attributes.add("noinline")
    for a, n in zip(fn.args, arg_names, strict=True):
        a.name = n
    return fn


UKR_ARGS = (("rowp", PTR), ("q", PTR), ("s0", I64), ("ss0", I64), ("s1", I64), ("ss1", I64), ("l", I64),
            ("c", PTR), ("ldc", I64))
"""a micro-kernel's leading arguments: its rows' pointers, the packed panel, the window's
segments (`window_segments`), the output tile and its row stride"""


def micro_kernel(module: ir.Module, name: str, tail: Sequence[tuple[str, ir.Type]], vt: ir.VectorType, rows: int,
                 nv: int) -> tuple[ir.Function, ir.IRBuilder, list[list[ir.Value]], list[ir.Value]]:
    """A new `void name(UKR_ARGS..., tail...)` (q and c noalias: the packed panel and the tile
    overlap nothing the kernel reads), with its entry block begun: (the function, a builder
    after the rows x nv accumulators of `vt` set to zero (mem2reg keeps them in registers)
    and the loads of the row pointers rowp[0 .. rows), the accumulators, the row pointers)."""
    args = (*UKR_ARGS, *tail)
    fn = internal_function(module, name, ir.FunctionType(VOID, [t for _, t in args]), [n for n, _ in args],
                           noinline=True)
    for a in (fn.args[1], fn.args[7]):
        a.add_attribute("noalias")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    acc = [[b.alloca(vt, name=f"acc.{r}.{v}") for v in range(nv)] for r in range(rows)]
    zero = ir.Constant(vt, [0 if isinstance(vt.element, ir.IntType) else 0.0] * 16)
    for row in acc:
        for slot in row:
            b.store(zero, slot)
    prow = [b.load(b.gep(fn.args[0], [i64(r)], inbounds=True, name="rowp.p", source_etype=PTR), name=f"p.row{r}",
                   typ=PTR, align=8) for r in range(rows)]
    return fn, b, acc, prow


@contextmanager
def window_segments(b: ir.IRBuilder, s0: ir.Value, ss0: ir.Value, s1: ir.Value, ss1: ir.Value,
                    per_seg: ir.Value, name: str) -> Iterator[tuple[ir.Value, ir.Value]]:
    """The S0 x S1 contiguous segments of a row's window (a conv's kernel rows and, when a
    tap's C elements are not contiguous with the next tap's, its columns): yields (the
    segment's element offset in the row, its index times `per_seg`, named `name`), the
    packed weights' start of the segment in whatever unit the caller counts them."""
    with for_range(b, s0, "sa", guard=True) as sa:
        with for_range(b, s1, "sb", guard=True) as sb:
            base = add(b, mul(b, sa, ss0, "seg.a"), mul(b, sb, ss1, "seg.b"), "seg.off")
            yield base, mul(b, add(b, mul(b, sa, s1, "seg.i"), sb, "seg.i"), per_seg, name)


def column_mask(b: ir.IRBuilder, ncols: ir.Value, v: int) -> ir.Value:
    """lane l of a tile's vector v is one of its columns when v*16 + l < ncols"""
    left = b.sub(ncols, i64(16 * v), name=f"left{v}")
    undef = ir.Constant(ir.VectorType(I64, 16), ir.Undefined)
    lv = b.shuffle_vector(b.insert_element(undef, left, i32(0), name="left.ins"), undef,
                          ir.Constant(ir.VectorType(I32, 16), [0] * 16), name=f"left{v}.v")
    m = b.icmp_signed(">", lv, ir.Constant(ir.VectorType(I64, 16), list(range(16))), name=f"mask{v}")
    m.type = MASK  # NOTE: llvmlite types vector compares as i1
    return m


@dataclass(frozen=True)
class CallShape:
    """What tells one GEMM call's scaffolding from another's."""

    sizes: tuple[str, ...]
    """the names of the call's sizes array, in order; batch, m, n, s0, s1, l among them"""
    bufs: tuple[str, ...]
    """the names of the buffers the task body reads, bufs[0 .. len); P and Q first"""
    ety: ir.Type
    """the element P's batch stride and Q's panel size count in"""
    nr: int
    """columns per packed weight panel"""
    mr: int
    """rows per micro-kernel call (the row pointer array's length)"""
    rb: int
    """rows per task, at most (a multiple of mr; fewer where that splits the work more evenly
    over the pool's threads, `row_blocks`)"""


@dataclass(frozen=True)
class Task:
    """One (batch, row block, panel) task inside the task body's loop."""

    b: ir.IRBuilder
    fn: ir.Function
    shape: CallShape
    rowp: ir.Value
    """[mr x ptr] on the stack: the micro-kernel's row pointers"""
    sz: dict[str, ir.Value]
    bufs: dict[str, ir.Value]
    bi: ir.Value
    """the batch index"""
    blk: ir.Value
    """the row block"""
    col: ir.Value
    """the panel's first column"""
    ncols: ir.Value
    """n - col: the columns left from the panel's first"""
    pbat: ir.Value
    """P of batch bi"""
    qpan: ir.Value
    """the packed panel"""
    tiles: ir.Value
    """ceil(m / mr): an image's tiles"""
    blocks: ir.Value
    """row blocks per image in this call (`row_blocks`)"""

    def rows(self) -> tuple[ir.Value, ir.Value]:
        """[r_lo, r_hi): the task's rows. Blocks differ by at most a tile, the longer first
        (tiles % blocks of them): the pool deals tasks in order, so the last ones, what a
        thread that finished early waits on, are the short ones."""
        b, mr = self.b, self.shape.mr
        q = b.udiv(self.tiles, self.blocks, name="t.q")
        r = b.urem(self.tiles, self.blocks, name="t.r")

        def start(k: ir.Value, name: str) -> ir.Value:
            return add(b, mul(b, k, q, f"{name}.q"), umin(b, k, r, f"{name}.r"), name)

        first = start(self.blk, "t.lo")
        end = start(add(b, self.blk, 1, "t.next"), "t.hi")
        return mul(b, first, mr, "r.lo"), umin(b, mul(b, end, mr, "r.hi"), self.sz["m"], "r.end")


@contextmanager
def task_body(module: ir.Module, name: str, shape: CallShape,
              panel_size: Callable[[ir.IRBuilder, dict[str, ir.Value]], ir.Value]) -> Iterator[Task]:
    """Defines `void name(i64 begin, i64 end, ptr ctx)`: tasks [begin, end) of the (batch, row
    block, panel) grid, ctx = {sizes, bufs, row blocks per image} of the call; the with-block
    emits one task's work.
    `panel_size(b, sizes)`: a packed panel's length in `shape.ety` elements."""
    fn = internal_function(module, name, BODY_FNTY, ("begin", "end", "ctx"))
    ctx = fn.args[2]
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    rowp = b.alloca(ir.ArrayType(PTR, shape.mr), name="rowp")
    sizes = b.load(ctx, name="sizes", typ=PTR, align=8)
    bufs = b.load(b.gep(ctx, [i64(1)], inbounds=True, name="bufs.p", source_etype=PTR), name="bufs", typ=PTR,
                  align=8)
    sz = {n: b.load(b.gep(sizes, [i64(j)], inbounds=True, name="s.p", source_etype=I64), name=n, typ=I64, align=8)
          for j, n in enumerate(shape.sizes)}
    bp = {nm: b.load(b.gep(bufs, [i64(j)], inbounds=True, name="buf.p", source_etype=PTR), name=nm, typ=PTR, align=8)
          for j, nm in enumerate(shape.bufs)}
    blocks = b.ptrtoint(b.load(b.gep(ctx, [i64(2)], inbounds=True, name="rblocks.pp", source_etype=PTR),
                               name="rblocks.p", typ=PTR, align=8), I64, name="rblocks")
    panels = ceildiv(b, sz["n"], shape.nr, "panels")
    psize = panel_size(b, sz)
    tiles = ceildiv(b, sz["m"], shape.mr, "tiles")
    with for_range(b, fn.args[1], "t", start=fn.args[0], guard=True) as t:
        j = b.urem(t, panels, name="panel")
        rest = b.udiv(t, panels, name="t.rest")
        blk = b.urem(rest, blocks, name="rblock")
        bi = b.udiv(rest, blocks, name="b")
        pbat = gep(b, bp["P"], mul(b, bi, sz["sp"], "p.b"), shape.ety, "p.bat")
        qpan = gep(b, bp["Q"], mul(b, j, psize, "q.j"), shape.ety, "q.pan")
        col = mul(b, j, shape.nr, "col")
        yield Task(b, fn, shape, rowp, sz, bp, bi, blk, col, b.sub(sz["n"], col, name="ncols"), pbat, qpan, tiles,
                   blocks)
    b.ret_void()


SPLIT_CANDIDATES = 8
"""block counts tried above the fewest, ceil(tiles / (rb / mr)): enough for a multiple of up to
8 threads"""


def row_blocks(b: ir.IRBuilder, shape: CallShape, batch: ir.Value, tiles: ir.Value, panels: ir.Value,
               threads: ir.Value) -> ir.Value:
    """Row blocks per image (of whole tiles of mr rows, differing by at most a tile:
    `Task.rows`). The fewest that keep a block within `shape.rb` rows, unless more blocks
    leave the busiest thread a smaller share of the (batch, block, panel) tasks, ceil(chunks /
    threads) / chunks, the chunks as the pool cuts them (runtime/onnxcc_rt.c
    `onnxcc_chunk_count`: one task each up to 2 * POOL_CHUNKS_PER_THREAD per thread, else
    POOL_CHUNKS_PER_THREAD per thread, taken as equal); the fewest blocks on a tie. A 16x16
    output (22 tiles of 12 rows) was 3 tasks of 8, 8 and 6 tiles, which 2 threads share 2:1;
    as 4 tasks, 11:11."""
    fewest = ceildiv(b, tiles, shape.rb // shape.mr, "rb.fewest")
    chunks = mul(b, threads, POOL_CHUNKS_PER_THREAD, "rb.chunks")
    singles = mul(b, chunks, 2, "rb.singles")
    best, share = fewest, None
    for d in range(SPLIT_CANDIDATES):
        cand = add(b, fewest, d, f"rb.cand{d}")
        tasks = mul(b, mul(b, batch, cand, f"rb.tasks{d}"), panels, f"rb.tasks{d}")
        one_each = b.icmp_unsigned("<=", tasks, singles, name=f"rb.one{d}")
        dealt = b.select(one_each, tasks, chunks, name=f"rb.dealt{d}")
        most = ceildiv_v(b, dealt, threads, f"rb.most{d}")
        if share is None:
            share = (most, dealt)
            continue
        ok = b.and_(b.icmp_unsigned("<", i64(d), threads, name=f"rb.fits{d}"),
                    b.icmp_unsigned("<=", cand, tiles, name=f"rb.tile{d}"), name=f"rb.ok{d}")
        # most / dealt < share[0] / share[1], cross-multiplied
        less = b.icmp_unsigned("<", mul(b, most, share[1], f"rb.l{d}"), mul(b, share[0], dealt, f"rb.r{d}"),
                               name=f"rb.lt{d}")
        better = b.and_(ok, less, name=f"rb.better{d}")
        share = (b.select(better, most, share[0], name=f"rb.most{d}"),
                 b.select(better, dealt, share[1], name=f"rb.dealt{d}"))
        best = b.select(better, cand, best, name=f"rb.best{d}")
    return best


def define_entry(module: ir.Module, name: str, shape: CallShape, body: Callable[[], ir.Function]) -> ir.Function:
    """Defines `i32 name(const i64 *sizes, void *const *bufs)`: the task grid of `body()` run
    on the calling thread, or through onnxcc_parallel_for when the work is big and splits."""
    # never inlined: one call per conv, and the version's entry stays control code that
    # shared_helpers.py moves this (with its task body) out of
    fn = internal_function(module, name, CALL_FNTY, ("sizes", "bufs"), noinline=True)
    sizes, bufs = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    ctx = b.alloca(ir.ArrayType(PTR, 3), name="ctx")  # sizes, bufs, row blocks per image (as a pointer)
    b.store(sizes, b.gep(ctx, [i64(0), i64(0)], inbounds=True, name="ctx.s"))
    b.store(bufs, b.gep(ctx, [i64(0), i64(1)], inbounds=True, name="ctx.b"))

    def size(nm: str) -> ir.Value:
        j = shape.sizes.index(nm)
        return b.load(b.gep(sizes, [i64(j)], inbounds=True, name=f"{nm}.p", source_etype=I64), name=nm, typ=I64,
                      align=8)

    batch, m, n = size("batch"), size("m"), size("n")
    kk = mul(b, mul(b, size("s0"), size("s1"), "k"), size("l"), "k")
    panels = ceildiv(b, n, shape.nr, "panels")
    tiles = ceildiv(b, m, shape.mr, "tiles")
    fewest = ceildiv(b, tiles, shape.rb // shape.mr, "rblocks")
    work = mul(b, mul(b, mul(b, batch, m, "w"), n, "w"), kk, "work")
    body_fn = body()
    runtime = get_or_declare(module, "onnxcc_parallel_for", ir.FunctionType(VOID, [I64, PTR, PTR]))
    big = b.icmp_unsigned(">=", work, i64(PAR_MIN_WORK), name="big")
    threads = b.zext(b.call(get_or_declare(module, "onnxcc_num_threads", ir.FunctionType(I32, [])), [],
                            name="threads"), I64, name="threads")
    blocks = b.select(big, row_blocks(b, shape, batch, tiles, panels, threads), fewest, name="rblocks")
    b.store(b.inttoptr(blocks, PTR, name="rblocks.p"), b.gep(ctx, [i64(0), i64(2)], inbounds=True, name="ctx.rb"))
    tasks = mul(b, mul(b, batch, blocks, "tasks"), panels, "tasks")
    big = b.and_(big, b.icmp_unsigned(">", tasks, i64(1), name="many"), name="par")
    with if_else(b, big, name="par") as (then, otherwise):
        with then:
            b.call(runtime, [tasks, body_fn, ctx])
        with otherwise:
            b.call(body_fn, [i64(0), tasks, ctx])
    b.ret(i32(0))
    return fn


def run_items(b: ir.IRBuilder, module: ir.Module, items: ir.Value, body: ir.Function, ctx: ir.Value,
              work: ir.Value, min_work: int = PAR_MIN_WORK) -> None:
    """`body(0, items, ctx)` on the calling thread, or `items` through onnxcc_parallel_for where
    the work is at least `min_work` and there is more than one item (the conv callees' entries)."""
    par = b.and_(b.icmp_unsigned(">=", work, i64(min_work), name="big"),
                 b.icmp_unsigned(">", items, i64(1), name="many"), name="par")
    with if_else(b, par, name="par") as (then, otherwise):
        with then:
            runtime = get_or_declare(module, "onnxcc_parallel_for", ir.FunctionType(VOID, [I64, PTR, PTR]))
            b.call(runtime, [items, body, ctx])
        with otherwise:
            b.call(body, [i64(0), items, ctx])


__all__ = ["BODY_FNTY", "CALL_FNTY", "MASK", "PAR_MIN_WORK", "CallShape", "Task", "column_mask", "define_entry",
           "gep", "internal_function", "micro_kernel", "row_blocks", "run_items", "splat", "task_body",
           "window_segments"]
