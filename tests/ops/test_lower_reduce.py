"""Lowerings of the reductions (ops/reduce.py) to kernel computes: Reduce* over several axis
sets (negative axes, keepdims 0/1, empty axes), ArgMax/ArgMin, the fused Softmax family and
CumSum, JIT-compiled and compared with onnxruntime at several settings of the symbolic dims
(one of them 1). Each model compiles once and runs on every feed set."""

from functools import partial

import numpy as np
import onnx
import pytest
from onnx import helper as h

from onnxcc.errors import RuntimeCallError
from onnxcc.testing import check_jit, check_lowering, jit_compile, ort_run, spec_inputs, spec_model

F32, I64, I32, BOOL = np.float32, np.int64, np.int32, np.bool_
DIMS = ({"N": 1, "M": 3}, {"N": 5, "M": 7})
REDUCE_OPS = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
              "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")


def check(m, inputs, dims_list=DIMS, rtol=1e-4, atol=1e-5):
    """Compile once; at each dims setting compare values, dtypes and shapes with onnxruntime."""
    return check_jit(m, dims_list, rtol, atol, feeds=partial(spec_inputs, inputs))


# ---- Reduce* -------------------------------------------------------------------------------------


@pytest.mark.parametrize("axes,keepdims", [([1], 1), ([0, 2], 0), ([-1], 1), ([-3, -1], 0), (None, 1),
                                           ([2, 1, 0], 0)])
def test_lower_reduce_ops_over_axes(axes, keepdims):
    inputs = [("x", F32, ["N", 4, "M"], 0.5, 1.5)]
    ins = ["x"] if axes is None else ["x", "axes"]
    inits = {} if axes is None else {"axes": np.array(axes, I64)}
    nodes = [h.make_node(op, ins, [op], keepdims=keepdims) for op in REDUCE_OPS]
    check(spec_model(nodes, inputs, list(REDUCE_OPS), inits), inputs)


def test_lower_reduce_attribute_axes_opset13():
    inputs = [("x", F32, ["N", 4, "M"], -1.0, 1.0)]
    nodes = [h.make_node("ReduceMax", ["x"], ["max"], axes=[-2]),
             h.make_node("ReduceMean", ["x"], ["mean"], axes=[0, -1], keepdims=0),
             h.make_node("ReduceLogSumExp", ["x"], ["lse"], axes=[1, 2]),
             h.make_node("ReduceSum", ["x", "axes"], ["sum"], keepdims=0)]
    check(spec_model(nodes, inputs, ["max", "mean", "lse", "sum"], {"axes": np.array([1], I64)}, opset=13), inputs)


def test_lower_reduce_empty_axes():
    """Empty axes reduce everything, unless noop_with_empty_axes: then only the op's
    elementwise part applies (SumSquare squares, LogSum logs), as onnxruntime does."""
    inputs = [("x", F32, ["N", "M"], -1.5, 1.5)]
    nodes = [h.make_node("ReduceSum", ["x", "none"], ["sum_all"], keepdims=0),
             h.make_node("ReduceMean", ["x", "none"], ["mean_all"]),
             h.make_node("ReduceSum", ["x", "none"], ["sum_noop"], noop_with_empty_axes=1),
             h.make_node("ReduceMax", ["x", "none"], ["max_noop"], noop_with_empty_axes=1),
             h.make_node("ReduceSumSquare", ["x", "none"], ["sq_noop"], noop_with_empty_axes=1),
             h.make_node("ReduceLogSum", ["x", "none"], ["log_noop"], noop_with_empty_axes=1),
             h.make_node("ReduceL1", ["x", "none"], ["l1_noop"], noop_with_empty_axes=1)]
    m = spec_model(nodes, inputs, [nd.output[0] for nd in nodes], {"none": np.zeros(0, I64)})
    prog = check(m, inputs)
    assert "out4[i0, i1] = in0[i0, i1] * in0[i0, i1]" in str(prog)


@pytest.mark.parametrize("dt", [I64, I32])
def test_lower_reduce_integer(dt):
    inputs = [("x", dt, ["N", 4, "M"], -5, 6)]
    ops = ("ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceMean", "ReduceL1", "ReduceSumSquare")
    nodes = [h.make_node(op, ["x", "axes"], [op], keepdims=0) for op in ops]
    nodes.append(h.make_node("ReduceMax", ["x"], ["all"]))
    check(spec_model(nodes, inputs, list(ops) + ["all"], {"axes": np.array([-1], I64)}), inputs)


def test_lower_reduce_bool():
    inputs = [("b", BOOL, ["N", "M"])]
    nodes = [h.make_node("ReduceMax", ["b", "axes"], ["any"], keepdims=0),
             h.make_node("ReduceMin", ["b", "axes"], ["all"], keepdims=1)]
    check(spec_model(nodes, inputs, ["any", "all"], {"axes": np.array([1], I64)}, opset=20), inputs)


def test_lower_reduce_via_check_lowering():
    x = h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 6])
    axes = onnx.numpy_helper.from_array(np.array([-1], I64), "axes")
    g = h.make_graph([h.make_node("ReduceMean", ["x", "axes"], ["y"])], "g", [x],
                     [h.make_empty_tensor_value_info("y")], [axes])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    m.ir_version = 8
    check_lowering(m, [{"N": 1}, {"N": 5}])


def test_lower_reduce_kernel_text():
    inputs = [("x", F32, ["N", 4, "M"])]
    nodes = [h.make_node("ReduceMean", ["x", "axes"], ["mean"], keepdims=0),
             h.make_node("ReduceLogSumExp", ["x", "axes"], ["lse"])]
    _, prog, _ = jit_compile(spec_model(nodes, inputs, ["mean", "lse"], {"axes": np.array([0, -1], I64)}))
    text = str(prog)
    assert "out0[i0] = sum(r0 < N, r2 < M: in0[r0, i0, r2]) / f32(M * N)" in text
    assert "max(m0 < N, m2 < M: in0[m0, i1, m2])" in text  # the max of the stable log-sum-exp
    assert len(list(prog.computes())) == 2


# ---- ArgMax / ArgMin -----------------------------------------------------------------------------


def test_lower_argmax_argmin():
    inputs = [("t", I32, ["N", 4, "M"], 0, 3), ("x", F32, ["N", "M"])]  # t: small ints, many ties
    nodes = []
    for op in ("ArgMax", "ArgMin"):
        for axis in (0, 1, -1):
            for keep in (0, 1):
                for last in (0, 1):
                    attrs = dict(axis=axis, keepdims=keep, select_last_index=last)
                    nodes.append(h.make_node(op, ["t"], [f"{op}_{axis}_{keep}_{last}"], **attrs))
        nodes.append(h.make_node(op, ["x"], [f"{op}_f"], axis=-1, keepdims=0))
    check(spec_model(nodes, inputs, [nd.output[0] for nd in nodes]), inputs)


# ---- Softmax family --------------------------------------------------------------------------------


def test_lower_softmax_family():
    inputs = [("x", F32, ["N", 5, "M"], -3.0, 3.0), ("big", F32, ["N", "M"], -200.0, 200.0)]
    nodes = [h.make_node("Round", ["x"], ["r"])]  # ties for Hardmax
    for op in ("Softmax", "LogSoftmax", "Hardmax"):
        for axis in (-1, 1, 0):
            nodes.append(h.make_node(op, ["r" if op == "Hardmax" else "x"], [f"{op}_{axis}"], axis=axis))
        nodes.append(h.make_node(op, ["big"], [f"{op}_big"]))  # exp overflows without the max shift
    check(spec_model(nodes, inputs, [nd.output[0] for nd in nodes[1:]], opset=13), inputs)


def test_lower_softmax_is_one_fused_compute_on_the_innermost_axis():
    for shape, axis in ((["N", 5], -1), (["N", 5, 1], 1)):
        m = spec_model([h.make_node("Softmax", ["x"], ["y"], axis=axis)], [("x", F32, shape)], ["y"], opset=13)
        _, prog, _ = jit_compile(m)
        (c,) = prog.computes()
        ix = "i0, i1" if len(shape) == 2 else "i0, i1, i2"
        rest = "i0, d" if len(shape) == 2 else "i0, d, i2"
        text = "\n".join(c.format(""))
        assert text == (f"out0[{ix}] = exp(in0[{ix}] - $0) / sum(d < 5: exp(in0[{rest}] - $0))\n"
                        f"    where $0 = max(c < 5: in0[{rest.replace('d', 'c')}])")


def test_lower_softmax_middle_axis_stages_row_statistics():
    """With elements after the axis, the row max and sum go to temps first: computed inline
    they would run once per element of the row."""
    m = spec_model([h.make_node("LogSoftmax", ["x"], ["y"], axis=1)], [("x", F32, ["N", 5, "M"])], ["y"], opset=13)
    _, prog, _ = jit_compile(m)
    lines = [c.format("")[0] for c in prog.computes()]
    assert lines == ["rowmax_1[i0, i1] = max(c < 5: in0[i0, c, i1])",
                     "rowlogsum_2[i0, i1] = log(sum(d < 5: exp(in0[i0, d, i1] - rowmax_1[i0, i1])))",
                     "out0[i0, i1, i2] = in0[i0, i1, i2] - rowmax_1[i0, i2] - rowlogsum_2[i0, i2]"]


# ---- CumSum ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("dt,lo,hi", [(F32, -2.0, 2.0), (I64, -9, 10), (I32, -9, 10)])
def test_lower_cumsum(dt, lo, hi):
    inputs = [("x", dt, ["N", "M"], lo, hi)]
    inits = {"a0": np.array(0, I64), "a1": np.array(-1, I32)}
    nodes = [h.make_node("CumSum", ["x", ax], [f"cs_{ax}_{e}{r}"], exclusive=e, reverse=r)
             for ax in ("a0", "a1") for e in (0, 1) for r in (0, 1)]
    check(spec_model(nodes, inputs, [nd.output[0] for nd in nodes], inits), inputs)


def test_lower_cumsum_axis_known_only_at_run_time():
    inputs = [("x", F32, ["N", "M"]), ("axis", I64, [1])]
    nodes = [h.make_node("CumSum", ["x", "axis"], ["y"], reverse=1)]
    m = spec_model(nodes, inputs, ["y"])
    _, _, k = jit_compile(m)
    x = np.random.default_rng(0).standard_normal((3, 7)).astype(F32)
    for a in (0, 1, -1, -2):
        feeds = {"x": x, "axis": np.array([a], I64)}
        np.testing.assert_allclose(k(x, feeds["axis"])[0], ort_run(m, feeds)["y"], rtol=1e-5, atol=1e-6)
    with pytest.raises(RuntimeCallError, match="index out of range"):
        k(x, np.array([2], I64))
