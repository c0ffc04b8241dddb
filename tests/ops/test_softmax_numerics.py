"""Softmax / LogSoftmax / Attention through the public path against onnxruntime, on what
the two-pass softmax (one exp per element, kernel/rownorm.py) must not get wrong: odd row
lengths, large magnitudes (no overflow), -inf masks with a fully masked row, f64 and f16."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper

import onnxcc
from onnxcc.testing import ort_run

_NP = {T.FLOAT: np.float32, T.DOUBLE: np.float64, T.FLOAT16: np.float16}


def _softmax_model(dt: int):
    """y = Softmax(x + mask), z = LogSoftmax(x + mask) over the last axis, w = Softmax over
    axis 1 (not innermost: the staged path), all with symbolic dims."""
    x = helper.make_tensor_value_info("x", dt, ["b", 3, "n"])
    m = helper.make_tensor_value_info("mask", dt, ["b", 1, "n"])
    outs = [helper.make_tensor_value_info(o, dt, ["b", 3, "n"]) for o in ("y", "z", "w")]
    nodes = [helper.make_node("Add", ["x", "mask"], ["xm"]),
             helper.make_node("Softmax", ["xm"], ["y"], axis=-1),
             helper.make_node("LogSoftmax", ["xm"], ["z"], axis=-1),
             helper.make_node("Softmax", ["x"], ["w"], axis=1)]
    mo = helper.make_model(helper.make_graph(nodes, "g", [x, m], outs), opset_imports=[helper.make_opsetid("", 17)])
    mo.ir_version = 8
    return mo


def _feeds(dt, b, n, rng, scale):
    top = float(np.finfo(_NP[dt]).max) / 2  # finite, and x - max stays finite
    x = np.clip(rng.standard_normal((b, 3, n)) * scale, -top, top).astype(_NP[dt])
    mask = np.where(rng.random((b, 1, n)) < 0.3, -np.inf, 0.0).astype(_NP[dt])
    mask[0] = -np.inf  # batch 0: every row fully masked (NaN in softmax: spec and onnxruntime)
    return {"x": x, "mask": mask}


def _close(got, want, rtol, atol, what):
    assert got.dtype == want.dtype, what
    assert np.array_equal(np.isnan(got), np.isnan(want)), f"{what}: NaN positions differ"
    ok = ~np.isnan(want)
    np.testing.assert_allclose(got[ok].astype(np.float64), want[ok].astype(np.float64), rtol=rtol, atol=atol,
                               err_msg=what)


@pytest.mark.parametrize("dt,rtol,atol", [(T.FLOAT, 1e-5, 1e-6), (T.DOUBLE, 1e-12, 1e-14), (T.FLOAT16, 2e-3, 2e-3)])
def test_softmax_family_against_onnxruntime(dt, rtol, atol, tmp_path):
    model = _softmax_model(dt)
    onnxcc.compile(model, tmp_path / "a", name="sm")
    lib = onnxcc.load(tmp_path / "a")
    rng = np.random.default_rng(1)
    big = 1e4 if dt == T.FLOAT16 else 1e30  # scores whose exp overflows without the max shift
    for b, n, scale in ((2, 1, 1.0), (2, 7, 3.0), (3, 33, 10.0), (2, 100, big), (2, 257, 1.0)):
        feeds = _feeds(dt, b, n, rng, scale)
        want = ort_run(model, feeds)
        got = lib.run(feeds)
        for name in ("y", "z", "w"):
            _close(got[name], want[name], rtol, atol, f"{name} at b={b} n={n} scale={scale}")
        assert np.isnan(got["y"][0]).all() and np.isfinite(got["y"][1:]).all()


def test_attention_fully_masked_rows_are_zero(tmp_path):
    """A bool mask with rows that attend to nothing: Y is 0 there (the ONNX reference), the
    other rows match onnxruntime; long rows at a symbolic seq."""
    ins = [("Q", ["b", 2, "s", 8]), ("K", ["b", 2, "s", 8]), ("V", ["b", 2, "s", 4])]
    vis = [helper.make_tensor_value_info(n, T.FLOAT, s) for n, s in ins]
    vis.append(helper.make_tensor_value_info("mask", T.BOOL, ["s", "s"]))
    y = helper.make_tensor_value_info("Y", T.FLOAT, None)
    node = helper.make_node("Attention", ["Q", "K", "V", "mask"], ["Y"])
    model = helper.make_model(helper.make_graph([node], "g", vis, [y]), opset_imports=[helper.make_opsetid("", 23)])
    model.ir_version = 10
    onnxcc.compile(model, tmp_path / "a", name="attn")
    lib = onnxcc.load(tmp_path / "a")
    rng = np.random.default_rng(2)
    for b, s in ((1, 5), (2, 77)):
        feeds = {n: (rng.standard_normal([b if d == "b" else s if d == "s" else d for d in shape]) * 4)
                 .astype(np.float32) for n, shape in ins}
        mask = rng.random((s, s)) < 0.7
        mask[2] = False
        feeds["mask"] = mask
        got, want = lib.run(feeds)["Y"], ort_run(model, feeds)["Y"]
        assert np.all(got[:, :, 2] == 0.0)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"b={b} s={s}")
