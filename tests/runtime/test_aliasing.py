"""In-place calls are refused (issue 17): an output whose memory overlaps an input's, or two
outputs that overlap, make NAME_run return ERR_ARGS with a message naming both tensors,
from C and from Python, instead of a silently wrong result. A byte_offset that wraps the
address space is refused too."""

from __future__ import annotations

import json
import subprocess
import textwrap

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnxcc

ERR_ARGS = 1


@pytest.fixture(scope="module")
def art(tmp_path_factory):
    """y = a + b and z = a * b over [N, 4] floats."""
    d = tmp_path_factory.mktemp("alias")
    vi = helper.make_tensor_value_info
    g = helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"]), helper.make_node("Mul", ["a", "b"], ["z"])],
                          "g", [vi("a", TensorProto.FLOAT, ["N", 4]), vi("b", TensorProto.FLOAT, ["N", 4])],
                          [vi("y", TensorProto.FLOAT, ["N", 4]), vi("z", TensorProto.FLOAT, ["N", 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(d / "m.onnx"))
    onnxcc.compile(d / "m.onnx", d / "art", name="alias")
    return d / "art"


def _ab(n=3):
    a = np.arange(n * 4, dtype=np.float32).reshape(n, 4)
    return a, a * 0.5 + 1


def test_python_output_into_input_is_refused(art):
    m = onnxcc.load(art)
    a, b = _ab()
    keep = a.copy()
    rc = m.run_raw([a, b], [a, np.empty_like(a)])  # y = a + b written into a
    assert rc == ERR_ARGS
    # z = a * b is computed after y: writing y over a is not proved safe (tests/runtime/test_in_place.py
    # has the versions that are)
    assert m.last_error == ('output "y" overlaps input "a" in memory; in-place calls are not supported by the '
                            "version this call runs (not proved safe) (pass an output buffer of its own)")
    np.testing.assert_array_equal(a, keep)  # nothing was written
    # z = a * b over b IS proved safe (z is computed last, reading b element by element): served
    b0, y = b.copy(), np.empty_like(a)
    rc = m.run_raw([a, b], [y, b])
    assert rc == 0, m.last_error
    np.testing.assert_array_equal(b, a * b0)
    np.testing.assert_array_equal(y, a + b0)


def test_python_partial_and_output_overlaps_are_refused(art):
    m = onnxcc.load(art)
    a, b = _ab(4)
    big = np.zeros((5, 4), np.float32)
    # two outputs sharing rows 1..3 of one buffer
    rc = m.run_raw([a, b], [big[0:4], big[1:5]])
    assert rc == ERR_ARGS and m.last_error.startswith('output "z" overlaps output "y"')
    # an output that starts in the middle of an input
    buf = np.concatenate([a.ravel(), np.zeros(4, np.float32)]).reshape(5, 4)
    rc = m.run_raw([buf[0:4], b], [buf[1:5], np.empty_like(a)])
    assert rc == ERR_ARGS and 'output "y" overlaps input "a"' in m.last_error
    # adjacent, not overlapping: served, and right
    rc = m.run_raw([a, b], [big[0:4], np.empty_like(a)])
    assert rc == 0
    np.testing.assert_allclose(big[0:4], a + b)
    # the same input twice is fine (inputs are read only)
    y, z = np.empty_like(a), np.empty_like(a)
    assert m.run_raw([a, a], [y, z]) == 0
    np.testing.assert_allclose(y, a + a)


def test_python_read_only_output_is_refused(art):
    m = onnxcc.load(art)
    a, b = _ab()
    frozen = np.frombuffer(bytes(a.nbytes), np.float32).reshape(a.shape)  # memory of a bytes object
    with pytest.raises(ValueError, match="output 0 is a read-only array"):
        m.run_raw([a, b], [frozen, np.empty_like(a)])
    assert not frozen.any()


C_DRIVER = r"""
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include "alias.h"

static DLTensor t(float *p, int64_t *shape, uint64_t off) {
  DLTensor x; memset(&x, 0, sizeof x);
  x.data = p; x.device.device_type = kDLCPU; x.ndim = 2; x.shape = shape;
  x.dtype.code = kDLFloat; x.dtype.bits = 32; x.dtype.lanes = 1; x.byte_offset = off;
  return x;
}

int main(void) {
  float a[12], b[12], z[12], buf[16];
  int64_t shape[2] = {3, 4};
  for (int i = 0; i < 12; i++) { a[i] = (float)i; b[i] = 1.0f; }
  DLTensor in[2] = {t(a, shape, 0), t(b, shape, 0)};
  /* y written into a */
  DLTensor out[2] = {t(a, shape, 0), t(z, shape, 0)};
  printf("%d %s\n", alias_run(in, 2, out, 2), alias_last_error());
  /* y and z overlapping through byte_offset */
  DLTensor o2[2] = {t(buf, shape, 0), t(buf, shape, 4 * sizeof(float) - 4)};
  printf("%d %s\n", alias_run(in, 2, o2, 2), alias_last_error());
  /* the same, one float apart: still refused */
  DLTensor o3[2] = {t(buf, shape, 0), t(buf, shape, 11 * sizeof(float))};
  printf("%d %s\n", alias_run(in, 2, o3, 2), alias_last_error());
  /* a byte_offset that wraps the address space */
  DLTensor o4[2] = {t(buf, shape, UINT64_MAX - 8), t(z, shape, 0)};
  printf("%d %s\n", alias_run(in, 2, o4, 2), alias_last_error());
  /* disjoint: fine, and a + b is right */
  DLTensor o5[2] = {t(buf, shape, 0), t(z, shape, 0)};
  int rc = alias_run(in, 2, o5, 2);
  int ok = rc == 0;
  for (int i = 0; i < 12; i++) ok &= buf[i] == a[i] + 1.0f && z[i] == a[i];
  printf("%d ok=%d\n", rc, ok);
  return 0;
}
"""


def test_c_in_place_calls_are_refused(art, tmp_path):
    meta = json.loads((art / "alias.json").read_text())
    assert meta["error_codes"]["ERR_ARGS"] == ERR_ARGS
    assert "any other overlap of an output with an input or another output is refused" in \
        (art / "alias.h").read_text()
    (tmp_path / "d.c").write_text(textwrap.dedent(C_DRIVER))
    exe = tmp_path / "d"
    subprocess.run(["cc", "-O1", "-o", str(exe), str(tmp_path / "d.c"), f"-I{art}", f"-L{art}", "-lalias",
                    f"-Wl,-rpath,{art}"], check=True)
    lines = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines()
    assert lines[0].startswith('1 output "y" overlaps input "a" in memory'), lines
    assert lines[1].startswith('1 output "z" overlaps output "y" in memory'), lines
    assert lines[2].startswith('1 output "z" overlaps output "y"'), lines
    assert lines[3].startswith('1 output "y": data + byte_offset'), lines
    assert "wraps the address space" in lines[3]
    assert lines[4] == "0 ok=1", lines
