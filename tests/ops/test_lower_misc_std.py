"""CumProd (reduce.py), LpPool (nn.py), ReverseSequence, MeanVarianceNormalization and Swish
(misc.py): native lowering and numpy reference vs onnxruntime, each model compiled once at
symbolic shapes and run at two settings of the dims (one of them 1)."""

import numpy as np
import onnx
import pytest
from onnx import helper as h

from onnxcc.errors import OnnxccError
from onnxcc.interp import run as interp_run
from onnxcc.testing import jit_compile, ort_run

F32, F64, I64, I32 = np.float32, np.float64, np.int64, np.int32
DIMS = ({"N": 1, "M": 1}, {"N": 3, "M": 5})


def model(node, inputs, inits=None, opset=18, ir=10):
    vis = [h.make_tensor_value_info(n, onnx.helper.np_dtype_to_tensor_dtype(np.dtype(t)), s)
           for n, t, s, *_ in inputs]
    inits = [onnx.numpy_helper.from_array(np.asarray(a), n) for n, a in (inits or {}).items()]
    m = h.make_model(h.make_graph([node], "g", vis, [h.make_empty_tensor_value_info("y")], inits),
                     opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = ir
    return m


def check(node, inputs, inits=None, opset=18, ir=10, rtol=1e-4, atol=1e-5):
    """inputs [(name, dtype, shape, lo, hi)]: ints uniform in [lo, hi), floats in [lo, hi)."""
    m = model(node, inputs, inits, opset, ir)
    mod, _, k = jit_compile(m)
    for seed, dims in enumerate(DIMS):
        rng = np.random.default_rng(seed)
        f = {}
        for n, t, s, lo, hi in inputs:
            shape = tuple(dims.get(d, d) if isinstance(d, str) else d for d in s)
            f[n] = (rng.integers(lo, hi, size=shape) if np.dtype(t).kind == "i"
                    else rng.uniform(lo, hi, size=shape)).astype(t)
        want = ort_run(m, f)["y"]
        args = [f[a.name] for a in mod.main.params]
        for got in (k(*args)[0], interp_run(mod, args)[0]):
            assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape)
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=f"at {dims}")


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
def test_cumprod(axis, exclusive, reverse):
    node = h.make_node("CumProd", ["x", "a"], ["y"], exclusive=exclusive, reverse=reverse)
    check(node, [("x", F32, ["N", 4, "M"], 0.5, 1.5)], {"a": np.array(axis, I64)}, opset=26, ir=11)


def test_cumprod_runtime_axis_int():
    node = h.make_node("CumProd", ["x", "a"], ["y"], reverse=1)
    check(node, [("x", I64, ["N", "M"], -3, 4), ("a", I32, [], 0, 2)], opset=26, ir=11)


@pytest.mark.parametrize("p", [1, 2, 3])
@pytest.mark.parametrize("attrs", [{"kernel_shape": [2, 2]},
                                   {"kernel_shape": [3, 2], "pads": [1, 0, 1, 1], "strides": [2, 1]},
                                   {"kernel_shape": [2, 2], "auto_pad": "SAME_UPPER"},
                                   {"kernel_shape": [2, 2], "dilations": [2, 1], "ceil_mode": 1}])
def test_lppool(p, attrs):
    node = h.make_node("LpPool", ["x"], ["y"], p=p, **attrs)
    check(node, [("x", F32, ["N", 2, "M", 6], -2.0, 2.0)] if "dilations" not in attrs else
          [("x", F32, ["N", 2, 5, "M"], -2.0, 2.0)])


@pytest.mark.parametrize("time_axis,batch_axis", [(0, 1), (1, 0)])
def test_reverse_sequence(time_axis, batch_axis):
    # time is 4 long; sequence_lens in [0, 4]
    shape = [4, "N", "M"] if time_axis == 0 else ["N", 4, "M"]
    lens = ("s", I64, ["N"], 0, 5)
    node = h.make_node("ReverseSequence", ["x", "s"], ["y"], time_axis=time_axis, batch_axis=batch_axis)
    check(node, [("x", F32, shape, -2.0, 2.0), lens])


@pytest.mark.parametrize("axes", [None, [0, 3], [1], [-1]])  # each reduces >= 3 elements
def test_mean_variance_normalization(axes):
    attrs = {} if axes is None else {"axes": axes}
    node = h.make_node("MeanVarianceNormalization", ["x"], ["y"], **attrs)
    check(node, [("x", F32, ["N", 3, "M", 4], -2.0, 2.0)], rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_swish(alpha):
    node = h.make_node("Swish", ["x"], ["y"], alpha=alpha)
    check(node, [("x", F32, ["N", "M"], -5.0, 5.0)], opset=24, ir=11)


def test_reverse_sequence_checks_lens_length():
    node = h.make_node("ReverseSequence", ["x", "s"], ["y"])
    m = model(node, [("x", F32, [4, 3, 2]), ("s", I64, [2])])
    with pytest.raises(OnnxccError, match="sequence_lens length"):
        jit_compile(m)


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_det(n):
    node = h.make_node("Det", ["x"], ["y"])
    check(node, [("x", F32, ["N", 2, n, n], -2.0, 2.0)], opset=22, ir=10, rtol=1e-4, atol=1e-4)


def test_det_refuses_large_matrices():
    m = model(h.make_node("Det", ["x"], ["y"]), [("x", F32, [5, 5])], opset=22)
    with pytest.raises(OnnxccError, match="only sizes up to 4"):
        jit_compile(m)


@pytest.mark.parametrize("attrs", [{"kernel_shape": [2, 2], "strides": [2, 2]},
                                   {"kernel_shape": [3, 2], "strides": [1, 2], "pads": [1, 0, 1, 0]}])
@pytest.mark.parametrize("out_shape", [None, "default"])
def test_max_unpool_after_max_pool(attrs, out_shape):
    """MaxPool's indices scattered back; overlapping windows (stride 1) repeat an index."""
    m = _pool_unpool(attrs, [2, 3, 6, 4] if out_shape else None)
    mod, _, k = jit_compile(m)
    for seed, (n, c) in enumerate([(2, 3)] if out_shape else [(1, 1), (2, 3)]):
        xv = np.random.default_rng(seed).uniform(-2, 2, size=(n, c, 6, 4)).astype(F32)
        want = ort_run(m, {"x": xv})["y"]
        for got in (k(xv)[0], interp_run(mod, [xv])[0]):
            assert got.shape == want.shape
            np.testing.assert_array_equal(got, want)


def test_max_unpool_refuses_another_output_shape():
    m = _pool_unpool({"kernel_shape": [2, 2], "strides": [2, 2]}, [2, 3, 7, 5])
    with pytest.raises(OnnxccError, match="disagree on where the indices go"):
        jit_compile(m)


def _pool_unpool(attrs, out_shape):
    x = h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", "M", 6, 4])
    pool = h.make_node("MaxPool", ["x"], ["p", "i"], **attrs)
    unpool = h.make_node("MaxUnpool", ["p", "i", "s"] if out_shape else ["p", "i"], ["y"], **attrs)
    inits = [onnx.numpy_helper.from_array(np.array(out_shape, I64), "s")] if out_shape else []
    m = h.make_model(h.make_graph([pool, unpool], "g", [x], [h.make_empty_tensor_value_info("y")], inits),
                     opset_imports=[h.make_opsetid("", 18)])
    m.ir_version = 10
    return m


@pytest.mark.parametrize("target,axes", [([3, 7], None), ([5, 2], None), ([6], [-1]), ([1, 8], [0, 2])])
def test_center_crop_pad(target, axes):
    """Crop and pad (odd and even differences) with a constant shape; N stays symbolic when
    it is not a cropped axis."""
    attrs = {} if axes is None else {"axes": axes}
    node = h.make_node("CenterCropPad", ["x", "s"], ["y"], **attrs)
    shape = [4, 5] if axes is None else (["N", 4, 5] if axes == [-1] else [4, "N", 5])
    check(node, [("x", F32, shape, -2.0, 2.0)], {"s": np.array(target, I64)})
