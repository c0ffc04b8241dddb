"""ScatterND / ScatterElements without a reduction in push form (ops/scatter_push.py): a copy of
the data, then one write per update. Checked against onnxruntime with symbolic sizes, negative
indices, duplicate targets (the last update wins, as onnxruntime's serial loop gives) and
slices of several elements per index; an index out of range fails the call, never writes
stray memory; and the work is the push form's (no reduction over the updates is left)."""

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as h

from onnxcc.errors import RuntimeCallError
from onnxcc.kernel import Reduce, WriteAt
from onnxcc.kernel.expr import walk
from onnxcc.testing import jit_compile, ort_run


def model(node, inputs):
    vis = [h.make_tensor_value_info(n, t, s) for n, t, s in inputs]
    m = h.make_model(h.make_graph([node], "g", vis, [h.make_empty_tensor_value_info("y")]),
                     opset_imports=[h.make_opsetid("", 16)])
    m.ir_version = 8
    return m


def _push_form(prog) -> bool:
    writes = [s for s in prog.body if isinstance(s, WriteAt)]
    reduces = [n for c in prog.computes() for n in walk(c.body) if isinstance(n, Reduce)]
    return len(writes) == 1 and not reduces


def _check(m, feeds):
    _, prog, k = jit_compile(m)
    assert _push_form(prog)
    got = k(*feeds.values())[0]
    want = ort_run(m, feeds)["y"]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("n,k", [(1, 1), (7, 3), (40, 25)])
def test_scatter_nd_rows(n, k):
    m = model(h.make_node("ScatterND", ["x", "i", "u"], ["y"]),
              [("x", TP.FLOAT, ["N", 5]), ("i", TP.INT64, ["K", 1]), ("u", TP.FLOAT, ["K", 5])])
    rng = np.random.default_rng(n * 31 + k)
    # distinct targets, some written negative: onnxruntime leaves duplicates' order to its loop
    rows = rng.permutation(n)[:k]
    idx = np.where(rng.random(k) < 0.5, rows - n, rows).astype(np.int64)[:, None]
    _check(m, {"x": rng.standard_normal((n, 5)).astype(np.float32), "i": idx,
               "u": rng.standard_normal((k, 5)).astype(np.float32)})


def test_scatter_nd_points_with_duplicates_last_wins():
    m = model(h.make_node("ScatterND", ["x", "i", "u"], ["y"]),
              [("x", TP.INT64, ["A", "B"]), ("i", TP.INT64, ["K", 2]), ("u", TP.INT64, ["K"])])
    idx = np.array([[0, 1], [2, 2], [0, 1], [-1, 0], [2, 2]], np.int64)
    x, u = np.zeros((3, 4), np.int64), np.arange(1, 6, dtype=np.int64)
    _, prog, k = jit_compile(m)
    assert _push_form(prog)
    got = k(x, idx, u)[0]
    want = x.copy()
    for (a, b), v in zip(idx, u):
        want[a, b] = v
    np.testing.assert_array_equal(got, want)
    assert got[0, 1] == 3 and got[2, 2] == 5


def test_scatter_elements_axis1():
    m = model(h.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=1),
              [("x", TP.FLOAT, ["N", 9]), ("i", TP.INT64, ["N", 4]), ("u", TP.FLOAT, ["N", 4])])
    rng = np.random.default_rng(3)
    n = 6
    idx = np.stack([rng.permutation(9)[:4] - 9 * (r % 2) for r in range(n)]).astype(np.int64)
    _check(m, {"x": rng.standard_normal((n, 9)).astype(np.float32), "i": idx,
               "u": rng.standard_normal((n, 4)).astype(np.float32)})


@pytest.mark.parametrize("op,bad", [("ScatterND", [[4]]), ("ScatterND", [[-5]]), ("ScatterElements", [[0, 7]])])
def test_index_out_of_range_fails_the_call(op, bad):
    if op == "ScatterND":
        ins = [("x", TP.FLOAT, [4, 3]), ("i", TP.INT64, ["K", 1]), ("u", TP.FLOAT, ["K", 3])]
        u = np.ones((1, 3), np.float32)
    else:
        ins = [("x", TP.FLOAT, [4, 3]), ("i", TP.INT64, [1, 2]), ("u", TP.FLOAT, [1, 2])]
        u = np.ones((1, 2), np.float32)
    m = model(h.make_node(op, ["x", "i", "u"], ["y"], **({"axis": 0} if op == "ScatterElements" else {})), ins)
    _, _, k = jit_compile(m)
    with pytest.raises(RuntimeCallError, match="index out of range"):
        k(np.zeros((4, 3), np.float32), np.array(bad, np.int64), u)


def test_reductions_keep_the_pull_form():
    m = model(h.make_node("ScatterND", ["x", "i", "u"], ["y"], reduction="add"),
              [("x", TP.FLOAT, [4, 3]), ("i", TP.INT64, [2, 1]), ("u", TP.FLOAT, [2, 3])])
    _, prog, _ = jit_compile(m)
    assert not any(isinstance(s, WriteAt) for s in prog.body)
