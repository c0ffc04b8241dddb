"""The tail of a strip-mined row: one masked vector iteration where that pays
(codegen/cpu/emit.py `masked_tail_pays`; a chunk whose lanes past the row's end are
guarded off, padded depthwise convs' guarded loads included), chunks ending at the row's
end where loads stride and elements may be computed twice (`overlap_tail_ok`), a scalar
loop elsewhere; and the results at every tail length from 0 to a full vector, against
onnxruntime (exact: elementwise and max, no reassociation), with nothing written past
any output's end."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxcc
from onnxcc.codegen.cpu.emit import masked_tail_pays, overlap_tail_ok
from onnxcc.kernel.program import Compute
from onnxcc.testing import jit_compile, ort_run


def _model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 1, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Relu", ["x"], ["relu"]),
             helper.make_node("MaxPool", ["x"], ["pool"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["x", "w"], ["dw"], group=4, strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("ReduceMax", ["x"], ["rmax"], axes=[3], keepdims=0),
             helper.make_node("Conv", ["x", "w"], ["dw1"], group=4, pads=[1, 1, 1, 1])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, "H", "W"])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("relu", "pool", "dw", "rmax", "dw1")]
    g = helper.make_graph(nodes, "tails", [x], outs, [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_which_computes_take_the_masked_tail():
    _, prog, _ = jit_compile(_model())
    computes = {c.out: c for c in prog.body if isinstance(c, Compute)}
    pays = {name: masked_tail_pays(c, len(c.vars) - 1) for name, c in computes.items()}
    assert pays["out0"]        # Relu: plain loads
    # max pool: the window at every column (ops/nn.py `_pool_dense_rows`), plain loads
    windows = [name for name in computes if name.startswith("prow")]
    assert len(windows) == 1 and pays[windows[0]]
    assert not pays["out2"]    # stride-2 depthwise conv: masked gathers lose to scalar code
    assert not pays["out3"]    # a reduction inside: does not vectorise
    assert pays["out4"]        # stride-1 padded depthwise conv: guarded loads become masked ones
    # the stride-2 conv's tail: chunks that end at the row's end, recomputing some elements
    # (it reads only its padded copy, never at its own index); Relu reads at its own index
    # (memory planning may give its output its input's memory): never computed twice
    assert overlap_tail_ok(prog, computes["out2"])
    assert not overlap_tail_ok(prog, computes["out0"])
    assert not overlap_tail_ok(prog, computes["out3"])  # a reduction: no vectors to gain


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    d = tmp_path_factory.mktemp("tails")
    onnx.save(_model(), d / "tails.onnx")
    onnxcc.compile(d / "tails.onnx", d / "lib")
    return d / "tails.onnx", onnxcc.load(d / "lib")


def test_every_tail_length_matches_onnxruntime(built):
    path, lib = built
    for w in range(1, 50):  # the stride-2 conv's rows: 1 to 25 wide (scalar, two halves, whole chunks)
        x = np.random.default_rng(w).standard_normal((1, 4, 3, w)).astype(np.float32)
        want = ort_run(path, {"x": x})
        # each output is the head of a larger block: a tail lane past the row's end would
        # write into the sentinels after the last row
        blocks = {name: np.full(a.size + 32, 7.0, np.float32) for name, a in want.items()}
        got = lib.run({"x": x}, out={name: blk[:a.size].reshape(a.shape) for (name, a), blk
                                     in zip(want.items(), blocks.values(), strict=True)})
        for name, a in want.items():
            np.testing.assert_allclose(got[name], a, rtol=1e-5, atol=1e-5, err_msg=f"{name} at W={w}")
            assert (blocks[name][a.size:] == 7.0).all(), f"{name} at W={w} wrote past its end"
