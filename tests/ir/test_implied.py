"""Lower bounds the module's constraints imply (ir/implied.py): a conv's `floor(L/5) - 1 >= 1`
(checked at dispatch) gives L >= 10 for the proofs of value and shape rules, so a length an
exporter computes from L (SEW's dynamo export: `(floor(L/10) - 1) / 2`, an integer Div that
truncates) is known symbolically instead of becoming a run-time symbol. The symbol table's
own range (the dispatcher's guard) is left alone, so a too-short input still fails on the
conv's constraint, by name."""

from __future__ import annotations

import numpy as np
import pytest
import sympy
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import onnxcc
from onnxcc.ir import Constraint, SymbolTable, implied_table, prove_le_implied
from onnxcc.testing import ort_run


def _table():
    t = SymbolTable()
    return t, t.declare("L"), t.declare("B")


def test_a_monotone_single_symbol_constraint_raises_the_lower_bound():
    t, L, _ = _table()
    c = Constraint(sympy.floor(L / 5) - 1 >= 1, "conv")
    assert implied_table(t, [c])["L"].lo == 10
    assert t["L"].lo == 1  # the table itself keeps the user's range
    strict = Constraint(sympy.floor(sympy.floor(L / 5) / 2) - 1 > 1, "conv")  # floor(L/10) >= 3
    assert implied_table(t, [strict])["L"].lo == 30
    assert prove_le_implied(t, 0, sympy.floor(L / 10) - 1, [c]) is True
    assert t.prove_le(0, sympy.floor(L / 10) - 1) is None


@pytest.mark.parametrize("expr", ["two symbols", "decreasing", "equality", "never"])
def test_constraints_that_imply_no_bound_leave_the_table(expr):
    t, L, B = _table()
    e = {"two symbols": L - B >= 3, "decreasing": 100 - L >= 0, "equality": sympy.Eq(L, 12),
         "never": sympy.floor(L / 5) >= 2**40}[expr]
    assert implied_table(t, [Constraint(e, "x")]) is t
    assert prove_le_implied(t, 0, L - 5, [Constraint(e, "x")]) is None


def _conv_length_model():
    """y = conv(x) (stride 5, window 10); r = Range(0, (floor(L/10) - 1) / 2, 1) as floats"""
    w = nh.from_array(np.linspace(-1, 1, 10, dtype=np.float32).reshape(1, 1, 10), "w")
    k = [nh.from_array(np.array(v, np.int64), n) for n, v in (("i2", [2]), ("ten", 10), ("one", 1), ("two", 2),
                                                             ("zero", 0))]
    nodes = [h.make_node("Conv", ["x", "w"], ["y"], strides=[5]),
             h.make_node("Shape", ["x"], ["sx"]), h.make_node("Gather", ["sx", "two"], ["L"]),
             h.make_node("Div", ["L", "ten"], ["q"]), h.make_node("Sub", ["q", "one"], ["a"]),
             h.make_node("Div", ["a", "two"], ["n"]), h.make_node("Range", ["zero", "n", "one"], ["rg"]),
             h.make_node("Cast", ["rg"], ["r"], to=T.FLOAT)]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [1, 1, "L"])],
                     [h.make_tensor_value_info("y", T.FLOAT, None), h.make_tensor_value_info("r", T.FLOAT, None)],
                     [w, *k])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_a_length_computed_from_the_input_is_symbolic_and_matches_onnxruntime(tmp_path):
    m = _conv_length_model()
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    mod = onnxcc.load_onnx(str(path))
    from onnxcc.passes import run_pipeline

    run_pipeline(mod, "shape-inference,canonicalize,shape-inference")
    r_dim = str(mod.main.result_types[1].shape[0])
    assert "L" in r_dim and "range" not in r_dim, r_dim
    onnxcc.compile(path, tmp_path / "art")
    model = onnxcc.load(tmp_path / "art")
    rng = np.random.default_rng(3)
    for L in (10, 19, 20, 45, 400):
        f = {"x": rng.standard_normal((1, 1, L)).astype(np.float32)}
        want, got = ort_run(m, f), model.run(f)
        for k in ("y", "r"):
            assert got[k].shape == want[k].shape, (L, k)
            np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5)
    with pytest.raises(Exception, match="floor"):  # L = 7: the conv's window does not fit
        model.run({"x": np.zeros((1, 1, 7), np.float32)})
