"""CPU emitter of `CallStmt` (kernel/extern.py): a call of a C runtime function.

The sizes go into an i64 array and the buffer pointers into a pointer array, both in the
entry block's frame; the call is `i32 fn(ptr sizes, ptr buffers)` and a nonzero result
leaves the kernel with ERR_ASSERT (the runtime set the thread's error message, which the
dispatcher appends). cpu.py's `STMT_EMITTERS` table points here. The 8-bit GEMM calls
(kernel/i8gemm.py), the f32 implicit-GEMM conv (kernel/conv_call.py), the small-input-channel
stem conv (kernel/conv_stem_call.py), the Winograd 3x3 conv (kernel/conv_wino_call.py) and the
channels-last global pool (kernel/chan_pool_call.py) keep that signature but their callee is
defined in LLVM, in the module (gemm_int8.py, gemm_implicit.py, conv_stem.py, conv_wino.py,
chan_pool.py), not in the runtime.
"""

from __future__ import annotations

from llvmlite import ir

from onnxcc.kernel.chan_pool_call import CALLEE as CHANPOOL_CALLEE
from onnxcc.kernel.conv_call import CALLEE as F32CONV_CALLEE
from onnxcc.kernel.conv_stem_call import PREFIX as STEM_PREFIX
from onnxcc.kernel.conv_wino_call import PREFIX as WINO_PREFIX
from onnxcc.kernel.expr import ERR_ASSERT
from onnxcc.kernel.extern import CallStmt
from onnxcc.kernel.i8gemm import CALLEES as I8GEMM_CALLEES

from ..llvm.exprs import ExprEmitter
from ..llvm.helpers import I32, I64, PTR, get_or_declare, i32, i64
from .chan_pool import define_callee as define_chanpool
from .conv_stem import define_callee as define_stem
from .conv_wino import define_callee as define_wino
from .gemm_implicit import define_callee as define_f32conv
from .gemm_int8 import define_callee

CALL_FNTY = ir.FunctionType(I32, [PTR, PTR])


def emit_call(kem, ctx, s: CallStmt, k: int) -> None:
    b = ctx.b
    em = ExprEmitter(ctx, b)
    sizes = ctx.alloca(ir.ArrayType(I64, max(1, len(s.sizes))), f"call{k}.sizes")
    bufs = ctx.alloca(ir.ArrayType(PTR, max(1, len(s.buffers))), f"call{k}.bufs")
    for j, e in enumerate(s.sizes):
        b.store(em.emit(e), b.gep(sizes, [i64(0), i64(j)], inbounds=True))
    for j, name in enumerate(s.buffers):
        b.store(ctx.buffer_ptr(name), b.gep(bufs, [i64(0), i64(j)], inbounds=True))
    if s.fn in I8GEMM_CALLEES:
        fn = define_callee(ctx.module, s.fn)
    elif s.fn == F32CONV_CALLEE:
        fn = define_f32conv(ctx.module)
    elif s.fn.startswith(STEM_PREFIX):
        fn = define_stem(ctx.module, s.fn)
    elif s.fn.startswith(WINO_PREFIX):
        fn = define_wino(ctx.module, s.fn)
    elif s.fn == CHANPOOL_CALLEE:
        fn = define_chanpool(ctx.module)
    else:
        fn = get_or_declare(ctx.module, s.fn, CALL_FNTY)
    rc = b.call(fn, [sizes, bufs], name=f"call{k}.rc")
    ok = ctx.fn.append_basic_block(f"call{k}.ok")
    b.cbranch(b.icmp_signed("!=", rc, i32(0)), ctx.fail_block(ERR_ASSERT), ok)
    b.position_at_end(ok)


EXTERN_EMITTERS = {CallStmt: emit_call}

__all__ = ["EXTERN_EMITTERS", "emit_call"]
