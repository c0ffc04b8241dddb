"""run()'s per-signature memo (loader._run_again, shape_memo.py): output shapes remembered per
tuple of input shapes, and a thread's DLTensor words reused when its next call has the same
shapes. Every test alternates what a stale reuse would get wrong (shapes, strides, dtypes,
threads) and checks the results against numpy."""

from __future__ import annotations

import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnxcc
from onnxcc.errors import GuardError
from onnxcc.runtime.shape_memo import shapes_follow_input_shapes


def _model(tmp_path_factory, name: str, nodes, inputs, outputs):
    g = helper.make_graph(nodes, "g", inputs, outputs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    d = tmp_path_factory.mktemp(name)
    onnx.save(m, str(d / f"{name}.onnx"))
    onnxcc.compile(d / f"{name}.onnx", d / "out")
    return onnxcc.load(d / "out")


@pytest.fixture(scope="module")
def transpose(tmp_path_factory):
    """y = x^T * 2 (shape [C, N]: a stale shape or stale strides shows in every element);
    s = sum over C ([N, 1])."""
    f = TensorProto.FLOAT
    two = helper.make_tensor("two", f, [], [2.0])
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0]),
             helper.make_node("Constant", [], ["c2"], value=two),
             helper.make_node("Mul", ["t", "c2"], ["y"]),
             helper.make_node("ReduceSum", ["x", "ax"], ["s"], keepdims=1)]
    ax = helper.make_tensor("ax", TensorProto.INT64, [1], [1])
    g_inputs = [helper.make_tensor_value_info("x", f, ["N", "C"])]
    g_outputs = [helper.make_tensor_value_info("y", f, ["C", "N"]), helper.make_tensor_value_info("s", f, ["N", 1])]
    nodes.insert(0, helper.make_node("Constant", [], ["ax"], value=ax))
    return _model(tmp_path_factory, "tr", nodes, g_inputs, g_outputs)


def _check(lib, x):
    got = lib.run({"x": x})
    np.testing.assert_allclose(got["y"], x.T * 2, rtol=1e-6)
    np.testing.assert_allclose(got["s"], x.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-5)
    return got


def test_memo_applies_to_symbolic_outputs(transpose):
    assert transpose._memo is not None
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    _check(transpose, x)
    assert transpose._scratch.key == ((2, 3),)  # the words-reuse path is armed for the next call
    assert ((2, 3),) in transpose._memo


def test_alternating_shapes_give_fresh_correct_outputs(transpose):
    rng = np.random.default_rng(0)
    shapes = [(2, 3), (3, 2), (2, 3), (5, 7), (1, 1), (5, 7), (3, 2), (2, 3)]
    kept = []
    for _ in range(2):
        for shp in shapes:
            x = rng.standard_normal(shp).astype(np.float32)
            got = _check(transpose, x)
            assert got["y"].shape == shp[::-1]
            kept.append((x, got))
    for x, got in kept:  # no later call wrote into an earlier call's outputs
        np.testing.assert_allclose(got["y"], x.T * 2, rtol=1e-6)


def test_same_shape_strided_then_compact(transpose):
    rng = np.random.default_rng(1)
    base = rng.standard_normal((4, 6)).astype(np.float32)
    views = [np.ascontiguousarray(base[:, :3]), base[:, ::2], base[::2, :3], base.T[:3, :4],
             np.ascontiguousarray(base[:, ::2]), base[:, :3]]
    for v in views * 2:
        _check(transpose, v)


def test_list_and_bare_array_calls(transpose):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    _check(transpose, x)
    for call in (lambda: transpose.run([x]), lambda: transpose.run(x)):
        got = call()
        np.testing.assert_allclose(got["y"], x.T * 2)


def test_checks_still_refuse_after_a_memoised_call(transpose):
    x = np.ones((2, 3), np.float32)
    _check(transpose, x)
    _check(transpose, x)
    with pytest.raises(GuardError, match="dtype"):
        transpose.run({"x": x.astype(np.float64)})
    with pytest.raises(GuardError):
        transpose.run({"x": np.ones((2, 3, 1), np.float32)})
    with pytest.raises(GuardError):
        transpose.run({"x": x, "z": x})
    with pytest.raises(GuardError):
        transpose.run({"z": x})
    with pytest.raises(GuardError, match="out of range"):  # N >= 1: the library's own guard
        transpose.run({"x": np.ones((0, 3), np.float32)})
    # and the model still answers right for the shape it had before the refusals
    _check(transpose, x * 3)
    np.testing.assert_allclose(transpose.run({"x": x.astype(np.float64)}, cast=True)["y"], x.T * 2)


def test_out_buffers_after_memoised_calls(transpose):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    _check(transpose, x)
    y, s = np.empty((3, 2), np.float32), np.empty((2, 1), np.float32)
    got = transpose.run({"x": x}, out={"y": y, "s": s})
    assert got["y"] is y
    np.testing.assert_allclose(y, x.T * 2)
    with pytest.raises(GuardError, match="shape"):
        transpose.run({"x": x}, out={"y": np.empty((2, 3), np.float32), "s": s})
    _check(transpose, x)


def test_out_buffers_repeated_and_refused(transpose):
    rng = np.random.default_rng(2)
    y, s = np.empty((3, 2), np.float32), np.empty((2, 1), np.float32)
    y5, s5 = np.empty((3, 5), np.float32), np.empty((5, 1), np.float32)
    for k in range(6):  # same buffers again and again, alternating with another shape and with fresh outputs
        x = rng.standard_normal((2, 3)).astype(np.float32)
        got = transpose.run({"x": x}, out={"y": y, "s": s}) if k % 3 else transpose.run([x], out=[y, s])
        assert got["y"] is y and got["s"] is s
        np.testing.assert_allclose(y, x.T * 2, rtol=1e-6)
        np.testing.assert_allclose(s, x.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-5)
        x5 = rng.standard_normal((5, 3)).astype(np.float32)
        transpose.run({"x": x5}, out={"y": y5, "s": s5})
        np.testing.assert_allclose(y5, x5.T * 2, rtol=1e-6)
        if k % 2:
            _check(transpose, x)
    x = np.ones((2, 3), np.float32)
    ro = np.empty((3, 2), np.float32)
    ro.flags.writeable = False
    for bad, why in (({"y": y5, "s": s}, "shape"), ({"y": y.astype(np.float64), "s": s}, "dtype"),
                     ({"y": ro, "s": s}, "read-only"), ({"y": y, "s": s, "t": s}, "no output")):
        transpose.run({"x": x}, out={"y": y, "s": s})  # armed for (2, 3): the short path sees `bad`
        assert transpose._scratch.key == ((2, 3),)
        with pytest.raises(GuardError, match=why):
            transpose.run({"x": x}, out=bad)
    got = transpose.run({"x": x * 2}, out={"y": y, "s": None})  # partial: s allocated fresh
    assert got["y"] is y and got["s"] is not s
    np.testing.assert_allclose(got["s"], (x * 2).sum(axis=1, keepdims=True))
    wide = np.zeros((3, 4), np.float32)  # a strided view: served in place or refused, never wrong
    try:
        transpose.run({"x": x}, out={"y": wide[:, ::2], "s": s})
    except GuardError:
        pass
    else:
        np.testing.assert_allclose(wide[:, ::2], x.T * 2)
        assert not wide[:, 1::2].any()


def test_threads_with_different_shapes(transpose):
    errors = []

    def work(shp, seed):
        rng = np.random.default_rng(seed)
        try:
            for _ in range(200):
                _check(transpose, rng.standard_normal(shp).astype(np.float32))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    ts = [threading.Thread(target=work, args=(shp, k)) for k, shp in enumerate([(2, 3), (3, 5), (7, 1)])]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors


def _meta(out_shape, **extra):
    return {"inputs": [{"name": "x", "shape": ["N", "3"]}],
            "outputs": [{"name": "y", "shape": out_shape}],
            "symbols": [{"name": "N"}, {"name": "K"}], "versions": [{"kind": "generic"}], **extra}


def test_memo_refused_where_shapes_follow_more_than_input_shapes():
    assert shapes_follow_input_shapes(_meta(["N", "3"]))
    assert shapes_follow_input_shapes(_meta(["floor(N/2) + 1", "Max(N, 3)"]))
    assert not shapes_follow_input_shapes(_meta(["K"]))  # K is no input dim
    assert not shapes_follow_input_shapes(_meta(["N"], data_dims={"N": {"input": "x", "element": 0}}))
    assert not shapes_follow_input_shapes(_meta(["N"], version_dims={"N": ["1"]}))
    assert not shapes_follow_input_shapes(_meta(["N"], run_dims={"N": "10"}))
    assert not shapes_follow_input_shapes(_meta(["N"], versions=[{"kind": "value", "value_guards": [{}]}]))
    run_det = _meta(["N"])
    run_det["outputs"][0]["run_determined"] = True
    assert not shapes_follow_input_shapes(run_det)
