"""codegen/cpu/split.py: a version's module cut into parts that LLVM accepts one by one,
every version function defined in exactly one part, helpers copied where used."""

from __future__ import annotations

import re

import llvmlite.binding as llvm
from llvmlite import ir

from onnxcc.codegen.cpu.split import split_module
from onnxcc.codegen.llvm.target import parse_modules

I64, PTR, VOID = ir.IntType(64), ir.PointerType(), ir.VoidType()
BODY = ir.FunctionType(VOID, [I64, I64, PTR])


def _module() -> ir.Module:
    """m_v0 hands m_v0.par.a to the thread pool and calls m_v0.par.b directly; both bodies
    call the helper onnxcc.h (noinline), which calls onnxcc.h2; par.a reads a constant."""
    m = ir.Module(name="m")
    w = ir.GlobalVariable(m, ir.ArrayType(I64, 4), "onnxcc.const.w")
    w.initializer, w.linkage, w.global_constant = ir.Constant(ir.ArrayType(I64, 4), [1, 2, 3, 4]), "internal", True
    pfor = ir.Function(m, ir.FunctionType(VOID, [I64, PTR, PTR]), "onnxcc_parallel_for")
    h2 = ir.Function(m, ir.FunctionType(I64, [I64]), "onnxcc.h2")
    h2.linkage = "internal"
    b = ir.IRBuilder(h2.append_basic_block("entry"))
    b.ret(b.mul(h2.args[0], ir.Constant(I64, 3)))
    h = ir.Function(m, ir.FunctionType(I64, [I64]), "onnxcc.h")
    h.linkage = "internal"
    h.attributes.add("noinline")
    b = ir.IRBuilder(h.append_basic_block("entry"))
    b.ret(b.add(b.call(h2, [h.args[0]]), ir.Constant(I64, 1)))
    bodies = []
    for name in ("a", "b"):
        f = ir.Function(m, BODY, f"m_v0.par.{name}")
        f.linkage = "internal"
        b = ir.IRBuilder(f.append_basic_block("entry"))
        x = b.call(h, [f.args[0]])
        if name == "a":
            p = b.gep(w, [ir.Constant(I64, 0), x], inbounds=True, source_etype=w.value_type)
            x = b.load(p, typ=I64)
        b.store(x, f.args[2])
        b.ret_void()
        bodies.append(f)
    main = ir.Function(m, ir.FunctionType(VOID, [PTR]), "m_v0")
    b = ir.IRBuilder(main.append_basic_block("entry"))
    b.call(pfor, [ir.Constant(I64, 8), bodies[0], main.args[0]])
    b.call(bodies[1], [ir.Constant(I64, 0), ir.Constant(I64, 8), main.args[0]])
    b.ret_void()
    return m


def _defined(text: str) -> set[str]:
    return set(re.findall(r'^define [^@]*@"([^"]+)"', text, re.MULTILINE))


def test_split_deals_out_version_functions_and_copies_helpers():
    parts = split_module(_module(), "m_v0", 2)
    assert len(parts) == 2
    texts = [str(p) for p in parts]
    for t in texts:
        parse_modules([t])  # each part is valid LLVM IR on its own
    own = [_defined(t) - {"onnxcc.h", "onnxcc.h2"} for t in texts]
    assert own[0] | own[1] == {"m_v0", "m_v0.par.a", "m_v0.par.b"}
    assert not own[0] & own[1]
    for t, names in zip(texts, own, strict=True):
        if names & {"m_v0.par.a", "m_v0.par.b"}:  # a part with a body carries the helpers, internal
            assert 'define internal i64 @"onnxcc.h"' in t
            assert 'define internal i64 @"onnxcc.h2"' in t
        else:
            assert "onnxcc.h" not in t
    # the bodies the entry reaches in the other part are hidden there and declared here
    main_part = texts[0] if "m_v0" in own[0] else texts[1]
    for f in ("m_v0.par.a", "m_v0.par.b"):
        if f not in _defined(main_part):
            assert f'declare hidden void @"{f}"' in main_part
            assert any(f'define hidden void @"{f}"' in t for t in texts)


def test_split_links_back_to_the_same_functions():
    parts = split_module(_module(), "m_v0", 2)
    linked = parse_modules([str(p) for p in parts])  # llvm links them: nothing missing or twice
    names = {f.name for f in linked.functions if not f.is_declaration}
    assert {"m_v0", "m_v0.par.a", "m_v0.par.b"} <= names
    assert isinstance(linked, llvm.ModuleRef)


def test_one_part_or_one_movable_function_leaves_the_module_alone():
    m = _module()
    assert split_module(m, "m_v0", 1) == [m]
    assert split_module(m, "other_v3", 4) == [m]  # no function of that version
