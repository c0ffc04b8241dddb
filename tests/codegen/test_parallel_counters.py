"""A parallel compute's items (its outer vars collapsed) are split between the pool's
threads; each body divides its first item into the outer vars once and then steps them
with carries (codegen/cpu/emit.py `_parallel_body`). Odd extents at ranks 3 to 5 make
every split land mid-row and every carry chain wrap; the results are compared with
numpy exactly (Transpose and Add move or add each element once), with 1 to 3 threads."""

from __future__ import annotations

import textwrap

import onnx
import pytest
from onnx import TensorProto, helper
from threaded_child import assert_child_ok, lib_fixture


def _model(path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["A", "B", "C", "D", "E"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["P", "Q", "R", "S"])
    y3 = helper.make_tensor_value_info("y3", TensorProto.FLOAT, ["U", "V", "W"])
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[4, 2, 0, 3, 1]),
             helper.make_node("Relu", ["t"], ["r"]),
             helper.make_node("Add", ["y", "y"], ["s"]),
             helper.make_node("Transpose", ["y3"], ["u"], perm=[1, 0, 2])]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("r", "s", "u")]
    g = helper.make_graph(nodes, "counters", [x, y, y3], outs)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


_RUN = textwrap.dedent("""
    import sys
    import numpy as np
    import onnxcc
    lib = onnxcc.load(sys.argv[1])
    rng = np.random.default_rng(0)
    for a, b, c, d, e in [(3, 5, 7, 11, 13), (1, 37, 3, 41, 9), (2, 3, 53, 7, 29)]:
        x = rng.standard_normal((a, b, c, d, e)).astype(np.float32)
        y = rng.standard_normal((a, b, c, d * e)).astype(np.float32)
        y3 = rng.standard_normal((a * b, c, d * e)).astype(np.float32)
        got = lib.run({"x": x, "y": y, "y3": y3})
        assert np.array_equal(got["r"], np.maximum(x.transpose(4, 2, 0, 3, 1), 0)), (a, b, c, d, e)
        assert np.array_equal(got["s"], y + y), (a, b, c, d, e)
        assert np.array_equal(got["u"], y3.transpose(1, 0, 2)), (a, b, c, d, e)
    print("ok")
""")


built = lib_fixture("counters", _model)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_split_items_match_numpy(built, threads):
    assert_child_ok(_RUN, built, threads)
