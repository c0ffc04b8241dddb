"""The never-inlined helpers (GEMM micro-kernels) are compiled once per library
(codegen/cpu/shared_helpers.py): moved, renamed under the build's prefix and `hidden`, into
a module of their own; each version keeps a declaration that tells LLVM what the definition
would have (only its pointer arguments' memory, none of them captured)."""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import onnx
from llvmlite import ir
from onnx import TensorProto, helper

import onnxcc
from onnxcc.codegen.cpu.shared_helpers import share_helpers
from onnxcc.testing import ort_run

F32 = ir.FloatType()


def _version(prefix: str, value: float, *, call_runtime: bool = False) -> ir.Module:
    """A module with one noinline helper `onnxcc.h` (stores `value` through its pointer) and
    a version function `PREFIX.k` calling it."""
    m = ir.Module(name=prefix)
    h = ir.Function(m, ir.FunctionType(ir.VoidType(), [ir.PointerType()]), "onnxcc.h")
    h.linkage = "internal"
    h.attributes.add("noinline")
    b = ir.IRBuilder(h.append_basic_block("entry"))
    if call_runtime:  # a call LLVM cannot see through: no memory claim may be made
        b.call(ir.Function(m, ir.FunctionType(ir.VoidType(), []), "onnxcc_runtime_hook"), [])
    b.store(ir.Constant(F32, value), h.args[0])
    b.ret_void()
    k = ir.Function(m, ir.FunctionType(ir.VoidType(), [ir.PointerType()]), f"{prefix}.k")
    b = ir.IRBuilder(k.append_basic_block("entry"))
    b.call(h, [k.args[0]])
    b.ret_void()
    return m


def test_identical_helpers_move_once_under_the_prefix():
    a, b = _version("v0", 1.0), _version("v1", 1.0)
    text = share_helpers([(a, "v0"), (b, "v1")], "lib")
    assert text is not None
    assert text.count("define hidden void @\"lib.onnxcc.h\"") == 1
    assert "argmemonly" in text.split('@"lib.onnxcc.h"')[1].splitlines()[0]
    for m in (a, b):
        printed = str(m)
        assert 'declare hidden void @"lib.onnxcc.h"(ptr captures(none)' in printed
        assert "argmemonly" in printed.split('@"lib.onnxcc.h"')[-1].splitlines()[0]
        assert 'call void @"lib.onnxcc.h"' in printed
        assert "define internal" not in printed


def test_differing_copies_stay_internal():
    """Equal names are equal code by construction (the emitters look a helper up by name);
    copies whose instructions differ anyway are left where they are."""
    a, b = _version("v0", 1.0), _version("v1", 1.0, call_runtime=True)
    assert share_helpers([(a, "v0"), (b, "v1")], "lib") is None
    for m in (a, b):
        assert "define internal void" in str(m)


def test_no_memory_claim_for_a_helper_that_calls_out():
    a = _version("v0", 1.0, call_runtime=True)
    text = share_helpers([(a, "v0")], "lib")
    assert text is not None and "argmemonly" not in text and "captures(none)" not in text


def _two_matmuls() -> onnx.ModelProto:
    rng = np.random.default_rng(1)
    w1 = rng.standard_normal((64, 96)).astype(np.float32)
    w2 = rng.standard_normal((96, 64)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["y"])]
    g = helper.make_graph(nodes, "mm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [helper.make_tensor("w1", TensorProto.FLOAT, w1.shape, w1.ravel()),
                           helper.make_tensor("w2", TensorProto.FLOAT, w2.shape, w2.ravel())])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_library_defines_each_micro_kernel_once(tmp_path):
    """Several versions (n == 16, n == 48, generic) share their micro-kernels: each is one
    symbol of the library, and every version computes what onnxruntime does."""
    model = _two_matmuls()
    path = tmp_path / "mm.onnx"
    onnx.save(model, path)
    art = onnxcc.compile(path, tmp_path / "art", specialize={"n": [16, 48]})
    lib = onnxcc.load(tmp_path / "art")
    assert lib.num_versions >= 2
    rng = np.random.default_rng(2)
    for n in (1, 16, 37, 48):
        x = rng.standard_normal((n, 64)).astype(np.float32)
        np.testing.assert_allclose(lib.run({"x": x})["y"], ort_run(model, {"x": x})["y"], rtol=1e-4, atol=1e-3)
    nm = shutil.which("nm")
    if nm is None:
        return
    syms = subprocess.run([nm, str(art.library)], capture_output=True, text=True, check=True).stdout.split()
    ukr = [s for s in syms if ".gemm.ukr." in s]
    # named by the target, not the library (codegen/cpu/backend.py `_kernel_prefix`)
    assert ukr and all(re.fullmatch(r"onnxcc_ukr_[0-9a-f]{12}\.onnxcc\.gemm\.ukr\..*", s) for s in ukr)
    assert len(ukr) == len(set(ukr))


def test_helper_naming_metadata_stays_internal():
    """Metadata numbering is its module's own: a helper whose instructions name any stays."""
    a = _version("v0", 1.0)
    h = a.globals["onnxcc.h"]
    store = h.blocks[0].instructions[0]
    store.set_metadata("nontemporal", a.add_metadata([ir.IntType(32)(1)]))
    assert share_helpers([(a, "v0")], "lib") is None
    assert "define internal void" in str(a)


I64, PTR, I32 = ir.IntType(64), ir.PointerType(), ir.IntType(32)
CALL = ir.FunctionType(I32, [PTR, PTR])


def _runtime_call(prefix: str, *, body_called_by_version: bool = False, ukr_differs: bool = False) -> ir.Module:
    """A module with a runtime call's entry `onnxcc.rc` (noinline, i32(ptr, ptr)) handing its
    task body `onnxcc.rc.tasks` (inlinable) to the thread pool; the body calls the micro-kernel
    `onnxcc.rc.ukr` (noinline). The version entry `PREFIX` calls `onnxcc.rc`."""
    m = ir.Module(name=prefix)
    pfor = ir.Function(m, ir.FunctionType(ir.VoidType(), [I64, PTR, PTR]), "onnxcc_parallel_for")
    ukr = ir.Function(m, ir.FunctionType(ir.VoidType(), [PTR]), "onnxcc.rc.ukr")
    ukr.linkage = "internal"
    ukr.attributes.add("noinline")
    b = ir.IRBuilder(ukr.append_basic_block("entry"))
    b.store(ir.Constant(F32, 2.0 if ukr_differs else 1.0), ukr.args[0])
    if ukr_differs:
        b.store(ir.Constant(F32, 3.0), ukr.args[0])
    b.ret_void()
    tasks = ir.Function(m, ir.FunctionType(ir.VoidType(), [I64, I64, PTR]), "onnxcc.rc.tasks")
    tasks.linkage = "internal"
    b = ir.IRBuilder(tasks.append_basic_block("entry"))
    b.call(ukr, [tasks.args[2]])
    b.ret_void()
    rc = ir.Function(m, CALL, "onnxcc.rc")
    rc.linkage = "internal"
    rc.attributes.add("noinline")
    b = ir.IRBuilder(rc.append_basic_block("entry"))
    b.call(pfor, [ir.Constant(I64, 4), tasks, rc.args[1]])
    b.ret(ir.Constant(I32, 0))
    k = ir.Function(m, ir.FunctionType(I32, [PTR]), prefix)
    b = ir.IRBuilder(k.append_basic_block("entry"))
    if body_called_by_version:
        b.call(tasks, [ir.Constant(I64, 0), ir.Constant(I64, 1), k.args[0]])
    b.ret(b.call(rc, [k.args[0], k.args[0]]))
    return m


def test_a_runtime_call_moves_with_its_task_body():
    """The entry of an LLVM-defined runtime call moves, and its task body goes with it: the
    version modules keep declarations (their copy of the body, unused now, is dropped by
    LLVM), the shared module defines all three (LLVM accepts it linked with the versions)."""
    from onnxcc.codegen.llvm.target import parse_modules

    a, b = _runtime_call("v0"), _runtime_call("v1")
    text = share_helpers([(a, "v0"), (b, "v1")], "lib")
    assert text is not None
    assert text.count('define hidden i32 @"lib.onnxcc.rc"') == 1
    assert text.count('define hidden void @"lib.onnxcc.rc.ukr"') == 1
    assert text.count('define internal void @"onnxcc.rc.tasks"') == 1
    for m in (a, b):
        printed = str(m)
        assert 'declare hidden i32 @"lib.onnxcc.rc"' in printed and 'call i32 @"lib.onnxcc.rc"' in printed
    parse_modules([text, str(a), str(b)])  # every reference resolves, nothing defined twice


def test_a_task_body_a_version_function_calls_stays_callable():
    """A version function that calls the task body itself keeps its own copy (it may inline
    it); the shared module has another, internal to it."""
    from onnxcc.codegen.llvm.target import parse_modules

    a = _runtime_call("v0", body_called_by_version=True)
    text = share_helpers([(a, "v0")], "lib")
    assert text is not None and 'define hidden i32 @"lib.onnxcc.rc"' in text
    printed = str(a)
    assert 'define internal void @"onnxcc.rc.tasks"' in printed
    assert 'call void @"onnxcc.rc.tasks"' in printed
    parse_modules([text, printed])


def test_a_call_whose_micro_kernel_stays_stays_too():
    """A unit calling a never-inlined helper that is not shared (its copies differ) would name
    a function its module no longer defines: it stays, with the helper."""
    from onnxcc.codegen.llvm.target import parse_modules

    a, b = _runtime_call("v0"), _runtime_call("v1", ukr_differs=True)
    assert share_helpers([(a, "v0"), (b, "v1")], "lib") is None
    for m in (a, b):
        printed = str(m)
        assert "declare hidden" not in printed
        assert 'define internal i32 @"lib.onnxcc.rc"' in printed  # renamed, still its module's own
        parse_modules(printed)


def test_grouped_helpers_each_in_a_module_of_their_own():
    """`shared_modules` with a grouping: the helpers it maps to None in the first module, each
    group's in one of its own (the GEMM micro-kernels by tile family, compiled through the
    short pipeline); a helper calling another group's declares it, and all of them together
    with the versions link (every reference resolves, nothing is defined twice)."""
    from onnxcc.codegen.cpu.shared_helpers import shared_modules
    from onnxcc.codegen.llvm.target import parse_modules

    a, b = _runtime_call("v0"), _runtime_call("v1")
    mods = shared_modules([(a, "v0"), (b, "v1")], "lib", lambda old: "k" if old == "onnxcc.rc.ukr" else None)
    assert [key for _, key in mods] == [None, "k"]
    rest, kernels = mods[0][0], mods[1][0]
    assert 'define hidden i32 @"lib.onnxcc.rc"' in rest and 'define hidden void @"lib.onnxcc.rc.ukr"' not in rest
    assert 'declare hidden void @"lib.onnxcc.rc.ukr"(ptr captures(none)' in rest  # what the task body calls
    assert kernels.count("define hidden") == 1 and 'define hidden void @"lib.onnxcc.rc.ukr"' in kernels
    parse_modules([rest, kernels, str(a), str(b)])


def test_kernel_family_is_the_micro_kernel_less_its_rows():
    from onnxcc.codegen.cpu.shared_helpers import kernel_family

    assert kernel_family("onnxcc.gemm.ukr.24x16.direct.cf277d46a22.v16") == "onnxcc.gemm.ukr.16.direct.cf277d46a22.v16"
    assert kernel_family("onnxcc.gemm.ukr.1x16.direct.cf277d46a22.v16") == "onnxcc.gemm.ukr.16.direct.cf277d46a22.v16"
    assert kernel_family("onnxcc.gemm.ukr.8x48.a8.win.v16") != kernel_family("onnxcc.gemm.ukr.8x16.a8.win.v16")
    for other in ("onnxcc.f32conv.ukr.12x32", "onnxcc.f32chanpool", "onnxcc.f32conv.tasks"):
        assert kernel_family(other) is None  # -O3, as before
