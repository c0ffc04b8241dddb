"""Non-temporal (streaming) stores for a row-staged compute's output too large for the caches.

A plain store to a line not in cache first reads the line (a read-for-ownership), so a
kernel that reads x and writes y moves three lines through DRAM for every two it needs. On
this machine's 2 cores (benchmarks/heldout_table.py's chains, 100 MB arrays): a plain copy
streams 22-30 GB/s (read + write counted), one with non-temporal stores 36-46 GB/s.

A row-staged compute (cpu/rowstage.py: LayerNorm after an activation) writes each row twice
and reads it back between, so its output row cannot be stored non-temporally in place: the
row would leave the cache before its statistics read it. On the streaming path the row is
staged in a 64-byte-aligned stack row instead (L1 resident: 3 KiB for 768 floats) and,
once normalised there, copied to the output with full-vector aligned non-temporal stores:

    row = stream ? stack : &out[outer..., 0]
    pass 1, statistics, pass 2 on row[.]     (cpu/rowstage.py, unchanged)
    if stream: nt_copy(stack -> &out[outer..., 0])

`stream` is decided at run time, once per function (dims are symbolic): the output is at
least STREAM_MIN_BYTES (an output the next kernel could read from the L3 stays on plain
stores) and its base 64-byte aligned (every row is then: the row's bytes are a multiple of
64). Where the output's size is static and below the threshold nothing of this is emitted.
Non-temporal stores are weakly ordered: the function that made them ends with an `sfence`
(`fence_streams`, before a parallel body returns to the pool, or after a serial nest), so
whoever joins it sees the rows. The CPU backend's targets are x86 (its features and vector
widths are x86's); the fence is x86's `sfence`.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import TYPE_CHECKING

from llvmlite import ir

from onnxcc.ir import canon

from ..llvm.helpers import I1, I32, I64, PTR, VOID, for_range, get_or_declare, i32, i64, if_then, scalar_loop_metadata

if TYPE_CHECKING:
    from onnxcc.kernel.program import Compute

    from .emit import FnCtx

STREAMING = True
"""whether row-staged computes take the streaming path at all. On: neither side wins clearly
on this machine's 2 cores, and it is the path the chains were tuned and checked on. Under
load plain stores look better: benchmarks/chain_cycles.py, 2 threads, x[1, rows, 768], the
fastest call of 3-8 rounds alternated with the streaming build (December 2026, load 3.4-9),
plain stores took, of its cycles a vector:
rows 16384 (48 MiB each way, four runs) SiLU + LN 0.67-0.77x, tanh-GELU 0.75-0.86x, Mish
0.53-0.82x, Erf-GELU 0.34-0.39x (two runs: its long calls seldom had both cores to
themselves); rows 65536 (192 MiB) SiLU 0.69-0.72x, tanh-GELU 0.90x, Erf-GELU 0.78x. Each
line copied out right after its normalisation instead of in a burst after the row: 1.7-2.9x
the burst's cycles. On a quiet machine they do not: benchmarks/heldout_table.py --threads 2
--models gelu_tanh,gelu_erf,silu,mish, plain stores against the streaming build in the same
run, two runs at load 0.8-1.2, the [16 | 32, 1024, 768] rows took tanh-GELU + LN 0.86-1.25x
(median 1.07), Erf-GELU 0.96-1.05x, SiLU 0.94-1.20x, Mish 0.86-1.49x the streaming time. The
results of a build without the path are not bit for bit the same: LLVM unrolls the first pass
differently around the staged row's select, and the row sum (the mean) is reassociated by
the unroll; tanh-GELU / Mish + LN moved by up to 1.9e-6 on a quarter of the rows of
[16, 1024, 768] (one ulp of their mean), SiLU + LN not at all; test_rowstage holds the
chains to onnxruntime within rtol 1e-5, atol 2e-5."""
STREAM_MIN_BYTES = 16 << 20
"""output bytes from which a row-staged compute stores non-temporally: half this machine's
32 MiB L3, so an output that input and output together could keep in the L3 for the next
kernel is stored plainly"""
LINE = 64
"""bytes of one non-temporal vector store (a cache line; a zmm register)"""
MAX_ROW_BYTES = 16 << 10
"""the largest row staged on the stack (4096 f32)"""
_VEC = ir.VectorType(I32, LINE // 4)


@dataclass(frozen=True)
class StreamRow:
    """The streaming path of one row-staged compute in one function."""

    flag: ir.Value
    """i1, computed in the entry block: store this compute's rows non-temporally"""
    stack: ir.Value
    """the 64-byte-aligned stack row the row is staged in on the streaming path"""
    lines: int
    """the row's bytes / LINE"""


def stream_row(ctx: FnCtx, c: Compute) -> StreamRow | None:
    """The streaming path of `c` (a row-staged compute, its row the innermost var) where
    it may take one: a static row of whole lines, at most MAX_ROW_BYTES, and an output not
    statically below STREAM_MIN_BYTES. None where it keeps plain stores only (always
    while STREAMING is off)."""
    if not STREAMING:
        return None
    ext = c.extents[-1]
    itemsize = ctx.buffer_dtype(c.out).itemsize
    if ctx.buffer_dtype(c.out).bits < 8 or not isinstance(ext, int):
        return None
    row_bytes = ext * itemsize
    if row_bytes % LINE or row_bytes > MAX_ROW_BYTES:
        return None
    numel = canon(prod(ctx.buffer_shape(c.out)))
    if isinstance(numel, int) and numel * itemsize < STREAM_MIN_BYTES:
        return None
    eb = ctx.eb
    big = eb.icmp_unsigned(">=", eb.mul(ctx.dim(numel), i64(itemsize), name=f"{c.out}.bytes"),
                           i64(STREAM_MIN_BYTES), name=f"{c.out}.big")
    base = eb.ptrtoint(ctx.buffer_ptr(c.out), I64, name=f"{c.out}.addr")
    aligned = eb.icmp_unsigned("==", eb.and_(base, i64(LINE - 1), name=f"{c.out}.misalign"), i64(0),
                               name=f"{c.out}.aligned")
    flag = eb.and_(big, aligned, name=f"{c.out}.stream")
    stack = eb.alloca(ir.ArrayType(_VEC, row_bytes // LINE), name=f"{c.out}.stage")
    stack.align = LINE
    stack.type = PTR  # NOTE: llvmlite types allocas as typed pointers; the IR is opaque
    ctx.stream_flags.append(flag)
    return StreamRow(flag, stack, row_bytes // LINE)


def copy_row(ctx: FnCtx, sr: StreamRow, dst: ir.Value) -> None:
    """`if flag: dst[0 : lines * LINE] = stack` by aligned non-temporal vector stores (`dst`,
    an output row, is 64-byte aligned where the flag is set)."""
    b = ctx.b
    nt = ctx.module.add_metadata([i32(1)])
    with if_then(b, sr.flag, name="stream"):
        with for_range(b, i64(sr.lines), "stream.line", guard=False,
                       metadata=scalar_loop_metadata(ctx.module, unroll=True)) as k:
            src = b.gep(sr.stack, [i64(0), k], inbounds=True, name="stream.src",
                        source_etype=sr.stack.allocated_type)
            v = b.load(src, name="stream.v", align=LINE, typ=_VEC)
            to = b.gep(dst, [k], inbounds=True, name="stream.dst", source_etype=_VEC)
            st = b.store(v, to, align=LINE)
            st.set_metadata("nontemporal", nt)


def fence_streams(ctx: FnCtx) -> None:
    """An `sfence` where any of the function's streaming flags is set, at the builder's
    position (before the function returns), then forget the flags."""
    if not ctx.stream_flags:
        return
    b = ctx.b
    any_set: ir.Value = ir.Constant(I1, 0)
    for f in ctx.stream_flags:
        any_set = b.or_(any_set, f, name="streamed")
    with if_then(b, any_set, name="sfence"):
        b.call(get_or_declare(ctx.module, "llvm.x86.sse.sfence", ir.FunctionType(VOID, [])), [])
    ctx.stream_flags.clear()


__all__ = ["LINE", "MAX_ROW_BYTES", "STREAMING", "STREAM_MIN_BYTES", "StreamRow", "copy_row", "fence_streams",
           "stream_row"]
