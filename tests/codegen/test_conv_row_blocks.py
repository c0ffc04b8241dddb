"""How many row blocks per image the GEMM calls' task grid takes (codegen/cpu/gemm_call.py
`row_blocks`), compiled alone into a function of (batch, tiles, panels, threads) and run:
the fewest blocks of at most rb / mr tiles, unless few tasks would leave a thread idle and
more blocks share them better (the pool deals up to 8 tasks a thread one a chunk)."""

from __future__ import annotations

import ctypes

import llvmlite.binding as llvm
import pytest
from llvmlite import ir

from onnxcc.codegen.cpu import gemm_call as gcall
from onnxcc.codegen.llvm.exprs import F32
from onnxcc.codegen.llvm.helpers import I64

SHAPE = gcall.CallShape(sizes=(), bufs=(), ety=F32, nr=32, mr=12, rb=96)
"""the f32 conv call's: 12-row tiles, at most 8 a block"""


@pytest.fixture(scope="module")
def row_blocks():
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    module = ir.Module(name="row_blocks")
    fn = ir.Function(module, ir.FunctionType(I64, [I64] * 4), name="row_blocks")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    batch, tiles, panels, threads = fn.args
    b.ret(gcall.row_blocks(b, SHAPE, batch, tiles, panels, threads))
    mod = llvm.parse_assembly(str(module))
    engine = llvm.create_mcjit_compiler(mod, llvm.Target.from_default_triple().create_target_machine())
    engine.finalize_object()
    call = ctypes.CFUNCTYPE(ctypes.c_int64, *[ctypes.c_int64] * 4)(engine.get_function_address("row_blocks"))
    yield call
    del engine


@pytest.mark.parametrize("batch, tiles, panels, threads, blocks", [
    (1, 22, 1, 1, 3),   # one thread: the fewest blocks of at most 8 tiles
    (1, 22, 1, 2, 4),   # 3 tasks on 2 threads shared 2:1; 4 of 5 or 6 tiles, 11:11
    (1, 22, 2, 2, 3),   # 6 tasks already split evenly
    (4, 22, 1, 2, 3),   # 12 tasks
    (1, 22, 1, 3, 3),   # 3 tasks on 3 threads
    (1, 5, 1, 2, 2),    # one block of 5 tiles: a thread idle; 2 blocks of 2 and 3
    (1, 1, 1, 2, 1),    # one tile: never more blocks than tiles
    (1, 11, 1, 2, 2),   # 2 tasks of 5 and 6 tiles
    (3, 22, 1, 2, 4),   # 9 tasks: 5:4; 12, 6:6
    (1, 262, 1, 2, 33),  # 33 tasks: the pool's 8 chunks of 4 or 5 split them evenly enough
])
def test_row_blocks(row_blocks, batch, tiles, panels, threads, blocks):
    assert row_blocks(batch, tiles, panels, threads) == blocks
