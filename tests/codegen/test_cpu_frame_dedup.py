"""Same-shape layers compile once (codegen/cpu/frame.py + dedup.py): two Softmax layers of
one shape, in two versions, leave one softmax body for LLVM; the other three are stubs that
tail-call it, and every version still computes onnxruntime's answer."""

from __future__ import annotations

import re

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import onnxcc
from onnxcc.codegen.cpu import backend as cpu_backend

W = np.random.default_rng(1).standard_normal((64, 64)).astype(np.float32)


def _model() -> onnx.ModelProto:
    """x -> Softmax -> MatMul -> Softmax: the two softmaxes have one shape, but read and write
    different buffers (an input and a temp; a temp and an output)."""
    nodes = [helper.make_node("Softmax", ["x"], ["s1"], axis=-1), helper.make_node("MatMul", ["s1", "W"], ["m"]),
             helper.make_node("Softmax", ["m"], ["y"], axis=-1)]
    g = helper.make_graph(nodes, "two", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "S", 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "S", 64])],
                          [numpy_helper.from_array(W, "W")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_same_shape_layers_compile_once_and_stay_right(tmp_path, monkeypatch):
    texts: list[str] = []
    real = cpu_backend.compile_in_workers

    def capture(work, jobs):
        texts.extend(str(m) for m, _ in work)
        return real(work, jobs)

    monkeypatch.setattr(cpu_backend, "compile_in_workers", capture)
    monkeypatch.setenv("ONNXCC_OBJECT_CACHE", "0")
    model = _model()
    onnxcc.compile(model, tmp_path / "art", name="two", specialize={"N": [2]})
    text = "\n".join(texts)
    bodies = re.findall(r'^define [^@]*@"(two_v\d\.par\.[^"]+)"\(([^)]*)\)[^\n]*\n\{\n(.*?)^\}', text,
                        re.MULTILINE | re.DOTALL)
    assert len(bodies) == 4, [name for name, _, _ in bodies]  # two softmaxes in each of two versions
    full = [name for name, _, body in bodies if "tail call" not in body]
    stubs = [body for name, _, body in bodies if "tail call" in body]
    assert len(full) == 1, full
    assert len(stubs) == 3 and all(f'@"{full[0]}"' in body and body.count("\n") <= 3 for body in stubs)
    # the body reads its buffers' addresses from its ctx, not from the workspace
    (kept,) = [body for name, _, body in bodies if name == full[0]]
    assert "getelementptr inbounds ptr, ptr %\"ctx\", i64 6" in kept

    lib = onnxcc.load(tmp_path / "art")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for n, s in ((2, 5), (3, 7), (1, 1)):  # the N=2 version, then the generic one
        x = rng.standard_normal((n, s, 64)).astype(np.float32)
        got = np.asarray(next(iter(lib.run([x]).values())))
        want = np.asarray(sess.run(None, {"x": x})[0])
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
