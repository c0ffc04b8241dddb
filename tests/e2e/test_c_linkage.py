"""A C program includes NAME.h, links libNAME.so with `cc` and runs the transformer sample at
two values of seq and two of batch with one library; results are compared with onnxruntime.
It also checks that a wrong rank and a violated range return nonzero with a useful message."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

import onnxcc
from onnxcc.testing import MODELS_DIR, ort_run, random_inputs
from onnxcc.testing_c import C_F32_TENSOR

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")

C_MAIN = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "transformer.h"
""" + C_F32_TENSOR + r"""
/* usage: prog BATCH SEQ IN.bin OUT.bin  -> runs once; or prog errors */
int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "errors") == 0) {
    static float buf[2 * 100 * 256];
    int64_t bad_rank[2] = {2, 256};
    DLTensor in = tensor(buf, 2, bad_rank), out = tensor(buf, 2, bad_rank);
    int rc = transformer_run(&in, 1, &out, 1);
    printf("rank rc=%d msg=%s\n", rc, transformer_last_error());
    int64_t too_long[3] = {2, 100, 256};
    DLTensor in2 = tensor(buf, 3, too_long), out2 = tensor(buf, 3, too_long);
    rc = transformer_run(&in2, 1, &out2, 1);
    printf("range rc=%d msg=%s\n", rc, transformer_last_error());
    return 0;
  }
  int64_t b = atoll(argv[1]), s = atoll(argv[2]);
  size_t n = (size_t)(b * s * 256);
  float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
  FILE *f = fopen(argv[3], "rb");
  if (fread(x, sizeof(float), n, f) != n) return 10;
  fclose(f);
  int64_t shape[3] = {b, s, 256}, oshape[3];
  DLTensor in = tensor(x, 3, shape);
  if (transformer_output_shape(&in, 1, 0, oshape) != 0) { printf("shape: %s\n", transformer_last_error()); return 11; }
  DLTensor out = tensor(y, 3, oshape);
  int rc = transformer_run(&in, 1, &out, 1);
  if (rc != 0) { printf("run rc=%d: %s\n", rc, transformer_last_error()); return 12; }
  f = fopen(argv[4], "wb");
  fwrite(y, sizeof(float), n, f);
  fclose(f);
  printf("ok version=%d of %d\n", transformer_last_version(), transformer_num_versions());
  return 0;
}
"""


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    d = tmp_path_factory.mktemp("clink")
    onnxcc.compile(MODELS_DIR / "transformer.onnx", d, dims={"seq": (1, 64)})
    (d / "main.c").write_text(C_MAIN)
    exe = d / "main"
    subprocess.run(["cc", "-O1", "-o", str(exe), str(d / "main.c"), f"-I{d}", f"-L{d}", "-ltransformer",
                    f"-Wl,-rpath,{d}"], check=True, capture_output=True, text=True)
    return d, exe


@pytest.mark.parametrize("batch,seq", [(1, 9), (3, 9), (1, 40), (3, 40)])
def test_c_program_matches_onnxruntime(program, batch, seq):
    d, exe = program
    feeds = random_inputs(MODELS_DIR / "transformer.onnx", {"batch": batch, "seq": seq}, seed=seq)
    feeds["x"].tofile(d / "in.bin")
    r = subprocess.run([str(exe), str(batch), str(seq), str(d / "in.bin"), str(d / "out.bin")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("ok version=")
    got = np.fromfile(d / "out.bin", np.float32).reshape(batch, seq, 256)
    want = ort_run(MODELS_DIR / "transformer.onnx", feeds)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_c_program_gets_error_codes_and_messages(program):
    _d, exe = program
    r = subprocess.run([str(exe), "errors"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    rank_line, range_line = r.stdout.strip().splitlines()
    assert not rank_line.startswith("rank rc=0") and 'input "x"' in rank_line and "rank" in rank_line
    assert not range_line.startswith("range rc=0")
    assert "seq" in range_line and "100" in range_line and "64" in range_line
