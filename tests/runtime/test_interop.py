"""run() takes DLPack objects without a copy, writes into out= buffers, and treats dtypes one
way for every input type (typed values must match or be cast=True; untyped Python values take
the model's dtype when that keeps their kind)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnxcc
from onnxcc.compiler import CompileOptions, compile_model
from onnxcc.errors import GuardError


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = tmp_path_factory.mktemp("interop")
    g = helper.make_graph([helper.make_node("Add", ["x", "b"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3]),
                           helper.make_tensor_value_info("b", TensorProto.FLOAT, [3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(d / "add.onnx"))
    compile_model(d / "add.onnx", d / "art", CompileOptions(max_versions=1))
    return onnxcc.load(d / "art")


class Foreign:
    """A DLPack producer that is not a numpy array (as a torch tensor would be); counts views."""

    def __init__(self, a):
        self.a, self.exports = a, 0

    def __dlpack__(self, **kw):
        self.exports += 1
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


class OnGpu(Foreign):
    def __dlpack_device__(self):
        return (2, 0)


X = np.arange(6, dtype=np.float32).reshape(2, 3)
B = np.array([10, 20, 30], np.float32)


def test_dlpack_inputs_are_viewed_not_copied(model, monkeypatch):
    import onnxcc.runtime.interop as interop

    seen = []
    real = np.from_dlpack
    monkeypatch.setattr(interop.np, "from_dlpack", lambda x: seen.append(real(x)) or seen[-1])
    x = Foreign(X)
    y = model.run({"x": x, "b": B})["y"]
    np.testing.assert_array_equal(y, X + B)
    assert x.exports == 1 and np.shares_memory(seen[0], X)
    with pytest.raises(GuardError, match='input "x": a tensor on DLPack device type 2'):
        model.run({"x": OnGpu(X), "b": B})
    try:
        import torch
    except ImportError:
        return
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    np.testing.assert_array_equal(model.run({"x": t, "b": B})["y"], X + B)


def test_out_buffers_are_written_in_place(model):
    out = np.empty((2, 3), np.float32)
    res = model.run({"x": X, "b": B}, out={"y": out})
    assert res["y"] is out
    np.testing.assert_array_equal(out, X + B)
    res = model.run([X, B], out=[Foreign(out)])
    assert np.shares_memory(res["y"], out)
    with pytest.raises(GuardError, match=r'out "y": expected shape \[2, 3\] for these inputs, got \[3, 3\]'):
        model.run({"x": X, "b": B}, out={"y": np.empty((3, 3), np.float32)})
    with pytest.raises(GuardError, match=r'out "y": expected dtype f32 \(float32\), got float64'):
        model.run({"x": X, "b": B}, out={"y": np.empty((2, 3))})
    with pytest.raises(GuardError, match="no output"):
        model.run({"x": X, "b": B}, out={"z": out})


def test_float64_is_refused_the_same_way_for_every_input_type(model):
    for x in (X.astype(np.float64), Foreign(X.astype(np.float64)), X.astype(np.float64)[:, :]):
        with pytest.raises(GuardError, match=r'input "x": expected dtype f32 \(float32\), got float64 '
                                             r"\(pass cast=True to convert\)"):
            model.run({"x": x, "b": B})
        np.testing.assert_array_equal(model.run({"x": x, "b": B}, cast=True)["y"], X + B)
    with pytest.raises(GuardError, match='input "b": expected dtype f32'):
        model.run({"x": X, "b": np.float64(1.0) * np.ones(3)})
    # Python values have no dtype of their own: floats and ints become f32
    np.testing.assert_array_equal(model.run({"x": X.tolist(), "b": [10, 20, 30]})["y"], X + B)
    with pytest.raises(GuardError, match=r'input "x": expected dtype f32 .* holds complex128'):
        model.run({"x": [[1j, 2, 3]], "b": B})
