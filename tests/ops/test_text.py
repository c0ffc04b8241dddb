"""TfIdfVectorizer (ops/text.py): native lowering and numpy reference vs onnxruntime for the
three weightings, with and without weights, skips, gram lengths 1..3, [C] and [B, C] inputs
of int32 / int64; compiled once with symbolic dims, run at two sizes; a string pool over
string tokens through a built library."""

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as h

from onnxcc.errors import OnnxccError
from onnxcc.interp import run as interp_run
from onnxcc.testing import jit_compile, ort_run

# sizes 1, 2, 3: unigrams [2, 3, 5, 4], bigrams (5, 6) (7, 8) (6, 7) (2, 2), trigram (3, 3, 7)
POOL = [2, 3, 5, 4, 5, 6, 7, 8, 6, 7, 2, 2, 3, 3, 7]
COUNTS = [0, 4, 12]
# a permutation (so weights, one per n-gram, differ from weights by column); the trigram shares
# column 2 with unigram 4, and its weight (IDF needs one weight per column)
INDEXES = [3, 0, 1, 2, 7, 4, 5, 6, 2]
WEIGHTS = [0.5, 1.0, 2.0, 0.25, 3.0, 1.5, 0.75, 4.0, 0.25]


def model(elem, shape, indexes=INDEXES, **attrs):
    node = h.make_node("TfIdfVectorizer", ["x"], ["y"], pool_int64s=POOL, ngram_counts=COUNTS,
                       ngram_indexes=indexes, **attrs)
    m = h.make_model(h.make_graph([node], "g", [h.make_tensor_value_info("x", elem, shape)],
                                  [h.make_empty_tensor_value_info("y")]), opset_imports=[h.make_opsetid("", 9)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("mode,weights,lo,hi,skip", [
    ("TF", None, 1, 2, 0), ("TF", None, 2, 3, 2), ("TF", None, 1, 3, 4), ("IDF", None, 2, 3, 2),
    ("IDF", WEIGHTS, 1, 3, 4), ("TFIDF", None, 1, 2, 0), ("TFIDF", WEIGHTS, 1, 3, 4)])
def test_tfidf_2d(mode, weights, lo, hi, skip):
    extra = {} if weights is None else {"weights": weights}
    m = model(TP.INT64, ["B", "C"], mode=mode, min_gram_length=lo, max_gram_length=hi, max_skip_count=skip,
              **extra)
    mod, _, k = jit_compile(m)
    for b, c in ((1, 5), (3, 14)):
        x = np.random.default_rng(c).integers(2, 9, size=(b, c)).astype(np.int64)
        want = ort_run(m, {"x": x})["y"]
        for got in (k(x)[0], interp_run(mod, [x])[0]):
            assert got.shape == want.shape and got.dtype == np.float32
            np.testing.assert_allclose(got, want, rtol=1e-6)


def test_tfidf_1d_int32():
    m = model(TP.INT32, ["C"], mode="TF", min_gram_length=1, max_gram_length=3, max_skip_count=1)
    mod, _, k = jit_compile(m)
    for c in (1, 3, 20):
        x = np.random.default_rng(c).integers(2, 9, size=c).astype(np.int32)
        want = ort_run(m, {"x": x})["y"]
        for got in (k(x)[0], interp_run(mod, [x])[0]):
            np.testing.assert_array_equal(got, want)


def _string_pool_model(elem):
    # unigrams "a" "b" "é", bigrams ("a", "b") ("b", "b"): pool strings repeat across sizes
    node = h.make_node("TfIdfVectorizer", ["x"], ["y"], pool_strings=["a", "b", "\u00e9", "a", "b", "b", "b"],
                       ngram_counts=[0, 3], ngram_indexes=[0, 1, 2, 3, 4], mode="TFIDF",
                       weights=[1.0, 2.0, 0.5, 3.0, 0.25], min_gram_length=1, max_gram_length=2, max_skip_count=1)
    m = h.make_model(h.make_graph([node], "g", [h.make_tensor_value_info("x", elem, ["B", "C"])],
                                  [h.make_empty_tensor_value_info("y")]), opset_imports=[h.make_opsetid("", 9)])
    m.ir_version = 8
    return m


def test_tfidf_string_pool_matches_onnxruntime(tmp_path):
    import onnxcc
    from onnxcc.frontend import load_onnx
    from onnxcc.passes import run_pipeline

    m = _string_pool_model(TP.STRING)
    onnxcc.compile(m, tmp_path / "tf", name="tf")
    lib = onnxcc.load(tmp_path / "tf")
    mod = load_onnx(m)
    run_pipeline(mod, "shape-inference,canonicalize")
    x = np.array([["a", "b", "b", "x", "\u00e9"], ["b", "a", "zz", "b", "b"]], dtype=object)
    want = ort_run(m, {"x": x})["y"]
    for got in (lib.run({"x": x})["y"], interp_run(mod, [x])[0]):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_tfidf_string_pool_needs_string_tokens():
    with pytest.raises(OnnxccError, match=r"X must be str \(the pool's kind\), got i64"):
        jit_compile(_string_pool_model(TP.INT64))


def test_tfidf_idf_shared_column_of_different_weights_is_refused():
    m = model(TP.INT64, ["C"], mode="IDF", min_gram_length=1, max_gram_length=3, max_skip_count=0,
              weights=[*WEIGHTS[:-1], 9.0])
    with pytest.raises(OnnxccError, match=r"TfIdfVectorizer.*different weights in output column 2"):
        jit_compile(m)
