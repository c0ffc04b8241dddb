"""NonZero, Compress, Unique, NonMaxSuppression: the run-time symbol in the IR and the
kernel text (printed, parsed back), the arena sized for the bound, and the lowered kernels
against the numpy interpreter (integer results exact, floats rtol 1e-6)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import onnxcc
from onnxcc.frontend import load_onnx
from onnxcc.interp import run
from onnxcc.ir import parse_module
from onnxcc.kernel.parser import parse_kernel_text
from onnxcc.kernel.plan_memory import plan
from onnxcc.passes import run_pipeline
from onnxcc.passes.lower import lower_function


def _model(nodes, inputs, outputs, opset=17):
    vis = [h.make_tensor_value_info(n, t, s) for n, t, s in inputs]
    m = h.make_model(h.make_graph(nodes, "g", vis, [h.make_tensor_value_info(o, t, None) for o, t in outputs]),
                     opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _nonzero_sum():
    return _model([h.make_node("NonZero", ["x"], ["nz"]), h.make_node("ReduceSum", ["nz"], ["s"], keepdims=0)],
                  [("x", T.FLOAT, ["N", 3])], [("nz", T.INT64), ("s", T.INT64)])


def test_nonzero_count_is_a_runtime_symbol_in_the_ir_text():
    mod = load_onnx(_nonzero_sum())
    run_pipeline(mod, "shape-inference,canonicalize")
    text = str(mod)
    assert "sym nonzero in [0, " in text
    assert "i64[2, nonzero]" in text
    assert str(parse_module(text)) == text


def test_lowering_binds_the_count_mid_run_and_the_text_round_trips():
    mod = load_onnx(_nonzero_sum())
    run_pipeline(mod, "shape-inference,canonicalize")
    p = lower_function(mod, mod.main, "k")
    text = str(p)
    assert "run nonzero <= 3*N" in text
    assert "bind nonzero := " in text
    # the reduction after the binding reads the true count: it is lowered, not refused
    assert p.late_dims == {"nonzero"}
    back = parse_kernel_text(text)[0]
    assert str(back) == text
    assert back.run_dims == p.run_dims and back.late_dims == {"nonzero"}


def test_arena_holds_run_time_sized_temps_at_their_bound():
    m = _model([h.make_node("NonZero", ["x"], ["nz"]), h.make_node("Neg", ["nz"], ["n1"]),
                h.make_node("ReduceSum", ["n1"], ["s"], keepdims=0)], [("x", T.FLOAT, [4, 3])], [("s", T.INT64)])
    mod = load_onnx(m)
    run_pipeline(mod, "shape-inference,canonicalize")
    p = lower_function(mod, mod.main, "k")
    mp = plan(p, mod.symbols)
    # NonZero's [2, nonzero] i64 temp takes 2 * 12 * 8 bytes whatever the count
    assert all("nonzero" not in str(off) for off in mp.offsets.values())
    assert isinstance(mp.workspace_bytes, int) and mp.workspace_bytes >= 2 * 12 * 8


UNIQUE_OUTS = [("y", T.FLOAT), ("i", T.INT64), ("v", T.INT64), ("n", T.INT64)]
CASES = {
    "nonzero": (_model([h.make_node("NonZero", ["x"], ["y"])], [("x", T.FLOAT, ["N", "M"])], [("y", T.INT64)]), None),
    "compress_axis": (_model([h.make_node("Compress", ["x", "c"], ["y"], axis=1)],
                             [("x", T.FLOAT, ["N", "M"]), ("c", T.BOOL, ["K"])], [("y", T.FLOAT)]), "c"),
    "compress_flat": (_model([h.make_node("Compress", ["x", "c"], ["y"])],
                             [("x", T.FLOAT, ["N", "M"]), ("c", T.BOOL, ["K"])], [("y", T.FLOAT)]), "c"),
    "unique": (_model([h.make_node("Unique", ["x"], ["y", "i", "v", "n"], sorted=1)],
                      [("x", T.FLOAT, ["N", "M"])], UNIQUE_OUTS), None),
    "unique_axis_unsorted": (_model([h.make_node("Unique", ["x"], ["y", "i", "v", "n"], sorted=0, axis=1)],
                                    [("x", T.FLOAT, ["N", "M"])], UNIQUE_OUTS), None),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_lowered_kernels_match_the_interpreter(name, tmp_path):
    m, cond = CASES[name]
    mod = load_onnx(m)
    run_pipeline(mod, "shape-inference,canonicalize")
    onnxcc.compile(m, tmp_path, name=name)
    lib = onnxcc.load(tmp_path)
    rng = np.random.default_rng(1)
    for n, k in ((3, 4), (1, 1), (5, 2)):
        x = rng.integers(0, 3, (n, k)).astype(np.float32)  # repeats and zeros
        feeds = {"x": x}
        if cond is not None:
            feeds["c"] = rng.random(k + 1) < 0.5
        want = run(mod, list(feeds.values()))
        got = list(lib.run(feeds).values())
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape and np.array_equal(g, w), (name, n, k, g, w)
