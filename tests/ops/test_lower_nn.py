"""Lowerings of the window ops (ops/nn.py: Conv, ConvTranspose, MaxPool, AveragePool, the
global pools) and the normalizations (ops/norm.py) to kernel computes, JIT-compiled and
compared with onnxruntime (or, where onnxruntime has no kernel, the numpy reference
interpreter) at several settings of the symbolic dims, one of them 1. Ops are grouped into
few models; each model is compiled once and run at every setting."""

from functools import partial

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from onnxcc.kernel import Binary, Const, Reduce, Select, walk
from onnxcc.testing import check_jit, op_model

F = T.FLOAT
_RNG = np.random.default_rng(11)


_model = partial(op_model, opset=19)


class _Weights(dict):
    """Initializers by name; `w(shape)` adds a random one and returns its name."""

    def w(self, *shape, positive=False):
        a = (_RNG.standard_normal(shape) * 0.5).astype(np.float32)
        name = f"w{len(self)}"
        self[name] = np.abs(a) + 0.1 if positive else a
        return name


def _compute(prog, out):
    (c,) = [c for c in prog.computes() if c.out == out]
    return c


# ---- Conv / ConvTranspose ----------------------------------------------------------------------------

def test_lower_conv2d_variants():
    w = _Weights()
    x = "x"
    nodes = [
        h.make_node("Conv", [x, w.w(6, 4, 3, 3), w.w(6)], ["y0"], pads=[1, 1, 1, 1]),
        h.make_node("Conv", [x, w.w(6, 4, 3, 3)], ["y1"], strides=[2, 2], pads=[1, 0, 2, 1]),
        h.make_node("Conv", [x, w.w(4, 2, 3, 2), w.w(4)], ["y2"], dilations=[2, 1], group=2),
        # depthwise with channel multiplier 2, SAME_UPPER with stride 2 (symbolic pads)
        h.make_node("Conv", [x, w.w(8, 1, 3, 3), w.w(8)], ["y3"], group=4, auto_pad="SAME_UPPER",
                    strides=[2, 2]),
        h.make_node("Conv", [x, w.w(4, 1, 3, 3)], ["y4"], group=4, pads=[1, 1, 1, 1]),  # depthwise
        h.make_node("Conv", [x, w.w(5, 4, 1, 1), w.w(5)], ["y5"]),                     # pointwise
        h.make_node("Conv", [x, w.w(3, 4, 2, 3)], ["y6"], auto_pad="SAME_LOWER", strides=[2, 1]),
        h.make_node("Conv", [x, w.w(3, 4, 3, 3)], ["y7"], auto_pad="VALID", strides=[1, 2]),
    ]
    m = _model(nodes, [(x, F, ["N", 4, "H", "W"])], [f"y{i}" for i in range(8)], w)
    prog = check_jit(m, [{"N": 1, "H": 5, "W": 6}, {"N": 2, "H": 9, "W": 7}])
    # the contraction is one sum (pads read through a lazy select inside it), the bias outside
    c = _compute(prog, "out0")
    reds = [n for n in walk(c.body) if isinstance(n, Reduce)]
    assert len(reds) == 1 and c.body.a is reds[0] and any(isinstance(n, Select) for n in walk(reds[0].body))
    assert not any(isinstance(n, Select) for n in walk(_compute(prog, "out5").body))  # no pads, no checks
    # strided convs with padding read a zero-padded copy of x (y1, y3, y6): no bounds selects
    # in their windows (y3's stride-2 rows add a pairing load, neutralised by a select on
    # |x| < inf, ops/nn.py `_pair_taps`); the grouped y2 sums a GEMM per group into a
    # [n, group, m/group, oh, ow] temp (ops/conv_grouped.py); nothing else makes temps
    assert sorted(t.name.split("_")[0] for t in prog.temps()) == ["gconv", "xpad", "xpad", "xpad"]
    assert [t.shape[1:3] for t in prog.temps() if t.name.startswith("gconv")] == [(2, 2)]
    for out in ("out1", "out3", "out6"):
        assert not any(isinstance(n, Select) and not _pairing(n) for n in walk(_compute(prog, out).body)), out
    assert any(_pairing(n) for n in walk(_compute(prog, "out3").body))


def _pairing(sel) -> bool:
    """The select that makes a pairing load's term 0 whatever it reads: (|v| < inf) ? v : 0."""
    if not isinstance(sel, Select):
        return False
    c = sel.cond
    return isinstance(c, Binary) and c.op == "lt" and isinstance(c.b, Const) and c.b.value == float("inf")


def test_lower_conv1d_3d_and_conv_transpose():
    w = _Weights()
    nodes = [
        h.make_node("Conv", ["x1", w.w(4, 3, 3), w.w(4)], ["y0"], strides=[2], dilations=[2], pads=[2, 1]),
        h.make_node("Conv", ["x3", w.w(4, 1, 2, 3, 2)], ["y1"], group=2, pads=[1, 0, 1, 0, 1, 1]),
        h.make_node("ConvTranspose", ["x2", w.w(4, 3, 3, 3), w.w(3)], ["y2"], strides=[2, 2],
                    pads=[1, 1, 0, 0]),
        h.make_node("ConvTranspose", ["x2", w.w(4, 2, 2, 3)], ["y3"], group=2, strides=[1, 2],
                    output_padding=[0, 1], dilations=[2, 1]),
        h.make_node("ConvTranspose", ["x2", w.w(4, 2, 3, 3)], ["y4"], strides=[2, 2], auto_pad="SAME_UPPER"),
        h.make_node("ConvTranspose", ["x1", w.w(3, 2, 3)], ["y5"], strides=[3], output_shape=[17]),
    ]
    m = _model(nodes, [("x1", F, ["N", 3, 6]), ("x3", F, ["N", 2, "D", 4, 5]), ("x2", F, ["N", 4, "H", "W"])],
               [f"y{i}" for i in range(6)], w)
    check_jit(m, [{"N": 1, "D": 1, "H": 1, "W": 4}, {"N": 2, "D": 3, "H": 5, "W": 3}])


# ---- pooling -----------------------------------------------------------------------------------------

def test_lower_pools():
    x = "x"
    nodes = [
        h.make_node("MaxPool", [x], ["y0"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
        h.make_node("MaxPool", [x], ["y1", "i1"], kernel_shape=[2, 3], pads=[1, 1, 0, 1], dilations=[1, 2]),
        h.make_node("MaxPool", [x], ["y2", "i2"], kernel_shape=[2, 2], strides=[2, 2], storage_order=1,
                    ceil_mode=1),
        h.make_node("AveragePool", [x], ["y3"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                    count_include_pad=1, ceil_mode=1),
        h.make_node("AveragePool", [x], ["y4"], kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 1, 1],
                    ceil_mode=1),
        h.make_node("AveragePool", [x], ["y5"], kernel_shape=[2, 2], strides=[2, 2]),
        h.make_node("AveragePool", [x], ["y6"], kernel_shape=[2, 2], pads=[1, 1, 1, 1], dilations=[2, 2]),
        h.make_node("AveragePool", [x], ["y7"], kernel_shape=[3, 3], auto_pad="SAME_UPPER", strides=[2, 2]),
        h.make_node("GlobalAveragePool", [x], ["y8"]),
        h.make_node("GlobalMaxPool", [x], ["y9"]),
    ]
    outs = ["y0", "y1", "i1", "y2", "i2"] + [f"y{i}" for i in range(3, 10)]
    m = _model(nodes, [(x, F, ["N", 3, "H", "W"])], outs)
    prog = check_jit(m, [{"N": 1, "H": 4, "W": 5}, {"N": 2, "H": 9, "W": 7}])
    # no pads and no ceil_mode: a plain window sum divided by the constant window size
    body = str(_compute(prog, "out7").body)
    assert "select" not in body and body.endswith("/ 4.0")


def test_lower_pools_1d_3d():
    nodes = [
        h.make_node("MaxPool", ["x1"], ["y0"], kernel_shape=[3], strides=[2], pads=[1, 1]),
        h.make_node("AveragePool", ["x1"], ["y1"], kernel_shape=[2], strides=[2], ceil_mode=1),
        h.make_node("MaxPool", ["x3"], ["y2"], kernel_shape=[2, 2, 2], strides=[1, 2, 2], ceil_mode=1),
        h.make_node("AveragePool", ["x3"], ["y3"], kernel_shape=[1, 3, 3], pads=[0, 1, 1, 0, 1, 1]),
        h.make_node("GlobalAveragePool", ["x3"], ["y4"]),
    ]
    m = _model(nodes, [("x1", F, ["N", 2, "L"]), ("x3", F, ["N", 2, "D", 5, 4])], [f"y{i}" for i in range(5)])
    check_jit(m, [{"N": 1, "L": 1, "D": 2}, {"N": 3, "L": 8, "D": 5}])


# ---- normalizations ----------------------------------------------------------------------------------

def test_lower_normalizations():
    w = _Weights()
    x = "x"
    nodes = [
        h.make_node("BatchNormalization", [x, w.w(4), w.w(4), w.w(4), w.w(4, positive=True)], ["y0"],
                    epsilon=1e-3),                                            # constant params: folded
        h.make_node("BatchNormalization", [x, "s", "b", "s", "v"], ["y1"]),   # run-time params
        h.make_node("InstanceNormalization", [x, w.w(4), w.w(4)], ["y2"]),
        h.make_node("LayerNormalization", [x, w.w(6), w.w(6)], ["y3", "mean", "inv"], axis=-1),
        h.make_node("LayerNormalization", [x, w.w(1, 6)], ["y4"], axis=2, epsilon=1e-3),
        h.make_node("GroupNormalization", [x, w.w(2), w.w(2)], ["y5"], num_groups=2),
        h.make_node("LpNormalization", [x], ["y6"], axis=1, p=2),
        h.make_node("LpNormalization", [x], ["y7"], axis=-1, p=1),
        h.make_node("LRN", [x], ["y8"], size=3, alpha=1e-3, beta=0.75, bias=2.0),
        h.make_node("LRN", [x], ["y9"], size=5),
    ]
    outs = ["y0", "y1", "y2", "y3", "mean", "inv"] + [f"y{i}" for i in range(4, 10)]
    m = _model(nodes, [(x, F, ["N", 4, "H", 6]), ("s", F, [4]), ("b", F, [4]), ("v", F, [4])], outs, w,
               opset=18)
    # NOTE: the absolute tolerance sits at the default, the variance of a 6..60-element row is
    # summed in another order than onnxruntime's, which the relative 1e-4 covers
    prog = check_jit(m, [{"N": 1, "H": 1}, {"N": 2, "H": 5}])
    # one compute per result: the statistics over one axis are hoistable reductions; instance
    # and group norms (statistics over several axes) add two small temps each, mean and inv_std;
    # LpNormalization over an inner axis one, its inverse norm (ops/norm.py `_lp_lower`)
    temps = [t for t in prog.temps() if t.name.startswith("norm_")]
    assert len(list(prog.computes())) == len(outs) + 5 and len(prog.temps()) == 5 and len(temps) == 4, temps
    assert all(t.shape[:1] == prog.buffers["out0"].shape[:1] and len(t.shape) == 2 for t in temps)
    assert "sqrt" not in str(_compute(prog, "out0").body)  # constant parameters folded into a, b
    # LayerNorm's Y: two distinct reductions (mean, and the variance that reuses the mean)
    assert len([n for n in walk(_compute(prog, "out3").body) if isinstance(n, Reduce)]) == 2


def test_lower_group_norm_per_channel_opset21():
    w = _Weights()
    nodes = [h.make_node("GroupNormalization", ["x", w.w(6), w.w(6)], ["y0"], num_groups=3, epsilon=1e-3)]
    m = _model(nodes, [("x", F, ["N", 6, "S"])], ["y0"], w, opset=21)
    check_jit(m, [{"N": 1, "S": 1}, {"N": 2, "S": 7}])


def test_lower_ops_without_an_ort_kernel_vs_interp():
    """Training-mode BatchNormalization and even-size LRN: onnxruntime has no CPU kernel for
    them, so the numpy reference interpreter is the oracle."""
    w = _Weights()
    nodes = [
        h.make_node("BatchNormalization", ["x", w.w(4), w.w(4), w.w(4), w.w(4, positive=True)],
                    ["y0", "rm", "rv"], training_mode=1, momentum=0.8),
        h.make_node("LRN", ["x"], ["y1"], size=4, alpha=0.01),
    ]
    m = _model(nodes, [("x", F, ["N", 4, "H"])], ["y0", "rm", "rv", "y1"], w, opset=15)
    prog = check_jit(m, [{"N": 1, "H": 1}, {"N": 3, "H": 5}], oracle="interp")
    assert len(prog.temps()) == 2  # the batch mean and variance per channel


@pytest.mark.parametrize("dtype", [T.FLOAT16, T.DOUBLE], ids=["f16", "f64"])
def test_lower_layernorm_maxpool_other_float_types(dtype):
    np_dt = onnx.helper.tensor_dtype_to_np_dtype(dtype)
    w = {"ls": _RNG.standard_normal((5,)).astype(np_dt), "lb": _RNG.standard_normal((5,)).astype(np_dt)}
    nodes = [h.make_node("LayerNormalization", ["x", "ls", "lb"], ["y0"], axis=-1),
             h.make_node("MaxPool", ["x"], ["y1"], kernel_shape=[2, 2], pads=[1, 1, 0, 0])]
    # (onnxruntime's CPU Conv and AveragePool take f32 only)
    m = _model(nodes, [("x", dtype, ["N", 2, 4, 5])], [f"y{i}" for i in range(len(nodes))], w, opset=17)
    # f16: inputs and results are rounded to half precision, and onnxruntime rounds the
    # intermediate steps differently: a few half ulps (2**-10 relative) apart
    tol = dict(rtol=4e-3, atol=4e-3) if dtype == T.FLOAT16 else {}
    check_jit(m, [{"N": 1}, {"N": 3}], **tol)
