"""Quantized models end to end: compiled to libNAME.so with a symbolic batch dim and run at two
batch sizes, compared with onnxruntime.

- a QDQ model (QuantizeLinear -> DequantizeLinear around a Conv and a MatMul): onnxcc runs it
  as written (dequantize to float, compute in f32, quantize), while onnxruntime fuses the
  pattern into integer kernels (QLinearConv / QLinearMatMul) whose requantization rounds the
  i32 accumulator times a scale ratio; the two can differ by one step where a value lies
  within an ulp of a rounding tie, so quantized outputs are allowed +-1;
- a model quantized by onnxruntime.quantization.quantize_dynamic (DynamicQuantizeLinear +
  MatMulInteger + Cast + Mul): same integer arithmetic as onnxruntime, so f32 rtol 1e-5.
"""

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import onnxcc
from onnxcc.testing import ort_run

_RNG = np.random.default_rng(11)


def _qdq_model():
    w = _RNG.integers(-127, 127, (6, 3, 3, 3)).astype(np.int8)
    wm = _RNG.integers(-127, 127, (6 * 4 * 4, 10)).astype(np.int8)
    inits = {
        "xs": np.float32(0.02), "xz": np.uint8(128),
        "w": w, "ws": np.array([0.01, 0.02, 0.005, 0.03, 0.015, 0.008], np.float32),
        "wz": np.zeros(6, np.int8),
        "bq": _RNG.integers(-500, 500, (6,)).astype(np.int32), "bs": (0.02 * np.array(
            [0.01, 0.02, 0.005, 0.03, 0.015, 0.008])).astype(np.float32), "bz": np.zeros(6, np.int32),
        "ys": np.float32(0.25), "yz": np.uint8(120),
        "wm": wm, "wms": np.float32(0.004), "wmz": np.int8(0),
        "os": np.float32(0.6), "oz": np.uint8(128), "shape": np.array([-1, 6 * 4 * 4], np.int64),
    }
    nodes = [
        h.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        h.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
        h.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=0),
        h.make_node("DequantizeLinear", ["bq", "bs", "bz"], ["bd"], axis=0),
        h.make_node("Conv", ["xd", "wd", "bd"], ["c"], pads=[1, 1, 1, 1]),
        h.make_node("QuantizeLinear", ["c", "ys", "yz"], ["cq"]),
        h.make_node("DequantizeLinear", ["cq", "ys", "yz"], ["cd"]),
        h.make_node("Reshape", ["cd", "shape"], ["flat"]),
        h.make_node("DequantizeLinear", ["wm", "wms", "wmz"], ["wmd"]),
        h.make_node("MatMul", ["flat", "wmd"], ["m"]),
        h.make_node("QuantizeLinear", ["m", "os", "oz"], ["y"]),
    ]
    inits = [onnx.numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()]
    g = h.make_graph(nodes, "qdq", [h.make_tensor_value_info("x", T.FLOAT, ["batch", 3, 4, 4])],
                     [h.make_tensor_value_info(n, T.UINT8, None) for n in ("cq", "y")],
                     inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def test_qdq_conv_matmul_model(tmp_path):
    model = _qdq_model()
    onnxcc.compile(model, tmp_path)
    lib = onnxcc.load(tmp_path)
    exact, total = 0, 0
    for k, batch in enumerate((1, 5)):
        x = np.random.default_rng(k).uniform(-2.5, 2.5, (batch, 3, 4, 4)).astype(np.float32)
        want = ort_run(model, {"x": x})
        got = lib.run({"x": x})
        for name in ("cq", "y"):
            assert got[name].shape == want[name].shape and got[name].dtype == np.uint8
            # the scales keep most values off the saturation bounds, so the comparison bites
            assert np.mean((want[name] == 0) | (want[name] == 255)) < 0.1, name
            diff = np.abs(got[name].astype(np.int32) - want[name].astype(np.int32))
            assert diff.max() <= 1, f"{name} at batch {batch}: max |diff| {diff.max()}"
            exact, total = exact + int(np.sum(diff == 0)), total + diff.size
    # off-by-one only near rounding ties: nearly every element agrees exactly
    assert exact / total > 0.95, f"{exact} of {total} exact"


def _float_matmul_model(path):
    w = _RNG.standard_normal((16, 8)).astype(np.float32)
    b = _RNG.standard_normal(8).astype(np.float32)
    g = h.make_graph([h.make_node("MatMul", ["x", "w"], ["t"]), h.make_node("Add", ["t", "b"], ["y"])], "mm",
                     [h.make_tensor_value_info("x", T.FLOAT, ["batch", 16])],
                     [h.make_tensor_value_info("y", T.FLOAT, ["batch", 8])],
                     [onnx.numpy_helper.from_array(w, "w"), onnx.numpy_helper.from_array(b, "b")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))


@pytest.mark.parametrize("wtype", ["QInt8", "QUInt8"])
def test_dynamic_quantized_matmul_model(tmp_path, wtype):
    from onnxruntime.quantization import QuantType, quantize_dynamic

    src, qpath = tmp_path / "f.onnx", tmp_path / "q.onnx"
    _float_matmul_model(src)
    quantize_dynamic(str(src), str(qpath), weight_type=getattr(QuantType, wtype))
    ops = [n.op_type for n in onnx.load(str(qpath)).graph.node]
    assert "DynamicQuantizeLinear" in ops and "MatMulInteger" in ops, ops
    onnxcc.compile(qpath, tmp_path / "lib")
    lib = onnxcc.load(tmp_path / "lib")
    for k, batch in enumerate((1, 7)):
        x = np.random.default_rng(k).standard_normal((batch, 16)).astype(np.float32)
        want = ort_run(qpath, {"x": x})["y"]
        got = lib.run({"x": x})["y"]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"batch {batch}")
