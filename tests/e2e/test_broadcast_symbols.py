"""Broadcast between independently symbolic dims (issue 15): `a[N] + b[K]` runs at N == K,
N == 1 and K == 1 as onnxruntime does, each call on the version typed for it, and a call
no broadcast allows is refused naming the inputs, dims and constraint."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto as TP
from onnx import helper as oh

import onnxcc
from onnxcc.cli import main
from onnxcc.errors import GuardError
from onnxcc.testing import ort_run

CASES = [(5, 5), (5, 1), (1, 5), (1, 1)]


def _model(op: str = "Add") -> onnx.ModelProto:
    g = oh.make_graph([oh.make_node(op, ["a", "b"], ["y"], name="add")], "bcast_sym",
                      [oh.make_tensor_value_info("a", TP.FLOAT, ["N"]),
                       oh.make_tensor_value_info("b", TP.FLOAT, ["K"])],
                      [oh.make_tensor_value_info("y", TP.FLOAT, None)])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _feeds(n: int, k: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(n * 10 + k)
    return {"a": rng.standard_normal(n).astype(np.float32), "b": rng.standard_normal(k).astype(np.float32)}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    d = tmp_path_factory.mktemp("bcast")
    m = _model()
    onnx.save(m, str(d / "bcast.onnx"))
    onnxcc.compile(m, d / "art", name="bcast")
    return d, m, onnxcc.load(d / "art")


@pytest.mark.parametrize("n,k", CASES)
def test_matches_onnxruntime(built, n, k):
    _, m, lib = built
    feeds = _feeds(n, k)
    got = lib.run(feeds)["y"]
    want = ort_run(m, feeds)["y"]
    assert got.shape == want.shape == (max(n, k),)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)


def test_each_case_runs_its_own_version(built):
    d, _, lib = built
    meta = json.loads((d / "art" / "bcast.json").read_text())
    guards = [v["guard"] for v in meta["versions"]]
    # the generic body indexes both inputs alike: it may only run where N == K
    assert guards[-1] == "N == K"
    assert "K == 1 | N == 1 | N == K" in [c["text"] for c in meta["constraints"]]
    ran = {}
    for n, k in CASES[:3]:
        lib.run(_feeds(n, k))
        ran[(n, k)] = guards[lib.last_version]
    assert ran == {(5, 5): "N == K", (5, 1): "K == 1", (1, 5): "N == 1"}
    # the output's signature covers every version: max(N, K)
    assert meta["outputs"][0]["shape"] == ["Max(K, N)"]


def test_incompatible_call_names_inputs_and_constraint(built):
    _, _, lib = built
    with pytest.raises(GuardError) as e:
        lib.run(_feeds(5, 3))
    assert str(e.value).startswith('constraint K == 1 | N == 1 | N == K does not hold (N = 5 from input "a" dim 0; '
                                   'K = 3 from input "b" dim 0), needed by node "add"')


@pytest.mark.parametrize("n,k", [(5, 5), (5, 1), (1, 5)])
def test_through_onnxcc_run(built, tmp_path, n, k):
    d, m, _ = built
    feeds = _feeds(n, k)
    np.savez(tmp_path / "in.npz", **feeds)
    r = CliRunner().invoke(main, ["run", str(d / "bcast.onnx"), "--inputs", str(tmp_path / "in.npz"),
                                  "--outputs", str(tmp_path / "out.npz"), "--cache-dir", str(d / "cache"),
                                  "--check"])
    assert r.exit_code == 0, r.output
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["y"], ort_run(m, feeds)["y"], rtol=1e-6, atol=0)


def test_incompatible_call_through_onnxcc_run(built, tmp_path):
    d, _, _ = built
    np.savez(tmp_path / "in.npz", **_feeds(5, 3))
    r = CliRunner().invoke(main, ["run", str(d / "bcast.onnx"), "--inputs", str(tmp_path / "in.npz"),
                                  "--cache-dir", str(d / "cache")])
    assert r.exit_code == 1
    assert "constraint K == 1 | N == 1 | N == K does not hold" in r.output
    assert 'input "b" dim 0' in r.output


def _folding_model() -> onnx.ModelProto:
    """Ops canonicalize would fold with N == K: Expand(a, Shape(b)) is typed f32[N] (an
    identity), Shape(a + b) the constant [N]. The 1-versions must come from the unfolded graph."""
    nodes = [oh.make_node("Shape", ["b"], ["sb"]), oh.make_node("Expand", ["a", "sb"], ["y"]),
             oh.make_node("Add", ["a", "b"], ["t"]), oh.make_node("Shape", ["t"], ["s"])]
    g = oh.make_graph(nodes, "bcast_fold", [oh.make_tensor_value_info("a", TP.FLOAT, ["N"]),
                                            oh.make_tensor_value_info("b", TP.FLOAT, ["K"])],
                      [oh.make_tensor_value_info("y", TP.FLOAT, None), oh.make_tensor_value_info("s", TP.INT64, None)])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_versions_do_not_inherit_folds_made_with_the_equality(tmp_path):
    m = _folding_model()
    onnxcc.compile(m, tmp_path / "art", name="fold")
    lib = onnxcc.load(tmp_path / "art")
    for n, k in CASES:
        feeds = _feeds(n, k)
        got, want = lib.run(feeds), ort_run(m, feeds)
        for name in ("y", "s"):
            assert got[name].shape == want[name].shape, (n, k, name)
            np.testing.assert_array_equal(got[name], want[name])
    with pytest.raises(GuardError, match="K == 1 \\| N == 1 \\| N == K does not hold"):
        lib.run(_feeds(5, 3))
