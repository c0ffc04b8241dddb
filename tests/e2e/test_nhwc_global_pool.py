"""Global pools of a channels-last region's value (passes/nhwc_region.py, ops/pool_nhwc.py):
GlobalAveragePool, GlobalMaxPool and ReduceMean over H, W join the region as
cc.global_*pool_nhwc and run as one call that walks the pixels with the channels in the vector
lanes (onnxcc_f32chanpool, codegen/cpu/chan_pool.py); their [N, 1, 1, C] result leaves as a
Reshape (a view), to [N, C] for a ReduceMean that drops its dims (mnasnet's head).

Each head sits after a dense chain 3 -> 16 -> C (a region from its input) and is compared with
onnxruntime through the user path at symbolic N, H, W: batch 1 to 3, odd planes, a 1x1 plane,
C = 40 (one block of channels, its last vector masked) and C = 72 (two blocks). One graph
also returns the pooled feature map itself, so the pool reads a value that leaves the region.
Tolerance rtol 1e-4, atol 1e-5: means of up to 37 * 29 values summed in f32 in pixel order."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxcc
from onnxcc.testing import ort_run

SHAPES = [(1, 1, 1), (3, 5, 7), (2, 37, 29), (1, 16, 3)]


def _model(path, head: str, cout: int, also_map: bool = False, flatten: bool = True) -> None:
    rng = np.random.default_rng(cout)
    inits = [numpy_helper.from_array((rng.standard_normal((16, 3, 3, 3)) / 5).astype(np.float32), "w1"),
             numpy_helper.from_array((rng.standard_normal((cout, 16, 3, 3)) / 12).astype(np.float32), "w2"),
             numpy_helper.from_array(rng.standard_normal(cout).astype(np.float32), "b2")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], kernel_shape=[3, 3], pads=[1] * 4),
             helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("Conv", ["ar", "w2", "b2"], ["b"], kernel_shape=[3, 3], pads=[1] * 4),
             helper.make_node("Relu", ["b"], ["m"])]
    opset = 17
    if head == "reduce_mean_input":
        opset = 18
        inits.append(numpy_helper.from_array(np.array([-1, 2], np.int64), "axes"))
        nodes.append(helper.make_node("ReduceMean", ["m", "axes"], ["p"]))
    elif head == "reduce_mean":
        nodes.append(helper.make_node("ReduceMean", ["m"], ["p"], axes=[2, 3]))
    elif head == "reduce_mean_dropped":
        nodes.append(helper.make_node("ReduceMean", ["m"], ["p"], axes=[2, 3], keepdims=0))
    elif head == "reduce_mean_dropped_input":
        opset = 18
        inits.append(numpy_helper.from_array(np.array([3, -2], np.int64), "axes"))
        nodes.append(helper.make_node("ReduceMean", ["m", "axes"], ["p"], keepdims=0))
    else:
        nodes.append(helper.make_node(head, ["m"], ["p"]))
    nodes.append(helper.make_node("Flatten" if flatten else "Identity", ["p"], ["y"]))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if also_map:
        outs.append(helper.make_tensor_value_info("m", TensorProto.FLOAT, None))
    g = helper.make_graph(nodes, "head", [x], outs, inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]), path)


def _check(tmp_path, names) -> None:
    onnxcc.compile(tmp_path / "m.onnx", tmp_path / "lib", max_versions=1)
    lib = onnxcc.load(tmp_path / "lib")
    for n, h, w in SHAPES:
        feeds = {"x": np.random.default_rng(h * 31 + w).standard_normal((n, 3, h, w)).astype(np.float32)}
        want, got = ort_run(tmp_path / "m.onnx", feeds), lib.run(feeds)
        for name in names:
            assert got[name].shape == want[name].shape, name
            np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-5, err_msg=f"{name} {n}x{h}x{w}")


@pytest.mark.parametrize("head,kind", [("GlobalAveragePool", "avg"), ("GlobalMaxPool", "max"),
                                       ("reduce_mean", "avg"), ("reduce_mean_input", "avg"),
                                       ("reduce_mean_dropped", "avg"), ("reduce_mean_dropped_input", "avg")])
@pytest.mark.parametrize("cout", [40, 72])
def test_global_pool_joins_the_region(tmp_path, head, kind, cout):
    _model(tmp_path / "m.onnx", head, cout)
    text = onnxcc.compile(tmp_path / "m.onnx", tmp_path / "ir", emit="ir", max_versions=1).text
    assert text.count(f"cc.global_{kind}pool_nhwc(") == 1
    assert "perm = [0, 3, 1, 2]" not in text  # nothing leaves as a feature map
    assert text.count("onnx.Reshape(") == 1
    kernel = onnxcc.compile(tmp_path / "m.onnx", tmp_path / "k", emit="kernel", max_versions=1).text
    assert "call onnxcc_f32chanpool(" in kernel
    _check(tmp_path, ["y"])


def test_pool_of_a_value_that_also_leaves(tmp_path):
    """The pooled map is also a graph output: it leaves through a Transpose, the pool stays in."""
    _model(tmp_path / "m.onnx", "GlobalAveragePool", 40, also_map=True)
    text = onnxcc.compile(tmp_path / "m.onnx", tmp_path / "ir", emit="ir", max_versions=1).text
    assert text.count("cc.global_avgpool_nhwc(") == 1
    assert text.count("perm = [0, 3, 1, 2]") == 1
    _check(tmp_path, ["y", "m"])


@pytest.mark.parametrize("flatten", [True, False])
def test_reduce_mean_dropping_its_dims_leaves_as_n_by_c(tmp_path, flatten):
    """mnasnet's head: the [N, C] mean read by a Flatten, or returned as it is (the Reshape view
    of the pool's buffer is the graph's output)"""
    _model(tmp_path / "m.onnx", "reduce_mean_dropped", 72, flatten=flatten)
    text = onnxcc.compile(tmp_path / "m.onnx", tmp_path / "ir", emit="ir", max_versions=1).text
    assert "onnx.ReduceMean(" not in text
    assert text.count("cc.global_avgpool_nhwc(") == 1
    _check(tmp_path, ["y"])


@pytest.mark.parametrize("head", ["GlobalAveragePool", "GlobalMaxPool"])
def test_region_references_match_onnxruntime(tmp_path, head):
    """The numpy references of the channels-last ops (the interpreter over the rewritten
    module) against onnxruntime: what the other tests' compiled runs are checked by."""
    from onnxcc.frontend import load_onnx
    from onnxcc.interp import run as interp_run
    from onnxcc.passes.nhwc_region import nhwc_regions

    _model(tmp_path / "m.onnx", head, 40)
    module = load_onnx(tmp_path / "m.onnx")
    assert nhwc_regions(module)
    assert "global_" in str(module)
    feeds = {"x": np.random.default_rng(5).standard_normal((2, 3, 11, 6)).astype(np.float32)}
    got = interp_run(module, list(feeds.values()))[0]
    np.testing.assert_allclose(got, ort_run(tmp_path / "m.onnx", feeds)["y"], rtol=1e-4, atol=1e-5)


def test_max_pool_call_lets_nan_win(tmp_path):
    """A NaN in one channel's map is that channel's max (np.max's rule, the reference's), the
    other channels unaffected."""
    _model(tmp_path / "m.onnx", "GlobalMaxPool", 40, also_map=True)
    onnxcc.compile(tmp_path / "m.onnx", tmp_path / "lib", max_versions=1)
    lib = onnxcc.load(tmp_path / "lib")
    x = np.random.default_rng(6).standard_normal((2, 3, 9, 8)).astype(np.float32)
    x[1, 0, 4, 4] = np.nan  # reaches some channels of image 1 through the 3x3 windows
    got = lib.run({"x": x})
    want = np.max(got["m"], axis=(2, 3))
    assert np.isnan(want).any() and not np.isnan(want).all()
    np.testing.assert_array_equal(np.isnan(got["y"]), np.isnan(want))
    np.testing.assert_allclose(got["y"], want, rtol=0, atol=0)


def test_pooled_result_returned_as_it_is(tmp_path):
    """The [N, C, 1, 1] result read by nothing but the graph's output (the Reshape view of the
    pool's buffer is what the caller gets)."""
    _model(tmp_path / "m.onnx", "GlobalAveragePool", 40, flatten=False)
    _check(tmp_path, ["y"])
