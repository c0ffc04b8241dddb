"""Window-mode convs on small output planes, where the GEMM picks one-vector-wide tiles
per call (codegen/cpu/gemm.py `_narrow_choice`) instead of the 32/48-column ones, and on
larger planes where it keeps the wide ones: 1x1 (B read in place) with a Clip epilogue in
registers and with a residual Add, a padded 3x3 (B from the padded copy), a stride-2 3x3;
output channels 8 (8-row tiles), 36 and 40 (12- and 8-row tiles with remainders), one
library at symbolic N, H, W, compared with onnxruntime (rtol 1e-4, atol 1e-4: sums of up
to 432 products of N(0, 1) inputs and 0.1-scaled weights)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from compiled_model import assert_matches_onnxruntime, lib_fixture
from onnx import TensorProto, helper, numpy_helper

from onnxcc.codegen.cpu.gemm import NARROW_EFFICIENCY

C = 48
# (name, out channels, kernel, attrs, residual)
CONVS = [
    ("pw8", 8, (1, 1), {}, False),
    ("pw36", 36, (1, 1), {}, False),
    ("pw40_res", 40, (1, 1), {}, True),
    ("k3_pad", 40, (3, 3), dict(pads=[1, 1, 1, 1]), False),
    ("k3_s2", 16, (3, 3), dict(pads=[1, 1, 1, 1], strides=[2, 2]), False),
]
# (N, H, W): grids of 1, 4, 15, 49 and 64 columns per batch (narrow tiles) up to 1056 (wide)
SHAPES = [(1, 1, 1), (3, 2, 2), (1, 3, 5), (2, 7, 7), (1, 8, 8), (3, 13, 11), (1, 32, 33)]


def _model(path):
    rng = np.random.default_rng(11)
    nodes, inits, outs = [], [], []
    lo, hi = numpy_helper.from_array(np.array(0, np.float32), "lo"), numpy_helper.from_array(np.array(6, np.float32),
                                                                                              "hi")
    inits += [lo, hi]
    for name, m, k, attrs, res in CONVS:
        w = (rng.standard_normal((m, C, *k)) * 0.1).astype(np.float32)
        bias = rng.standard_normal(m).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w_{name}"), numpy_helper.from_array(bias, f"b_{name}")]
        nodes.append(helper.make_node("Conv", ["x", f"w_{name}", f"b_{name}"], [f"c_{name}"], **attrs))
        if res:  # a residual the size of the output: the first 40 channels of x
            inits.append(numpy_helper.from_array(np.array([0, 0, 0, 0], np.int64), "s0"))
            inits.append(numpy_helper.from_array(np.array([1 << 30, m, 1 << 30, 1 << 30], np.int64), "s1"))
            nodes.append(helper.make_node("Slice", ["x", "s0", "s1"], ["xs"]))
            nodes.append(helper.make_node("Add", [f"c_{name}", "xs"], [name]))
        else:
            nodes.append(helper.make_node("Clip", [f"c_{name}", "lo", "hi"], [name]))
        outs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", C, "H", "W"])
    g = helper.make_graph(nodes, "small_planes", [x], outs, inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


built = lib_fixture("small_planes", _model)


def _narrow(cols: int, nr: int, vl: int = 16) -> bool:
    """`_narrow_choice`'s rule, for the test's coverage claim below."""
    return -(-cols // vl) * vl * 100 < -(-cols // nr) * nr * NARROW_EFFICIENCY


def test_the_shapes_cover_both_tile_widths():
    cols = [h * w for _, h, w in SHAPES]
    assert any(_narrow(c, 48) for c in cols) and not all(_narrow(c, 48) for c in cols)
    assert any(_narrow(c, 32) for c in cols) and not all(_narrow(c, 32) for c in cols)


@pytest.mark.parametrize("n,h,w", SHAPES)
def test_small_planes_match_onnxruntime(built, n, h, w):
    path, lib = built
    x = np.random.default_rng(h * 100 + w).standard_normal((n, C, h, w)).astype(np.float32)
    assert_matches_onnxruntime(path, lib, {"x": x}, rtol=1e-4, atol=1e-4, where=(n, h, w))
