"""Versions compiled in parallel (one LLVM module each, in forked workers) give the same
library as the serial build: same results bit for bit, weights stored once."""

from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import onnxcc


def _model() -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal((64, 32)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal((32,)).astype(np.float32), "B")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Add", ["h", "B"], ["a"]),
             helper.make_node("Tanh", ["a"], ["t"]), helper.make_node("ReduceSum", ["t", "ax"], ["y"], keepdims=0)]
    g = helper.make_graph(nodes, "par", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N"])],
                          [w, b, numpy_helper.from_array(np.array([1], np.int64), "ax")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _build(tmp_path, monkeypatch, jobs: str):
    monkeypatch.setenv("ONNXCC_JOBS", jobs)
    monkeypatch.setenv("ONNXCC_CACHE_DIR", str(tmp_path / f"cache{jobs}"))
    out = tmp_path / f"jobs{jobs}"
    art = onnxcc.compile(_model(), out, name="par", specialize={"N": [1, 4]})
    return art, onnxcc.load(out)


def test_parallel_versions_match_serial(tmp_path, monkeypatch):
    serial_art, serial = _build(tmp_path, monkeypatch, "1")
    par_art, par = _build(tmp_path, monkeypatch, "2")
    versions = json.loads(par_art.metadata.read_text())["versions"]
    assert len(versions) >= 3  # N=1, N=4, generic: the parallel path was taken
    rng = np.random.default_rng(0)
    for n in (1, 4, 7):
        x = rng.standard_normal((n, 64)).astype(np.float32)
        a = np.asarray(next(iter(serial.run([x]).values())))
        b = np.asarray(next(iter(par.run([x]).values())))
        assert a.tobytes() == b.tobytes()
        ref = np.tanh(x @ numpy_helper.to_array(_model().graph.initializer[0])
                      + numpy_helper.to_array(_model().graph.initializer[1])).sum(axis=1)
        np.testing.assert_allclose(b, ref, rtol=1e-4, atol=1e-4)
    # the 8 KiB weight is stored once, not once per version: its bytes occur once in each
    # library (the parallel one may differ in code size: its versions are separate modules)
    w = numpy_helper.to_array(_model().graph.initializer[0]).tobytes()
    for art in (serial_art, par_art):
        assert art.library.read_bytes().count(w) == 1, art.library


def test_one_version_split_across_workers_matches_serial(tmp_path, monkeypatch):
    """One version, two workers: its functions are dealt out to two modules (codegen/cpu/
    split.py) compiled in parallel; the library computes the same bits as the serial one."""
    libs = []
    for jobs in ("1", "2"):
        monkeypatch.setenv("ONNXCC_JOBS", jobs)
        out = tmp_path / f"one{jobs}"
        art = onnxcc.compile(_model(), out, name="one", specialize_one=False, divisible=0)
        assert len(json.loads(art.metadata.read_text())["versions"]) == 1
        libs.append(onnxcc.load(out))
    x = np.random.default_rng(1).standard_normal((5, 64)).astype(np.float32)
    a, b = (np.asarray(next(iter(lib.run([x]).values()))) for lib in libs)
    assert a.tobytes() == b.tobytes()
    ref = np.tanh(x @ numpy_helper.to_array(_model().graph.initializer[0])
                  + numpy_helper.to_array(_model().graph.initializer[1])).sum(axis=1)
    np.testing.assert_allclose(b, ref, rtol=1e-4, atol=1e-4)
