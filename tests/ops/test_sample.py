"""GridSample (ops/sample.py): native lowering and numpy reference vs onnxruntime over every
mode x padding x align_corners, 2-D and 3-D, compiled once with symbolic batch / channel /
output dims and run at two settings; refusals."""

import numpy as np
import onnx
import pytest
from onnx import helper as h

from onnxcc.errors import OnnxccError
from onnxcc.interp import run as interp_run
from onnxcc.testing import jit_compile, ort_run

F32 = np.float32
DIMS = ({"N": 1, "C": 1, "H": 1, "W": 2}, {"N": 2, "C": 3, "H": 4, "W": 5})


def model(node, inputs, opset=20):
    vis = [h.make_tensor_value_info(n, onnx.helper.np_dtype_to_tensor_dtype(np.dtype(t)), s)
           for n, t, s in inputs]
    m = h.make_model(h.make_graph([node], "g", vis, [h.make_empty_tensor_value_info("y")]),
                     opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def check(node, inputs, opset=20, rtol=1e-4, atol=1e-5):
    m = model(node, inputs, opset)
    mod, _, k = jit_compile(m)
    for seed, dims in enumerate(DIMS):
        rng = np.random.default_rng(seed)
        # the grid reaches past [-1, 1] so that every padding rule is exercised
        f = {n: rng.uniform(-1.6, 1.6, size=tuple(dims.get(d, d) for d in s)).astype(t) for n, t, s in inputs}
        want = ort_run(m, f)["y"]
        args = [f[a.name] for a in mod.main.params]
        for got in (k(*args)[0], interp_run(mod, args)[0]):
            assert got.shape == want.shape and got.dtype == want.dtype
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=f"at {dims}")


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("pad", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample_2d(mode, pad, align):
    inputs = [("x", F32, ["N", "C", 3, 4]), ("g", F32, ["N", "H", "W", 2])]
    node = h.make_node("GridSample", ["x", "g"], ["y"], mode=mode, padding_mode=pad, align_corners=align)
    check(node, inputs)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("pad", ["zeros", "border", "reflection"])
def test_grid_sample_3d(mode, pad):
    inputs = [("x", F32, ["N", "C", 2, 3, 4]), ("g", F32, ["N", "H", "W", 2, 3])]
    node = h.make_node("GridSample", ["x", "g"], ["y"], mode=mode, padding_mode=pad)
    check(node, inputs)


def test_grid_sample_opset16_names():
    inputs = [("x", F32, ["N", "C", 3, 4]), ("g", F32, ["N", "H", "W", 2])]
    node = h.make_node("GridSample", ["x", "g"], ["y"], mode="bicubic", padding_mode="border")
    check(node, inputs, opset=16)


def test_grid_sample_symbolic_output_shape():
    inputs = [("x", F32, ["N", "C", 3, 4]), ("g", F32, ["N", "H", "W", 2])]
    mod, _, _ = jit_compile(model(h.make_node("GridSample", ["x", "g"], ["y"]), inputs))
    assert "-> (f32[N, C, H, W])" in str(mod)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("pad", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample_symbolic_spatial_dims(mode, pad, align):
    # X's own H and W symbolic (a torch export with dynamic image size): its borders are
    # run-time values; a size of 1 is the reflection's single-position case
    inputs = [("x", F32, ["N", "C", "XH", "XW"]), ("g", F32, ["N", "H", "W", 2])]
    node = h.make_node("GridSample", ["x", "g"], ["y"], mode=mode, padding_mode=pad, align_corners=align)
    m = model(node, inputs)
    mod, _, k = jit_compile(m)
    for seed, dims in enumerate(({"N": 1, "C": 2, "XH": 1, "XW": 3, "H": 2, "W": 3},
                                 {"N": 2, "C": 1, "XH": 5, "XW": 4, "H": 3, "W": 4})):
        rng = np.random.default_rng(seed)
        f = {n: rng.uniform(-1.6, 1.6, size=tuple(dims.get(d, d) for d in sh)).astype(t) for n, t, sh in inputs}
        want = ort_run(m, f)["y"]
        for got in (k(f["x"], f["g"])[0], interp_run(mod, [f["x"], f["g"]])[0]):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"at {dims}")


def test_grid_sample_checks_grid_shape():
    inputs = [("x", F32, ["N", "C", 3, 4]), ("g", F32, ["N", 2, 2, 3])]
    with pytest.raises(OnnxccError, match="last dim must be 2"):
        jit_compile(model(h.make_node("GridSample", ["x", "g"], ["y"]), inputs))


@pytest.mark.parametrize("attrs,c,oc,extra", [
    ({}, 1, 1, []),
    ({"pads": [1, 1, 1, 1], "strides": [2, 1]}, 2, 3, ["b"]),
    ({"dilations": [1, 2], "offset_group": 2, "group": 2}, 4, 2, ["b", "m"]),
])
def test_deform_conv(attrs, c, oc, extra):
    kh, kw, hh, ww = 2, 3, 5, 6
    pads = attrs.get("pads", [0] * 4)
    st, dl = attrs.get("strides", [1, 1]), attrs.get("dilations", [1, 1])
    oh = (hh + pads[0] + pads[2] - dl[0] * (kh - 1) - 1) // st[0] + 1
    ow = (ww + pads[1] + pads[3] - dl[1] * (kw - 1) - 1) // st[1] + 1
    og = attrs.get("offset_group", 1)
    inputs = [("x", F32, ["N", c, hh, ww]), ("w", F32, [oc, c // attrs.get("group", 1), kh, kw]),
              ("off", F32, ["N", og * 2 * kh * kw, oh, ow])]
    names = ["x", "w", "off"]
    if "b" in extra:
        inputs.append(("b", F32, [oc]))
        names.append("b")
    if "m" in extra:
        inputs.append(("m", F32, ["N", og * kh * kw, oh, ow]))
        names += ["m"] if "b" in extra else ["", "m"]
    node = h.make_node("DeformConv", names, ["y"], kernel_shape=[kh, kw], **attrs)
    check(node, inputs, opset=22)


def test_deform_conv_refuses_3d():
    inputs = [("x", F32, ["N", 1, 3, 3, 3]), ("w", F32, [1, 1, 2, 2, 2]), ("off", F32, ["N", 24, 2, 2, 2])]
    with pytest.raises(OnnxccError, match=r"must be 4-D \(2-D DeformConv\)"):
        jit_compile(model(h.make_node("DeformConv", ["x", "w", "off"], ["y"]), inputs, opset=22))


@pytest.mark.parametrize("size", [[2, 3, 4, 5], [2, 1, 1, 6], [2, 3, 2, 3, 4]])
@pytest.mark.parametrize("align", [0, 1])
def test_affine_grid_with_a_constant_size(size, align):
    r = len(size) - 2
    node = h.make_node("AffineGrid", ["t", "s"], ["y"], align_corners=align)
    vis = [h.make_tensor_value_info("t", onnx.TensorProto.FLOAT, [2, r, r + 1])]
    m = h.make_model(h.make_graph([node], "g", vis, [h.make_empty_tensor_value_info("y")],
                                  [onnx.numpy_helper.from_array(np.array(size, np.int64), "s")]),
                     opset_imports=[h.make_opsetid("", 20)])
    m.ir_version = 10
    if align and 1 in size[2:]:
        with pytest.raises(OnnxccError, match="disagree on its coordinate"):
            jit_compile(m)
        return
    mod, _, k = jit_compile(m)
    t = np.random.default_rng(0).uniform(-2, 2, size=(2, r, r + 1)).astype(F32)
    want = ort_run(m, {"t": t})["y"]
    for got in (k(t)[0], interp_run(mod, [t])[0]):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("image,block,attrs", [
    ([5, 5], [2, 2], {}),
    ([6, 5], [3, 2], {"strides": [2, 1], "pads": [1, 0, 1, 1], "dilations": [1, 2]}),
    ([4, 3, 4], [2, 1, 2], {"strides": [2, 1, 1]}),
])
def test_col2im_with_constant_shapes(image, block, attrs):
    nd = len(image)
    st, dl = attrs.get("strides", [1] * nd), attrs.get("dilations", [1] * nd)
    pads = attrs.get("pads", [0] * (2 * nd))
    counts = [(image[i] + pads[i] + pads[nd + i] - dl[i] * (block[i] - 1) - 1) // st[i] + 1
              for i in range(nd)]
    c = 2
    inputs = [("x", F32, ["N", c * int(np.prod(block)), int(np.prod(counts))])]
    vis = [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, inputs[0][2])]
    inits = [onnx.numpy_helper.from_array(np.array(image, np.int64), "i"),
             onnx.numpy_helper.from_array(np.array(block, np.int64), "b")]
    node = h.make_node("Col2Im", ["x", "i", "b"], ["y"], **attrs)
    m = h.make_model(h.make_graph([node], "g", vis, [h.make_empty_tensor_value_info("y")], inits),
                     opset_imports=[h.make_opsetid("", 18)])
    m.ir_version = 10
    mod, _, k = jit_compile(m)
    for seed, n in enumerate((1, 3)):
        x = np.random.default_rng(seed).uniform(-2, 2, size=(n, *inputs[0][2][1:])).astype(F32)
        want = ort_run(m, {"x": x})["y"]
        for got in (k(x)[0], interp_run(mod, [x])[0]):
            assert got.shape == want.shape and got.dtype == want.dtype
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_col2im_with_the_image_shape_of_an_input():
    """torch's F.fold at the input's own size: image_shape is Shape(img)[2:], symbolic H and W
    (held-out fold_dyn18); the block count L is checked against floor((H - 2) / 2 + 1) * ..."""
    vis = [h.make_tensor_value_info("img", onnx.TensorProto.FLOAT, ["N", 2, "H", "W"]),
           h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 8, "L"])]
    inits = [onnx.numpy_helper.from_array(np.array([2, 2], np.int64), "b"),
             onnx.numpy_helper.from_array(np.array([2], np.int64), "s0"),
             onnx.numpy_helper.from_array(np.array([4], np.int64), "s1")]
    nodes = [h.make_node("Shape", ["img"], ["sh"]), h.make_node("Slice", ["sh", "s0", "s1"], ["i"]),
             h.make_node("Col2Im", ["x", "i", "b"], ["y"], strides=[2, 2], pads=[1, 0, 0, 1])]
    m = h.make_model(h.make_graph(nodes, "g", vis, [h.make_empty_tensor_value_info("y")], inits),
                     opset_imports=[h.make_opsetid("", 18)])
    m.ir_version = 10
    mod, _, k = jit_compile(m)
    for seed, (n, hh, ww) in enumerate(((1, 3, 4), (2, 6, 5), (1, 7, 9))):
        rng = np.random.default_rng(seed)
        img = rng.uniform(-1, 1, (n, 2, hh, ww)).astype(F32)
        x = rng.uniform(-2, 2, (n, 8, ((hh + 1 - 2) // 2 + 1) * ((ww + 1 - 2) // 2 + 1))).astype(F32)
        want = ort_run(m, {"img": img, "x": x})["y"]
        for got in (k(img, x)[0], interp_run(mod, [img, x])[0]):
            assert got.shape == want.shape == (n, 2, hh, ww)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
