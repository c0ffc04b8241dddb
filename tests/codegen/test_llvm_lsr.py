"""The code generator without loop strength reduction (llvm/target.py `emit_object(lsr=False)`,
what the CPU backend uses for every module but the micro-kernels'): the object differs where
LSR would rewrite a loop's addressing, LLVM's process-wide option is set back afterwards (a
later emission is what it was before), and the object cache keeps the two apart."""

from __future__ import annotations

from llvmlite import ir

from onnxcc.codegen.llvm.object_cache import object_key
from onnxcc.codegen.llvm.target import emit_object

I64, F32 = ir.IntType(64), ir.FloatType()


def _strided_sum() -> str:
    """float f(ptr a, i64 n): sum of a[3*i + 1] for i < n, a loop whose address LSR rewrites."""
    m = ir.Module(name="lsr")
    fn = ir.Function(m, ir.FunctionType(F32, [ir.PointerType(), I64]), "f")
    a, n = fn.args
    entry, loop, done = fn.append_basic_block("entry"), fn.append_basic_block("loop"), fn.append_basic_block("done")
    b = ir.IRBuilder(entry)
    go = b.icmp_signed(">", n, I64(0))
    b.cbranch(go, loop, done)
    b.position_at_end(loop)
    i = b.phi(I64)
    acc = b.phi(F32)
    idx = b.add(b.mul(i, I64(3)), I64(1))
    x = b.load(b.gep(a, [idx], source_etype=F32), typ=F32)
    nacc = b.fadd(acc, x)
    ni = b.add(i, I64(1))
    i.add_incoming(I64(0), entry)
    i.add_incoming(ni, loop)
    acc.add_incoming(ir.Constant(F32, 0.0), entry)
    acc.add_incoming(nacc, loop)
    b.cbranch(b.icmp_signed("<", ni, n), loop, done)
    b.position_at_end(done)
    out = b.phi(F32)
    out.add_incoming(ir.Constant(F32, 0.0), entry)
    out.add_incoming(nacc, loop)
    b.ret(out)
    return str(m)


def test_without_lsr_differs_and_the_option_is_restored():
    text = _strided_sum()
    with_lsr = emit_object(text, opt=1)
    without = emit_object(text, opt=1, lsr=False)
    assert without != with_lsr
    assert emit_object(text, opt=1) == with_lsr  # LLVM's option was set back


def test_object_cache_key_tells_them_apart():
    args = ("ir", "x86_64-unknown-linux-gnu", "znver4", "+avx2", 3, 3)
    assert object_key(*args) == object_key(*args, lsr=True)
    assert object_key(*args, lsr=False) != object_key(*args)
