"""kernel/index_simplify.py: integer divisions of index expressions folded with the vars'
ranges. Every rewrite is checked by brute force (original and folded expression evaluated at
every point of the vars' ranges for several symbol values); divisions the ranges do not
decide must stay; and a Reshape-split GroupNorm-style chain compiles to loads with no
division and matches onnxruntime."""

import itertools

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as h

from onnxcc.ir import SymbolTable
from onnxcc.ir.dims import Prover, sym
from onnxcc.kernel.expr import I64, Binary, Const, SymRef, Var, walk
from onnxcc.kernel.index_simplify import simplify_indices
from onnxcc.testing import jit_compile, ort_run

H, W = SymRef("H"), SymRef("W")
i1, i2, i3 = Var("i1"), Var("i2"), Var("i3")
RANGES = {"i1": 6, "i2": sym("H"), "i3": sym("W")}


def _eval(e, env):
    if isinstance(e, Const):
        return e.value
    if isinstance(e, (Var, SymRef)):
        return env[e.name]
    a, b = _eval(e.a, env), _eval(e.b, env)
    ops = {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b,
           "floordiv": lambda: a // b, "mod": lambda: a % b}
    return ops[e.op]()


def _divisions(e) -> int:
    return sum(1 for n in walk(e) if isinstance(n, Binary) and n.op in ("floordiv", "mod")
               and not isinstance(n.b, Const))


def _same_everywhere(before, after, ranges=RANGES):
    for hv, wv in ((1, 1), (2, 3), (3, 5)):
        syms = {"H": hv, "W": wv}
        ext = {k: int(v.subs({sym("H"): hv, sym("W"): wv})) if not isinstance(v, int) else v
               for k, v in ranges.items()}
        for pt in itertools.product(*(range(n) for n in ext.values())):
            env = {**syms, **dict(zip(ext, pt))}
            assert _eval(before, env) == _eval(after, env), (before, after, env)


FLAT = (i1 * H + i2) * W + i3
TWO_HW = H * W * Const(2, I64)


@pytest.mark.parametrize("name,expr,want", [
    ("row", FLAT // W, "H * i1 + i2"),
    ("col", FLAT % W, "i3"),
    ("group", FLAT // TWO_HW, "i1 // 2"),
    ("back", ((FLAT // TWO_HW * TWO_HW + FLAT % TWO_HW) // W) // H, "i1"),
    ("back_mod", ((FLAT // TWO_HW * TWO_HW + FLAT % TWO_HW) // W) % H, "i2"),
    ("within", FLAT % TWO_HW, None),
])
def test_folds_what_the_ranges_decide(name, expr, want):
    got = simplify_indices(expr, RANGES, Prover(SymbolTable()))
    _same_everywhere(expr, got)
    assert _divisions(got) == 0, got
    if want is not None:
        assert str(got) == want


@pytest.mark.parametrize("expr", [
    (i2 * W + i3 + Const(1, I64)) // W,   # i3 + 1 reaches W
    (i1 * W + i2) // W,                   # i2 < H, not < W
    (i2 * W - i3) % W,                    # a negative remainder part
])
def test_keeps_what_the_ranges_do_not_decide(expr):
    got = simplify_indices(expr, RANGES, Prover(SymbolTable()))
    assert got == expr


def test_groupnorm_reshapes_compile_without_divisions():
    # (N, 6, H, W) -> (N, 3, 2*H*W) -> add the group's mean -> back: the fused kernel reads x
    # at (i0, i1, i2, i3) directly
    nodes = [h.make_node("Reshape", ["x", "g"], ["r"]),
             h.make_node("ReduceMean", ["r", "ax"], ["m"], keepdims=1),
             h.make_node("Sub", ["r", "m"], ["d"]),
             h.make_node("Shape", ["x"], ["s"]),
             h.make_node("Reshape", ["d", "s"], ["b"]),
             h.make_node("Mul", ["b", "x"], ["y"])]
    inits = [h.make_tensor("g", TP.INT64, [3], [0, 3, -1]), h.make_tensor("ax", TP.INT64, [1], [2])]
    m = h.make_model(h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TP.FLOAT, ["N", 6, "H", "W"])],
                                  [h.make_tensor_value_info("y", TP.FLOAT, None)], inits),
                     opset_imports=[h.make_opsetid("", 18)])
    _, prog, k = jit_compile(m, "shape-inference,canonicalize")
    from onnxcc.kernel.fuse import fuse
    fuse(prog)
    last = next(c for c in prog.computes() if c.out == "out0")
    assert _divisions(last.body) == 0, str(last)
    _, _, k = jit_compile(m)
    for shape in ((1, 6, 1, 1), (2, 6, 5, 3)):
        x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(k(x)[0], ort_run(m, {"x": x})["y"], rtol=1e-5, atol=1e-6)


def test_groupnorm_statistics_sum_without_divisions():
    # torch's GroupNorm before opset 18: Reshape (N, G, -1) -> InstanceNormalization ->
    # Reshape back. The statistics sum over the flattened (channels of the group, H, W); the
    # sum's var is split (2, H, W) so no term divides by H or W
    nodes = [h.make_node("Reshape", ["x", "g"], ["r"]),
             h.make_node("InstanceNormalization", ["r", "s", "b"], ["n"], epsilon=1e-5),
             h.make_node("Shape", ["x"], ["sh"]),
             h.make_node("Reshape", ["n", "sh"], ["y"])]
    inits = [h.make_tensor("g", TP.INT64, [3], [0, 3, -1]), h.make_tensor("s", TP.FLOAT, [3], [1.0, 0.5, 2.0]),
             h.make_tensor("b", TP.FLOAT, [3], [0.0, 0.1, -0.2])]
    m = h.make_model(h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TP.FLOAT, ["N", 6, "H", "W"])],
                                  [h.make_tensor_value_info("y", TP.FLOAT, None)], inits),
                     opset_imports=[h.make_opsetid("", 13)])
    from onnxcc.kernel.fuse import fuse

    _, prog, _ = jit_compile(m)
    fuse(prog)
    for c in prog.computes():
        assert _divisions(c.body) == 0, str(c)
    _, _, k = jit_compile(m)
    for shape in ((1, 6, 1, 1), (2, 6, 5, 3), (1, 6, 7, 16)):
        x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(k(x)[0], ort_run(m, {"x": x})["y"], rtol=1e-4, atol=1e-5)
