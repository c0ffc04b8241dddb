"""codegen.c.link end to end: hand-written LLVM kernels -> libNAME.so -> loader and C callers."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import llvmlite.binding as llvm
import numpy as np
import pytest
import sympy

from onnxcc.codegen.c.abi import ArtifactSpec, TensorSig, VersionSpec
from onnxcc.codegen.c.build import build_library
from onnxcc.codegen.c.exprs import C_HELPERS, UnsupportedExpr, c_bool, c_int, text
from onnxcc.codegen.c.link import RUNTIME_DIR, generate_dispatcher, generate_metadata
from onnxcc.errors import CompileError, GuardError, RuntimeCallError
from onnxcc.ir import DType, SymbolInfo, sym
from onnxcc.runtime import load

N, M = sym("N"), sym("M")
REPO = Path(__file__).resolve().parents[2]


# ---- kernels ---------------------------------------------------------------------------

# y[i, j] = x[i, j] + b[j] * N ;  w[k] = z[2k] + z[2k+1] (k < M), w[M] = N
# @CHECKS@ is where the generic version tests its workspace and fails on purpose at N = 13.
TOY_KERNEL = """
define i32 @@NAME@(ptr %syms, ptr %ins, ptr %outs, ptr %ws) {
entry:
  %N = load i64, ptr %syms
  %Mp = getelementptr i64, ptr %syms, i64 1
  %M = load i64, ptr %Mp
  %x = load ptr, ptr %ins
  %bpp = getelementptr ptr, ptr %ins, i64 1
  %b = load ptr, ptr %bpp
  %zpp = getelementptr ptr, ptr %ins, i64 2
  %z = load ptr, ptr %zpp
  %y = load ptr, ptr %outs
  %wpp = getelementptr ptr, ptr %outs, i64 1
  %w = load ptr, ptr %wpp
  %Nf = sitofp i64 %N to float
  %n3 = mul i64 %N, 3
@CHECKS@
  br label %body
body:
  br label %loop1
loop1:
  %i = phi i64 [0, %body], [%i1, %loop1]
  %j = urem i64 %i, 3
  %xa = getelementptr float, ptr %x, i64 %i
  %xv = load float, ptr %xa
  %ba = getelementptr float, ptr %b, i64 %j
  %bv = load float, ptr %ba
  %t = fmul float %bv, %Nf
  %r = fadd float %xv, %t
  %ya = getelementptr float, ptr %y, i64 %i
  store float %r, ptr %ya
  %i1 = add i64 %i, 1
  %c1 = icmp ult i64 %i1, %n3
  br i1 %c1, label %loop1, label %loop2
loop2:
  %k = phi i64 [0, %loop1], [%k1, %loop2]
  %k2 = shl i64 %k, 1
  %za = getelementptr float, ptr %z, i64 %k2
  %zv = load float, ptr %za
  %k2b = add i64 %k2, 1
  %zb = getelementptr float, ptr %z, i64 %k2b
  %zw = load float, ptr %zb
  %s = fadd float %zv, %zw
  %wa = getelementptr float, ptr %w, i64 %k
  store float %s, ptr %wa
  %k1 = add i64 %k, 1
  %c2 = icmp ult i64 %k1, %M
  br i1 %c2, label %loop2, label %done
done:
  %wl = getelementptr float, ptr %w, i64 %M
  store float %Nf, ptr %wl
  ret i32 0
@FAILS@
}
"""

# The generic version needs 4*N workspace bytes: it must be non-NULL and 64-byte aligned.
GENERIC_CHECKS = """
  %wsi = ptrtoint ptr %ws to i64
  %mis = and i64 %wsi, 63
  %isnull = icmp eq i64 %wsi, 0
  %misal = icmp ne i64 %mis, 0
  %badws = or i1 %isnull, %misal
  br i1 %badws, label %fail_ws, label %chk13
chk13:
  %lastws = add i64 %N, -1
  %wsl = getelementptr float, ptr %ws, i64 %lastws
  store float 0.0, ptr %wsl
  %is13 = icmp eq i64 %N, 13
  br i1 %is13, label %fail13, label %body0
body0:"""
GENERIC_FAILS = """
fail_ws:
  ret i32 7
fail13:
  ret i32 42"""

# y = 2 * x through the runtime's thread pool; t[0] = the pool's thread count.
PAR_KERNEL = """
declare void @onnxcc_parallel_for(i64, ptr, ptr)
declare i32 @onnxcc_num_threads()

define internal void @par_body(i64 %begin, i64 %end, ptr %ctx) {
entry:
  %x = load ptr, ptr %ctx
  %yq = getelementptr ptr, ptr %ctx, i64 1
  %y = load ptr, ptr %yq
  %any = icmp ult i64 %begin, %end
  br i1 %any, label %loop, label %done
loop:
  %i = phi i64 [%begin, %entry], [%i1, %loop]
  %xa = getelementptr float, ptr %x, i64 %i
  %xv = load float, ptr %xa
  %r = fmul float %xv, 2.0
  %ya = getelementptr float, ptr %y, i64 %i
  store float %r, ptr %ya
  %i1 = add i64 %i, 1
  %c = icmp ult i64 %i1, %end
  br i1 %c, label %loop, label %done
done:
  ret void
}

define i32 @par_kernel(ptr %syms, ptr %ins, ptr %outs, ptr %ws) {
entry:
  %N = load i64, ptr %syms
  %ctx = alloca [2 x ptr]
  %x = load ptr, ptr %ins
  store ptr %x, ptr %ctx
  %y = load ptr, ptr %outs
  %c1 = getelementptr ptr, ptr %ctx, i64 1
  store ptr %y, ptr %c1
  call void @onnxcc_parallel_for(i64 %N, ptr @par_body, ptr %ctx)
  %tp = getelementptr ptr, ptr %outs, i64 1
  %t = load ptr, ptr %tp
  %nt = call i32 @onnxcc_num_threads()
  %nt64 = sext i32 %nt to i64
  store i64 %nt64, ptr %t
  ret i32 0
}
"""


def toy_kernel(name: str, generic: bool) -> str:
    ir = TOY_KERNEL.replace("@NAME@", name)
    ir = ir.replace("@CHECKS@", GENERIC_CHECKS if generic else "")
    return ir.replace("@FAILS@", GENERIC_FAILS if generic else "")


def emit_object(ir: str, path: Path) -> Path:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    mod = llvm.parse_assembly(ir)
    mod.verify()
    # NOTE: reloc="pic" is required: the object is linked into a shared library.
    tm = llvm.Target.from_default_triple().create_target_machine(reloc="pic", codemodel="default")
    path.write_bytes(tm.emit_object(mod))
    return path


def toy_spec(name: str = "toy", versions=None) -> ArtifactSpec:
    return ArtifactSpec(
        name=name,
        inputs=[TensorSig("x", DType.f32, (N, 3)), TensorSig("b", DType.f32, (3,)),
                TensorSig("z", DType.f32, (2 * M,))],
        outputs=[TensorSig("y", DType.f32, (N, 3)), TensorSig("w", DType.f32, (M + 1,))],
        symbols=[SymbolInfo("N", 1, 1000, 1, 'input "x" dim 0'),
                 SymbolInfo("M", 1, 64, 1, 'input "z" dim 0')],
        constraints=[(sympy.Ne(sympy.Mod(N, 7), 0), 'node "Reshape_5": split into heads')],
        versions=versions or [
            VersionSpec("toy_exact", sympy.Eq(N, 4), "", {"N": 4}, 0, "exact"),
            VersionSpec("toy_generic", sympy.true, "", {}, 4 * N, "generic"),
        ],
    )


@pytest.fixture(scope="module")
def toy_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("toy")
    ir = toy_kernel("toy_exact", False) + toy_kernel("toy_generic", True)
    obj = emit_object(ir, d / "toy_kernels.o")
    build_library(toy_spec(), [obj], d)
    return d


@pytest.fixture(scope="module")
def toy(toy_dir):
    return load(toy_dir)


@pytest.fixture(scope="module")
def par_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("par")
    obj = emit_object(PAR_KERNEL, d / "par.o")
    spec = ArtifactSpec(
        name="par",
        inputs=[TensorSig("x", DType.f32, (N,))],
        outputs=[TensorSig("y", DType.f32, (N,)), TensorSig("t", DType.i64, (1,))],
        symbols=[SymbolInfo("N", 1, 10**7)],
        versions=[VersionSpec("par_kernel")],
    )
    build_library(spec, [obj], d)
    return d


def toy_inputs(n: int, m: int = 3, seed: int = 0):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((n, 3), dtype=np.float32), "b": rng.standard_normal(3, dtype=np.float32),
            "z": rng.standard_normal(2 * m, dtype=np.float32)}


def toy_reference(ins):
    n, z = ins["x"].shape[0], ins["z"]
    return ins["x"] + ins["b"] * np.float32(n), np.append(z[0::2] + z[1::2], np.float32(n))


# ---- numerics and dispatch -------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 2, 4, 5, 100, 1000])
def test_numerics_and_version_choice(toy, n):
    ins = toy_inputs(n, m=1 + n % 5)
    out = toy.run(ins)
    y, w = toy_reference(ins)
    np.testing.assert_allclose(out["y"], y, rtol=1e-6)
    np.testing.assert_allclose(out["w"], w, rtol=1e-6)
    assert toy.last_version == (0 if n == 4 else 1)


def test_introspection(toy):
    assert toy.num_versions == 2
    assert "N == 4" in toy.version_info(0) and "exact" in toy.version_info(0)
    assert "N=4" in toy.version_info(0)
    assert "generic" in toy.version_info(1) and "4*N" in toy.version_info(1)
    with pytest.raises(IndexError):
        toy.version_info(2)
    assert toy.output_shape(toy_inputs(6, m=5), "w") == (6,)
    assert toy.output_shape(toy_inputs(6, m=5), 0) == (6, 3)


def test_metadata(toy_dir):
    import hashlib
    import json

    meta = json.loads((toy_dir / "toy.json").read_text())
    lib = (toy_dir / "libtoy.so").read_bytes()
    assert meta.pop("library_size") == len(lib)  # recorded for the loader's check
    assert meta.pop("library_sha256") == hashlib.sha256(lib).hexdigest()
    spec = toy_spec()
    spec.build_id = meta["build_id"]  # fresh for every link
    assert meta == generate_metadata(spec)
    assert meta["outputs"][1] == {"name": "w", "dtype": "f32", "shape": ["M + 1"]}
    assert meta["symbols"][0] == {"name": "N", "lo": 1, "hi": 1000, "multiple_of": 1,
                                  "origin": 'input "x" dim 0'}
    assert meta["constraints"] == [{"text": "N % 7 != 0", "origin": 'node "Reshape_5": split into heads'}]
    assert [v["guard"] for v in meta["versions"]] == ["N == 4", "true"]
    assert meta["versions"][1]["workspace_bytes"] == "4*N"
    assert (toy_dir / "toy_dispatch.c").is_file() and (toy_dir / "toy.h").is_file()


def test_only_the_api_is_exported(toy_dir):
    out = subprocess.run(["nm", "-D", "--defined-only", str(toy_dir / "libtoy.so")],
                         capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip("nm not available")
    exported = {line.split()[-1] for line in out.stdout.splitlines() if " T " in line}
    api = ("run", "output_shape", "last_error", "num_versions", "version_info", "last_version", "build_id",
           "abi_version", "num_inputs", "num_outputs", "input_info", "output_info")
    assert exported == {f"toy_{f}" for f in api}


# ---- errors: every failure is a code plus a message naming input and dim ---------------

def _raw(toy, ins: dict, y_shape=None, w_shape=None):
    n = ins["x"].shape[0] if ins["x"].ndim else 1
    m = ins["z"].shape[0] // 2
    outs = [np.zeros(y_shape or (n, 3), np.float32), np.zeros(w_shape or (m + 1,), np.float32)]
    return toy.run_raw([ins["x"], ins["b"], ins["z"]], outs), toy.last_error


def test_wrong_dtype(toy):
    ins = toy_inputs(5)
    ins["b"] = ins["b"].astype(np.float64)
    rc, msg = _raw(toy, ins)
    assert rc == 3 and msg == 'input "b": expected dtype f32, got f64'
    with pytest.raises(GuardError, match='input "b": expected dtype f32'):
        toy.run(ins)


def test_wrong_rank(toy):
    ins = toy_inputs(5)
    ins["x"] = ins["x"].reshape(5, 3, 1)
    rc, msg = _raw(toy, ins)
    assert rc == 4 and msg == 'input "x": expected rank 2 (shape [N, 3]), got rank 3'


def test_static_dim(toy):
    ins = toy_inputs(5)
    ins["b"] = np.zeros(4, np.float32)
    rc, msg = _raw(toy, ins)
    assert rc == 4 and msg == 'input "b" dim 0: expected 3, got 4'


def test_solved_symbol_not_divisible(toy):
    ins = toy_inputs(5)
    ins["z"] = np.zeros(7, np.float32)
    with pytest.raises(GuardError) as e:
        toy.run(ins)
    assert str(e.value) == 'input "z" dim 0: expected 2*M, got 7, which is not 2*M for any integer M'


def test_symbol_out_of_range(toy):
    rc, msg = _raw(toy, toy_inputs(1001))
    assert rc == 4 and msg == 'input "x" dim 0: N = 1001, out of range [1, 1000]'
    rc, msg = _raw(toy, toy_inputs(5, m=65))
    assert rc == 4 and msg == 'input "z" dim 0: 2*M = 130 gives M = 65, out of range [1, 64]'


def test_violated_constraint(toy):
    rc, msg = _raw(toy, toy_inputs(14))
    assert rc == 5
    assert msg == ('constraint N % 7 != 0 does not hold (N = 14 from input "x" dim 0), needed'
                   ' by node "Reshape_5": split into heads')


def test_wrong_output_shape(toy):
    rc, msg = _raw(toy, toy_inputs(5, m=2), w_shape=(4,))
    assert rc == 4 and msg == 'output "w" dim 0: expected M + 1 = 3 (M = 2), got 4'


def test_kernel_failure(toy):
    with pytest.raises(RuntimeCallError, match="kernel failed in version 1 with code 42") as e:
        toy.run(toy_inputs(13))
    assert e.value.code == 8
    assert toy.last_version == 1


def test_counts_and_output_index(toy):
    ins = toy_inputs(5)
    outs = [np.zeros((5, 3), np.float32)]
    assert toy.run_raw([ins["x"], ins["b"], ins["z"]], outs) == 1
    assert toy.last_error == "expected 2 outputs (y, w), got 1"
    assert toy.run_raw([ins["x"], ins["b"]], outs) == 1
    assert toy.last_error == "expected 3 inputs (x, b, z), got 2"


def test_inconsistent_symbol(tmp_path):
    """A symbol repeated across inputs: the later occurrence is checked against the first."""
    spec = ArtifactSpec(
        name="pair",
        inputs=[TensorSig("a", DType.f32, (N, 2)), TensorSig("c", DType.i64, (N + 1, N))],
        outputs=[TensorSig("o", DType.f32, (2 * N,))],
        symbols=[SymbolInfo("N", 1, 100)],
        versions=[VersionSpec("pair_kernel")],
    )
    src = tmp_path / "k.c"
    src.write_text("#include <stdint.h>\n"
                   "int32_t pair_kernel(const int64_t *s, void *const *i, void *const *o, void *w) {\n"
                   "  float *out = o[0];\n"
                   "  for (int64_t k = 0; k < 2 * s[0]; k++) out[k] = (float)k;\n"
                   "  return 0;\n}\n")
    m = load(build_library(spec, [], tmp_path, extra_c_sources=[src]).parent)
    a, c = np.zeros((3, 2), np.float32), np.zeros((4, 3), np.int64)
    np.testing.assert_array_equal(m.run({"a": a, "c": c})["o"], np.arange(6, dtype=np.float32))
    assert m.run_raw([a, np.zeros((4, 5), np.int64)], [np.zeros(6, np.float32)]) == 4
    assert m.last_error == 'input "c" dim 1: expected N = 3 (bound by input "a" dim 0), got 5'
    assert m.run_raw([a, np.zeros((5, 3), np.int64)], [np.zeros(6, np.float32)]) == 4
    assert m.last_error == 'input "c" dim 0: expected N + 1 = 4 (N = 3 bound by input "a" dim 0), got 5'


def test_no_version_accepts(tmp_path):
    spec = toy_spec("picky", [VersionSpec("toy_exact", sympy.Eq(N, 4), "", {"N": 4}, 0, "exact")])
    obj = emit_object(toy_kernel("toy_exact", False), tmp_path / "k.o")
    m = load(build_library(spec, [obj], tmp_path).parent)
    assert m.run(toy_inputs(4))["y"].shape == (4, 3)
    msg = r"no version accepts this call \(N = 5; M = 3\): version 0 needs N == 4$"
    with pytest.raises(GuardError, match=msg):
        m.run(toy_inputs(5))
    assert m.last_version == -1


# ---- build failures ----------------------------------------------------------------------

def test_missing_kernel_symbol_fails_the_build(tmp_path):
    obj = emit_object(toy_kernel("toy_exact", False), tmp_path / "k.o")
    with pytest.raises(CompileError, match="version 1's kernel toy_generic not defined by any object file"):
        build_library(toy_spec("broken"), [obj], tmp_path)
    assert not (tmp_path / "libbroken.so").exists()


def test_unbindable_symbol_is_a_compile_error():
    spec = toy_spec("bad")
    spec.inputs[2] = TensorSig("z", DType.f32, (M * M,))
    with pytest.raises(CompileError, match="symbol\\(s\\) M cannot be determined"):
        generate_dispatcher(spec)


# ---- the C side: NAME.h and a C caller -------------------------------------------------

C_MAIN = r"""
#include <stdio.h>
#include <string.h>
#include "toy.h"

static DLTensor tensor(float *data, int32_t ndim, int64_t *shape) {
  DLTensor t;
  memset(&t, 0, sizeof t);
  t.data = data; t.device.device_type = kDLCPU; t.ndim = ndim; t.shape = shape;
  t.dtype.code = kDLFloat; t.dtype.bits = 32; t.dtype.lanes = 1;
  return t;
}

int main(void) {
  float x[6] = {1, 2, 3, 4, 5, 6}, b[3] = {10, 20, 30}, z[4] = {1, 2, 3, 4}, y[6], w[3];
  int64_t xs[2] = {2, 3}, bs[1] = {3}, zs[1] = {4}, ys[2], ws[1];
  DLTensor ins[3] = {tensor(x, 2, xs), tensor(b, 1, bs), tensor(z, 1, zs)};
  if (toy_output_shape(ins, TOY_NUM_INPUTS, 0, ys) || toy_output_shape(ins, TOY_NUM_INPUTS, 1, ws)) return 1;
  DLTensor outs[2] = {tensor(y, 2, ys), tensor(w, 1, ws)};
  int rc = toy_run(ins, TOY_NUM_INPUTS, outs, TOY_NUM_OUTPUTS);
  printf("rc=%d version=%d y=%g,%g w=%g,%g,%g\n", rc, toy_last_version(), y[0], y[5], w[0], w[1], w[2]);
  printf("sizeof=%d\n", (int)sizeof(DLTensor));
  zs[0] = 5;
  rc = toy_run(ins, TOY_NUM_INPUTS, outs, TOY_NUM_OUTPUTS);
  printf("rc=%d shape_err=%d msg=%s\n", rc, rc == TOY_ERR_SHAPE, toy_last_error());
  printf("versions=%d info0=%s\n", toy_num_versions(), toy_version_info(0));
  return 0;
}
"""


def test_c_program(toy_dir, tmp_path):
    import ctypes

    from onnxcc.runtime.loader import DLTensor

    (tmp_path / "main.c").write_text(C_MAIN)
    exe = tmp_path / "main"
    subprocess.run(["cc", "-std=c99", "-Wall", "-Werror", "-O1", "-I", str(toy_dir), str(tmp_path / "main.c"),
                    "-L", str(toy_dir), "-ltoy", f"-Wl,-rpath,{toy_dir}", "-o", str(exe)], check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0] == "rc=0 version=1 y=21,66 w=3,7,2"
    assert out[1] == f"sizeof={ctypes.sizeof(DLTensor)}"
    assert out[2] == ('rc=4 shape_err=1 msg=input "z" dim 0: expected 2*M, got 5, '
                      "which is not 2*M for any integer M")
    assert out[3].startswith("versions=2 info0=version 0 (exact, toy_exact): guard N == 4; subs N=4")


FAKE_DLPACK = """
#ifndef DLPACK_DLPACK_H_
#define DLPACK_DLPACK_H_
#include <stdint.h>
typedef enum { kDLCPU = 1 } DLDeviceType;
typedef struct { DLDeviceType device_type; int32_t device_id; } DLDevice;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;
typedef struct {
  void *data; DLDevice device; int32_t ndim; DLDataType dtype; int64_t *shape; int64_t *strides;
  uint64_t byte_offset;
} DLTensor;
#endif
"""


def test_header_compiles_standalone_in_c_and_cpp_and_beside_dlpack(toy_dir, tmp_path):
    (tmp_path / "a.c").write_text('#include "toy.h"\nint main(void) { return TOY_OK; }\n')
    # A stand-in for dlpack.h included first: our copy of the types must step aside.
    (tmp_path / "dlpack.h").write_text(FAKE_DLPACK)
    (tmp_path / "b.c").write_text('#include "dlpack.h"\n#include "toy.h"\n#include "toy.h"\n'
                                  "int main(void) { return 0; }\n")
    compilers = (("a.c", "cc"), ("b.c", "cc")) + ((("a.c", "c++"),) if shutil.which("c++") else ())
    for src, cc in compilers:
        args = [cc, "-fsyntax-only", "-Wall", "-Werror", "-I", str(toy_dir), "-I", str(tmp_path)]
        args += ["-x", "c++"] if cc == "c++" else ["-std=c99", "-pedantic"]
        subprocess.run(args + [str(tmp_path / src)], check=True)


# ---- the thread pool -------------------------------------------------------------------

def test_parallel_for_from_a_kernel(par_dir):
    m = load(par_dir)
    for n in (1, 2, 7, 100_000):
        x = np.arange(n, dtype=np.float32)
        out = m.run({"x": x})
        np.testing.assert_array_equal(out["y"], 2 * x)
        assert out["t"][0] >= 1


@pytest.mark.parametrize("env,expect", [("3", 3), ("1", 1), (None, "cpus"), ("junk", "cpus")])
def test_num_threads_env(par_dir, env, expect):
    script = ("import numpy as np\nfrom onnxcc.runtime import load\nm = load({!r})\n"  # noqa: UP032
              "print(int(m.run({{'x': np.ones(1000, np.float32)}})['t'][0]))".format(str(par_dir)))
    e = {k: v for k, v in os.environ.items() if k != "ONNXCC_NUM_THREADS"}
    if env is not None:
        e["ONNXCC_NUM_THREADS"] = env
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=e, check=True)
    assert int(out.stdout) == (os.sysconf("SC_NPROCESSORS_ONLN") if expect == "cpus" else expect)


def test_concurrent_callers(toy, par_dir):
    """Calls from several Python threads at once: results, last_version and errors stay per thread."""
    par = load(par_dir)
    failures: list[str] = []

    def work(n: int):
        for k in range(30):
            ins = toy_inputs(n, seed=k)
            out = toy.run(ins)
            if not np.allclose(out["y"], toy_reference(ins)[0]) or toy.last_version != (0 if n == 4 else 1):
                failures.append(f"toy n={n}")
            x = np.full(5000 + n, float(n), np.float32)
            if not np.array_equal(par.run({"x": x})["y"], 2 * x):
                failures.append(f"par n={n}")
            if toy.run_raw([ins["x"], ins["b"]], []) != 1 or "expected 3 inputs" not in toy.last_error:
                failures.append(f"error n={n}")

    threads = [threading.Thread(target=work, args=(n,)) for n in (4, 5, 6, 4, 9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


POOL_TEST = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "onnxcc_rt.h"

#define N 10007
typedef struct { int *hits; } job;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_t seen[64];
static int nseen;

static void note_thread(void) {
  pthread_mutex_lock(&mu);
  int found = 0;
  for (int i = 0; i < nseen; i++) found |= pthread_equal(seen[i], pthread_self());
  if (!found && nseen < 64) seen[nseen++] = pthread_self();
  pthread_mutex_unlock(&mu);
}

static void inner(int64_t b, int64_t e, void *ctx) {
  __atomic_add_fetch((int64_t *)ctx, e - b, __ATOMIC_RELAXED);
}

static void body(int64_t b, int64_t e, void *ctx) {
  int *hits = ((job *)ctx)->hits;
  for (int64_t i = b; i < e; i++) hits[i]++;
  int64_t count = 0;
  onnxcc_parallel_for(10, inner, &count);  /* nested: must run inline and cover all 10 */
  if (count != 10) { printf("nested count %lld\n", (long long)count); exit(1); }
}

static void slow(int64_t b, int64_t e, void *ctx) {
  (void)b; (void)e; (void)ctx;
  note_thread();
  struct timespec ts = {0, 2000000};
  nanosleep(&ts, NULL);
}

static int64_t shortest = 1 << 30, longest;

static void measure(int64_t b, int64_t e, void *ctx) {
  (void)ctx;
  pthread_mutex_lock(&mu);
  if (e - b < shortest) shortest = e - b;
  if (e - b > longest) longest = e - b;
  pthread_mutex_unlock(&mu);
}

static void *caller(void *arg) {
  (void)arg;
  int *hits = calloc(N, sizeof(int));
  job j = {hits};
  for (int r = 0; r < 200; r++) onnxcc_parallel_for(N, body, &j);
  for (int i = 0; i < N; i++)
    if (hits[i] != 200) { printf("hits[%d] = %d\n", i, hits[i]); exit(1); }
  free(hits);
  return NULL;
}

int main(void) {
  pthread_t t[4];
  for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, caller, NULL);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  onnxcc_parallel_for(64, slow, NULL);
  onnxcc_parallel_for(34, measure, NULL); /* 3 threads: 12 chunks of 2 or 3 items */
  printf("chunks %lld..%lld\n", (long long)shortest, (long long)longest);
  void *p = onnxcc_aligned_alloc(100), *q = onnxcc_aligned_alloc(0);
  printf("threads=%d distinct=%d aligned=%d\n", onnxcc_num_threads(), nseen,
         p && q && ((uintptr_t)p % 64 == 0) && ((uintptr_t)q % 64 == 0));
  onnxcc_aligned_free(p);
  onnxcc_aligned_free(q);
  onnxcc_error_set("x=%d %s", 3, "y");
  printf("err=%s\n", onnxcc_error_get());
  return 0;
}
"""


@pytest.mark.parametrize("spin_us", ["100", "0"])
def test_thread_pool_in_c(tmp_path, spin_us):
    """Every item once, nested loops inline, concurrent callers, chunks that differ by one item
    at most; without spinning (ONNXCC_SPIN_US=0) every job wakes the workers and the caller
    waits on done_cv."""
    (tmp_path / "pool.c").write_text(POOL_TEST)
    exe = tmp_path / "pool"
    subprocess.run(["cc", "-O1", "-Wall", "-Werror", "-pthread", "-I", str(RUNTIME_DIR),
                    str(tmp_path / "pool.c"), str(RUNTIME_DIR / "onnxcc_rt.c"), "-o", str(exe)], check=True)
    env = dict(os.environ, ONNXCC_NUM_THREADS="3", ONNXCC_SPIN_US=spin_us)
    out = subprocess.run([str(exe)], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "chunks 2..3"
    threads, distinct, aligned = (int(kv.split("=")[1]) for kv in lines[1].split())
    assert threads == 3 and 2 <= distinct <= 3 and aligned == 1
    assert lines[2] == "err=x=3 y"


PLACEMENT_TEST = r"""
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <time.h>
#include "onnxcc_rt.h"

static pthread_t caller_thread;
static int worker_cpus = -1, worker_cpu = -1; /* the worker's affinity: CPU count, one CPU */

static void probe(int64_t b, int64_t e, void *ctx) {
  (void)b; (void)e; (void)ctx;
  struct timespec ts = {0, 2000000};
  nanosleep(&ts, NULL); /* long enough chunks that the worker surely takes one */
  if (pthread_equal(pthread_self(), caller_thread)) return;
  cpu_set_t set;
  pthread_getaffinity_np(pthread_self(), sizeof set, &set);
  worker_cpus = CPU_COUNT(&set);
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &set)) { worker_cpu = c; break; }
}

static void pin_caller(int cpu) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  sched_setaffinity(0, sizeof one, &one);
}

int main(void) {
  caller_thread = pthread_self();
  onnxcc_num_threads(); /* the pool starts now, while the caller may use every CPU */
  cpu_set_t all;
  sched_getaffinity(0, sizeof all, &all);
  int first = -1;
  for (int c = 0; c < CPU_SETSIZE && first < 0; c++)
    if (CPU_ISSET(c, &all)) first = c;
  pin_caller(first);
  onnxcc_parallel_for(8, probe, NULL);
  printf("%d %d %d\n", first, worker_cpus, worker_cpu);
  int was = worker_cpu;
  pin_caller(was); /* the caller lands on the worker's CPU: the worker must move away */
  onnxcc_parallel_for(8, probe, NULL);
  printf("%d %d %d\n", was, worker_cpus, worker_cpu);
  return 0;
}
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
@pytest.mark.parametrize("pin", [True, False])
def test_workers_keep_off_the_callers_cpu(tmp_path, pin):
    """With a CPU per thread each worker is pinned to one, never the caller's current CPU
    (a worker sharing the caller's core halves a parallel loop's speed); it follows the caller
    when the caller moves onto its CPU. ONNXCC_PIN_THREADS=0 leaves workers unpinned."""
    (tmp_path / "place.c").write_text(PLACEMENT_TEST)
    exe = tmp_path / "place"
    subprocess.run(["cc", "-O1", "-Wall", "-Werror", "-pthread", "-I", str(RUNTIME_DIR),
                    str(tmp_path / "place.c"), str(RUNTIME_DIR / "onnxcc_rt.c"), "-o", str(exe)], check=True)
    env = dict(os.environ, ONNXCC_NUM_THREADS="2", ONNXCC_PIN_THREADS="1" if pin else "0")
    out = subprocess.run([str(exe)], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    rows = [[int(v) for v in line.split()] for line in out.stdout.splitlines()]
    allowed = len(os.sched_getaffinity(0))
    for caller_cpu, ncpus, cpu in rows:
        if pin:
            assert ncpus == 1 and cpu != caller_cpu, rows
        else:
            assert ncpus == allowed, rows


# ---- c_exprs: rendered C agrees with sympy ---------------------------------------------

A, B = sym("a"), sym("b")
EXPRS = [
    sympy.floor((A - 7) / 3), sympy.ceiling((A - 7) / 3), sympy.floor((A - 5) / (B + 1)),
    sympy.ceiling(A / B), sympy.Mod(A - 5, 3), sympy.Mod(A, B + 1), sympy.Mod(A - 9, B),
    sympy.Max(A, 2 * B - 3), sympy.Min(A - 4, B, 2),
    A * (A + 1) / 2, sympy.floor(A / 2 + sympy.Rational(1, 3)), (A - 3) ** 3, 3 * A - 2 * B + 7,
    sympy.floor((sympy.Max(A, B) - 1) / 2) + 1, sympy.Abs(A - B), sympy.Mod(A - 7, -3),
    sympy.Piecewise((3 * A, A <= 4), (A * B, B > A), (A + 1, True)),  # per-range memory plans
]
BOOLS = [
    sympy.Eq(sympy.Mod(A, 4), 0), sympy.And(A <= 5, sympy.Ne(B, 2)),
    sympy.Or(A > 7, sympy.Not(sympy.Eq(B, 3))),
    sympy.Le(A / 2, 3), sympy.Eq(A / 2, B), A >= B + 1, sympy.Lt(A, B), sympy.true, sympy.false,
]


def test_c_exprs_match_sympy(tmp_path):
    names = {"a": "a", "b": "b"}
    lines = ["#include <stdint.h>", "#include <stdio.h>", C_HELPERS, "int main(void) {",
             "  for (int64_t a = 1; a <= 12; a++) for (int64_t b = 1; b <= 6; b++) {"]
    for e in EXPRS:
        lines.append(f'    printf("%lld ", (long long)({c_int(e, names)}));')
    for e in BOOLS:
        lines.append(f'    printf("%d ", (int)({c_bool(e, names)}));')
    lines += ['    printf("\\n");', "  }", "  return 0;", "}"]
    (tmp_path / "e.c").write_text("\n".join(lines))
    subprocess.run(["cc", "-Wall", "-Werror", "-o", str(tmp_path / "e"), str(tmp_path / "e.c")], check=True)
    got = subprocess.run([str(tmp_path / "e")], capture_output=True, text=True, check=True).stdout
    got = got.splitlines()
    want = []
    for a in range(1, 13):
        for b in range(1, 7):
            env = {A: a, B: b}
            row = [str(int(e.subs(env))) for e in EXPRS] + [str(int(bool(e.subs(env)))) for e in BOOLS]
            want.append(" ".join(row))
    assert [g.strip() for g in got] == want


def test_text_rendering():
    assert text(sympy.Eq(sympy.Mod(sym("batch"), 8), 0)) == "batch % 8 == 0"
    assert text(sym("seq") <= 128) == "seq <= 128"
    assert text(sym("seq") + 1) == "seq + 1"
    assert text(sympy.Max(A, B)) == "Max(a, b)"  # the IR's spelling: NAME.h reads like the IR
    assert text(sympy.And(B <= 8, sympy.Eq(A, 4))) == "a == 4 & b <= 8"
    assert text(sympy.true) == "true" and text(7) == "7"


def test_unsupported_exprs_raise():
    for bad in (A ** 20, sympy.Float(1.5) * A, sympy.sin(A)):
        with pytest.raises(UnsupportedExpr):
            c_int(bad, {"a": "a"})
    with pytest.raises(UnsupportedExpr):
        c_bool(A + 1, {"a": "a"})
