"""Helpers emitted once per build (codegen/cpu/shared_helpers.py `emit_once`, `HelpersOnce`):
a later module of the build gets the helper's declaration only, which `shared_modules`
points at the shared definition as it would a copy; where the first definition is not
shared, the later module defines its own after all. The GEMM micro-kernels go this way: a
build's version modules print as they did when each built its own copy."""

from __future__ import annotations

import dataclasses

from llvmlite import ir

from onnxcc.codegen.cpu.shared_helpers import HelpersOnce, emit_once, kernel_family, shared_modules
from onnxcc.codegen.llvm.target import parse_modules

F32 = ir.FloatType()


def _version(prefix: str, *, tagged: bool = False) -> ir.Module:
    """A module whose version function `PREFIX.k` calls noinline helper `onnxcc.h`, defined
    through `emit_once` (`tagged`: its store names metadata, so it cannot be shared)."""
    m = ir.Module(name=prefix)
    h = ir.Function(m, ir.FunctionType(ir.VoidType(), [ir.PointerType()]), "onnxcc.h")
    h.linkage = "internal"
    h.attributes.add("noinline")
    h.args[0].name = "p"

    def define() -> None:
        b = ir.IRBuilder(h.append_basic_block("entry"))
        st = b.store(ir.Constant(F32, 1.0), h.args[0])
        if tagged:
            st.set_metadata("onnxcc.tag", m.add_metadata([]))
        b.ret_void()

    emit_once(h, define)
    k = ir.Function(m, ir.FunctionType(ir.VoidType(), [ir.PointerType()]), f"{prefix}.k")
    b = ir.IRBuilder(k.append_basic_block("entry"))
    b.call(h, [k.args[0]])
    b.ret_void()
    return m


def test_outside_a_build_every_module_defines_its_own():
    a, b = _version("v0"), _version("v1")
    assert a.globals["onnxcc.h"].blocks and b.globals["onnxcc.h"].blocks


def test_a_later_module_declares_the_first_definition():
    once = HelpersOnce()
    with once:
        a = _version("v0")
    with once:
        b = _version("v1")
    assert a.globals["onnxcc.h"].blocks and not b.globals["onnxcc.h"].blocks
    mods = shared_modules([(a, "v0"), (b, "v1")], "lib", once=once)
    assert len(mods) == 1 and mods[0][0].count('define hidden void @"lib.onnxcc.h"') == 1
    # both versions now declare it alike: renamed, hidden, with the memory claims
    decls = [[x for x in str(m).splitlines() if x.startswith("declare")] for m in (a, b)]
    assert decls[0] == decls[1] == ['declare hidden void @"lib.onnxcc.h"(ptr captures(none) %"p") argmemonly noinline']
    assert 'call void @"lib.onnxcc.h"' in str(b)
    parse_modules([mods[0][0], str(a), str(b)])  # every reference resolves, nothing twice


def test_a_later_module_defines_its_own_where_the_first_is_not_shared():
    once = HelpersOnce()
    with once:
        a = _version("v0", tagged=True)  # names metadata: stays in its module
    with once:
        b = _version("v1")
    assert not b.globals["onnxcc.h"].blocks
    assert shared_modules([(a, "v0"), (b, "v1")], "lib", once=once) == []
    assert b.globals["onnxcc.h"].blocks  # defined after all
    assert 'define internal void @"onnxcc.h"' in str(b)
    parse_modules(str(b))


def _plan(vl: int):
    from onnxcc.ir import DType, sym
    from onnxcc.kernel import KernelProgram, Var, rsum
    from onnxcc.kernel.row_epilogue import RowOp
    from onnxcc.kernel.schedule import TargetInfo, schedule_program

    M, K = sym("M"), sym("K")
    p = KernelProgram.new("ukr", ["M", "K"])
    a = p.input("A", DType.f32, (M, K))
    w = p.input("W", DType.f32, (K, 32))
    c = p.output("C", DType.f32, (M, 32))
    k = Var("k")
    p.compute(c, lambda i, j: rsum([(k, K)], a[i, k] * w[k, j]))
    schedule_program(p, TargetInfo(parallel=False, gemm_min_work=1))
    g = p.body[0].schedule.gemm
    assert g is not None
    return dataclasses.replace(g, mr=8, nr=vl, vl=vl, col_ops=(RowOp("max", 0.0),))


def _ukr_versions(once: HelpersOnce | None) -> list[tuple[ir.Module, str]]:
    """Two version modules, each calling the same two micro-kernels (with an epilogue, so its
    body declares min / max too) from `PREFIX.k`."""
    from onnxcc.codegen.cpu.gemm_ukr import ukr_function

    g = _plan(16)
    out = []
    for prefix in ("v0", "v1"):
        m = ir.Module(name=prefix)
        with once if once is not None else _nothing():
            ukrs = [ukr_function(m, rows, g) for rows in (8, 3)]
        k = ir.Function(m, ir.FunctionType(ir.VoidType(), [ir.PointerType()]), f"{prefix}.k")
        b = ir.IRBuilder(k.append_basic_block("entry"))
        for u in ukrs:
            args = [k.args[0] if isinstance(t, ir.PointerType) else ir.Constant(t, 1) for t in u.ftype.args]
            b.call(u, args)
        b.ret_void()
        out.append((m, prefix))
    return out


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc) -> None:
        return None


def test_micro_kernels_built_once_print_as_copies_did():
    """The version modules and the kernel modules print byte for byte as when every module
    built its own micro-kernels."""
    once = HelpersOnce()
    built_once = _ukr_versions(once)
    assert [f.name for f in built_once[1][0].functions if f.blocks] == ["v1.k"]  # no kernel built again
    each = _ukr_versions(None)
    mods_once = shared_modules(built_once, "lib", kernel_family, "ukr_tag", once)
    mods_each = shared_modules(each, "lib", kernel_family, "ukr_tag")
    assert mods_once == mods_each and len(mods_once) == 1
    assert [str(m) for m, _ in built_once] == [str(m) for m, _ in each]
    assert "llvm.maximum" in str(built_once[1][0])  # the intrinsics the body would declare
    parse_modules([mods_once[0][0], *(str(m) for m, _ in built_once)])
