"""RoiAlign: the numpy reference and the native lowering (JIT) against onnxruntime on rois that
reach past the image and rois smaller than a pixel, both coordinate modes, avg and max; the
adaptive grid (sampling_ratio 0) in the interpreter and its refusal by the lowering."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh

from onnxcc import load_onnx
from onnxcc.errors import RuntimeCallError, UnsupportedOp
from onnxcc.interp import run as interp_run
from onnxcc.ir.parser import parse_module
from onnxcc.passes import run_pipeline
from onnxcc.testing import jit_run, ort_run


def model(**attrs):
    node = oh.make_node("RoiAlign", ["x", "rois", "idx"], ["y"], **attrs)
    oh_, ow = attrs.get("output_height", 1), attrs.get("output_width", 1)
    g = oh.make_graph([node], "g", [oh.make_tensor_value_info("x", TP.FLOAT, ["n", 3, "h", "w"]),
                                    oh.make_tensor_value_info("rois", TP.FLOAT, ["r", 4]),
                                    oh.make_tensor_value_info("idx", TP.INT64, ["r"])],
                      [oh.make_tensor_value_info("y", TP.FLOAT, ["r", 3, oh_, ow])])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 16)])
    m.ir_version = 8
    return m


def feeds(seed, n=2, h=6, w=7):
    rng = np.random.default_rng(seed)
    rois = np.array([[0.5, 1.0, 4.0, 5.5],     # inside
                     [-3.0, -2.0, 9.0, 8.5],   # past every border
                     [2.2, 3.1, 2.4, 3.3],     # smaller than a pixel
                     [6.0, 5.0, 12.0, 11.0]],  # mostly outside
                    np.float32)
    return {"x": rng.standard_normal((n, 3, h, w)).astype(np.float32), "rois": rois,
            "idx": np.array([0, 1, 1, 0], np.int64)}


def imported(m):
    mod = load_onnx(m)
    run_pipeline(mod, "shape-inference,canonicalize")
    return mod


@pytest.mark.parametrize("attrs", [
    dict(output_height=3, output_width=2, sampling_ratio=2),
    dict(output_height=2, output_width=4, sampling_ratio=3, spatial_scale=0.5,
         coordinate_transformation_mode="output_half_pixel"),
    dict(output_height=3, output_width=3, sampling_ratio=2, mode="max"),
])
def test_matches_onnxruntime(attrs):
    m = model(**attrs)
    mod = imported(m)
    assert str(mod.main.return_op.operands[0].type) == \
        f"f32[r, 3, {attrs['output_height']}, {attrs['output_width']}]"
    assert str(parse_module(str(mod))) == str(mod)
    for seed, size in enumerate([(2, 6, 7), (2, 4, 9)]):
        f = feeds(seed, *size)
        want = ort_run(m, f)["y"]
        np.testing.assert_allclose(interp_run(mod, f)[0], want, rtol=1e-5, atol=1e-5, err_msg="interp")
        np.testing.assert_allclose(jit_run(mod, f)[0], want, rtol=1e-5, atol=1e-5, err_msg="native")


def test_adaptive_grid_interpreted_and_refused_natively():
    m = model(output_height=2, output_width=2)  # sampling_ratio 0
    mod = imported(m)
    f = feeds(3)
    np.testing.assert_allclose(interp_run(mod, f)[0], ort_run(m, f)["y"], rtol=1e-5, atol=1e-5)
    with pytest.raises(UnsupportedOp, match="sampling_ratio = 0"):
        jit_run(mod, f)


def test_batch_index_out_of_range_is_an_error():
    mod = imported(model(output_height=2, output_width=2, sampling_ratio=1))
    f = feeds(4)
    f["idx"][2] = 5
    with pytest.raises(RuntimeCallError, match="index"):
        jit_run(mod, f)


@pytest.mark.parametrize("opset", [10, 13, 15])
@pytest.mark.parametrize("mode", ["avg", "max"])
def test_before_opset_16_the_default_is_output_half_pixel(opset, mode):
    """RoiAlign-10 had no coordinate_transformation_mode; its meaning is 16's
    output_half_pixel, not 16's default half_pixel (a 0.5-pixel shift of every roi)."""
    m = model(output_height=3, output_width=2, sampling_ratio=2, mode=mode)
    m.opset_import[0].version = opset
    mod = imported(m)
    assert mod.main.body.ops[0].attrs["coordinate_transformation_mode"] == "output_half_pixel"
    f = feeds(5)
    want = ort_run(m, f)["y"]
    np.testing.assert_allclose(interp_run(mod, f)[0], want, rtol=1e-5, atol=1e-5, err_msg="interp")
    np.testing.assert_allclose(jit_run(mod, f)[0], want, rtol=1e-5, atol=1e-5, err_msg="native")
