"""Strided numpy views through onnxcc.load(...).run (issue 15, item 5): x[:, ::2], x.T,
x[::-1] and np.broadcast_to go to the dispatcher with their strides, not copied by the
loader, and give what the compact call gives (float32, exact: the same kernel on the same
values). Inputs the dispatcher cannot take strided (sub-byte) are still copied."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnxcc
from onnxcc.testing import compile_lib
from onnxcc.testing_c import relu_mul_add_model


@pytest.fixture(scope="module")
def st(tmp_path_factory):
    d = tmp_path_factory.mktemp("st_py")
    onnxcc.compile(relu_mul_add_model(d / "st.onnx", "st"), d / "art", name="st")
    return onnxcc.load(d / "art")


def _want(a, b):
    return np.maximum(a, 0) * b + a


@pytest.mark.parametrize("view", ["step", "transposed", "reversed", "broadcast", "zero-1d"])
def test_views_run_uncopied_and_right(st, view):
    rng = np.random.default_rng(0)
    big = rng.standard_normal((6, 8)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    a = {"step": big[:, ::2], "transposed": big[:4, :6].T[:, :4],
         "reversed": big[::-1, 1:5], "broadcast": np.broadcast_to(big[0, :4], (5, 4)),
         "zero-1d": big[:, :4]}[view]
    if view == "zero-1d":
        b = np.broadcast_to(np.float32(1.5), (4,))
    assert not (a.flags.c_contiguous and b.flags.c_contiguous)
    prepared = st._prepare({"a": a, "b": b})
    assert prepared[0] is a and prepared[1] is b  # no copy in the loader
    got = st.run({"a": a, "b": b})["y"]
    np.testing.assert_array_equal(got, st.run({"a": np.ascontiguousarray(a), "b": np.ascontiguousarray(b)})["y"])
    np.testing.assert_allclose(got, _want(a, b), rtol=1e-6, atol=1e-6)
    assert st.output_shape({"a": a, "b": b}, "y") == a.shape


def test_metadata_lists_strided_inputs(st):
    assert st.meta["strided_inputs"] == ["a", "b"]


def test_inspect_shows_stride_and_alias_guards(st):
    from click.testing import CliRunner

    from onnxcc.cli import main

    r = CliRunner().invoke(main, ["inspect", str(st.path.parent)])
    assert r.exit_code == 0, r.output
    assert "strides: served strided (compacted into scratch first, compact ones read in place): a, b" in r.output
    assert "in place: version 0 may write y over a (exact alias, proved safe)" in r.output


def test_value_guarded_input_must_be_compact(tmp_path):
    """The dispatcher compares a value guard's input byte for byte: that input is not served
    strided. A strided one is refused naming it (never compared wrongly); x still may be."""
    from onnxcc.runtime.loader import _Tensors

    vi = helper.make_tensor_value_info
    g = helper.make_graph([helper.make_node("Reshape", ["x", "shape"], ["y"])], "vv",
                          [vi("x", TensorProto.FLOAT, [2, 6]), vi("shape", TensorProto.INT64, [2])],
                          [vi("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    vv = compile_lib(m, tmp_path, name="vv", specialize_value={"shape": [3, 4]})
    assert vv.meta["strided_inputs"] == ["x"]
    x = np.arange(24, dtype=np.float32).reshape(2, 12)[:, ::2]
    shape = np.array([3, 0, 4, 0], np.int64)[::2]  # [3, 4], strided
    got = vv.run({"x": x, "shape": shape})["y"]  # the loader copies `shape` (not served strided)
    np.testing.assert_array_equal(got, x.reshape(3, 4))
    ins = _Tensors([x, shape], ["f32", "i64"])  # straight to the C ABI, strides and all
    out = _Tensors([np.empty((3, 4), np.float32)], ["f32"])
    rc = vv._run(ins.array, 2, out.array, 1)
    assert rc == vv.codes["ERR_SHAPE"]
    assert vv.last_error == ('input "shape" dim 0: stride 2 is not compact row-major (expected 1); this input is '
                             "not served strided (the header lists those that are), pass it compact")
    assert "must be compact: shape (their data is read by the dispatcher" in (tmp_path / "lib" / "vv.h").read_text()


@pytest.fixture(scope="module")
def dt(tmp_path_factory):
    """Neg of an f64, an i8 and an f16 input: the compaction's 8-, 1- and 2-byte paths."""
    d = tmp_path_factory.mktemp("dt")
    vi = helper.make_tensor_value_info
    types = {"d": TensorProto.DOUBLE, "c": TensorProto.INT8, "h": TensorProto.FLOAT16}
    g = helper.make_graph([helper.make_node("Neg", [k], [f"n{k}"]) for k in types], "dt",
                          [vi(k, t, ["N", 3]) for k, t in types.items()], [vi(f"n{k}", t, ["N", 3])
                                                                           for k, t in types.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(d / "dt.onnx"))
    onnxcc.compile(d / "dt.onnx", d / "art", name="dt")
    return onnxcc.load(d / "art")


@pytest.mark.parametrize("view", [lambda a: a[::-2, ::-1][:, :3], lambda a: a.T[:, :3],
                                  lambda a: np.broadcast_to(a[1, :3], (4, 3)), lambda a: a[1:, 1:4]])
def test_every_element_size_compacts_right(dt, view):
    base = np.arange(-20, 20).reshape(8, 5)
    feeds = {"d": view(base.astype(np.float64)), "c": view(base.astype(np.int8)),
             "h": view(base.astype(np.float16))}
    assert not any(a.flags.c_contiguous for a in feeds.values())
    got = dt.run(feeds)
    for k, a in feeds.items():
        np.testing.assert_array_equal(got[f"n{k}"], -a)  # exact: negation of small integers


def test_python_out_over_input_runs_in_place(st):
    a = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    b = np.array([1, 2, 3, 4], np.float32)
    want = _want(a, b)
    got = st.run({"a": a, "b": b}, out={"y": a})["y"]
    assert got is a
    np.testing.assert_allclose(a, want, rtol=1e-6, atol=1e-6)


def test_big_strided_input_compacts_in_parallel_right(st):
    """Over 1 MiB the compaction splits its rows over the thread pool (each chunk starts its
    own odometer): the same numbers as the compact call."""
    big = np.random.default_rng(3).standard_normal((80000, 6)).astype(np.float32)
    x = big[::-1, 1:5]  # rows reversed, a column window
    b = np.array([0.5, 1, 2, 3], np.float32)
    assert x.nbytes > (1 << 20) and not x.flags.c_contiguous
    np.testing.assert_array_equal(st.run({"a": x, "b": b})["y"], st.run({"a": np.ascontiguousarray(x), "b": b})["y"])
