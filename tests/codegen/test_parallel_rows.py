"""A parallel compute whose innermost axis is a short static run of vectors (a channels-last
depthwise conv's 16 or 32 channels) takes rows of its last outer var as parallel items
(codegen/cpu/emit.py `row_items`): each body steps the vars before the row with carries and
loops over the row itself. Odd symbolic extents make the thread splits land anywhere and the
carries wrap; 16, 24 (a vector and a masked tail) and 32 channels; results compared with
numpy exactly (Relu, Add and Transpose move or add each element once), 1 to 3 threads."""

from __future__ import annotations

import textwrap

import onnx
import pytest
from onnx import TensorProto, helper
from threaded_child import assert_child_ok, lib_fixture

from onnxcc.codegen.cpu.emit import NestPlan, row_items
from onnxcc.ir import DType, sym
from onnxcc.kernel.program import KernelProgram


def _model(path) -> None:
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["A", "B", "C", 16]),
           helper.make_tensor_value_info("y", TensorProto.FLOAT, ["P", "Q", "R", 24]),
           helper.make_tensor_value_info("z", TensorProto.FLOAT, ["U", 32, "V", "W"])]
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Add", ["y", "y"], ["s"]),
             helper.make_node("Transpose", ["z"], ["t"], perm=[0, 2, 3, 1])]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("r", "s", "t")]
    g = helper.make_graph(nodes, "rows", ins, outs)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


_RUN = textwrap.dedent("""
    import sys
    import numpy as np
    import onnxcc
    lib = onnxcc.load(sys.argv[1])
    rng = np.random.default_rng(0)
    for a, b, c in [(3, 37, 41), (1, 5, 997), (2, 129, 3), (1, 1, 1)]:
        x = rng.standard_normal((a, b, c, 16)).astype(np.float32)
        y = rng.standard_normal((a, c, b, 24)).astype(np.float32)
        z = rng.standard_normal((a, 32, b, c)).astype(np.float32)
        got = lib.run({"x": x, "y": y, "z": z})
        assert np.array_equal(got["r"], np.maximum(x, 0)), (a, b, c)
        assert np.array_equal(got["s"], y + y), (a, b, c)
        assert np.array_equal(got["t"], z.transpose(0, 2, 3, 1)), (a, b, c)
    print("ok")
""")


built = lib_fixture("rows", _model)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_row_items_match_numpy(built, threads):
    assert_child_ok(_RUN, built, threads)


def test_row_items_only_for_short_static_rows():
    """16 channels in 16-lane vectors take rows; 32 only where the row's length is symbolic
    (on a static row LLVM made gathers of a guarded conv's taps); 33, a symbolic extent, an
    unvectorised innermost loop or rank 2 or 3 keep one item per iteration of the outer vars."""
    p = KernelProgram.new("rows", ["N", "H", "W"])
    N, H, W = sym("N"), sym("H"), sym("W")
    computes = {}
    for row, last in ((W, 16), (W, 32), (7, 16), (7, 32), (W, 33), (W, H)):
        k = len(computes)
        x = p.input(f"x{k}", DType.f32, (N, H, row, last))
        y = p.output(f"y{k}", DType.f32, (N, H, row, last))
        computes[row, last] = p.compute(y, lambda n, h, w, c, x=x: x[n, h, w, c])
    flat = p.output("flat", DType.f32, (N, 16))
    xf = p.input("xf", DType.f32, (N, 16))
    c2 = p.compute(flat, lambda n, c: xf[n, c])
    x3 = p.input("r3", DType.f32, (N, H, 16))
    c3 = p.compute(p.output("s3", DType.f32, (N, H, 16)), lambda n, h, c: x3[n, h, c])
    plan = NestPlan(order=(0, 1, 2, 3), parallel=True, vector_width=16)
    assert row_items(computes[W, 16], plan) and row_items(computes[W, 32], plan) and row_items(computes[7, 16], plan)
    assert not row_items(computes[7, 32], plan)
    assert not row_items(computes[W, 33], plan) and not row_items(computes[W, H], plan)
    assert not row_items(computes[W, 16], NestPlan(order=(0, 1, 2, 3), parallel=True))
    assert not row_items(c2, NestPlan(order=(0, 1), parallel=True, vector_width=16))
    assert not row_items(c3, NestPlan(order=(0, 1, 2), parallel=True, vector_width=16))
