"""Loops whose carried value changes shape every iteration, over a trip count known only at
run time (issue 15): compiled as ONE native loop (ops/loop_carried.py), the carried dim a
run-time symbol re-bound per iteration, compared with onnxruntime at several inputs (floats:
rtol 1e-5). Hand-built ONNX Loops (M from an input dim, a data condition, a Pad that widens
the state) and torch.jit.script loops exported by torch.onnx (tests/data/loops/, made by
models/export_loops.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto as T
from onnx import helper as h

import onnxcc
from onnxcc.cli import main
from onnxcc.compiler import CompileOptions, compile_model
from onnxcc.errors import RuntimeCallError, UnsupportedOp
from onnxcc.frontend import load_onnx
from onnxcc.interp import run as interp_run
from onnxcc.kernel.parser import parse_kernel_text
from onnxcc.testing import ort_run

DATA = Path(__file__).resolve().parents[1] / "data" / "loops"


def vi(n: str, e: int, s):
    return h.make_tensor_value_info(n, e, s)


def _model(nodes, ins, outs, inits=()) -> onnx.ModelProto:
    m = h.make_model(h.make_graph(nodes, "g", ins, outs, list(inits)), opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _grow_body(cond=None, scan: bool = False) -> onnx.GraphProto:
    """y_out = Concat(y_in, y_in[-1:] * 0.5 + i): one more element per iteration."""
    nodes = [h.make_node("Cast", ["i"], ["fi"], to=T.FLOAT),
             h.make_node("Slice", ["y_in", "m1", "big", "ax0"], ["last"]),
             h.make_node("Mul", ["last", "half"], ["lh"]),
             h.make_node("Add", ["lh", "fi"], ["step"]),
             h.make_node("Concat", ["y_in", "step"], ["y_out"], axis=0)]
    outs = [vi("c_out", T.BOOL, []), vi("y_out", T.FLOAT, None)]
    nodes += cond or [h.make_node("Identity", ["c_in"], ["c_out"])]
    if scan:
        nodes.append(h.make_node("ReduceSum", ["y_out"], ["s"], keepdims=0))
        outs.append(vi("s", T.FLOAT, []))
    return h.make_graph(nodes, "body", [vi("i", T.INT64, []), vi("c_in", T.BOOL, []), vi("y_in", T.FLOAT, None)],
                        outs, [h.make_tensor("m1", T.INT64, [1], [-1]), h.make_tensor("big", T.INT64, [1], [2**62]),
                               h.make_tensor("ax0", T.INT64, [1], [0]), h.make_tensor("half", T.FLOAT, [], [0.5])])


def _n_of_x():
    return [h.make_node("Shape", ["x"], ["sh"]), h.make_node("Gather", ["sh", "z"], ["n"], axis=0)]


ZERO = h.make_tensor("z", T.INT64, [], [0])


def grow_by_dim() -> onnx.ModelProto:
    """M = x.shape[0]; the state grows by one per step; the per-step sums are scan outputs;
    the result is computed on after the loop."""
    nodes = _n_of_x() + [h.make_node("Loop", ["n", "", "x"], ["y", "s"], body=_grow_body(scan=True), name="grow"),
                         h.make_node("Neg", ["y"], ["ny"])]
    return _model(nodes, [vi("x", T.FLOAT, ["N"])], [vi("ny", T.FLOAT, None), vi("s", T.FLOAT, None)], [ZERO])


def _sum_below_lim():
    return [h.make_node("ReduceSum", ["y_out"], ["ss"], keepdims=0), h.make_node("Less", ["ss", "lim"], ["c_out"])]


def while_bounded() -> onnx.ModelProto:
    """At most 2 * x.shape[0] steps, stopping early once the sum reaches `lim` (data)."""
    nodes = _n_of_x() + [h.make_node("Add", ["n", "n"], ["M"]),
                         h.make_node("Constant", [], ["c0"], value=h.make_tensor("c", T.BOOL, [], [True])),
                         h.make_node("Loop", ["M", "c0", "x"], ["y"], body=_grow_body(_sum_below_lim()), name="grow")]
    return _model(nodes, [vi("x", T.FLOAT, ["N"]), vi("lim", T.FLOAT, [])], [vi("y", T.FLOAT, None)], [ZERO])


def while_const_trips() -> onnx.ModelProto:
    """`for i in range(16): ...; if sum >= lim: break`: a constant trip count and a data
    condition (the import tries unrolling, finds the condition is data and keeps the Loop)."""
    nodes = [h.make_node("Loop", ["M", "c0", "x"], ["y"], body=_grow_body(_sum_below_lim()), name="grow")]
    return _model(nodes, [vi("x", T.FLOAT, ["N"]), vi("lim", T.FLOAT, [])], [vi("y", T.FLOAT, None)],
                  [h.make_tensor("M", T.INT64, [], [16]), h.make_tensor("c0", T.BOOL, [], [True])])


def while_data() -> onnx.ModelProto:
    """No trip count: runs while the sum is below `lim`, so nothing bounds the state."""
    nodes = [h.make_node("ReduceSum", ["x"], ["s0"], keepdims=0), h.make_node("Less", ["s0", "lim"], ["c0"]),
             h.make_node("Loop", ["", "c0", "x"], ["y"], body=_grow_body(_sum_below_lim()), name="grow")]
    return _model(nodes, [vi("x", T.FLOAT, ["N"]), vi("lim", T.FLOAT, [])], [vi("y", T.FLOAT, None)])


def grow_by_data_trips() -> onnx.ModelProto:
    """M = int(sum(k)) (data); per-step sums as scan outputs: bounded by the range given to
    the trip count's symbol (`iters`)."""
    nodes = [h.make_node("ReduceSum", ["k"], ["ks"], keepdims=0), h.make_node("Cast", ["ks"], ["M"], to=T.INT64),
             h.make_node("Loop", ["M", "", "x"], ["y", "s"], body=_grow_body(scan=True), name="grow")]
    return _model(nodes, [vi("x", T.FLOAT, ["N"]), vi("k", T.FLOAT, [2])],
                  [vi("y", T.FLOAT, None), vi("s", T.FLOAT, None)])


def pad_cols() -> onnx.ModelProto:
    """A [r, c] state widened by a Pad of one column each side per step (the varying dim is
    not the leading one); the row maxima are scan outputs; Relu after the loop."""
    body = h.make_graph([h.make_node("Identity", ["c_in"], ["c_out"]),
                         h.make_node("Pad", ["y_in", "pads", "pv"], ["y_out"]),
                         h.make_node("ReduceMax", ["y_out"], ["mx"], axes=[1], keepdims=0)],
                        "body", [vi("i", T.INT64, []), vi("c_in", T.BOOL, []), vi("y_in", T.FLOAT, None)],
                        [vi("c_out", T.BOOL, []), vi("y_out", T.FLOAT, None), vi("mx", T.FLOAT, None)],
                        [h.make_tensor("pads", T.INT64, [4], [0, 1, 0, 1]), h.make_tensor("pv", T.FLOAT, [], [1.0])])
    nodes = _n_of_x() + [h.make_node("Loop", ["n", "", "x"], ["y", "mx"], body=body, name="pad"),
                         h.make_node("Relu", ["y"], ["yr"])]
    return _model(nodes, [vi("x", T.FLOAT, ["N", "C"])], [vi("yr", T.FLOAT, None), vi("mx", T.FLOAT, None)], [ZERO])


def grow_by_count() -> onnx.ModelProto:
    """Each step appends the positions where m > i: a NonZero in the body binds its count (a
    run-time symbol bound inside the loop body) and the state grows by it; the counts are
    scan outputs, the state is summed after the loop (int64: exact)."""
    body = h.make_graph([h.make_node("Identity", ["c_in"], ["c_out"]),
                         h.make_node("Cast", ["i"], ["fi"], to=T.FLOAT),
                         h.make_node("Greater", ["m", "fi"], ["gt"]),
                         h.make_node("NonZero", ["gt"], ["nz"]),
                         h.make_node("Reshape", ["nz", "m1"], ["nzf"]),
                         h.make_node("Concat", ["y_in", "nzf"], ["y_out"], axis=0),
                         h.make_node("ReduceSum", ["nzf"], ["cnt"], keepdims=0)],
                        "body", [vi("i", T.INT64, []), vi("c_in", T.BOOL, []), vi("y_in", T.INT64, None)],
                        [vi("c_out", T.BOOL, []), vi("y_out", T.INT64, None), vi("cnt", T.INT64, [])],
                        [h.make_tensor("m1", T.INT64, [1], [-1])])
    nodes = _n_of_x() + [h.make_node("Loop", ["n", "", "x"], ["y", "cnt"], body=body, name="grow_nz"),
                         h.make_node("ReduceSum", ["y"], ["t"], keepdims=0)]
    return _model(nodes, [vi("x", T.INT64, ["N"]), vi("m", T.FLOAT, [5])],
                  [vi("y", T.INT64, None), vi("cnt", T.INT64, None), vi("t", T.INT64, [])], [ZERO])


def shrink() -> onnx.ModelProto:
    """y = y[1:] * 2 for M = len(m) steps (the state shrinks by a row a step); sums after."""
    body = h.make_graph([h.make_node("Identity", ["c_in"], ["c_out"]),
                         h.make_node("Slice", ["y_in", "one", "big", "ax0"], ["t"]),
                         h.make_node("Mul", ["t", "two"], ["y_out"]),
                         h.make_node("ReduceSum", ["y_out"], ["s"], keepdims=0)],
                        "body", [vi("i", T.INT64, []), vi("c_in", T.BOOL, []), vi("y_in", T.FLOAT, None)],
                        [vi("c_out", T.BOOL, []), vi("y_out", T.FLOAT, None), vi("s", T.FLOAT, [])],
                        [h.make_tensor("one", T.INT64, [1], [1]), h.make_tensor("big", T.INT64, [1], [2**62]),
                         h.make_tensor("ax0", T.INT64, [1], [0]), h.make_tensor("two", T.FLOAT, [], [2.0])])
    nodes = [h.make_node("Shape", ["m"], ["sh"]), h.make_node("Gather", ["sh", "z"], ["M"], axis=0),
             h.make_node("Loop", ["M", "", "x"], ["y", "s"], body=body, name="shrink"),
             h.make_node("ReduceSum", ["y"], ["t"], keepdims=0)]
    return _model(nodes, [vi("x", T.FLOAT, ["N", 3]), vi("m", T.FLOAT, ["K"])],
                  [vi("y", T.FLOAT, None), vi("s", T.FLOAT, None), vi("t", T.FLOAT, [])], [ZERO])


def coupled() -> onnx.ModelProto:
    """z grows by one a step and y by len(z): y's growth depends on another carried dim."""
    body = h.make_graph([h.make_node("Identity", ["c_in"], ["c_out"]),
                         h.make_node("Concat", ["z_in", "one_f"], ["z_out"], axis=0),
                         h.make_node("Concat", ["y_in", "z_out"], ["y_out"], axis=0)],
                        "body", [vi("i", T.INT64, []), vi("c_in", T.BOOL, []), vi("y_in", T.FLOAT, None),
                                 vi("z_in", T.FLOAT, None)],
                        [vi("c_out", T.BOOL, []), vi("y_out", T.FLOAT, None), vi("z_out", T.FLOAT, None)],
                        [h.make_tensor("one_f", T.FLOAT, [1], [1.0])])
    nodes = _n_of_x() + [h.make_node("Loop", ["n", "", "x", "x"], ["y", "zz"], body=body, name="coupled")]
    return _model(nodes, [vi("x", T.FLOAT, ["N"])], [vi("y", T.FLOAT, None), vi("zz", T.FLOAT, None)], [ZERO])


def scan_grow() -> onnx.ModelProto:
    """A Scan over the rows of x whose state appends each row (a Scan state that grows; ONNX
    allows it, onnxruntime's Scan refuses it: the oracle is numpy and the interpreter)."""
    body = h.make_graph([h.make_node("Concat", ["st_in", "row"], ["st_out"], axis=0),
                         h.make_node("ReduceSum", ["st_out"], ["tot"], keepdims=0)],
                        "body", [vi("st_in", T.FLOAT, None), vi("row", T.FLOAT, None)],
                        [vi("st_out", T.FLOAT, None), vi("tot", T.FLOAT, [])])
    nodes = [h.make_node("Scan", ["s0", "x"], ["st", "tots"], body=body, num_scan_inputs=1, name="scan_grow"),
             h.make_node("Abs", ["st"], ["ast"])]
    return _model(nodes, [vi("s0", T.FLOAT, ["K"]), vi("x", T.FLOAT, ["L", 3])],
                  [vi("ast", T.FLOAT, None), vi("tots", T.FLOAT, None)])


def nested() -> onnx.ModelProto:
    """An outer loop over len(x) whose body runs an inner loop over len(m) that appends j to
    the state: the inner carried dim starts from the outer one (both re-bound per step)."""
    inner = h.make_graph([h.make_node("Identity", ["c2"], ["c2o"]),
                          h.make_node("Cast", ["j"], ["fj"], to=T.FLOAT),
                          h.make_node("Unsqueeze", ["fj", "ax0"], ["fj1"]),
                          h.make_node("Concat", ["z_in", "fj1"], ["z_out"], axis=0)],
                         "inner", [vi("j", T.INT64, []), vi("c2", T.BOOL, []), vi("z_in", T.FLOAT, None)],
                         [vi("c2o", T.BOOL, []), vi("z_out", T.FLOAT, None)])
    outer = h.make_graph([h.make_node("Identity", ["c_in"], ["c_out"]),
                          h.make_node("Shape", ["m"], ["shm"]), h.make_node("Gather", ["shm", "z"], ["K"], axis=0),
                          h.make_node("Loop", ["K", "", "y_in"], ["y_mid"], body=inner, name="inner"),
                          h.make_node("Mul", ["y_mid", "half"], ["y_out"])],
                         "outer", [vi("i", T.INT64, []), vi("c_in", T.BOOL, []), vi("y_in", T.FLOAT, None)],
                         [vi("c_out", T.BOOL, []), vi("y_out", T.FLOAT, None)])
    nodes = _n_of_x() + [h.make_node("Loop", ["n", "", "x"], ["y"], body=outer, name="outer"),
                         h.make_node("ReduceSum", ["y"], ["t"], keepdims=0)]
    return _model(nodes, [vi("x", T.FLOAT, ["N"]), vi("m", T.FLOAT, ["K"])],
                  [vi("y", T.FLOAT, None), vi("t", T.FLOAT, [])],
                  [ZERO, h.make_tensor("ax0", T.INT64, [1], [0]), h.make_tensor("half", T.FLOAT, [], [0.5])])


def count_in_body() -> onnx.ModelProto:
    """A fixed-shape accumulator; each step sums x's elements above i, picked by a NonZero in
    the body (a run-time symbol bound, and computed on by Gather, every iteration)."""
    body = h.make_graph([h.make_node("Identity", ["c_in"], ["c_out"]),
                         h.make_node("Cast", ["i"], ["fi"], to=T.FLOAT),
                         h.make_node("Greater", ["x", "fi"], ["gt"]),
                         h.make_node("NonZero", ["gt"], ["nz"]),
                         h.make_node("Gather", ["x", "nz"], ["sel"], axis=0),
                         h.make_node("ReduceSum", ["sel"], ["s"], keepdims=0),
                         h.make_node("Add", ["acc_in", "s"], ["acc_out"])],
                        "body", [vi("i", T.INT64, []), vi("c_in", T.BOOL, []), vi("acc_in", T.FLOAT, [])],
                        [vi("c_out", T.BOOL, []), vi("acc_out", T.FLOAT, []), vi("s", T.FLOAT, [])])
    nodes = _n_of_x() + [h.make_node("Loop", ["n", "", "a0"], ["acc", "ss"], body=body, name="nzloop")]
    return _model(nodes, [vi("x", T.FLOAT, ["N"])], [vi("acc", T.FLOAT, None), vi("ss", T.FLOAT, None)],
                  [ZERO, h.make_tensor("a0", T.FLOAT, [], [0.0])])


def constrained() -> onnx.ModelProto:
    """The body adds w to the state before growing it: the state's extent must equal W
    where the Add runs (a model constraint over the carried dim), not after the last step."""
    body = h.make_graph([h.make_node("Identity", ["c_in"], ["c_out"]),
                         h.make_node("Add", ["y_in", "w"], ["yw"]),
                         h.make_node("Concat", ["yw", "one_f"], ["y_out"], axis=0)],
                        "body", [vi("i", T.INT64, []), vi("c_in", T.BOOL, []), vi("y_in", T.FLOAT, None)],
                        [vi("c_out", T.BOOL, []), vi("y_out", T.FLOAT, None)],
                        [h.make_tensor("one_f", T.FLOAT, [1], [1.0])])
    nodes = [h.make_node("Shape", ["m"], ["sh"]), h.make_node("Gather", ["sh", "z"], ["M"], axis=0),
             h.make_node("Loop", ["M", "", "x"], ["y"], body=body, name="cons")]
    return _model(nodes, [vi("x", T.FLOAT, ["N"]), vi("w", T.FLOAT, ["W"]), vi("m", T.FLOAT, ["K"])],
                  [vi("y", T.FLOAT, None)], [ZERO])


def _close(got: dict, want: dict, where: str) -> None:
    assert list(got) == list(want)
    for k, w in want.items():
        assert got[k].shape == w.shape, f"{k} at {where}: shape {got[k].shape} != {w.shape}"
        np.testing.assert_allclose(got[k], w, rtol=1e-5, atol=1e-6, err_msg=f"{k} at {where}")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    cache: dict = {}

    def get(name: str, model, **options):
        if name not in cache:
            d = tmp_path_factory.mktemp(name)
            path = model if isinstance(model, Path) else d / f"{name}.onnx"
            if not isinstance(model, Path):
                onnx.save(model, path)
            onnxcc.compile(path, d / "lib", name=name, **options)
            cache[name] = (path, onnxcc.load(d / "lib"), d / "lib")
        return cache[name]

    return get


@pytest.mark.parametrize("n", [1, 3, 7])
def test_grow_by_an_input_dim(built, n):
    path, lib, _ = built("grow_by_dim", grow_by_dim())
    feeds = {"x": np.random.default_rng(n).standard_normal(n).astype(np.float32)}
    got = lib.run(feeds)
    assert got["ny"].shape == (2 * n,)
    _close(got, ort_run(path, feeds), f"n={n}")


@pytest.mark.parametrize("n,lim", [(1, 0.1), (2, 5.0), (4, 9.0), (4, 1e6)])
def test_while_with_a_bounded_trip_count(built, n, lim):
    path, lib, _ = built("while_bounded", while_bounded())
    feeds = {"x": np.abs(np.random.default_rng(n).standard_normal(n)).astype(np.float32),
             "lim": np.array(lim, np.float32)}
    _close(lib.run(feeds), ort_run(path, feeds), f"n={n} lim={lim}")


@pytest.mark.parametrize("r,c", [(1, 1), (3, 2), (5, 4)])
def test_pad_widens_an_inner_dim(built, r, c):
    path, lib, _ = built("pad_cols", pad_cols())
    feeds = {"x": np.random.default_rng(r * c).standard_normal((r, c)).astype(np.float32)}
    got = lib.run(feeds)
    assert got["yr"].shape == (r, c + 2 * r)
    _close(got, ort_run(path, feeds), f"r={r} c={c}")


@pytest.mark.parametrize("n,seed", [(1, 0), (3, 1), (6, 2), (4, 3)])
def test_grow_by_a_count_of_the_data(built, n, seed):
    path, lib, d = built("grow_by_count", grow_by_count())
    m = (np.random.default_rng(seed).random(5) * 5).astype(np.float32)
    if seed == 3:
        m[:] = 0.0  # nothing appended: the state keeps its initial extent
    feeds = {"x": np.arange(n, dtype=np.int64), "m": m}
    _close(lib.run(feeds), ort_run(path, feeds), f"n={n} seed={seed}")
    meta = (d / "grow_by_count.json").read_text()
    assert '"carried0_d0": "6*N"' in meta  # N + N steps of at most 5 each


@pytest.mark.parametrize("n", [1, 4, 9])
def test_a_count_bound_inside_the_body(built, n):
    path, lib, _ = built("count_in_body", count_in_body())
    feeds = {"x": (np.random.default_rng(n).random(n) * n).astype(np.float32)}
    _close(lib.run(feeds), ort_run(path, feeds), f"n={n}")


def test_a_constraint_over_the_carried_dim_is_checked_where_the_body_needs_it(built):
    path, lib, _ = built("constrained", constrained())
    feeds = {"x": np.arange(3, dtype=np.float32), "w": np.ones(3, np.float32), "m": np.zeros(1, np.float32)}
    _close(lib.run(feeds), ort_run(path, feeds), "one step")  # after it the state has 4 != W: fine
    feeds["m"] = np.zeros(2, np.float32)  # the second step adds w [3] to a state of 4 (onnxruntime fails too)
    with pytest.raises(RuntimeCallError, match=r"carried0_d0 == W \(node \"cons/Add_1\""):
        lib.run(feeds)


def test_the_body_rebinds_the_carried_dim(tmp_path):
    """The kernel text: bound to the initial extent before the loop, re-bound (checked
    against the bound n + n) at the end of every iteration."""
    onnx.save(grow_by_dim(), tmp_path / "g.onnx")
    text = compile_model(tmp_path / "g.onnx", tmp_path / "k", emit="kernel").text
    assert "run carried0_d0 <= 2*N" in text
    top, _, body = text.partition("loop ")
    assert "bind carried0_d0 := N" in top
    # the new extent is checked against the bound before the state is written, then bound
    check_at = body.index("next_carried0_d0")
    assert body[check_at:].split("\n")[0].endswith("= check(carried0_d0 + 1 <= N * 2, check(carried0_d0 + 1 >= 0, "
                                                    "carried0_d0 + 1, code=4), code=4)")
    assert check_at < body.index("for (w0 < carried0_d0 + 1)") < body.index("bind carried0_d0 := next_carried0_d0")
    progs = parse_kernel_text(text)  # the text parses back; the nested binding counts as mid-run
    assert progs[-1].late_dims == {"carried0_d0"} and str(progs[-1].run_dims["carried0_d0"]) == "2*N"


@pytest.mark.parametrize("n,lim", [(1, 2.0), (3, 8.0), (2, 1e9)])
def test_constant_trip_count_with_a_data_condition(built, n, lim):
    path, lib, _ = built("while_const_trips", while_const_trips())
    feeds = {"x": np.abs(np.random.default_rng(n).standard_normal(n)).astype(np.float32),
             "lim": np.array(lim, np.float32)}
    _close(lib.run(feeds), ort_run(path, feeds), f"n={n} lim={lim}")


def test_constant_trip_count_with_a_data_condition_stays_a_loop():
    main_f = load_onnx(while_const_trips()).functions["main"]
    assert [o.name for o in main_f.body.ops if o.name != "return"] == ["cc.const", "cc.const", "onnx.Loop"]
    assert [str(t) for t in main_f.result_types] == ["f32[carried0_d0]"]


@pytest.mark.parametrize("n,lim", [(1, 3.0), (2, 40.0), (3, 400.0)])
def test_unbounded_growth_grows_a_capacity(built, n, lim):
    """No trip count and no range: a capacity the library doubles until the run fits
    (ops/loop_capacity.py; tests/e2e/test_loop_capacity.py has its edges)."""
    path, lib, _ = built("while_data_cap", while_data())
    feeds = {"x": np.full(n, 0.5, np.float32), "lim": np.array(lim, np.float32)}
    _close(lib.run(feeds), ort_run(path, feeds), f"n={n} lim={lim}")


@pytest.mark.parametrize("n,lim", [(1, 3.0), (3, 8.0)])
def test_unbounded_growth_runs_under_a_given_range(built, n, lim):
    path, lib, _ = built("while_data", while_data(), dims={"carried0_d0": (1, 32)})
    feeds = {"x": np.abs(np.random.default_rng(n).standard_normal(n)).astype(np.float32) + 0.1,
             "lim": np.array(lim, np.float32)}
    _close(lib.run(feeds), ort_run(path, feeds), f"n={n} lim={lim}")


def test_growth_past_the_given_range_fails_instead_of_overrunning(built):
    _, lib, _ = built("while_data", while_data(), dims={"carried0_d0": (1, 32)})
    feeds = {"x": np.full(2, 0.01, np.float32), "lim": np.array(1e9, np.float32)}  # ~endless
    with pytest.raises(RuntimeCallError, match=r'0 <= carried0_d0 <= 32 \(node "grow": loop-carried value 0 dim 0'):
        lib.run(feeds)


@pytest.mark.parametrize("n,k", [(1, 0.0), (3, 2.5), (2, 16.0)])
def test_data_trip_count_bounded_by_its_symbol(built, n, k):
    path, lib, _ = built("grow_by_data_trips", grow_by_data_trips(), dims={"iters": (1, 16)})
    feeds = {"x": np.random.default_rng(n).standard_normal(n).astype(np.float32), "k": np.array([k, 0.0], np.float32)}
    _close(lib.run(feeds), ort_run(path, feeds), f"n={n} k={k}")


def test_data_trip_count_past_its_range_fails(built):
    _, lib, _ = built("grow_by_data_trips", grow_by_data_trips(), dims={"iters": (1, 16)})
    with pytest.raises(RuntimeCallError):
        lib.run({"x": np.ones(2, np.float32), "k": np.array([17.0, 0.0], np.float32)})


@pytest.mark.parametrize("n,k", [(1, 0.0), (2, 5.0), (2, 40.0)])
def test_data_trip_count_without_a_range_gets_capacities(built, n, k):
    """M from data and no range: the state and the scan outputs' iteration count each get a
    capacity the library grows per call (ops/loop_capacity.py)."""
    path, lib, _ = built("grow_by_data_trips_cap", grow_by_data_trips())
    feeds = {"x": np.random.default_rng(n).standard_normal(n).astype(np.float32), "k": np.array([k, 0.0], np.float32)}
    got = lib.run(feeds)
    assert got["s"].shape == (int(k),)
    _close(got, ort_run(path, feeds), f"n={n} k={k}")


@pytest.mark.parametrize("n,k", [(1, 1), (4, 2), (3, 3)])
def test_shrinking_state(built, n, k):
    path, lib, _ = built("shrink", shrink())
    feeds = {"x": np.random.default_rng(n).standard_normal((n, 3)).astype(np.float32), "m": np.zeros(k, np.float32)}
    _close(lib.run(feeds), ort_run(path, feeds), f"n={n} k={k}")


@pytest.mark.parametrize("n,k", [(2, 5), (1, 2), (3, 3)])
def test_slicing_an_emptied_state_gives_empty_rows(built, n, k):
    """The shape rules take dims as positive (x[1:] would type as d - 1, -1 rows once the
    state is empty), so a slice of a carried dim the loop re-binds is a run-time length
    (ops/slice_run.py may_run_empty), clamped: x[1:] past the last row stays 0 rows, as
    onnxruntime gives."""
    path, lib, _ = built("shrink", shrink())
    feeds = {"x": np.random.default_rng(n).standard_normal((n, 3)).astype(np.float32), "m": np.zeros(k, np.float32)}
    got = lib.run(feeds)
    assert got["y"].shape == (max(0, n - k), 3)
    _close(got, ort_run(path, feeds), f"n={n} k={k}")


@pytest.mark.parametrize("n", [1, 3, 12])
def test_growth_that_depends_on_another_carried_dim_gets_a_capacity(built, n):
    """y grows by len(z) a step: no bound over the inputs, so a capacity (grown per call)."""
    path, lib, _ = built("coupled", coupled())
    feeds = {"x": np.arange(n, dtype=np.float32)}
    got = lib.run(feeds)
    assert got["y"].shape == (n + n * (n + 1) + n * (n - 1) // 2,)
    _close(got, ort_run(path, feeds), f"n={n}")


@pytest.mark.parametrize("length,k", [(1, 1), (4, 2), (7, 3)])
def test_scan_state_that_grows(built, length, k):
    path, lib, _ = built("scan_grow", scan_grow())
    rng = np.random.default_rng(length)
    feeds = {"s0": rng.standard_normal(k).astype(np.float32), "x": rng.standard_normal((length, 3)).astype(np.float32)}
    got = lib.run(feeds)
    flat = np.concatenate([feeds["s0"], feeds["x"].reshape(-1)])
    want = {"ast": np.abs(flat), "tots": np.array([flat[:k + 3 * (t + 1)].sum() for t in range(length)], np.float32)}
    _close(got, want, f"L={length} k={k}")
    mine = interp_run(load_onnx(path), [feeds["s0"], feeds["x"]])
    _close(dict(zip(("ast", "tots"), mine)), want, f"interp L={length} k={k}")


@pytest.mark.parametrize("n,k", [(1, 1), (3, 2), (2, 4)])
def test_nested_loops_both_growing(built, n, k):
    path, lib, _ = built("nested", nested())
    feeds = {"x": np.random.default_rng(n).standard_normal(n).astype(np.float32), "m": np.zeros(k, np.float32)}
    got = lib.run(feeds)
    assert got["y"].shape == (n + n * k,)
    _close(got, ort_run(path, feeds), f"n={n} k={k}")


def test_through_onnxcc_run(tmp_path):
    """The user's path: `onnxcc run --inputs --check` (exit 0: onnxruntime agrees)."""
    onnx.save(grow_by_dim(), tmp_path / "g.onnx")
    np.savez(tmp_path / "in.npz", x=np.arange(5, dtype=np.float32))
    r = CliRunner().invoke(main, ["run", str(tmp_path / "g.onnx"), "--inputs", str(tmp_path / "in.npz"),
                                  "--outputs", str(tmp_path / "out.npz"), "--cache-dir", str(tmp_path / "cache"),
                                  "--check"])
    assert r.exit_code == 0, r.output
    assert np.load(tmp_path / "out.npz")["ny"].shape == (10,)


# ---- torch.jit.script loops exported by torch.onnx (models/export_loops.py) -----------------


@pytest.mark.parametrize("n", [1, 3, 5])
def test_torch_cat_over_range_of_size(built, n):
    """for i in range(x.size(0)): out = cat([out, out[-1:] * 0.5 + 1]); relu after."""
    path, lib, _ = built("cat_sym", DATA / "cat_sym.onnx")
    feeds = {"x": np.random.default_rng(n).standard_normal((n, 2)).astype(np.float32)}
    _close(lib.run(feeds), ort_run(path, feeds), f"n={n}")


@pytest.mark.parametrize("n", [1, 3])
def test_torch_greedy_while_loop(built, n):
    """while out.sum() < lim: out = cat([out, out[-1:] + 1]) (torch writes M = 2**63-1)."""
    path, lib, _ = built("greedy", DATA / "greedy.onnx", dims={"carried0_d0": (1, 64)})
    feeds = {"x": np.abs(np.random.default_rng(n).standard_normal((n, 2))).astype(np.float32),
             "lim": np.array(6.0 * n, np.float32)}
    _close(lib.run(feeds), ort_run(path, feeds), f"n={n}")


def test_a_float_trip_count_is_refused_as_invalid(tmp_path):
    """torch.onnx exports `range(int(k.sum()))` with the float sum as M (onnxruntime refuses
    that model too): a clear refusal naming the Loop, not a kernel verifier error."""
    nodes = [h.make_node("ReduceSum", ["k"], ["M"], keepdims=0),
             h.make_node("Loop", ["M", "", "x"], ["y"], body=_grow_body(), name="grow")]
    m = _model(nodes, [vi("x", T.FLOAT, ["N"]), vi("k", T.FLOAT, [2])], [vi("y", T.FLOAT, None)])
    onnx.save(m, tmp_path / "f.onnx")
    with pytest.raises(UnsupportedOp, match=r"'grow': the trip count M is f32\[\], the spec says i64"):
        compile_model(tmp_path / "f.onnx", tmp_path / "lib", CompileOptions(dims={"carried0_d0": (1, 8)}))


def ragged_scan() -> onnx.ModelProto:
    """M an input; the state grows by one a step and is also the scan output: the stacked
    slices would change shape from the second iteration on (onnxruntime: "inconsistent shape
    in loop output"), so only a run of one iteration has an answer."""
    body = h.make_graph([h.make_node("Identity", ["c_in"], ["c_out"]),
                         h.make_node("Concat", ["y_in", "one_f"], ["y_out"], axis=0),
                         h.make_node("Identity", ["y_out"], ["scan"])],
                        "body", [vi("i", T.INT64, []), vi("c_in", T.BOOL, []), vi("y_in", T.FLOAT, None)],
                        [vi("c_out", T.BOOL, []), vi("y_out", T.FLOAT, None), vi("scan", T.FLOAT, None)],
                        [h.make_tensor("one_f", T.FLOAT, [1], [1.0])])
    nodes = [h.make_node("Loop", ["M", "", "x"], ["y", "s"], body=body, name="ragged")]
    return _model(nodes, [vi("M", T.INT64, []), vi("x", T.FLOAT, ["N"])], [vi("y", T.FLOAT, None),
                                                                             vi("s", T.FLOAT, None)])


@pytest.mark.parametrize("n", [1, 3])
def test_scan_output_typed_by_its_first_slice_one_build_for_every_m(built, n):
    """M as an input: one build (no per-value build); the scan output's slice dim is the first
    iteration's extent, recorded by the kernel; a later slice of another shape is an error
    naming it, as onnxruntime refuses it, never a ragged or wrong result."""
    path, lib, _ = built("ragged", ragged_scan())
    feeds = {"M": np.array(1, np.int64), "x": np.arange(n, dtype=np.float32)}
    got = lib.run(feeds)
    assert got["s"].shape == (1, n + 1)
    _close(got, ort_run(path, feeds), f"M=1 n={n}")
    with pytest.raises(RuntimeCallError, match=r"every iteration's slice has the first one's extent scan"):
        lib.run({"M": np.array(3, np.int64), "x": np.arange(n, dtype=np.float32)})
