"""ai.onnx.ml Binarizer, ArrayFeatureExtractor and TreeEnsemble (ops/ml.py): native lowering and
numpy reference vs onnxruntime, compiled once with a symbolic batch and run at two sizes;
the refusals of what is not compiled (post transforms) and of bad attributes."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as h

from onnxcc.errors import OnnxccError
from onnxcc.interp import run as interp_run
from onnxcc.testing import jit_compile, ort_run

ML = [h.make_opsetid("", 21), h.make_opsetid("ai.onnx.ml", 5)]


def model(node, inputs, elem=TP.FLOAT, inits=None):
    vis = [h.make_tensor_value_info(n, t, s) for n, t, s in inputs]
    inits = [onnx.numpy_helper.from_array(np.asarray(a), n) for n, a in (inits or {}).items()]
    m = h.make_model(h.make_graph([node], "g", vis, [h.make_empty_tensor_value_info("y")], inits),
                     opset_imports=ML)
    m.ir_version = 10
    return m


def check(m, feeds_for, sizes=(1, 5), rtol=1e-6, atol=1e-6):
    mod, _, k = jit_compile(m)
    for n in sizes:
        feeds = feeds_for(n)
        want = ort_run(m, feeds)["y"]
        names = [i.name for i in m.graph.input]
        for got in (k(*[feeds[x] for x in names])[0], interp_run(mod, [feeds[x] for x in names])[0]):
            assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape)
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=f"N={n}")


def rng_x(n, f, dtype=np.float32, seed=0):
    return np.random.default_rng(seed + n).uniform(-3, 3, size=(n, f)).astype(dtype)


def test_binarizer():
    node = h.make_node("Binarizer", ["x"], ["y"], domain="ai.onnx.ml", threshold=0.5)
    check(model(node, [("x", TP.FLOAT, ["N", 4])]), lambda n: {"x": rng_x(n, 4)})


@pytest.mark.parametrize("dtype,elem", [(np.float64, TP.DOUBLE), (np.int64, TP.INT64)])
def test_binarizer_other_types_against_the_formula(dtype, elem):
    # onnxruntime implements Binarizer for float only
    node = h.make_node("Binarizer", ["x"], ["y"], domain="ai.onnx.ml", threshold=0.5)
    mod, _, k = jit_compile(model(node, [("x", elem, ["N", 4])]))
    x = (rng_x(6, 4) * 2).astype(dtype)
    want = (x > 0.5).astype(dtype)
    for got in (k(x)[0], interp_run(mod, [x])[0]):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("idx", [[0, 2], [3, 3, 1], [[1, 0]]])
def test_array_feature_extractor(idx):
    node = h.make_node("ArrayFeatureExtractor", ["x", "i"], ["y"], domain="ai.onnx.ml")
    m = model(node, [("x", TP.FLOAT, ["N", 4])], inits={"i": np.array(idx, np.int64)})
    check(m, lambda n: {"x": rng_x(n, 4)})


def test_array_feature_extractor_index_out_of_range_fails_cleanly():
    node = h.make_node("ArrayFeatureExtractor", ["x", "i"], ["y"], domain="ai.onnx.ml")
    m = model(node, [("x", TP.FLOAT, ["N", 4]), ("i", TP.INT64, [1])])
    _, _, k = jit_compile(m)
    with pytest.raises(OnnxccError, match="index out of range"):
        k(rng_x(2, 4), np.array([4], np.int64))


def forest(agg=1, missing=False, modes=(0, 1, 6), n_targets=3, post=0, dtype=np.float32):
    """Two trees over 3 features: tree 0 = node0 (mode[0] on f0) -> leaf / node1 (mode[1] on f1)
    -> leaves; tree 1 = node2 (mode[2] on f2, a membership test when 6) -> two leaves."""
    attrs = dict(
        nodes_featureids=[0, 1, 2], nodes_modes=onnx.numpy_helper.from_array(np.array(modes, np.uint8)),
        nodes_splits=onnx.numpy_helper.from_array(np.array([0.5, -1.0, np.nan if modes[2] == 6 else 0.0], dtype)),
        nodes_truenodeids=[0, 1, 3], nodes_trueleafs=[1, 1, 1],
        nodes_falsenodeids=[1, 2, 4], nodes_falseleafs=[0, 1, 1],
        leaf_targetids=[0, 1, 2, 1, 0], leaf_weights=onnx.numpy_helper.from_array(
            np.array([1.5, -2.0, 4.25, 8.0, 0.5], dtype)),
        tree_roots=[0, 2], n_targets=n_targets, aggregate_function=agg, post_transform=post)
    if modes[2] == 6:
        attrs["membership_values"] = onnx.numpy_helper.from_array(np.array([1.0, 2.0, np.nan], dtype))
    if missing:
        attrs["nodes_missing_value_tracks_true"] = [1, 0, 1]
    return h.make_node("TreeEnsemble", ["x"], ["y"], domain="ai.onnx.ml", **attrs)


def tree_inputs(n, dtype=np.float32):
    x = np.round(rng_x(n, 3, dtype) * 2) / 2  # halves hit the splits and the members exactly
    x[0, 0] = np.nan
    return {"x": x}


@pytest.mark.parametrize("agg", [0, 1, 2, 3])
@pytest.mark.parametrize("missing", [False, True])
def test_tree_ensemble_aggregates(agg, missing):
    m = model(forest(agg=agg, missing=missing), [("x", TP.FLOAT, ["N", 3])])
    check(m, tree_inputs, sizes=(1, 9))


@pytest.mark.parametrize("modes", [(2, 3, 4), (5, 0, 1), (0, 1, 6)])
def test_tree_ensemble_modes_double(modes):
    m = model(forest(modes=modes, dtype=np.float64), [("x", TP.DOUBLE, ["N", 3])])
    check(m, lambda n: tree_inputs(n, np.float64), sizes=(2, 7))


def test_tree_ensemble_post_transform_is_refused_by_name():
    m = model(forest(post=1), [("x", TP.FLOAT, ["N", 3])])
    with pytest.raises(OnnxccError, match=r"TreeEnsemble.*post_transform 1"):
        jit_compile(m)


def test_tree_ensemble_bad_target_is_an_error():
    m = model(forest(n_targets=2), [("x", TP.FLOAT, ["N", 3])])
    with pytest.raises(OnnxccError, match=r"leaf target id is outside \[0, 2\)"):
        jit_compile(m)


LE = [h.make_opsetid("", 21), h.make_opsetid("ai.onnx.ml", 4)]


def label_encoder(elem, **attrs):
    node = h.make_node("LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml", **attrs)
    m = h.make_model(h.make_graph([node], "g", [h.make_tensor_value_info("x", elem, ["N"])],
                                  [h.make_empty_tensor_value_info("y")]), opset_imports=LE)
    m.ir_version = 10
    return m


@pytest.mark.parametrize("elem,x,attrs", [
    (TP.INT64, np.array([3, 7, -1, 3, 100], np.int64), dict(keys_int64s=[3, -1, 7], values_int64s=[30, 10, 70])),
    (TP.INT64, np.array([3, 7, 5], np.int64), dict(keys_int64s=[3, 7], values_floats=[0.5, -2.0],
                                                      default_float=9.0)),
    (TP.FLOAT, np.array([0.5, np.nan, 2.0, -1.0], np.float32),
     dict(keys_floats=[0.5, 2.0, np.nan], values_int64s=[1, 2, 3], default_int64=-7)),
    (TP.INT64, np.array([1, 2, 9], np.int64),
     dict(keys_tensor=onnx.numpy_helper.from_array(np.array([1, 2], np.int64)),
          values_tensor=onnx.numpy_helper.from_array(np.array([0.25, 0.75], np.float64)),
          default_tensor=onnx.numpy_helper.from_array(np.array([4.0], np.float64)))),
])
def test_label_encoder_numeric(elem, x, attrs):
    m = label_encoder(elem, **attrs)
    mod, _, k = jit_compile(m)
    want = ort_run(m, {"x": x})["y"]
    for got in (k(x)[0], interp_run(mod, [x])[0]):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_label_encoder_opset1_classes_strings_are_refused_by_name():
    m = label_encoder(TP.INT64, keys_int64s=[1, 2], values_int64s=[3, 4], classes_strings=["a", "b"])
    with pytest.raises(OnnxccError, match=r"LabelEncoder.*classes_strings .* not supported"):
        jit_compile(m)


def test_tree_ensemble_too_few_features_is_an_error():
    with pytest.raises(OnnxccError, match=r"X has more than 2 features .*can never hold"):
        jit_compile(model(forest(), [("x", TP.FLOAT, ["N", 2])]))


def test_tree_ensemble_feature_count_checked_at_run_time(tmp_path):
    import onnxcc

    onnxcc.compile(model(forest(), [("x", TP.FLOAT, ["N", "F"])]), tmp_path, name="te")
    lib = onnxcc.load(tmp_path)
    x = tree_inputs(4)["x"]
    np.testing.assert_allclose(lib.run([x])["y"], ort_run(model(forest(), [("x", TP.FLOAT, ["N", "F"])]),
                                                          {"x": x})["y"], rtol=1e-6)
    with pytest.raises(OnnxccError, match="X has more than 2 features"):  # reading feature 2 of 2: refused
        lib.run([np.ascontiguousarray(x[:, :2])])
