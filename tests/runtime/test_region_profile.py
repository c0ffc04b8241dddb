"""The runtime's region profile (runtime/onnxcc_rt.c, read by benchmarks/region_profile.py).

`ONNXCC_REGION_PROFILE=FILE` runs every parallel loop on the caller, cut into the chunks the pool
would deal at `ONNXCC_REGION_PROFILE_THREADS` threads, one timed `R` line per loop; with
`ONNXCC_REGION_PROFILE_LIVE=1` the pool runs as usual and each chunk is stamped where it ran
(`L` lines). A build with `ONNXCC_PROFILE_SERIAL=1` runs the computes that are serial for their
small work through the pool too, their bodies named `ser.OUT`. Each run is a child process (the
file is written at exit; the pool's size is fixed at its first loop). Results must not change."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnxcc

_CHILD = """
import sys, numpy as np, onnxcc
lib = onnxcc.load(sys.argv[1])
x = np.load(sys.argv[2])
z = np.arange(32, dtype=np.float32).reshape(4, 8) - 10
out = lib.run({"x": x, "z": z})
np.savez(sys.argv[3], y=out["y"], w=out["w"])
"""


def _chunks(n: int, threads: int) -> int:
    """runtime/onnxcc_rt.c onnxcc_chunk_count, as the pool cuts n items"""
    most = threads * 4
    if n <= 2 * most:
        return n
    if n >= 4 * most:
        return most
    for k in range(most - most % threads, 2 * threads - 1, -threads):
        if n % k == 0:
            return k
    return most


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    d = tmp_path_factory.mktemp("region_profile")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 32, 48, 40])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [4, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    w = helper.make_tensor_value_info("w", TensorProto.FLOAT, None)
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["z"], ["w"])],
                          "profiled", [x, z], [y, w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), d / "m.onnx")
    os.environ["ONNXCC_PROFILE_SERIAL"] = "1"
    try:
        onnxcc.compile(d / "m.onnx", d / "lib")
    finally:
        del os.environ["ONNXCC_PROFILE_SERIAL"]
    return d


def _run(d, tmp_path, **env):
    x = np.random.default_rng(0).standard_normal((3, 32, 48, 40)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    prof = tmp_path / "profile.txt"
    subprocess.run([sys.executable, "-c", _CHILD, str(d / "lib"), str(tmp_path / "x.npy"), str(tmp_path / "o.npz")],
                   check=True, env=dict(os.environ, ONNXCC_REGION_PROFILE=str(prof), **env))
    out = np.load(tmp_path / "o.npz")
    np.testing.assert_array_equal(out["y"], np.maximum(x, 0))
    np.testing.assert_array_equal(out["w"], -(np.arange(32, dtype=np.float32).reshape(4, 8) - 10))
    return [ln.split() for ln in prof.read_text().splitlines()]


@pytest.mark.parametrize("threads", [2, 3])
def test_profiled_loops_are_cut_as_the_pool_would(built, tmp_path, threads):
    lines = _run(built, tmp_path, ONNXCC_NUM_THREADS="1", ONNXCC_REGION_PROFILE_THREADS=str(threads))
    assert lines[0][:2] == ["H", str(threads)]
    regions = [ln for ln in lines if ln[0] == "R"]
    assert regions, "no parallel loop was profiled"
    for f in regions:
        n, chunks = int(f[3]), f[6:-1]
        assert len(chunks) == _chunks(n, threads), f
        assert int(f[4]) <= int(f[5]) <= int(f[-1][1:])
        assert all(int(c) >= 0 for c in chunks)


def test_serial_computes_are_named_in_a_profiling_build(built):
    so = next((built / "lib").glob("*.so"))
    names = subprocess.run(["nm", str(so)], capture_output=True, text=True, check=True).stdout
    assert ".ser.out1" in names  # w = Neg over 4 x 8: serial for its work, profiled as a region
    assert ".par.out0" in names  # y = Relu: parallel when N x 32 x 48 x 40 is big, which the run decides
    assert ".ser.out0" in names  # and serial otherwise


def test_live_profile_stamps_each_chunk_where_it_ran(built, tmp_path):
    lines = _run(built, tmp_path, ONNXCC_NUM_THREADS="2", ONNXCC_REGION_PROFILE_LIVE="1")
    live = [ln for ln in lines if ln[0] == "L"]
    assert live and not any(ln[0] == "R" for ln in lines)
    for f in live:
        n, stamps = int(f[3]), [tuple(int(v) for v in c.split(":")) for c in f[6:-1]]
        assert len(stamps) == _chunks(n, 2)
        assert all(0 <= s <= e and t in (0, 1) for s, e, t in stamps), f
