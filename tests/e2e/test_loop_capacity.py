"""While loops on a data condition that append to their state with nothing bounding it (no trip
count, no count the shape rules prove, no --dim): compiled into the one library with a
capacity the dispatcher doubles per call (ops/loop_capacity.py, codegen/c/capacity.py),
instead of refused. Through the user's path, `onnxcc run MODEL --inputs X.npz --check`
(onnxruntime agrees: the check's rtol 1e-4 / atol 1e-5; the values here are small integers
in f32, so exact), at inputs making 0, 1, capacity-1, capacity, capacity+1 and 5 x capacity
iterations; the limit's error names the loop node, the value and the capacity reached."""

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
from onnxcc.errors import RuntimeCallError
from onnxcc.testing import ort_run

DATA = Path(__file__).resolve().parents[1] / "data" / "loops"
CAP = 4  # --loop-capacity: small, so the counts below cross it and double it several times
COUNTS = [0, 1, CAP - 1, CAP, CAP + 1, 5 * CAP]


def appended_while() -> onnx.ModelProto:
    """`v = x; n = 0; while max(v) < lim: v = cat([v, v[-1:] + 1]); n += 1`: no trip count
    (M is ""), the condition is data, the state grows by one element per iteration, a second
    carried value (the counter) keeps its shape; the result is computed on after the loop."""
    vi = h.make_tensor_value_info
    body = h.make_graph(
        [h.make_node("Slice", ["v_in", "m1", "big", "ax0"], ["last"]),
         h.make_node("Add", ["last", "one"], ["step"]),
         h.make_node("Concat", ["v_in", "step"], ["v_out"], axis=0),
         h.make_node("Add", ["n_in", "one"], ["n_out"]),
         h.make_node("ReduceMax", ["v_out"], ["mx"], keepdims=0),
         h.make_node("Less", ["mx", "lim"], ["c_out"])],
        "body", [vi("i", T.INT64, []), vi("c_in", T.BOOL, []), vi("v_in", T.FLOAT, None), vi("n_in", T.FLOAT, [])],
        [vi("c_out", T.BOOL, []), vi("v_out", T.FLOAT, None), vi("n_out", T.FLOAT, [])],
        [h.make_tensor("m1", T.INT64, [1], [-1]), h.make_tensor("big", T.INT64, [1], [2**62]),
         h.make_tensor("ax0", T.INT64, [1], [0]), h.make_tensor("one", T.FLOAT, [], [1.0])])
    nodes = [h.make_node("ReduceMax", ["x"], ["mx0"], keepdims=0), h.make_node("Less", ["mx0", "lim"], ["c0"]),
             h.make_node("Loop", ["", "c0", "x", "zero"], ["v", "n"], body=body, name="grow"),
             h.make_node("Mul", ["v", "two"], ["v2"])]
    g = h.make_graph(nodes, "appended", [vi("x", T.FLOAT, ["N"]), vi("lim", T.FLOAT, [])],
                     [vi("v2", T.FLOAT, None), vi("n", T.FLOAT, [])],
                     [h.make_tensor("zero", T.FLOAT, [], [0.0]), h.make_tensor("two", T.FLOAT, [], [2.0])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def appended_feeds(k: int) -> dict:
    """Inputs making exactly k iterations: v starts [0], step j appends j, stops at j = lim."""
    return {"x": np.zeros(1, np.float32), "lim": np.array(float(k), np.float32)}


def greedy_feeds(k: int) -> dict:
    """tests/data/loops/greedy.onnx (`while out.sum() < lim: out = cat([out, out[-1:] + 1])`)
    from one zero row: after j steps the sum is j (j + 1), so lim = k (k + 1) makes k."""
    return {"x": np.zeros((1, 2), np.float32), "lim": np.array(float(k * (k + 1)), np.float32)}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("loopcap")
    onnx.save(appended_while(), d / "appended.onnx")
    return d, {"appended": (d / "appended.onnx", appended_feeds, "v2"),
               "greedy": (DATA / "greedy.onnx", greedy_feeds, "y")}


@pytest.mark.parametrize("k", COUNTS)
@pytest.mark.parametrize("which", ["appended", "greedy"])
def test_onnxcc_run_check_at_every_capacity_edge(models, which, k):
    d, table = models
    path, feeds_of, out = table[which]
    feeds = feeds_of(k)
    npz = d / f"{which}_{k}.npz"
    np.savez(npz, **feeds)
    r = CliRunner().invoke(main, ["run", str(path), "--inputs", str(npz), "--outputs", str(d / f"o_{which}_{k}.npz"),
                                  "--cache-dir", str(d / "cache"), "--loop-capacity", str(CAP), "--check"])
    assert r.exit_code == 0, r.output
    got = np.load(d / f"o_{which}_{k}.npz")[out]
    want = ort_run(path, feeds)[out]
    assert got.shape == want.shape == (1 + k,) + want.shape[1:]  # k iterations ran
    np.testing.assert_array_equal(got, want)


@pytest.fixture(scope="module")
def limited(tmp_path_factory):
    """A build whose capacity may grow from 4 to 16 rows, no further."""
    d = tmp_path_factory.mktemp("loopcap_limit")
    onnx.save(appended_while(), d / "a.onnx")
    onnxcc.compile(d / "a.onnx", d / "lib", name="appended", loop_capacity=(4, 16))
    return d / "a.onnx", onnxcc.load(d / "lib")


def test_growth_up_to_the_limit_runs(limited):
    path, lib = limited
    for k in (15, 16):  # 1 + 16 rows: the initial extent plus the full capacity
        got, want = lib.run(appended_feeds(k)), ort_run(path, appended_feeds(k))
        for name in want:
            np.testing.assert_array_equal(got[name], want[name])


def test_growth_past_the_limit_names_the_loop_the_value_and_the_capacity(limited):
    _, lib = limited
    with pytest.raises(RuntimeCallError, match=r'node "grow" loop-carried value 0 dim 0 \(carried0_d0\): the run '
                                               r"needs more than the capacity limit of this build, 16 rows"
                                               r".*--loop-capacity"):
        lib.run(appended_feeds(17))
    # the thread's capacity starts over: the next call runs (and doubles again)
    assert lib.run(appended_feeds(9))["v2"].shape == (10,)


def test_a_bound_that_is_known_gets_no_capacity(tmp_path):
    """Static and symbolic bounds are unchanged: a loop whose growth is bounded by its trip
    count keeps init + trips x growth and no capacity symbol."""
    from test_loop_carried_native import grow_by_dim  # (tests/e2e on sys.path under pytest)

    onnx.save(grow_by_dim(), tmp_path / "g.onnx")
    onnxcc.compile(tmp_path / "g.onnx", tmp_path / "lib", name="g")
    assert "__cap" not in (tmp_path / "lib" / "g.json").read_text()
    assert "capacity_exceeded" not in (tmp_path / "lib" / "g_dispatch.c").read_text()


def summed_while() -> onnx.ModelProto:
    """appended_while's loop with only sums of its results as outputs: no output's size
    depends on the capacity, so the caller-allocated NAME_run re-runs with a larger one."""
    m = appended_while()
    g = m.graph
    g.node.append(h.make_node("ReduceSum", ["v2"], ["total"], keepdims=0))
    del g.output[:]
    g.output.extend([h.make_tensor_value_info("total", T.FLOAT, []), h.make_tensor_value_info("n", T.FLOAT, [])])
    return m


def test_caller_allocated_run_grows_when_no_output_depends_on_the_capacity(tmp_path):
    onnx.save(summed_while(), tmp_path / "s.onnx")
    onnxcc.compile(tmp_path / "s.onnx", tmp_path / "lib", name="summed", loop_capacity=(2, 4096))
    meta = (tmp_path / "lib" / "summed.json").read_text()
    assert '"run_grows_outputs": false' in meta
    lib = onnxcc.load(tmp_path / "lib")
    for k in (0, 2, 3, 100):
        out = {"total": np.zeros((), np.float32), "n": np.zeros((), np.float32)}
        lib.run(appended_feeds(k), out=out)  # the caller's buffers: NAME_run itself
        want = ort_run(tmp_path / "s.onnx", appended_feeds(k))
        assert float(out["n"]) == k
        np.testing.assert_array_equal(out["total"], want["total"])


# ---- torch.jit.script while loops exported by torch.onnx (models/export_loops.py) ---------


@pytest.fixture(scope="module")
def torch_libs(tmp_path_factory):
    d = tmp_path_factory.mktemp("loopcap_torch")
    out = {}
    for name in ("decode", "collect"):
        onnxcc.compile(DATA / f"{name}.onnx", d / name, name=name)  # the default capacity, 16
        out[name] = onnxcc.load(d / name)
    return out


@pytest.mark.parametrize("ids,stop", [([[3, 5]], 0), ([[3, 5]], 4), ([[3, 5]], 9), ([[1, 2, 3], [4, 5, 6]], 4)])
def test_torch_greedy_token_decode(torch_libs, ids, stop):
    """`while ids[0, -1] != stop and ids.size(1) < 40: ids = cat([ids, argmax(...)], 1)`: the
    state grows along dim 1 (up to 40 tokens: past the first capacity of 16 and of 32)."""
    feeds = {"x": np.array(ids, np.int64), "stop": np.array(stop, np.int64)}
    got, want = torch_libs["decode"].run(feeds), ort_run(DATA / "decode.onnx", feeds)
    assert got["y"].shape == want["y"].shape
    np.testing.assert_array_equal(got["y"], want["y"])


@pytest.mark.parametrize("n,lim", [(1, 0.1), (2, 3.0), (1, 1e4), (3, 1e7)])
def test_torch_while_growing_two_states_one_from_empty(torch_libs, n, lim):
    """Rows appended to x and a list of sums that starts with 0 elements (rtol 1e-5: f32
    sums in another order)."""
    feeds = {"x": np.full((n, 2), 0.1, np.float32), "lim": np.array(lim, np.float32)}
    got, want = torch_libs["collect"].run(feeds), ort_run(DATA / "collect.onnx", feeds)
    for k in ("y", "s"):
        assert got[k].shape == want[k].shape
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5)


def test_inspect_shows_the_capacity(tmp_path):
    onnx.save(appended_while(), tmp_path / "a.onnx")
    onnxcc.compile(tmp_path / "a.onnx", tmp_path / "lib", name="appended", loop_capacity=(4, 16))
    r = CliRunner().invoke(main, ["inspect", str(tmp_path / "lib")])
    assert r.exit_code == 0, r.output
    assert "sym carried0_d0__cap in [1, 2147483647]  (capacity of node \"grow\" loop-carried value 0 dim 0" in r.output
    assert "loop capacity: set by the dispatcher, 4 rows, doubled while a run needs more, up to 16" in r.output
