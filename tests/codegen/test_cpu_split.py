"""codegen/cpu/split.py: a version's module cut into parts that LLVM accepts one by one,
every version function defined in exactly one part, helpers copied where used."""

from __future__ import annotations

import re

import llvmlite.binding as llvm
from llvmlite import ir

from onnxcc.codegen.cpu.split import split_module
from onnxcc.codegen.llvm.target import parse_modules

I64, PTR, VOID, F32 = ir.IntType(64), ir.PointerType(), ir.VoidType(), ir.FloatType()
BODY = ir.FunctionType(VOID, [I64, I64, PTR])
CALL = ir.FunctionType(ir.IntType(32), [PTR, PTR])


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


def test_split_by_level_keeps_each_level_in_parts_of_its_own():
    """Functions grouped by the -O level the backend gives them: a part holds one level,
    every version function is defined in exactly one part, each part parses alone."""
    from onnxcc.codegen.cpu.split import split_by_level

    def level(fn: ir.Function) -> int:
        return 2 if fn.name == "m_v0.par.a" else 3

    out = split_by_level(_module(), "m_v0", 1, level)  # one part asked, two levels: two parts
    assert sorted(lv for _, lv in out) == [2, 3]
    owners = {}
    for part, lv in out:
        text = str(part)
        parse_modules([text])
        for name in _defined(text) - {"onnxcc.h", "onnxcc.h2"}:
            assert name not in owners
            owners[name] = lv
    assert owners == {"m_v0": 3, "m_v0.par.b": 3, "m_v0.par.a": 2}
    # one level and one part: the module itself, whole
    m = _module()
    assert split_by_level(m, "m_v0", 1, lambda fn: 3) == [(m, 3)]


def test_only_big_b_packers_go_below_the_build_level():
    """`_LOW_OPT`: a conv-sized B packer at -O2, a small one and every other function at the
    build's level; a build below -O2 keeps its own level everywhere."""
    from onnxcc.codegen.cpu.backend import _fn_opt

    def fn(name: str, n: int) -> ir.Function:
        m = ir.Module(name="t")
        f = ir.Function(m, ir.FunctionType(VOID, [I64]), name)
        b = ir.IRBuilder(f.append_basic_block("entry"))
        x = f.args[0]
        for _ in range(n - 1):
            x = b.add(x, ir.Constant(I64, 1))
        b.ret_void()
        return f

    assert _fn_opt("m_v0", 3, fn("m_v0.gemm.packb.conv1", 400)) == (2, 2)
    assert _fn_opt("m_v0", 3, fn("m_v0.gemm.packb.matmul", 100)) == (3, 3)
    assert _fn_opt("m_v0", 3, fn("m_v0.gemm.conv1", 400)) == (3, 3)
    assert _fn_opt("m_v0", 1, fn("m_v0.gemm.packb.conv1", 400)) == (1, 1)


def test_a_control_only_entry_skips_the_ir_optimiser():
    """The version's entry, when it only does size arithmetic and calls (`control_only`):
    only the clean-up IR passes, the code generator at -O1 (`CONTROL_OPT`); an entry with a compute loop
    (its `!llvm.loop` metadata), a vector value or a micro-kernel call keeps the build's
    level, and so does every other function and a small entry; -O0 builds stay at -O0."""
    from onnxcc.codegen.cpu.backend import CONTROL_OPT, _fn_opt
    from onnxcc.codegen.llvm.helpers import for_range, scalar_loop_metadata
    from onnxcc.codegen.llvm.target import LIGHT

    def entry(kind: str, name: str = "m_v0", n: int = 600) -> ir.Function:
        m = ir.Module(name="t")
        f = ir.Function(m, ir.FunctionType(VOID, [I64]), name)
        b = ir.IRBuilder(f.append_basic_block("entry"))
        x = f.args[0]
        for _ in range(n):  # size arithmetic
            x = b.add(x, ir.Constant(I64, 1))
        if kind == "loop":
            with for_range(b, x, "i", guard=True, metadata=scalar_loop_metadata(m)):
                pass
        elif kind == "vector":
            v = ir.VectorType(F32, 8)
            b.fadd(ir.Constant(v, [0.0] * 8), ir.Constant(v, [1.0] * 8))
        elif kind == "ukr":
            ukr = ir.Function(m, ir.FunctionType(VOID, [I64]), "onnxcc.gemm.ukr.8x32.a8.v16")
            b.call(ukr, [x])
        elif kind == "body":
            body = ir.Function(m, ir.FunctionType(VOID, [I64]), "m_v0.par.a")
            b.call(body, [x])
        elif kind in ("call", "call-defined", "shared-ukr"):  # a runtime call (the conv call) / a micro-kernel
            name, ty = (("lib.onnxcc.gemm.ukr.8x32.v16", ir.FunctionType(VOID, [PTR, PTR])) if kind == "shared-ukr"
                        else ("lib.onnxcc.f32conv" if kind == "call" else "onnxcc.f32conv", CALL))
            callee = ir.Function(m, ty, name)
            if kind == "call-defined":  # defined here: the part would compile it at the entry's level
                callee.linkage = "internal"
                cb = ir.IRBuilder(callee.append_basic_block("entry"))
                cb.ret(ir.Constant(ir.IntType(32), 0))
            null = ir.Constant(PTR, None)
            b.call(callee, [null, null])
        b.ret_void()
        return f

    assert _fn_opt("m_v0", 3, entry("plain")) == CONTROL_OPT == (LIGHT, 1)
    assert _fn_opt("m_v0", 3, entry("body")) == CONTROL_OPT  # calling the parallel bodies is control
    # a runtime call defined in the shared helpers' module is one call; defined in this
    # module it would be compiled with the entry, and a micro-kernel call is compute
    assert _fn_opt("m_v0", 3, entry("call")) == CONTROL_OPT
    for kind in ("loop", "vector", "ukr", "call-defined", "shared-ukr"):
        assert _fn_opt("m_v0", 3, entry(kind)) == (3, 3), kind
    assert _fn_opt("m_v0", 3, entry("plain", "m_v0.par.b")) == (3, 3)  # only the entry
    assert _fn_opt("m_v0", 0, entry("plain")) == (0, 0)
    assert _fn_opt("m_v0", 3, entry("plain", n=100)) == (3, 3)  # small: -O3 costs little, may inline


def _caller(name: str, callee: str | None, n: int = 300) -> ir.Function:
    """Version function `name`: `n` instructions of index arithmetic, then a call of `callee`."""
    m = ir.Module(name="t")
    f = ir.Function(m, BODY, name)
    b = ir.IRBuilder(f.append_basic_block("entry"))
    x = f.args[0]
    for _ in range(n):
        x = b.add(x, ir.Constant(I64, 1))
    if callee is not None:
        b.call(ir.Function(m, ir.FunctionType(VOID, [I64]), callee), [x])
    b.ret_void()
    return f


def test_a_gemm_task_body_is_compiled_at_O1():
    """`GEMM_TASK_OPT`: a GEMM task body (`gemm.*` calling micro-kernels that read A in place,
    `.direct`, shared or not) at -O1 in an -O2 / -O3 build; a body calling a packed-A
    micro-kernel, a packer, a parallel body, or a `gemm.*` without a micro-kernel call keep the
    build's level (or `_LOW_OPT`'s), and so does every function of a build at or below -O1."""
    from onnxcc.codegen.cpu.backend import GEMM_TASK_OPT, _fn_opt

    ukr, shared = "onnxcc.gemm.ukr.24x8.direct.v8", "onnxcc_ukr_0123456789ab.onnxcc.gemm.ukr.8x32.direct.v16"
    packed = "onnxcc_ukr_0123456789ab.onnxcc.gemm.ukr.8x32.a8.v16"
    assert GEMM_TASK_OPT == (1, 1)
    assert _fn_opt("m_v0", 3, _caller("m_v0.gemm.conv1", ukr)) == GEMM_TASK_OPT
    assert _fn_opt("m_v0", 3, _caller("m_v0.gemm.out0", shared)) == GEMM_TASK_OPT
    assert _fn_opt("m_v0", 2, _caller("m_v0.gemm.out0", shared)) == GEMM_TASK_OPT
    assert _fn_opt("m_v0", 3, _caller("m_v0.gemm.fc1", packed)) == (3, 3)  # packs A itself
    assert _fn_opt("m_v0", 3, _caller("m_v0.gemm.packb.conv1", ukr)) == (2, 2)  # a packer: `_LOW_OPT`
    assert _fn_opt("m_v0", 3, _caller("m_v0.gemm.conv1", "onnxcc.h")) == (3, 3)
    assert _fn_opt("m_v0", 3, _caller("m_v0.gemm.pad.conv1", None)) == (3, 3)
    assert _fn_opt("m_v0", 3, _caller("m_v0.par.dw1", ukr)) == (3, 3)
    assert _fn_opt("m_v0", 1, _caller("m_v0.gemm.conv1", ukr)) == (1, 1)
    assert _fn_opt("m_v0", 0, _caller("m_v0.gemm.conv1", ukr)) == (0, 0)


def test_shared_helpers_but_the_micro_kernels_are_compiled_at_O1():
    """`_helper_opt`: the shared helpers' module (conv / pool calls) at `HELPER_OPT` in an -O2 /
    -O3 build, a micro-kernel family's through the short pipeline at the build's code
    generator level; at or below -O1 the build's level; LSR kept in all."""
    from onnxcc.codegen.cpu.backend import HELPER_OPT, _helper_opt
    from onnxcc.codegen.llvm.target import KERNEL

    assert HELPER_OPT == (1, 1)
    assert _helper_opt(3, None) == (1, 1, True)
    assert _helper_opt(2, None) == (1, 1, True)
    assert _helper_opt(1, None) == (1, 1, True)
    assert _helper_opt(0, None) == (0, 0, True)
    assert _helper_opt(3, "onnxcc.gemm.ukr.8.direct.v16") == (KERNEL, 3, True)
    assert _helper_opt(0, "onnxcc.gemm.ukr.8.direct.v16") == (0, 0, True)


def test_a_built_matmul_compiles_its_gemm_task_at_O1(tmp_path, monkeypatch):
    """Through the backend: a MatMul's task body reaches the workers in a part of its own at
    `GEMM_TASK_OPT`, with nothing but GEMM task bodies in it, and the library still computes
    the product."""
    import numpy as np
    from onnx import TensorProto, helper

    from onnxcc.codegen.cpu import backend
    from onnxcc.testing import compile_lib, op_model

    seen: list[tuple[str, object]] = []
    real = backend.compile_in_workers

    def spy(work, jobs):
        seen.extend((str(m), target[3]) for m, target in work)
        return real(work, jobs)

    monkeypatch.setattr(backend, "compile_in_workers", spy)
    monkeypatch.setenv("ONNXCC_NO_OBJECT_CACHE", "1")
    w = np.random.default_rng(0).standard_normal((64, 96)).astype(np.float32)
    model = op_model([helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", TensorProto.FLOAT, ["n", 64])],
                     ["y"], {"w": w})
    lib = compile_lib(model, tmp_path)
    at_o1 = [text for text, lv in seen if isinstance(lv, tuple) and lv[:2] == backend.GEMM_TASK_OPT]
    assert at_o1, [lv for _, lv in seen]
    for text in at_o1:
        defined = [d for d in _defined(text) if ".onnxcc." not in d and not d.startswith("onnxcc")]
        assert defined and all(".gemm." in d and ".gemm.packb." not in d for d in defined), defined
        assert "onnxcc.gemm.ukr." in text
    x = np.random.default_rng(1).standard_normal((37, 64)).astype(np.float32)
    np.testing.assert_allclose(lib.run({"x": x})["y"], x @ w, rtol=1e-4, atol=1e-4)


def test_workers_take_the_biggest_part_first_and_return_work_order():
    """compile_in_workers hands the parts out biggest first, yet each object comes back at
    its own module's place in the work list."""
    from onnxcc.codegen.cpu.backend import compile_in_workers

    def mod(name: str, n: int) -> ir.Module:
        m = ir.Module(name=name)
        f = ir.Function(m, ir.FunctionType(I64, [I64]), name)
        b = ir.IRBuilder(f.append_basic_block("entry"))
        x = f.args[0]
        for k in range(n):
            x = b.mul(b.add(x, ir.Constant(I64, k)), f.args[0])
        b.ret(x)
        return m

    names = ["small_fn", "big_fn", "mid_fn"]
    work = [(mod(n, s), (None, None, None, 2)) for n, s in zip(names, (2, 300, 40))]
    objs = compile_in_workers(work, 2)
    assert len(objs) == 3
    for name, obj in zip(names, objs, strict=True):
        assert name.encode() in obj and not any(o.encode() in obj for o in names if o != name)
