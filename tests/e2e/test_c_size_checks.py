"""Size arithmetic at the C API is checked (issue 17): a shape whose element count or byte
size overflows int64, or whose workspace size does, is refused with an error code and a
message naming it, never wrapped into a small size; data == NULL is refused for a tensor
with elements. Driven from C on the transformer sample (x: f32[batch, seq, 256], batch and
seq in [1, 2**31 - 1]) with dummy data pointers (far enough apart not to overlap): a refusal
never reads them. Constants that
do not fit int64 are refused when the library is built."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import sympy

import onnxcc
from onnxcc.codegen.c.exprs import UnsupportedExpr, c_bool, c_int_checked
from onnxcc.ir import sym
from onnxcc.testing import MODELS_DIR

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")

C_MAIN = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "transformer.h"

/* usage: prog BATCH SEQ NULLDATA -> runs once with x and y of [BATCH, SEQ, 256] */
int main(int argc, char **argv) {
  static float dummy[16];
  int64_t shape[3] = {strtoll(argv[1], NULL, 10), strtoll(argv[2], NULL, 10), 256};
  DLTensor t[2];
  memset(t, 0, sizeof t);
  for (int k = 0; k < 2; k++) {
    /* y's dummy address lies 2**44 bytes past x's, so the two never overlap (nor alias) */
    t[k].data = atoi(argv[3]) ? NULL : (void *)((uintptr_t)dummy + ((uintptr_t)k << 44));
    t[k].device.device_type = kDLCPU; t[k].ndim = 3;
    t[k].dtype.code = kDLFloat; t[k].dtype.bits = 32; t[k].dtype.lanes = 1; t[k].shape = shape;
  }
  int rc = transformer_run(&t[0], 1, &t[1], 1);
  printf("rc=%d msg=%s\n", rc, transformer_last_error());
  return 0;
}
"""

BIG = 2**31 - 1


@pytest.fixture(scope="module")
def prog(tmp_path_factory):
    d = tmp_path_factory.mktemp("sizes")
    onnxcc.compile(MODELS_DIR / "transformer.onnx", d)
    (d / "main.c").write_text(C_MAIN)
    exe = d / "main"
    subprocess.run(["cc", "-O1", "-o", str(exe), str(d / "main.c"), f"-I{d}", f"-L{d}", "-ltransformer",
                    f"-Wl,-rpath,{d}"], check=True, capture_output=True, text=True)
    return exe


def _run(exe, batch: int, seq: int, null: bool = False) -> tuple[int, str]:
    r = subprocess.run([str(exe), str(batch), str(seq), str(int(null))], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)  # a crash is a failure
    rc, msg = r.stdout.strip().split(" msg=", 1)
    return int(rc.removeprefix("rc=")), msg


@pytest.mark.parametrize("batch, seq", [(2**30, 2**30), (BIG, BIG)])
def test_element_count_overflow_is_refused(prog, batch, seq):
    rc, msg = _run(prog, batch, seq)
    assert rc == 4, msg  # ERR_SHAPE
    assert 'input "x"' in msg and "overflows int64" in msg, msg


def test_workspace_too_big_is_refused(prog):
    # x and y fit (2**39 floats each); the workspace they need does not: refused with ERR_ALLOC
    # and a message, never a crash. (Attention runs fused over key blocks now, so the
    # transformer has no seq**2 score buffer left whose size would overflow int64: the
    # overflow flag of the checked size arithmetic is tested in C by tests/codegen/test_c_lets.py.)
    rc, msg = _run(prog, 1, BIG)
    assert rc == 7, msg  # ERR_ALLOC
    assert "workspace" in msg and ("overflows int64" in msg or "could not allocate" in msg), msg


def test_null_data_with_elements_is_refused(prog):
    rc, msg = _run(prog, 1, 3, null=True)
    assert rc == 1 and 'input "x": data is NULL' in msg, msg


def test_checked_expressions_and_wide_constants():
    n = sym("N")
    assert "onnxcc_mul_ck" in c_int_checked(16 * n**2, {"N": "s[0]"}, "ovf")
    assert "onnxcc_add_ck" in c_int_checked(n + 3, {"N": "s[0]"}, "ovf")
    with pytest.raises(UnsupportedExpr, match="does not fit in int64"):
        c_bool(sympy.Le(n, 2**64), {"N": "s[0]"})
    assert "INT64_C(9223372036854775807)" in c_bool(sympy.Le(n, 2**63 - 1), {"N": "s[0]"})


def test_constraint_constant_past_int64_is_a_compile_error(tmp_path):
    from onnxcc.codegen.c.abi import ArtifactSpec, TensorSig, VersionSpec
    from onnxcc.codegen.c.build import build_library
    from onnxcc.errors import CompileError
    from onnxcc.ir import DType, SymbolInfo

    n = sym("N")
    spec = ArtifactSpec(name="wide", inputs=[TensorSig("x", DType.f32, (n,))],
                        outputs=[TensorSig("y", DType.f32, (n,))], symbols=[SymbolInfo("N", 1, 100)],
                        constraints=[(sympy.Le(n * n, 2**64), 'node "Reshape_1"')],
                        versions=[VersionSpec("wide_any", sympy.true)])
    with pytest.raises(CompileError, match=r"constraint N\*\*2 <= 18446744073709551616 \(needed by node"):
        build_library(spec, [], tmp_path)
