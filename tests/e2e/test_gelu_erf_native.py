"""The exact GELU as torch exports it, x * 0.5 * (1 + erf(x / sqrt 2)), compiled at a symbolic
batch: the whole product is vmath's `gelu` (x Phi(x) from exp(-x**2 / 2) and a rational,
no erf; gelu_forms.exact_gelu), checked against a float64 reference (4 ulp relative plus the
absolute error the graph's 1 + erf has where it cancels) and onnxruntime, with infinities, NaN, signed zeros,
denormals and the extremes among the inputs. A second GELU has its operands in the other
order, a third torch's dynamo grouping, x * (0.5 * (erf(x / sqrt 2) + 1)); one output takes
erf of x / 3 (another constant divisor), one erf of x / t with t an input (no constant: the
plain division and erf)."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from compiled_model import lib_fixture
from onnx import TensorProto, helper, numpy_helper

import onnxcc
from onnxcc.testing import ort_run

WIDTH = 768
SPECIALS = [np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-40, -1e-40, 3.4e38, -3.4e38, 1.4142135, -1.4142135, 5.6, -5.6]


def _model() -> onnx.ModelProto:
    def c(name, v):
        return numpy_helper.from_array(np.asarray(v, np.float32), name)

    n = helper.make_node
    nodes = [n("Div", ["x", "sqrt2"], ["xs"]), n("Erf", ["xs"], ["e"]), n("Add", ["e", "one"], ["e1"]),
             n("Mul", ["x", "e1"], ["xe"]), n("Mul", ["xe", "half"], ["gelu"]),
             n("Div", ["w", "sqrt2"], ["ws"]), n("Erf", ["ws"], ["ew"]), n("Add", ["one", "ew"], ["ew1"]),
             n("Mul", ["ew1", "w"], ["wew"]), n("Mul", ["half", "wew"], ["gelu2"]),
             n("Div", ["v", "sqrt2"], ["vs"]), n("Erf", ["vs"], ["ev"]), n("Add", ["ev", "one"], ["ev1"]),
             n("Mul", ["half", "ev1"], ["hev1"]), n("Mul", ["v", "hev1"], ["gelu3"]),
             n("Div", ["x", "three"], ["x3"]), n("Erf", ["x3"], ["erf3"]),
             n("Div", ["x", "t"], ["xt"]), n("Erf", ["xt"], ["erft"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", WIDTH])
    w = helper.make_tensor_value_info("w", TensorProto.FLOAT, ["batch", WIDTH])
    v = helper.make_tensor_value_info("v", TensorProto.FLOAT, ["batch", WIDTH])
    t = helper.make_tensor_value_info("t", TensorProto.FLOAT, [WIDTH])
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, ["batch", WIDTH])
            for o in ("gelu", "gelu2", "gelu3", "erf3", "erft")]
    g = helper.make_graph(nodes, "gelu_erf", [x, w, v, t], outs,
                          [c("sqrt2", math.sqrt(2.0)), c("one", 1.0), c("half", 0.5), c("three", 3.0)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


built = lib_fixture("gelu_erf", lambda p: onnx.save(_model(), p), max_versions=1)


def _inputs(batch: int):
    rng = np.random.default_rng(batch)
    x = (3.0 * rng.standard_normal((batch, WIDTH))).astype(np.float32)
    x.flat[:len(SPECIALS)] = SPECIALS
    w = rng.uniform(-6.0, 6.0, (batch, WIDTH)).astype(np.float32)
    t = rng.uniform(0.5, 3.0, WIDTH).astype(np.float32)
    return {"x": x, "w": w, "v": -w, "t": t}


def _erf64(v: np.ndarray) -> np.ndarray:
    return np.vectorize(lambda a: a if math.isnan(a) else math.erf(a))(v.astype(np.float64))


def _check_gelu(g: np.ndarray, x: np.ndarray):
    x64, g = x.astype(np.float64), g.astype(np.float64)
    q = (x / np.float32(math.sqrt(2.0))).astype(np.float32)  # the graph's rounded quotient
    with np.errstate(invalid="ignore"):  # -inf * 0: NaN (as the graph's f32 products give)
        want = x64 * 0.5 * (1.0 + _erf64(q))
    assert np.array_equal(np.isnan(g), np.isnan(want))
    fin = np.isfinite(want)
    assert np.array_equal(g[~fin & ~np.isnan(want)], want[~fin & ~np.isnan(want)])  # +inf in, +inf out
    # erf within 1.9 ulp (vmath's tests) of erf of the exact quotient: 2**-23 of 1 absolute,
    # which 1 + erf keeps for negative x; then x / 2 + x / 2 erf rounded once (exprs' GELU
    # fma: no overflow of x * 2 at the float maximum, which the graph's products would have)
    tol = 4 * 2.0 ** -24 * np.abs(want[fin]) + 2.0 ** -23 * 0.5 * np.abs(x64[fin]) + 1e-45
    bad = np.abs(g[fin] - want[fin]) > tol
    assert not bad.any(), (x64[fin][bad][:5], g[fin][bad][:5], want[fin][bad][:5])


@pytest.mark.parametrize("batch", [1, 3, 17])
def test_gelu_erf_against_float64_and_ort(built, batch):
    path, lib = built
    feeds = _inputs(batch)
    got = lib.run(feeds)
    _check_gelu(got["gelu"], feeds["x"])
    _check_gelu(got["gelu2"], feeds["w"])  # the products and the sum in the other order
    _check_gelu(got["gelu3"], feeds["v"])  # torch's dynamo grouping: x * (0.5 * (erf + 1))
    x = feeds["x"]
    for name, d in (("erf3", np.float32(3.0)), ("erft", feeds["t"])):
        with np.errstate(over="ignore"):  # 3.4e38 / t: inf, erf 1
            ref = _erf64((x / d).astype(np.float32))
        np.testing.assert_allclose(got[name], ref, rtol=2e-7, atol=2e-7 * 1e-30, equal_nan=True)
    ort = ort_run(str(path), feeds)
    for name in ("gelu", "gelu2", "gelu3", "erf3", "erft"):
        np.testing.assert_allclose(got[name], ort[name], rtol=1e-5, atol=1e-6, equal_nan=True)


def test_gelu_erf_uses_erf_div(tmp_path):
    """The three f32 GELU spellings (divisor sqrt 2) reach vmath's gelu (x Phi(x), no erf);
    the other constant divisor reaches erf_div (no division in the loop); the input divisor
    neither."""
    path = tmp_path / "g.onnx"
    onnx.save(_model(), path)
    llvm_ir = onnxcc.compile(path, tmp_path / "out", emit="llvm", max_versions=1).text
    assert llvm_ir.count('call float @"onnxcc.math.gelu.f32"(') == 3  # the three GELU spellings
    assert llvm_ir.count('call float @"onnxcc.math.erf_div.f32"(') == 1  # erf(x / 3)
    assert llvm_ir.count('call float @"onnxcc.math.erf.f32"(') == 1  # erf(x / t)


def test_gelu_ops_reach_vmath_gelu(tmp_path):
    """onnx.Gelu (opset 20) and com.microsoft.Gelu lower to 0.5 x (1 + erf(x * (1 / sqrt 2))):
    the factor form reaches vmath's gelu too, within the float64 reference's bound (the
    reference takes the graph's rounded quotient; vmath's gelu the product with 1 / sqrt 2 as
    fitted for sqrt 2, 3.4e-8 apart) and onnxruntime's."""
    n = helper.make_node
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", WIDTH])
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, ["batch", WIDTH]) for o in ("g20", "gms")]
    g = helper.make_graph([n("Gelu", ["x"], ["g20"]), n("Gelu", ["x"], ["gms"], domain="com.microsoft")],
                          "gelu_ops", [x], outs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20), helper.make_opsetid("com.microsoft", 1)],
                          ir_version=9)
    path = tmp_path / "g.onnx"
    onnx.save(m, path)
    llvm_ir = onnxcc.compile(path, tmp_path / "ll", emit="llvm", max_versions=1).text
    assert llvm_ir.count('call float @"onnxcc.math.gelu.f32"(') == 2
    onnxcc.compile(path, tmp_path / "lib", max_versions=1)
    feeds = {"x": _inputs(5)["x"]}
    got = onnxcc.load(tmp_path / "lib").run(feeds)
    ort = ort_run(str(path), feeds)
    for name in ("g20", "gms"):
        _check_gelu(got[name], feeds["x"])
        np.testing.assert_allclose(got[name], ort[name], rtol=1e-5, atol=1e-6, equal_nan=True)
