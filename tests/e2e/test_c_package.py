"""The artifact as a C package: the signature, build id and ABI version from C; pkg-config and
CMake find it; the README's build line works from any directory; --cc and $CC are honoured."""

from __future__ import annotations

import os
import shutil
import subprocess

import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from onnxcc.cli import main
from onnxcc.testing import MODELS_DIR

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")

MAIN_C = r"""
#include <stdio.h>
#include <string.h>
#include "mlp.h"

int main(void) {
  if (strcmp(MLP_BUILD_ID, mlp_build_id()) != 0) { printf("build id mismatch\n"); return 3; }
  printf("abi %d %d\n", MLP_ABI_VERSION, mlp_abi_version());
  for (int k = 0; k < mlp_num_inputs(); k++) {
    const mlp_tensor_info *t = mlp_input_info(k);
    printf("input %s code %d bits %d [", t->name, t->dtype.code, t->dtype.bits);
    for (int j = 0; j < t->ndim; j++) printf("%s%s", j ? ", " : "", t->dims[j]);
    printf("]\n");
  }
  const mlp_tensor_info *o = mlp_output_info(0);
  printf("output %s ndim %d; past the end: %s\n", o->name, o->ndim, mlp_output_info(1) ? "?" : "NULL");
  float x[2 * 64] = {0}, y[2 * 10];
  int64_t xs[2] = {2, 64}, ys[2] = {2, 10};
  DLTensor in = {x, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, xs, NULL, 0};
  DLTensor out = {y, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, ys, NULL, 0};
  int rc = mlp_run(&in, 1, &out, 1);
  printf("rc %d\n", rc);
  return rc;
}
"""

WANT = "abi 1 1\ninput x code 2 bits 32 [batch, 64]\noutput y ndim 2; past the end: NULL\nrc 0\n"


@pytest.fixture(scope="module")
def art(tmp_path_factory):
    d = tmp_path_factory.mktemp("cpkg")
    r = CliRunner().invoke(main, ["compile", str(MODELS_DIR / "mlp.onnx"), "-o", str(d / "mlp"), "-q",
                                  "--max-versions", "1"])
    assert r.exit_code == 0, r.output
    (d / "main.c").write_text(MAIN_C)
    return d


def _run_elsewhere(exe, tmp_path):
    """Run from another directory, so a relative rpath would not find the library."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    p = subprocess.run([str(exe)], capture_output=True, text=True, cwd=elsewhere, timeout=60,
                       env={k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"})
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def test_readme_build_line_works_from_any_directory(art, tmp_path):
    readme = (MODELS_DIR.parent / "README.md").read_text()
    assert '-Wl,-rpath,"$PWD/out/transformer"' in readme
    lib = art / "mlp"
    subprocess.run(["cc", "main.c", "-Imlp", "-Lmlp", "-lmlp", f"-Wl,-rpath,{lib}", "-o", str(tmp_path / "a")],
                   cwd=art, check=True, timeout=120)
    assert _run_elsewhere(tmp_path / "a", tmp_path) == WANT


@pytest.mark.skipif(shutil.which("pkg-config") is None, reason="needs pkg-config")
def test_pkg_config(art, tmp_path):
    env = {**os.environ, "PKG_CONFIG_PATH": str(art / "mlp")}
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "mlp"], capture_output=True, text=True, env=env,
                           check=True).stdout.split()
    subprocess.run(["cc", str(art / "main.c"), *flags, "-o", str(tmp_path / "b")], check=True, timeout=120,
                   cwd=tmp_path)
    assert _run_elsewhere(tmp_path / "b", tmp_path) == WANT


@pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake")
def test_cmake_find_package(art, tmp_path):
    src = tmp_path / "proj"
    src.mkdir()
    shutil.copy(art / "main.c", src / "main.c")
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.13)\nproject(app C)\n"
        "find_package(mlp CONFIG REQUIRED)\nadd_executable(app main.c)\ntarget_link_libraries(app mlp::mlp)\n")
    build = tmp_path / "build"
    subprocess.run(["cmake", "-S", str(src), "-B", str(build), f"-Dmlp_DIR={art / 'mlp'}"], check=True,
                   capture_output=True, timeout=300)
    subprocess.run(["cmake", "--build", str(build)], check=True, capture_output=True, timeout=300)
    assert _run_elsewhere(build / "app", tmp_path) == WANT


def test_header_documents_every_return_code(art):
    h = (art / "mlp" / "mlp.h").read_text()
    enum = h[h.index("enum {\n  MLP_OK"):]
    enum = enum[:enum.index("};")]
    rows = [ln for ln in enum.splitlines()[1:] if ln.strip()]
    assert len(rows) == 10 and all("/* " in ln and len(ln.split("/*")[1].strip()) > 8 for ln in rows)


def test_cc_flag_and_env_are_honoured(tmp_path):
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N"])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(tmp_path / "r.onnx"))
    args = ["compile", str(tmp_path / "r.onnx"), "-o", str(tmp_path / "o"), "--max-versions", "1"]
    r = CliRunner().invoke(main, [*args, "--cc", "/no/such/cc"])
    assert r.exit_code == 1 and "C compiler '/no/such/cc' not found" in r.output
    r = CliRunner().invoke(main, args, env={"CC": "/no/such/envcc"})
    assert r.exit_code == 1 and "C compiler '/no/such/envcc' not found" in r.output
    assert not (tmp_path / "o").exists()  # nothing half-built left behind
