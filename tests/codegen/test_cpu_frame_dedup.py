"""Same-shape layers compile once (codegen/cpu/frame.py + dedup.py): two Softmax layers of
one shape, in two versions, leave one softmax body for LLVM; the other three are stubs that
tail-call it; two MatMul layers with different weights share one GEMM task (the packed
weights' address read from the frame). Every version still computes onnxruntime's answer."""

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


def _compiled_text(monkeypatch, model: onnx.ModelProto, out, **options) -> str:
    """The LLVM IR of every module the build hands to the workers."""
    texts: list[str] = []
    real = cpu_backend.compile_in_workers

    def capture(work, jobs):
        texts.extend(str(m) for m, _ in work)
        return real(work, jobs)

    monkeypatch.setattr(cpu_backend, "compile_in_workers", capture)
    monkeypatch.setenv("ONNXCC_OBJECT_CACHE", "0")
    onnxcc.compile(model, out, **options)
    return "\n".join(texts)


def _bodies(text: str, pattern: str) -> list[tuple[str, str, str]]:
    """(name, parameters, body) of each function defined in `text` whose name matches `pattern`."""
    return re.findall(r'^define [^@]*@"(' + pattern + r')"\(([^)]*)\)[^\n]*\n\{\n(.*?)^\}', text,
                      re.MULTILINE | re.DOTALL)


def _check(lib, model: onnx.ModelProto, shapes) -> None:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for shape in shapes:
        x = rng.standard_normal(shape).astype(np.float32)
        got = np.asarray(next(iter(lib.run([x]).values())))
        want = np.asarray(sess.run(None, {"x": x})[0])
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_same_shape_layers_compile_once_and_stay_right(tmp_path, monkeypatch):
    model = _model()
    text = _compiled_text(monkeypatch, model, tmp_path / "art", name="two", specialize={"N": [2]})
    bodies = _bodies(text, r"two_v\d\.par\.[^\"]+")
    assert len(bodies) == 4, [name for name, _, _ in bodies]  # two softmaxes in each of two versions
    full = [name for name, _, body in bodies if "tail call" not in body]
    stubs = [body for name, _, body in bodies if "tail call" in body]
    assert len(full) == 1, full
    assert len(stubs) == 3 and all(f'@"{full[0]}"' in body and body.count("\n") <= 3 for body in stubs)
    # the body reads its buffers' addresses from its ctx, not from the workspace
    (kept,) = [body for name, _, body in bodies if name == full[0]]
    assert "getelementptr inbounds ptr, ptr %\"ctx\", i64 6" in kept

    _check(onnxcc.load(tmp_path / "art"), model, [(2, 5, 64), (3, 7, 64), (1, 1, 64)])  # N=2, then generic


def test_gemm_layers_with_different_weights_share_one_task(tmp_path, monkeypatch):
    rng = np.random.default_rng(2)
    w1, w2 = (rng.standard_normal((64, 64)).astype(np.float32) for _ in range(2))
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["m1"]), helper.make_node("Tanh", ["m1"], ["t"]),
             helper.make_node("MatMul", ["t", "W2"], ["m2"]), helper.make_node("Tanh", ["m2"], ["y"])]
    g = helper.make_graph(nodes, "mm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 64])],
                          [numpy_helper.from_array(w1, "W1"), numpy_helper.from_array(w2, "W2")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    text = _compiled_text(monkeypatch, model, tmp_path / "art", name="mm")
    tasks = _bodies(text, r"mm_v0\.gemm\.[^\"]+")
    assert len(tasks) == 2, [name for name, _, _ in tasks]
    assert sum("tail call" in body for _, _, body in tasks) == 1
    _check(onnxcc.load(tmp_path / "art"), model, [(1, 64), (5, 64), (37, 64)])


def test_repeats_keys_each_compute_once(tmp_path, monkeypatch):
    """The emitter asks `Repeats` about every compute again (`frame_ctx`): the key (sympy
    extents printed, the body formatted) is computed when the program is counted, not again
    per question. The frame decisions are checked by the test above."""
    from onnxcc.codegen.cpu import frame

    counted, keyed, asked = [0], [0], [0]
    init, key, contains = frame.Repeats.__init__, frame.Repeats.key, frame.Repeats.__contains__

    def counting_init(self, program):
        counted[0] += sum(1 for _ in program.computes())
        init(self, program)

    def counting_key(c):
        keyed[0] += 1
        return key(c)

    def counting_contains(self, c):
        asked[0] += 1
        return contains(self, c)

    monkeypatch.setattr(frame.Repeats, "__init__", counting_init)
    monkeypatch.setattr(frame.Repeats, "key", staticmethod(counting_key))
    monkeypatch.setattr(frame.Repeats, "__contains__", counting_contains)
    _compiled_text(monkeypatch, _model(), tmp_path / "art", name="two", specialize={"N": [2]})
    assert asked[0] >= 4  # two softmaxes in each of two versions
    assert keyed[0] == counted[0]


def test_equal_computes_of_two_programs_are_formatted_once():
    """`Repeats.key` is memoised by content: a later version's program, built apart, repeats
    the first one's computes, whose bodies are not formatted again."""
    from onnxcc.codegen.cpu import frame
    from onnxcc.ir import DType, sym
    from onnxcc.kernel import KernelProgram

    def compute():
        p = KernelProgram.new("k", ["N"])
        x = p.input("X", DType.f32, (sym("N"), 8))
        y = p.output("Y", DType.f32, (sym("N"), 8))
        p.compute(y, lambda i, j: x[i, j] * x[i, j] + 1.0)
        return p.body[0]

    a, b = compute(), compute()
    assert a is not b and a.body is not b.body
    assert frame.Repeats.key(a) is frame.Repeats.key(b)
