"""Reflect Pad (ops/pad_reflect.py): the one-reflection index when the constant pads are
provably at most n - 1, the general mirror-with-period form otherwise. Through the user path
(compile + load + run) against onnxruntime on 1-D/2-D/3-D tensors, pads 0..n-1, negative
pads (crop first), symbolic lengths with and without a range that proves the pads small,
and pads given at run time (one version per pads value); plus the decision itself."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import sympy
from onnx import TensorProto, helper

import onnxcc
from onnxcc.ir import DType
from onnxcc.ir.dims import SymbolTable
from onnxcc.kernel import Const as KConst
from onnxcc.ops.pad_reflect import single_reflection_ok
from onnxcc.testing import ort_run

CASES = {
    # name: (input shape (str = symbolic), pads (None: a run-time input), dims ranges, run shapes)
    "1d_up_to_n_minus_1": ([2, 3, 7], [0, 0, 3, 0, 0, 6], {}, [[2, 3, 7]]),
    "2d_symbolic_ranged": ([1, 2, "H", "W"], [0, 0, 2, 3, 0, 0, 1, 4], {"H": (3, 64), "W": (5, 64)},
                           [[1, 2, 3, 5], [1, 2, 9, 20]]),
    "2d_symbolic_unranged": ([1, 2, "H", "W"], [0, 0, 2, 3, 0, 0, 1, 4], {}, [[1, 2, 3, 5], [1, 2, 9, 20]]),
    "3d_crop_then_reflect": ([1, 6, 5, 4], [0, -1, 2, 3, 0, -2, 0, 0], {}, [[1, 6, 5, 4]]),
    "runtime_pads": ([1, 2, "L"], None, {}, [[1, 2, 6], [1, 2, 11]]),
}
def _c(v: int) -> KConst:
    return KConst(v, DType.i64)


RUNTIME_PADS = np.array([0, 0, 5, 0, 0, 2], np.int64)


def _model(shape, pads) -> onnx.ModelProto:
    rank = len(shape)
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)]
    inits = []
    if pads is None:
        inputs.append(helper.make_tensor_value_info("pads", TensorProto.INT64, [2 * rank]))
    else:
        inits.append(helper.make_tensor("pads", TensorProto.INT64, [2 * rank], pads))
    # LeakyRelu after the Pad as in convs1d, so the fused kernel is what runs
    nodes = [helper.make_node("Pad", ["x", "pads"], ["p"], mode="reflect"),
             helper.make_node("LeakyRelu", ["p"], ["y"], alpha=0.1)]
    g = helper.make_graph(nodes, "pad_reflect", inputs,
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("name", sorted(CASES))
def test_reflect_pad_matches_onnxruntime(name, tmp_path):
    shape, pads, dims, runs = CASES[name]
    model = _model(shape, pads)
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, path)
    # run-time pads: one version per value (onnxcc refuses a value-dependent shape otherwise)
    values = {} if pads is not None else {"pads": [RUNTIME_PADS.tolist()]}
    onnxcc.compile(path, tmp_path / "art", dims=dims, specialize_value=values)
    lib = onnxcc.load(tmp_path / "art")
    rng = np.random.default_rng(len(name))
    for run_shape in runs:
        feeds = {"x": rng.standard_normal(run_shape).astype(np.float32)}
        if pads is None:
            feeds["pads"] = RUNTIME_PADS
        want = ort_run(model, feeds)["y"]
        got = lib.run(feeds)["y"]
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)  # a copy and one multiply: exact


def test_single_reflection_needs_pads_below_the_extent():
    c = _c
    assert single_reflection_ok(None, 7, c(6), c(0))
    assert not single_reflection_ok(None, 7, c(7), c(0))
    assert not single_reflection_ok(None, 7, c(0), c(7))
    # a crop of 2 leaves 5: pads up to 4
    assert single_reflection_ok(None, 7, c(-2), c(4))
    assert not single_reflection_ok(None, 7, c(-2), c(5))
    # pads only known at run time: the general form
    assert not single_reflection_ok(None, 7, object(), c(1))


def test_single_reflection_on_a_symbol_needs_its_range():
    table = SymbolTable()
    n = table.declare("n", 4, 100)
    assert single_reflection_ok(table, n, _c(3), _c(3))
    assert not single_reflection_ok(table, n, _c(4), _c(0))
    assert single_reflection_ok(table, 2 * n + 1, _c(8), _c(8))
    assert not single_reflection_ok(None, sympy.Symbol("m"), _c(1), _c(1))
