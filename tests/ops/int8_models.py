"""What the 8-bit op tests (test_int8_gemm.py, test_int8_routes.py, test_int8_depthwise.py)
share: the quantized model builder, integer data with the type's extremes in it, and the run
through the user's path (compile + load + run) against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper as h

import onnxcc
from onnxcc.testing import ort_run


def quant_model(nodes, inputs, outputs, inits, microsoft: bool = False) -> onnx.ModelProto:
    """inputs: [(name, TensorProto type, shape)], outputs: [(name, type)] (shapes inferred),
    inits: {name: array}; opset 13, and com.microsoft 1 for its contrib ops"""
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                     [h.make_tensor_value_info(n, t, None) for n, t in outputs],
                     [onnx.numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    opsets = [h.make_opsetid("", 13)] + ([h.make_opsetid("com.microsoft", 1)] if microsoft else [])
    m = h.make_model(g, opset_imports=opsets)
    m.ir_version = 8  # what the pinned onnxruntime reads
    return m


def extremes(r: np.random.Generator, shape, dt, middle: bool = False) -> np.ndarray:
    """uniform integers of `dt` with its min first and its max last (and, with `middle`, in the
    middle too): the values where a wrong zero point or saturation shows"""
    info = np.iinfo(dt)
    x = r.integers(int(info.min), int(info.max) + 1, shape).astype(dt)
    x.flat[0], x.flat[-1] = info.min, info.max
    if middle:
        x.flat[len(x.flat) // 2] = info.max
    return x


def run_against_ort(m: onnx.ModelProto, tmp_path, feeds_list, exact: set[str] | None = None, **options) -> str:
    """compile `m` with `options`, run every feeds dict against onnxruntime, return the kernel
    IR text. Outputs in `exact` (all of them when None) must match bit for bit; the others (the
    float results of contrib ops, whose f32 product of the exact sum and the scales onnxruntime
    may fuse differently) to 1e-6 relative."""
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    onnxcc.compile(path, tmp_path / "lib", **options)
    lib = onnxcc.load(tmp_path / "lib")
    for feeds in feeds_list:
        want, got = ort_run(path, feeds), lib.run(feeds)
        for name, w in want.items():
            assert got[name].dtype == w.dtype, name
            if exact is None or name in exact:
                np.testing.assert_array_equal(got[name], w, err_msg=f"{name} at {[f.shape for f in feeds.values()]}")
            else:
                np.testing.assert_allclose(got[name], w, rtol=1e-6, atol=1e-6 * float(np.abs(w).max()), err_msg=name)
    return onnxcc.compile(path, tmp_path / "kir", emit="kernel", **options).text
