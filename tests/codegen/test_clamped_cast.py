"""A float cast to a narrow int whose operand is clamped inside i32 (the quantizers' stores,
codegen/llvm/exprs.py `_cast`) is emitted as fptosi with NaN sent to 0, not as the saturating
i64 conversion (scalarized lane by lane on x86); its values are those of the general cast:
NaN -> 0, +-inf and the huge to the ends of the range, halves to even."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import onnxcc
from onnxcc.ir import DType
from onnxcc.ops.quant import quantize_np


@pytest.mark.parametrize("qt,dt", [(T.UINT8, DType.u8), (T.INT8, DType.i8)])
def test_quantize_linear_store(tmp_path, qt, dt):
    zp = np.asarray(3 if dt is DType.u8 else -3, dt.np)
    inits = [onnx.numpy_helper.from_array(np.float32(0.5), "s"), onnx.numpy_helper.from_array(zp, "z")]
    g = h.make_graph([h.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, ["N"])], [h.make_tensor_value_info("y", qt, None)], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)])
    m.ir_version = 8
    path = tmp_path / "q.onnx"
    onnx.save(m, path)
    llvm = onnxcc.compile(path, tmp_path / "ll", emit="llvm").text
    assert "fptosi.sat" not in llvm and "fptosi" in llvm
    onnxcc.compile(path, tmp_path / "lib")
    lib = onnxcc.load(tmp_path / "lib")
    special = [np.nan, np.inf, -np.inf, 3e38, -3e38, 2.0**31, -(2.0**31), 0.25, 0.75, -0.25, -0.75, 1.25, 63.5, -64.5]
    x = np.concatenate([np.asarray(special, np.float32),
                        np.random.default_rng(0).uniform(-200, 200, 61).astype(np.float32)])
    got = lib.run({"x": x})["y"]
    with np.errstate(over="ignore", invalid="ignore"):  # 3e38 / 0.5 overflows to inf, as intended
        want = quantize_np(x, np.float32(0.5), zp, dt)
    np.testing.assert_array_equal(got, want)
    assert got[0] == 0  # NaN: round(NaN) + zp is NaN through the clamp, stored as 0 (the general cast's rule)
