"""Lowerings of the shape / data-movement ops (ops/shape.py, ops/misc.py) to kernel
computes: JIT-compiled and compared with onnxruntime at several settings of the symbolic
dims (one of them 1 where legal). Ops are grouped into few models to keep JIT time small;
most models run both with canonicalize (shape chains folded to cc.dims) and without it
(Shape, Gather, Concat... on shape values compiled as kernels)."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from onnxcc.errors import RuntimeCallError
from onnxcc.frontend import load_onnx
from onnxcc.passes import run_pipeline
from onnxcc.passes.lower import lower_function
from onnxcc.testing import MODELS_DIR, check_lowering, jit_compile, op_model, ort_run, random_inputs

FOLDED, UNFOLDED = "shape-inference,canonicalize", "shape-inference"
BIG, SMALL = 2**63 - 1, -(2**63)
SEVEN = onnx.numpy_helper.from_array(np.array([7], np.int32))


def i64(*v):
    return np.array(v, dtype=np.int64)


def compile_jit(m, pipeline=FOLDED):
    mod, _, k = jit_compile(m, pipeline)
    return k, mod


def check_feeds(m, feeds_list, pipeline=FOLDED, rtol=1e-4, atol=1e-5):
    """Compile once, then compare with onnxruntime on each of the given feeds."""
    k, mod = compile_jit(m, pipeline)
    for feeds in feeds_list:
        want = ort_run(m, feeds)
        got = k(*[feeds[a.name] for a in mod.main.params])
        for (name, w), g in zip(want.items(), got):
            assert g.shape == w.shape, (name, g.shape, w.shape)
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"output {name}")


# ---- views, Transpose, Concat, Split, Slice, Shape, Size ---------------------------------------------

def _movement_model():
    x, z = ("x", T.FLOAT, ["N", "S", 6]), ("z", T.FLOAT, ["N", 2, 6])
    nodes = [
        h.make_node("Transpose", ["x"], ["t"], perm=[2, 0, 1]),
        h.make_node("Concat", ["x", "z", "x", "z", "x"], ["c"], axis=1),  # offsets S, S+2, 2S+2, 2S+4
        h.make_node("Split", ["x", "sp"], ["s0", "s1", "s2"], axis=2),
        h.make_node("Split", ["c"], ["e0", "e1"], axis=0),  # N split in 2: only at even N
        h.make_node("Slice", ["x", "st", "en", "ax", "stp"], ["rev"]),  # x[:, ::-1, 1:6:2]
        h.make_node("Slice", ["x", "st2", "en2"], ["mid"]),  # x[-2:, 1:-1] with negative start / end
        h.make_node("Shape", ["x"], ["sh"]),
        h.make_node("Shape", ["x"], ["sh1"], start=1, end=-1),
        h.make_node("Size", ["x"], ["sz"]),
        h.make_node("Flatten", ["x"], ["fl"], axis=2),
        h.make_node("Unsqueeze", ["x", "a0"], ["u"]),
        h.make_node("Squeeze", ["u", "a0"], ["sq"]),
        h.make_node("Identity", ["x"], ["id"]),
        h.make_node("Reshape", ["x", "rs"], ["r"]),
    ]
    inits = {"sp": i64(1, 2, 3), "st": i64(-1, 1), "en": i64(SMALL, 6), "ax": i64(1, 2), "stp": i64(-1, 2),
             "st2": i64(0, 1), "en2": i64(BIG, -1), "a0": i64(0), "rs": i64(0, -1, 3)}
    outs = ["t", "c", "s0", "s1", "s2", "e0", "e1", "rev", "mid", "sh", "sh1", "sz", "fl", "sq", "id", "r"]
    return op_model(nodes, [x, z], outs, inits)


@pytest.mark.parametrize("pipeline", [FOLDED, UNFOLDED])
def test_lower_movement_ops(pipeline):
    check_lowering(_movement_model(), [{"N": 2, "S": 1}, {"N": 4, "S": 7}], pipeline=pipeline)


def test_lower_slice_start_past_end_and_clamping():
    # starts/ends beyond the dim clamp; a negative step from a huge start begins at the last element
    x = ("x", T.FLOAT, ["N", "S"])
    nodes = [h.make_node("Slice", ["x", "a", "b", "ax", "st"], ["y0"]),
             h.make_node("Slice", ["x", "c", "d", "ax", "st2"], ["y1"])]
    inits = {"a": i64(BIG, 5), "b": i64(-4, SMALL), "ax": i64(0, 1), "st": i64(-1, -2),
             "c": i64(-100, 2), "d": i64(100, BIG), "st2": i64(1, 3)}
    dims = [{"N": 1, "S": 1}, {"N": 3, "S": 8}, {"N": 9, "S": 5}]
    check_lowering(op_model(nodes, [x], ["y0", "y1"], inits), dims)


# ---- exporter shape chains ---------------------------------------------------------------------------

def _chain_model():
    """What torch.onnx.export writes around attention: split heads with a reshape target built
    from Shape -> Gather -> Unsqueeze -> Concat, merge heads with Shape -> Slice -> Concat."""
    x = ("x", T.FLOAT, ["batch", "seq", 256])
    nodes = [
        h.make_node("Shape", ["x"], ["s0"]),
        h.make_node("Gather", ["s0", "k0"], ["g0"], axis=0),
        h.make_node("Unsqueeze", ["g0", "ax0"], ["u0"]),
        h.make_node("Shape", ["x"], ["s1"]),
        h.make_node("Gather", ["s1", "k1"], ["g1"], axis=0),
        h.make_node("Unsqueeze", ["g1", "ax0"], ["u1"]),
        h.make_node("Concat", ["u0", "u1", "heads", "hd"], ["tgt"], axis=0),
        h.make_node("Reshape", ["x", "tgt"], ["r"]),
        h.make_node("Transpose", ["r"], ["p"], perm=[0, 2, 1, 3]),
        h.make_node("Transpose", ["p"], ["q"], perm=[0, 2, 1, 3]),
        h.make_node("Shape", ["x"], ["s2"]),
        h.make_node("Slice", ["s2", "z", "two", "ax0"], ["bs"]),
        h.make_node("Concat", ["bs", "w"], ["tgt2"], axis=0),
        h.make_node("Reshape", ["q", "tgt2"], ["y"]),
    ]
    inits = {"k0": np.array(0, np.int64), "k1": np.array(1, np.int64), "ax0": i64(0), "heads": i64(4),
             "hd": i64(64), "z": i64(0), "two": i64(2), "w": i64(256)}
    return op_model(nodes, [x], ["p", "y", "tgt", "tgt2"], inits)


@pytest.mark.parametrize("pipeline", [FOLDED, UNFOLDED])
def test_lower_exporter_shape_chains(pipeline):
    check_lowering(_chain_model(), [{"batch": 1, "seq": 1}, {"batch": 3, "seq": 7}], pipeline=pipeline)


def test_lower_sample_transformer_unfolded():
    # the whole sample model with its shape chains compiled as kernels (no canonicalize)
    path = MODELS_DIR / "transformer.onnx"
    feeds = [random_inputs(path, {"batch": 1, "seq": 1}, 0), random_inputs(path, {"batch": 3, "seq": 7}, 1)]
    check_feeds(onnx.load(str(path)), feeds, UNFOLDED)


def test_lower_exporter_chain_folds_to_views():
    # after canonicalize the chain is gone: the reshapes are views, only the transposes copy
    mod = load_onnx(_chain_model())
    run_pipeline(mod, FOLDED)
    text = str(lower_function(mod, mod.main, "k"))
    assert "view(in0)" in text
    assert "onnx" not in text and "Gather" not in text


def test_lower_slice_symbolic_starts_and_ends():
    # starts / ends from shapes: compile-time dims when folded, loaded at run time when not
    x, z = ("x", T.FLOAT, ["N", "S", 3]), ("z", T.FLOAT, ["K"])
    nodes = [
        h.make_node("Shape", ["z"], ["k"]),
        h.make_node("Shape", ["x"], ["s"], start=1, end=2),
        h.make_node("Slice", ["x", "k", "s", "one"], ["y"]),  # x[:, K:S]
        h.make_node("Slice", ["x", "s", "zero", "one", "m1"], ["y2"]),  # x[:, S:0:-1]: start clamps to S - 1
        h.make_node("Slice", ["x", "zero", "k", "two"], ["y3"]),  # x[:, :, :K]
    ]
    inits = {"zero": i64(0), "one": i64(1), "two": i64(2), "m1": i64(-1)}
    m = op_model(nodes, [x, z], ["y", "y2", "y3"], inits)
    dims = [{"N": 1, "S": 4, "K": 1}, {"N": 2, "S": 9, "K": 3}]
    check_lowering(m, dims)
    check_lowering(m, dims, pipeline=UNFOLDED)


def test_lower_slice_symbolic_expression_bounds():
    # x[:, -K:S - 1] and x[:, S - 1:-K - 1:-1]: shape arithmetic folds into symbolic starts / ends
    x, z = ("x", T.FLOAT, ["N", "S", 3]), ("z", T.FLOAT, ["K"])
    nodes = [
        h.make_node("Shape", ["z"], ["k"]),
        h.make_node("Shape", ["x"], ["s"], start=1, end=2),
        h.make_node("Neg", ["k"], ["nk"]),
        h.make_node("Sub", ["s", "one"], ["e"]),
        h.make_node("Slice", ["x", "nk", "e", "one"], ["y"]),
        h.make_node("Sub", ["nk", "one"], ["e2"]),
        h.make_node("Slice", ["x", "e", "e2", "one", "m1"], ["y2"]),
    ]
    m = op_model(nodes, [x, z], ["y", "y2"], {"one": i64(1), "m1": i64(-1)})
    check_lowering(m, [{"N": 1, "S": 4, "K": 1}, {"N": 2, "S": 9, "K": 3}, {"N": 1, "S": 2, "K": 5}])


# ---- Gather family, Expand, Tile, Range, ConstantOfShape ---------------------------------------------

def _gather_model():
    x, gi = ("x", T.FLOAT, ["N", "S", 5]), ("gi", T.INT64, ["M", 2])
    ge, gn = ("ge", T.INT32, ["N", "S", 2]), ("gn", T.INT64, ["N", "M", 2])
    nodes = [
        h.make_node("Gather", ["x", "gi"], ["g1"], axis=2),
        h.make_node("Gather", ["x", "s0"], ["g0"], axis=0),  # scalar index: drops the axis
        h.make_node("GatherElements", ["x", "ge"], ["gel"], axis=2),
        h.make_node("GatherND", ["x", "gn"], ["gnd"], batch_dims=1),  # picks x[n, gn[n, m, 0], gn[n, m, 1]]
        h.make_node("Expand", ["v", "shp"], ["ex"]),
        h.make_node("Shape", ["x"], ["xs"]),
        h.make_node("Expand", ["col", "xs"], ["ex2"]),
        h.make_node("Tile", ["x", "reps"], ["ti"]),
        h.make_node("Gather", ["xs", "s1"], ["len"], axis=0),
        h.make_node("Range", ["r0", "len", "r1"], ["rg"]),
        h.make_node("Range", ["f0", "f9", "f1"], ["rgf"]),  # constant: folded, or compiled when unfolded
        h.make_node("ConstantOfShape", ["xs"], ["cs"], value=SEVEN),
    ]
    inits = {"s0": np.array(-1, np.int64), "s1": np.array(1, np.int64), "shp": i64(2, 1, 3),
             "v": np.arange(3, dtype=np.float32).reshape(1, 3, 1), "col": np.ones((1, 5), np.float32),
             "reps": i64(2, 1, 3), "r0": np.array(2, np.int64), "r1": np.array(3, np.int64),
             "f0": np.array(0.5, np.float32), "f9": np.array(3.1, np.float32),
             "f1": np.array(0.25, np.float32)}
    outs = ["g1", "g0", "gel", "gnd", "ex", "ex2", "ti", "rg", "rgf", "cs"]
    return op_model(nodes, [x, gi, ge, gn], outs, inits)


def _gather_feeds(n, s, m, seed):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((n, s, 5)).astype(np.float32),
            "gi": rng.integers(-5, 5, (m, 2)),  # negative indices count from the end
            "ge": rng.integers(-5, 5, (n, s, 2)).astype(np.int32),
            "gn": np.stack([rng.integers(-s, s, (n, m)), rng.integers(-5, 5, (n, m))], axis=-1)}


@pytest.mark.parametrize("pipeline", [FOLDED, UNFOLDED])
def test_lower_gather_family(pipeline):
    check_feeds(_gather_model(), [_gather_feeds(1, 1, 1, 0), _gather_feeds(3, 7, 4, 1)], pipeline)


def test_lower_gather_out_of_range_index_is_an_error():
    k, mod = compile_jit(_gather_model())
    feeds = _gather_feeds(2, 3, 2, 0)
    names = [a.name for a in mod.main.params]
    for bad in (5, -6):
        feeds["gi"][1, 0] = bad
        with pytest.raises(RuntimeCallError, match="index out of range"):
            k(*[feeds[n] for n in names])
    feeds = _gather_feeds(2, 3, 2, 0)
    feeds["gn"][1, 1, 0] = 3  # GatherND past dim S
    with pytest.raises(RuntimeCallError, match="index out of range"):
        k(*[feeds[n] for n in names])


def test_lower_gather_constant_index_checked_against_symbolic_dim():
    # x[:, 4] and x[:, -5]: fine while S >= 5, a run-time index error below
    nodes = [h.make_node("Gather", ["x", "four"], ["y"], axis=1),
             h.make_node("Gather", ["x", "m5"], ["z"], axis=1)]
    m = op_model(nodes, [("x", T.FLOAT, ["N", "S"])], ["y", "z"],
              {"four": np.array(4, np.int64), "m5": np.array(-5, np.int64)})
    check_lowering(m, [{"N": 1, "S": 5}, {"N": 3, "S": 9}])
    k, _ = compile_jit(m)
    with pytest.raises(RuntimeCallError, match="index out of range"):
        k(np.zeros((2, 4), np.float32))


# ---- Pad, Trilu, EyeLike, OneHot, DepthToSpace, SpaceToDepth -----------------------------------------

def _misc_model():
    x, q = ("x", T.FLOAT, ["N", "S", 4]), ("q", T.FLOAT, ["N", 8, "H", "W"])
    oh = ("oh", T.INT64, ["N", "S"])
    nodes = [
        h.make_node("Pad", ["x", "p1", "pv"], ["pc"], mode="constant"),
        h.make_node("Pad", ["x", "p2"], ["pr"], mode="reflect"),
        h.make_node("Pad", ["x", "p1"], ["pe"], mode="edge"),
        h.make_node("Pad", ["x", "p3"], ["pw"], mode="wrap"),  # negative pads crop
        h.make_node("Trilu", ["x", "tk"], ["tu"], upper=1),
        h.make_node("Trilu", ["x"], ["tl"], upper=0),
        h.make_node("Reshape", ["x", "r2"], ["x2"]),
        h.make_node("EyeLike", ["x2"], ["ey"], k=1, dtype=T.INT32),
        h.make_node("OneHot", ["oh", "depth", "ohv"], ["o1"], axis=1),
        h.make_node("DepthToSpace", ["q"], ["d2s"], blocksize=2, mode="DCR"),
        h.make_node("DepthToSpace", ["q"], ["d2c"], blocksize=2, mode="CRD"),
        h.make_node("SpaceToDepth", ["d2s"], ["s2d"], blocksize=2),
    ]
    inits = {"p1": i64(0, 1, 2, 0, 2, 1), "pv": np.array(1.5, np.float32), "p2": i64(0, 2, 3, 0, 0, 2),
             "p3": i64(0, -1, 5, 0, 2, -1), "tk": np.array(-1, np.int64), "r2": i64(-1, 4),
             "depth": np.array(6, np.int64), "ohv": np.array([-1.0, 2.0], np.float32)}
    outs = ["pc", "pr", "pe", "pw", "tu", "tl", "ey", "o1", "d2s", "d2c", "s2d"]
    return op_model(nodes, [x, q, oh], outs, inits, opset=19)


def _misc_feeds(n, s, hh, w, seed):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((n, s, 4)).astype(np.float32),
            "q": rng.standard_normal((n, 8, hh, w)).astype(np.float32),
            "oh": rng.integers(-7, 8, (n, s))}  # out of range -> a row of "off"


def test_lower_misc_ops():
    # reflect pads 2 on S: S >= 3
    check_feeds(_misc_model(), [_misc_feeds(1, 3, 1, 1, 0), _misc_feeds(2, 5, 3, 2, 1)])


# ---- TopK, ScatterND, ScatterElements ----------------------------------------------------------------

def _select_scatter_model():
    x, u = ("x", T.FLOAT, ["N", "S"]), ("u", T.FLOAT, ["N", 2])
    si, su = ("si", T.INT64, ["K", 1]), ("su", T.FLOAT, ["K", "S"])
    ei = ("ei", T.INT64, ["N", 2])
    nodes = [
        h.make_node("TopK", ["x", "k"], ["tv", "ti"], axis=1, largest=1),
        h.make_node("TopK", ["x", "k1"], ["bv", "bi"], axis=0, largest=0),
        h.make_node("ScatterND", ["x", "si", "su"], ["snd"]),
        h.make_node("ScatterND", ["x", "si", "su"], ["sna"], reduction="add"),
        h.make_node("ScatterND", ["x", "pt", "pv"], ["snp"], reduction="mul"),  # point updates
        h.make_node("ScatterElements", ["x", "ei", "u"], ["se"], axis=1),
        h.make_node("ScatterElements", ["x", "ei", "u"], ["sem"], axis=1, reduction="max"),
        h.make_node("ScatterElements", ["x", "ei", "u"], ["sen"], axis=1, reduction="min"),
        # indices [K, 2]: smaller than data off the axis
        h.make_node("ScatterElements", ["x", "ei0", "u0"], ["sea"], axis=0, reduction="add"),
    ]
    inits = {"k": i64(1), "k1": i64(1), "pt": np.array([[0, 0], [0, -1], [0, 0]], np.int64),
             "pv": np.array([2.0, 3.0, -1.0], np.float32)}
    ei0, u0 = ("ei0", T.INT64, ["K", 2]), ("u0", T.FLOAT, ["K", 2])
    outs = ["tv", "ti", "bv", "bi", "snd", "sna", "snp", "se", "sem", "sen", "sea"]
    return op_model(nodes, [x, u, si, su, ei, ei0, u0], outs, inits, opset=18)


def _select_scatter_feeds(n, s, k, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, s)).astype(np.float32)
    x[0, -1] = x[0, 0]  # a tie: the lower index comes first
    return {"x": x, "u": rng.standard_normal((n, 2)).astype(np.float32),
            "si": (rng.permutation(n)[:k] - n * (np.arange(k) % 2)).reshape(k, 1),  # distinct rows, some < 0
            "su": rng.standard_normal((k, s)).astype(np.float32),
            "ei": np.stack([rng.permutation(s)[:2] for _ in range(n)]) - s * rng.integers(0, 2, (n, 2)),
            "ei0": rng.integers(-n, n, (k, 2)), "u0": rng.standard_normal((k, 2)).astype(np.float32)}


def test_lower_topk_and_scatter():
    feeds = [_select_scatter_feeds(1, 2, 1, 0), _select_scatter_feeds(5, 7, 3, 1)]
    check_feeds(_select_scatter_model(), feeds)


def test_lower_gather_with_check_lowering_inputs():
    # the plain check_lowering path (random non-negative indices) at M = 1 and a non power of two
    m = op_model([h.make_node("Gather", ["x", "i"], ["y"], axis=1)],
              [("x", T.FLOAT, ["N", 10]), ("i", T.INT64, ["M"])], ["y"])
    check_lowering(m, [{"N": 1, "M": 1}, {"N": 3, "M": 6}])
