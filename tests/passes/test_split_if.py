"""split-if: an If whose branches give results of different ranks, on a condition over input
dims, becomes one guarded function per value of the condition (regression: silero_vad's
decoder squeezes its frame axis only when it is 1, `If(Equal(Shape(x)[-1], 1))`)."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from onnxcc.compiler import compile_model
from onnxcc.errors import OnnxccError, UnsupportedOp
from onnxcc.frontend import load_onnx
from onnxcc.ort_compat import InferenceSession
from onnxcc.passes import run_pipeline


def _model(cond_nodes, cond_inputs=()):
    """y = ReduceSum(b) * rank(b) with b = If(cond, Squeeze(x, 0), x): rank 1 or 2 by the branch."""
    then_g = h.make_graph([h.make_node("Squeeze", ["x", "ax0"], ["t"])], "then", [],
                          [h.make_tensor_value_info("t", T.FLOAT, None)])
    else_g = h.make_graph([h.make_node("Identity", ["x"], ["e"])], "else", [],
                         [h.make_tensor_value_info("e", T.FLOAT, None)])
    nodes = [*cond_nodes,
             h.make_node("If", ["cond"], ["b"], then_branch=then_g, else_branch=else_g),
             h.make_node("Shape", ["b"], ["bs"]),
             h.make_node("Size", ["bs"], ["rank"]),
             h.make_node("ReduceSum", ["b"], ["s"], keepdims=0),
             h.make_node("Cast", ["rank"], ["rankf"], to=T.FLOAT),
             h.make_node("Mul", ["s", "rankf"], ["y"])]
    inputs = [h.make_tensor_value_info("x", T.FLOAT, ["batch", "n"]), *cond_inputs]
    inits = [h.make_tensor("ax0", T.INT64, [1], [0]), h.make_tensor("zero", T.INT64, [1], [0]),
             h.make_tensor("one", T.INT64, [1], [1])]
    g = h.make_graph(nodes, "g", inputs, [h.make_tensor_value_info("y", T.FLOAT, [])], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _batch_is_one():
    return [h.make_node("Shape", ["x"], ["xs"]), h.make_node("Gather", ["xs", "zero"], ["b0"]),
            h.make_node("Equal", ["b0", "one"], ["cond1"]),
            h.make_node("Squeeze", ["cond1", "zero"], ["cond"])]


def test_if_on_a_dim_splits_into_two_guarded_versions_matching_onnxruntime(tmp_path):
    m = _model(_batch_is_one())
    sess = InferenceSession(m, cache_dir=tmp_path / "cache")
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for b, n in ((1, 5), (3, 5), (1, 1), (2, 7)):
        x = rng.standard_normal((b, n)).astype(np.float32)
        got, = sess.run(None, {"x": x})
        want, = ref.run(None, {"x": x})
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)  # rank 1 -> x1, rank 2 -> x2


def test_split_if_pass_guards_each_function_and_folds_the_if():
    mod = load_onnx(_model(_batch_is_one()))
    run_pipeline(mod, "split-if,shape-inference")
    funcs = {f.name: f for f in mod.functions.values()}
    assert set(funcs) == {"main", "main.if_batch1"}
    assert str(funcs["main.if_batch1"].guard) == "Eq(batch, 1)"
    assert str(funcs["main"].guard) == "Ne(batch, 1)"
    assert mod.dispatch["main"] == ["main.if_batch1"]
    assert not any(o.name == "onnx.If" for f in funcs.values() for o in f.walk())
    assert funcs["main.if_batch1"].result_types == funcs["main"].result_types


def test_if_on_data_is_refused_in_one_line(tmp_path):
    # a condition from float data: no input value can be read into a symbol, so the If the
    # importer typed as one branch is refused where it is lowered, naming the ranks
    nodes = [h.make_node("ReduceMax", ["x"], ["mx"], keepdims=0),
             h.make_node("Constant", [], ["z"], value=h.make_tensor("z", T.FLOAT, [], [0.0])),
             h.make_node("Greater", ["mx", "z"], ["cond"])]
    mod = load_onnx(_model(nodes))
    run_pipeline(mod, "split-if")
    assert [o.attrs.get("typed_as") for o in mod.functions["main"].walk() if o.name == "onnx.If"] == [0]
    with pytest.raises(UnsupportedOp, match="rank 1 in then_branch and 2 in else_branch, and the condition "
                                            "depends on data"):
        compile_model(_model(nodes), tmp_path, emit="kernel")


def test_without_the_split_shape_inference_still_refuses():
    mod = load_onnx(_model(_batch_is_one()))
    with pytest.raises(OnnxccError, match="rank 1 in then_branch and 2 in else_branch"):
        run_pipeline(mod, "shape-inference")


def test_a_value_of_the_condition_whose_graph_cannot_hold_gets_no_version(tmp_path):
    # then_branch squeezes to rank 1, but Gemm needs rank 2: batch == 1 can never run (onnxruntime
    # fails there too); the build keeps the batch != 1 version and refuses batch == 1 by its guard
    then_g = h.make_graph([h.make_node("Squeeze", ["x", "ax0"], ["t"])], "then", [],
                          [h.make_tensor_value_info("t", T.FLOAT, None)])
    else_g = h.make_graph([h.make_node("Identity", ["x"], ["e"])], "else", [],
                         [h.make_tensor_value_info("e", T.FLOAT, None)])
    nodes = [*_batch_is_one(), h.make_node("If", ["cond"], ["b"], then_branch=then_g, else_branch=else_g),
             h.make_node("Gemm", ["b", "w"], ["y"])]
    w = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
    inits = [h.make_tensor("ax0", T.INT64, [1], [0]), h.make_tensor("zero", T.INT64, [1], [0]),
             h.make_tensor("one", T.INT64, [1], [1]), h.make_tensor("w", T.FLOAT, [4, 3], w.reshape(-1))]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, ["batch", 4])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    mod = load_onnx(m)
    run_pipeline(mod, "split-if")
    assert list(mod.functions) == ["main"] and str(mod.functions["main"].guard) == "Ne(batch, 1)"
    assert "Gemm" in mod.attrs["dropped_versions"][0]
    sess = InferenceSession(m, cache_dir=tmp_path / "cache")
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], x @ w, rtol=1e-5, atol=1e-6)
    with pytest.raises(OnnxccError, match="batch"):
        sess.run(None, {"x": x[:1]})
