"""Run-time symbols bound mid-run: NonZero's count computed on by later ops (Transpose,
Gather, ReduceSum, TopK), through onnxcc.compile + onnxcc.load and through `onnxcc run`,
against onnxruntime (integer results: exact; floats: rtol 1e-5)."""

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
from onnxcc.errors import RuntimeCallError
from onnxcc.testing import ort_run


def _chain_model() -> onnx.ModelProto:
    """nz = NonZero(x) [2, n]; its columns index y; the sum, the transposed indices and the
    top-1 of the gathered values are all computed on the true n."""
    one = oh.make_tensor("one", TP.INT64, [], [1])
    k1 = oh.make_tensor("k1", TP.INT64, [1], [1])
    nodes = [
        oh.make_node("NonZero", ["x"], ["nz"]),
        oh.make_node("Transpose", ["nz"], ["nzt"]),
        oh.make_node("ReduceSum", ["nz"], ["s"], keepdims=0),
        oh.make_node("Gather", ["nz", "one"], ["cols"], axis=0),
        oh.make_node("Gather", ["y", "cols"], ["g"], axis=0),
        oh.make_node("Mul", ["g", "g"], ["g2"]),
        oh.make_node("TopK", ["g2", "k1"], ["tv", "ti"], axis=0),
    ]
    outs = [("nzt", TP.INT64), ("s", TP.INT64), ("g2", TP.FLOAT), ("tv", TP.FLOAT), ("ti", TP.INT64)]
    g = oh.make_graph(nodes, "chain", [oh.make_tensor_value_info("x", TP.FLOAT, ["N", "M"]),
                                       oh.make_tensor_value_info("y", TP.FLOAT, ["M"])],
                      [oh.make_tensor_value_info(n, t, None) for n, t in outs], [one, k1])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _feeds(shape, density, seed):
    rng = np.random.default_rng(seed)
    x = (rng.random(shape) < density) * rng.standard_normal(shape)
    x = x.astype(np.float32)
    if not x.any():  # at least one nonzero: TopK's k = 1 needs it
        x.flat[-1] = 1.5
    return {"x": x, "y": rng.standard_normal(shape[1]).astype(np.float32)}


def _same(got: dict, want: dict) -> None:
    assert list(got) == list(want)
    for name, w in want.items():
        assert got[name].shape == w.shape, f"{name}: shape {got[name].shape} != {w.shape}"
        if w.dtype.kind == "f":
            np.testing.assert_allclose(got[name], w, rtol=1e-5, atol=1e-6, err_msg=name)
        else:
            np.testing.assert_array_equal(got[name], w, err_msg=name)


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    d = tmp_path_factory.mktemp("chain")
    onnx.save(_chain_model(), d / "chain.onnx")
    onnxcc.compile(d / "chain.onnx", d / "lib", name="chain")
    return d, onnxcc.load(d / "lib")


@pytest.mark.parametrize("shape,density", [((3, 4), 0.4), ((1, 1), 1.0), ((7, 5), 0.1), ((16, 9), 0.9)])
def test_nonzero_chain_computes_on_the_true_count(chain, shape, density):
    d, lib = chain
    feeds = _feeds(shape, density, seed=shape[0])
    _same(lib.run(feeds), ort_run(d / "chain.onnx", feeds))


def test_nonzero_chain_metadata_names_the_runtime_symbol(chain):
    d, _ = chain
    meta = json.loads((d / "lib" / "chain.json").read_text())
    assert meta["run_dims"] == {"nonzero": "M*N"} and meta["late_dims"] == ["nonzero"]
    by_name = {t["name"]: t for t in meta["outputs"]}
    assert by_name["nzt"]["run_determined"] == ["nonzero"]
    assert by_name["nzt"]["run_layout"] == "prefix"
    header = (d / "lib" / "chain.h").read_text()
    assert "bound mid-run" in header


def test_nonzero_chain_refuses_topk_past_the_count(chain):
    """All zeros: n = 0 < k = 1. onnxruntime fails too; onnxcc must refuse, not read garbage."""
    _, lib = chain
    feeds = {"x": np.zeros((2, 3), np.float32), "y": np.ones(3, np.float32)}
    with pytest.raises(RuntimeCallError):
        lib.run(feeds)


def test_nonzero_chain_through_onnxcc_run(chain, tmp_path):
    d, _ = chain
    feeds = _feeds((5, 6), 0.5, seed=3)
    np.savez(tmp_path / "in.npz", **feeds)
    r = CliRunner().invoke(main, ["run", str(d / "chain.onnx"), "--inputs", str(tmp_path / "in.npz"),
                                  "--outputs", str(tmp_path / "out.npz"), "--cache-dir", str(tmp_path / "cache"),
                                  "--check"])
    assert r.exit_code == 0, r.output
    got = dict(np.load(tmp_path / "out.npz"))
    _same({k: got[k] for k in ("nzt", "s", "g2", "tv", "ti")}, ort_run(d / "chain.onnx", feeds))


def test_empty_count_gives_empty_results(tmp_path):
    """NonZero of all zeros -> [2, 0]; Compress with nothing kept -> [0]; both computed on
    (a sum, a negation, a mean)."""
    nodes = [oh.make_node("NonZero", ["x"], ["nz"]), oh.make_node("ReduceSum", ["nz"], ["s"], keepdims=0),
             oh.make_node("Compress", ["x", "c"], ["cx"], axis=1), oh.make_node("Neg", ["cx"], ["ncx"]),
             oh.make_node("Cast", ["nz"], ["nzf"], to=TP.FLOAT),  # the mean of nothing is 0 (onnxruntime)
             oh.make_node("ReduceMean", ["nzf"], ["mean"], keepdims=0)]
    g = oh.make_graph(nodes, "empty", [oh.make_tensor_value_info("x", TP.FLOAT, ["N", "M"]),
                                       oh.make_tensor_value_info("c", TP.BOOL, ["M"])],
                      [oh.make_tensor_value_info(n, t, None) for n, t in
                       (("nz", TP.INT64), ("s", TP.INT64), ("ncx", TP.FLOAT), ("mean", TP.FLOAT))])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, tmp_path / "e.onnx")
    onnxcc.compile(tmp_path / "e.onnx", tmp_path / "lib", name="empty")
    lib = onnxcc.load(tmp_path / "lib")
    for x, c in ((np.zeros((2, 3), np.float32), np.zeros(3, bool)),
                 (np.arange(6, dtype=np.float32).reshape(2, 3), np.array([True, False, True]))):
        feeds = {"x": x, "c": c}
        _same(lib.run(feeds), ort_run(tmp_path / "e.onnx", feeds))


def test_inspect_shows_the_runtime_symbol(chain):
    d, _ = chain
    r = CliRunner().invoke(main, ["inspect", str(d / "lib")])
    assert r.exit_code == 0, r.output
    assert "sym nonzero in [0, " in r.output
    assert "run-time: bound mid-run (later kernels compute on it); buffers sized for at most M*N" in r.output


def test_constraint_on_a_runtime_symbol_is_checked_when_it_is_bound(tmp_path):
    """g[nonzero] + z[K] needs nonzero == K: the dispatcher cannot check it before the run;
    the kernel does, right after counting, and the error names the constraint."""
    one = oh.make_tensor("one", TP.INT64, [], [1])
    nodes = [oh.make_node("NonZero", ["x"], ["nz"]), oh.make_node("Gather", ["nz", "one"], ["cols"], axis=0),
             oh.make_node("Gather", ["y", "cols"], ["g"], axis=0), oh.make_node("Add", ["g", "z"], ["o"])]
    g = oh.make_graph(nodes, "bc", [oh.make_tensor_value_info("x", TP.FLOAT, ["N", "M"]),
                                    oh.make_tensor_value_info("y", TP.FLOAT, ["M"]),
                                    oh.make_tensor_value_info("z", TP.FLOAT, ["K"])],
                      [oh.make_tensor_value_info("o", TP.FLOAT, None)], [one])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, tmp_path / "bc.onnx")
    onnxcc.compile(tmp_path / "bc.onnx", tmp_path / "lib", name="bc", specialize_one=False)
    lib = onnxcc.load(tmp_path / "lib")
    x = np.array([[0, 1, 2], [3, 0, 0]], np.float32)
    y = np.arange(3, dtype=np.float32) + 1
    feeds = {"x": x, "y": y, "z": np.full(3, 0.5, np.float32)}
    _same(lib.run(feeds), ort_run(tmp_path / "bc.onnx", feeds))
    with pytest.raises(RuntimeCallError, match=r"nonzero == K"):
        lib.run({"x": x, "y": y, "z": np.full(2, 0.5, np.float32)})
    header = (tmp_path / "lib" / "bc.h").read_text()
    assert "Checked by the kernel when they are bound" in header and "nonzero == K" in header


def test_argmax_over_an_empty_runtime_dim_is_refused(tmp_path):
    """ArgMax of nothing has no answer (onnxruntime fails): a clear error, never index 0."""
    one = oh.make_tensor("one", TP.INT64, [], [1])
    nodes = [oh.make_node("NonZero", ["x"], ["nz"]), oh.make_node("Gather", ["nz", "one"], ["c"], axis=0),
             oh.make_node("ArgMax", ["c"], ["am"], keepdims=0)]
    g = oh.make_graph(nodes, "am", [oh.make_tensor_value_info("x", TP.FLOAT, ["N", "M"])],
                      [oh.make_tensor_value_info("am", TP.INT64, None)], [one])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 18)])
    m.ir_version = 8
    onnx.save(m, tmp_path / "am.onnx")
    onnxcc.compile(tmp_path / "am.onnx", tmp_path / "lib", name="am")
    lib = onnxcc.load(tmp_path / "lib")
    feeds = {"x": np.array([[0, 2, 0], [1, 1, 0]], np.float32)}
    _same(lib.run(feeds), ort_run(tmp_path / "am.onnx", feeds))
    with pytest.raises(RuntimeCallError, match="code 4"):
        lib.run({"x": np.zeros((2, 3), np.float32)})


def test_a_count_over_runtime_sized_values(tmp_path):
    """Unique of NonZero's (transposed, flattened) indices: a run-time symbol whose bound is
    another one's (2 * nonzero <= 2*N*M); views and reshapes of run-time sized values."""
    nodes = [oh.make_node("NonZero", ["x"], ["nz"]), oh.make_node("Transpose", ["nz"], ["t"]),
             oh.make_node("Reshape", ["t", "shp"], ["r"]), oh.make_node("Neg", ["r"], ["nr"]),
             oh.make_node("Reshape", ["nr", "shp2"], ["r2"]), oh.make_node("Mul", ["r2", "r2"], ["sq"]),
             oh.make_node("Unique", ["r"], ["u", "ui", "uv", "uc"])]
    inits = [oh.make_tensor("shp", TP.INT64, [1], [-1]), oh.make_tensor("shp2", TP.INT64, [2], [-1, 1])]
    outs = [("nr", TP.INT64), ("sq", TP.INT64), ("u", TP.INT64), ("ui", TP.INT64), ("uv", TP.INT64),
            ("uc", TP.INT64)]
    g = oh.make_graph(nodes, "cc", [oh.make_tensor_value_info("x", TP.FLOAT, ["N", "M"])],
                      [oh.make_tensor_value_info(n, t, None) for n, t in outs], inits)
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, tmp_path / "cc.onnx")
    onnxcc.compile(tmp_path / "cc.onnx", tmp_path / "lib", name="cc")
    lib = onnxcc.load(tmp_path / "lib")
    for x in (np.zeros((2, 3), np.float32), np.array([[0, 2, 0], [1, 1, 0]], np.float32), np.eye(4, dtype=np.float32)):
        feeds = {"x": x}
        _same(lib.run(feeds), ort_run(tmp_path / "cc.onnx", feeds))
