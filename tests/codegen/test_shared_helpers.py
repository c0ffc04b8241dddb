"""The never-inlined helpers (GEMM micro-kernels) are compiled once per library
(codegen/cpu/shared_helpers.py): moved, renamed under the build's prefix and `hidden`, into
a module of their own; each version keeps a declaration that tells LLVM what the definition
would have (only its pointer arguments' memory, none of them captured)."""

from __future__ import annotations

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
    assert ukr and all(s.startswith("mm.onnxcc.gemm.ukr.") for s in ukr)
    assert len(ukr) == len(set(ukr))


def test_helper_naming_metadata_stays_internal():
    """Metadata numbering is its module's own: a helper whose instructions name any stays."""
    a = _version("v0", 1.0)
    h = a.globals["onnxcc.h"]
    store = h.blocks[0].instructions[0]
    store.set_metadata("nontemporal", a.add_metadata([ir.IntType(32)(1)]))
    assert share_helpers([(a, "v0")], "lib") is None
    assert "define internal void" in str(a)
