"""A Slice whose end is a length read from another value's Shape (held-out
Wav2Vec2-Conformer: the rotary table cut to the conv front end's output length): the symbols'
ranges alone leave its sign open (floor(L/5) - 1 may be -1 for L < 5), the conv's recorded
constraint (output length >= 1, checked at run time) proves it nonnegative, so the result
has a symbolic type instead of a data-dependent dim (a refusal)."""

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h

from onnxcc.interp import run as interp_run
from onnxcc.testing import jit_compile, ort_run


def test_slice_end_from_a_conv_output_length():
    w = onnx.numpy_helper.from_array(np.ones((1, 1, 10), np.float32), "w")
    k = {n: onnx.numpy_helper.from_array(np.array([v], np.int64), n) for n, v in (("z0", 0), ("two", 2), ("three", 3))}
    nodes = [h.make_node("Conv", ["x", "w"], ["y"], strides=[5]),  # length floor(L/5) - 1
             h.make_node("Shape", ["y"], ["sy"]), h.make_node("Slice", ["sy", "two", "three"], ["n"]),
             h.make_node("Slice", ["t", "z0", "n", "z0"], ["cut"]),
             h.make_node("Mul", ["cut", "sc"], ["out"])]
    vis = [h.make_tensor_value_info("x", T.FLOAT, [1, 1, "L"]), h.make_tensor_value_info("t", T.FLOAT, ["M", 4]),
           h.make_tensor_value_info("sc", T.FLOAT, [1])]
    g = h.make_graph(nodes, "g", vis, [h.make_empty_tensor_value_info("out")], [w, *k.values()])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    mod, _, kern = jit_compile(m)
    out_dim = mod.main.result_types[0].shape[0]
    assert "slice" not in str(out_dim) and "L" in str(out_dim), out_dim
    rng = np.random.default_rng(0)
    for L, M in ((10, 5), (23, 2), (52, 40)):
        f = {"x": rng.standard_normal((1, 1, L)).astype(np.float32),
             "t": rng.standard_normal((M, 4)).astype(np.float32), "sc": np.array([2.0], np.float32)}
        want = ort_run(m, f)["out"]
        for got in (kern(f["x"], f["t"], f["sc"])[0], interp_run(mod, [f["x"], f["t"], f["sc"]])[0]):
            assert got.shape == want.shape == (min(M, L // 5 - 1), 4)
            np.testing.assert_allclose(got, want, rtol=1e-6)
