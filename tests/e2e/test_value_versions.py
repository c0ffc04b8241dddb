"""Value versions: a version compiled for the VALUE of a small input, checked by the generated
dispatcher on the input's data (passes/specialize_value.py, codegen/link.py)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import onnxcc
from onnxcc.compiler import CompileOptions
from onnxcc.compiler.cache import cache_document
from onnxcc.compiler.value_versions import ValueDependentError
from onnxcc.errors import GuardError, OnnxccError
from onnxcc.testing import ort_run


def _model(nodes, inputs, outputs, opset=18):
    g = h.make_graph(nodes, "g", inputs, outputs)
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)])


@pytest.fixture(scope="module")
def reshape_model(tmp_path_factory):
    m = _model([h.make_node("Reshape", ["x", "shape"], ["y"]), h.make_node("Relu", ["y"], ["z"])],
               [h.make_tensor_value_info("x", T.FLOAT, ["n", 12]), h.make_tensor_value_info("shape", T.INT64, [3])],
               [h.make_tensor_value_info("z", T.FLOAT, None)])
    p = tmp_path_factory.mktemp("vv") / "reshape.onnx"
    onnx.save(m, p)
    return p


def test_generic_refused_names_the_input(reshape_model, tmp_path):
    with pytest.raises(ValueDependentError) as e:
        onnxcc.compile(reshape_model, tmp_path / "a")
    msg = str(e.value)
    assert e.value.inputs == ["shape"]
    assert 'depends on the value of input "shape"' in msg and "--specialize-value shape=" in msg
    assert "\n" not in msg


def test_value_versions_run_and_refuse_other_values(reshape_model, tmp_path):
    values = [[2, 3, 4], [4, 6, 1]]
    art = onnxcc.compile(reshape_model, tmp_path / "a", specialize_value={"shape": values})
    meta = json.loads(art.metadata.read_text())
    assert [v["kind"] for v in meta["versions"]] == ["value", "value"]  # no generic: it cannot be built
    # the value's own needs join the guard: 24 elements means n == 2
    assert [v["guard"] for v in meta["versions"]] == ["shape == [2, 3, 4] & 12*n == 24",
                                                      "shape == [4, 6, 1] & 12*n == 24"]
    assert meta["versions"][0]["value_guards"] == [{"input": "shape", "value": "[2, 3, 4]"}]
    assert any(d.startswith("generic:") for d in meta["metadata"]["dropped_versions"])
    m = onnxcc.load(art.out_dir)
    x = np.random.default_rng(0).standard_normal((2, 12)).astype(np.float32)
    for k, sh in enumerate(values):
        feeds = {"x": x, "shape": np.array(sh, dtype=np.int64)}
        got = m.run(feeds)["z"]
        want = ort_run(reshape_model, feeds)["z"]
        assert got.shape == want.shape and m.last_version == k
        np.testing.assert_array_equal(got, want)  # a reshape + relu is exact
    with pytest.raises(GuardError) as e:  # the same element count, another value: refused, not guessed
        m.run({"x": x, "shape": np.array([2, 4, 3], dtype=np.int64)})
    assert 'input "shape" has another value than the ones compiled ([2, 3, 4] | [4, 6, 1])' in str(e.value)
    with pytest.raises(GuardError, match="no version accepts this call"):  # the value, but 36 elements
        m.run({"x": np.zeros((3, 12), np.float32), "shape": np.array([2, 3, 4], dtype=np.int64)})


def test_value_guard_beside_a_generic_version(tmp_path):
    """A scalar that changes no shape: its value version sits in front of the generic one."""
    m = _model([h.make_node("Mul", ["x", "k"], ["y"])],
               [h.make_tensor_value_info("x", T.FLOAT, ["n"]), h.make_tensor_value_info("k", T.FLOAT, [])],
               [h.make_tensor_value_info("y", T.FLOAT, ["n"])])
    art = onnxcc.compile(m, tmp_path / "a", specialize_value={"k": 2.5})
    lib = onnxcc.load(art.out_dir)
    kinds = [json.loads(art.metadata.read_text())["versions"][i]["kind"] for i in range(lib.num_versions)]
    assert kinds[0] == "value" and kinds[-1] == "generic"
    x = np.arange(5, dtype=np.float32)
    for k, want_version in ((2.5, 0), (3.0, lib.num_versions - 1)):
        y = lib.run({"x": x, "k": np.array(k, dtype=np.float32)})["y"]
        np.testing.assert_allclose(y, x * np.float32(k), rtol=0, atol=0)
        assert lib.last_version == want_version


def test_slice_with_several_value_inputs(tmp_path):
    m = _model([h.make_node("Slice", ["x", "starts", "ends", "axes"], ["y"])],
               [h.make_tensor_value_info("x", T.FLOAT, [4, 10]),
                *(h.make_tensor_value_info(n, T.INT64, [2]) for n in ("starts", "ends", "axes"))],
               [h.make_tensor_value_info("y", T.FLOAT, None)])
    feeds = {"x": np.arange(40, dtype=np.float32).reshape(4, 10), "starts": np.array([1, 2]),
             "ends": np.array([3, -1]), "axes": np.array([0, 1])}
    art = onnxcc.compile(m, tmp_path / "a", specialize_value={k: v for k, v in feeds.items() if k != "x"})
    got = onnxcc.load(art.out_dir).run(feeds)["y"]
    np.testing.assert_array_equal(got, ort_run(m, feeds)["y"])


def test_bad_values_are_one_line_errors(reshape_model, tmp_path):
    for spec, want in (({"shape": [2, 3]}, "(3 elements), the value has 2"),
                       ({"nope": [1]}, "has no input 'nope'"),
                       ({"shape": [2.5, 3, 4]}, "not representable as i64")):
        with pytest.raises(OnnxccError) as e:
            onnxcc.compile(reshape_model, tmp_path / "a", specialize_value=spec)
        assert want in str(e.value) and "\n" not in str(e.value)


def test_cache_key_holds_the_values(reshape_model):
    docs = [cache_document(reshape_model, CompileOptions(specialize_value=v))
            for v in ({"shape": [2, 3, 4]}, {"shape": [4, 3, 2]}, {})]
    assert docs[0] != docs[1] and docs[0] != docs[2]
    assert docs[0]["options"]["specialize_value"] == {"shape": [[2, 3, 4]]}


def test_option_forms_normalize():
    o = CompileOptions(specialize_value={"sr": 16000, "shape": [2, 3, 4], "two": [[1], [2]],
                                         "arr": np.array([1.5, 2], np.float32), "empty": []})
    assert o.specialize_value == {"sr": [[16000]], "shape": [[2, 3, 4]], "two": [[1], [2]],
                                  "arr": [[1.5, 2.0]], "empty": [[]]}


def test_cli_flag_syntax():
    from onnxcc.cli.options import parse_value_specs

    assert parse_value_specs(["shape=2,3,4;4,6,1", "sr=16000", "shape=[1,24]", "axes="]) == {
        "shape": [[2, 3, 4], [4, 6, 1], [1, 24]], "sr": [[16000]], "axes": [[]]}
    assert parse_value_specs(["a=1;b=2.5"]) == {"a": [[1]], "b": [[2.5]]}
    with pytest.raises(OnnxccError, match="expected INPUT=V"):
        parse_value_specs(["shape=2,x"])


# ---- (b) the user's path: `onnxcc run --inputs` and the Session propose value versions ----

def test_run_specialises_on_the_inputs_values(reshape_model, tmp_path):
    from click.testing import CliRunner

    from onnxcc.cli import main

    x = np.random.default_rng(1).standard_normal((2, 12)).astype(np.float32)
    env = {"ONNXCC_CACHE_DIR": str(tmp_path / "cache")}
    for k, sh in enumerate(([3, 8, 1], [3, 8, 1], [6, 4, 1])):
        np.savez(tmp_path / "in.npz", x=x, shape=np.array(sh, dtype=np.int64))
        r = CliRunner().invoke(main, ["run", str(reshape_model), "--inputs", str(tmp_path / "in.npz"),
                                      "--outputs", str(tmp_path / "out.npz"), "--check"], env=env)
        assert r.exit_code == 0, r.output
        notes = [ln for ln in r.stderr.splitlines() if ln.startswith("onnxcc: shapes depend")]
        assert notes == [f'onnxcc: shapes depend on the value of input "shape": specialising on the values given '
                         f"(--specialize-value shape={','.join(map(str, sh))})"]
        assert ("cached build" if k == 1 else "compiled build") in r.stderr  # the value is in the cache key
        assert np.load(tmp_path / "out.npz")["z"].shape == tuple(sh)
        assert "ok" in r.stdout
    r = CliRunner().invoke(main, ["run", str(reshape_model), "--random", "n=2"], env=env)
    assert r.exit_code == 1 and "--specialize-value shape=V" in r.output


def test_session_builds_one_artifact_per_value(reshape_model, tmp_path):
    s = onnxcc.Session(reshape_model, cache=str(tmp_path / "cache"), background=False)
    assert s.base is None and s.value_inputs == ["shape"]
    x = np.arange(24, dtype=np.float32).reshape(2, 12) - 7
    for sh in ([2, 12, 1], [24, 1, 1], [2, 12, 1]):
        y = s.run({"x": x, "shape": np.array(sh, dtype=np.int64)})["z"]
        np.testing.assert_array_equal(y, np.maximum(x, 0).reshape(sh))
    assert s.stats.calls == 3 and s.stats.compiles == 2 and s.stats.hits == 1


def test_range_scalars_through_the_shared_path(tmp_path):
    """Range's three scalars decide its length: the refusal names them, build_for_inputs (what
    run, the Session and the conformance executor use) specialises on all three."""
    from onnxcc.compiler.value_versions import build_for_inputs

    m = _model([h.make_node("Range", ["start", "limit", "delta"], ["y"])],
               [h.make_tensor_value_info(n, T.FLOAT, []) for n in ("start", "limit", "delta")],
               [h.make_tensor_value_info("y", T.FLOAT, None)])
    feeds = {"start": np.float32(1.5), "limit": np.float32(7.0), "delta": np.float32(0.75)}
    notes = []
    art = build_for_inputs(lambda o: onnxcc.compile(m, tmp_path / "a", **o.__dict__), CompileOptions(),
                           lambda names: {n: feeds[n] for n in names}, notes.append)
    assert notes and '"start", "limit", "delta"' in notes[0]
    got = onnxcc.load(art.out_dir).run(feeds)["y"]
    np.testing.assert_array_equal(got, ort_run(m, {k: np.array(v) for k, v in feeds.items()})["y"])


# ---- (c) --value-symbols: size-only int64 inputs read at dispatch, one generic version ----

@pytest.fixture(scope="module")
def sizes_model(tmp_path_factory):
    fill = h.make_tensor("v", T.FLOAT, [1], [1.5])
    m = _model([h.make_node("Reshape", ["x", "shape"], ["y"]), h.make_node("Relu", ["y"], ["z"]),
                h.make_node("ConstantOfShape", ["cshape"], ["c"], value=fill),
                h.make_node("Tile", ["x", "reps"], ["t"])],
               [h.make_tensor_value_info("x", T.FLOAT, ["n", 12]), h.make_tensor_value_info("shape", T.INT64, [3]),
                h.make_tensor_value_info("cshape", T.INT64, [2]), h.make_tensor_value_info("reps", T.INT64, [2])],
               [h.make_tensor_value_info(n, T.FLOAT, None) for n in ("z", "c", "t")])
    p = tmp_path_factory.mktemp("vs") / "sizes.onnx"
    onnx.save(m, p)
    return p


def test_value_symbols_one_generic_version_serves_every_value(sizes_model, tmp_path):
    art = onnxcc.compile(sizes_model, tmp_path / "a", value_symbols=True, divisible=0)
    meta = json.loads(art.metadata.read_text())
    assert [v["kind"] for v in meta["versions"]] == ["generic"]
    assert meta["outputs"][0]["shape"] == ["shape_0", "shape_1", "shape_2"]
    assert meta["data_dims"]["shape_1"] == {"input": "shape", "element": 1}
    lib = onnxcc.load(art.out_dir)
    rng = np.random.default_rng(2)
    for n, sh, cs, reps in ((2, [2, 3, 4], [3, 5], [2, 1]), (3, [9, 4, 1], [1, 32], [1, 3]),
                            (2, [24, 1, 1], [2, 2], [3, 2])):
        feeds = {"x": rng.standard_normal((n, 12)).astype(np.float32), "shape": np.array(sh),
                 "cshape": np.array(cs), "reps": np.array(reps)}
        got, want = lib.run(feeds), ort_run(sizes_model, feeds)
        for k in want:  # copies, a relu and a fill: exact
            np.testing.assert_array_equal(got[k], want[k])
    base = {"x": np.zeros((2, 12), np.float32), "cshape": np.array([1, 1]), "reps": np.array([1, 1])}
    for bad, want in (([2, -1, 12], 'input "shape" element 1: shape_1 = -1, out of range'),
                      ([2, 3, 5], "constraint 12*n == shape_0*shape_1*shape_2 does not hold")):
        with pytest.raises(GuardError) as e:
            lib.run({**base, "shape": np.array(bad)})
        assert want in str(e.value)


def test_value_symbols_leave_inputs_with_value_versions_alone(sizes_model, tmp_path):
    """-1 (infer) is no size: a value version takes it, the other inputs stay symbols."""
    art = onnxcc.compile(sizes_model, tmp_path / "a", value_symbols=True, specialize_value={"shape": [2, -1, 4]})
    lib = onnxcc.load(art.out_dir)
    feeds = {"x": np.arange(24, dtype=np.float32).reshape(2, 12), "shape": np.array([2, -1, 4]),
             "cshape": np.array([2, 7]), "reps": np.array([1, 2])}
    got, want = lib.run(feeds), ort_run(sizes_model, feeds)
    assert json.loads(art.metadata.read_text())["versions"][lib.last_version]["kind"] == "value"
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])


def test_device_targets_refuse_value_guards():
    """A CUDA dispatcher cannot read device memory: value guards are refused at link time."""
    import sympy

    from onnxcc.codegen.c.abi import ArtifactSpec, TensorSig, ValueGuard, VersionSpec
    from onnxcc.codegen.c.link import generate_dispatcher
    from onnxcc.errors import CompileError
    from onnxcc.ir import DType

    spec = ArtifactSpec("vg", [TensorSig("k", DType.i64, (2,))], [TensorSig("y", DType.f32, (2,))], [],
                        versions=[VersionSpec("vg_v0", sympy.true, "k == [1, 2]", {}, 0, "value",
                                              value_guards=[ValueGuard(0, "k", 2, bytes(16), "[1, 2]")])])
    assert "value_guard_holds(0, inputs)" in generate_dispatcher(spec)  # the CPU reads the data
    spec.target = "cuda"
    with pytest.raises(CompileError, match="value versions compare the input's data"):
        generate_dispatcher(spec)


def test_bf16_scalars_take_value_versions(tmp_path):
    """Range over bf16 scalars: the length depends on their values, which a value version folds;
    the guard compares the input's bf16 bits (two bytes), so another value is refused."""
    import ml_dtypes

    bf = ml_dtypes.bfloat16
    names = ["start", "limit", "delta"]
    m = _model([h.make_node("Range", names, ["y"])], [h.make_tensor_value_info(n, T.BFLOAT16, []) for n in names],
               [h.make_tensor_value_info("y", T.BFLOAT16, None)], opset=21)
    art = onnxcc.compile(m, tmp_path / "a", specialize_value={"start": 1.5, "limit": 6.0, "delta": 0.5})
    lib = onnxcc.load(art.out_dir)
    feeds = [np.array(v, bf).view(np.uint16) for v in (1.5, 6.0, 0.5)]  # the loader takes bf16 as its bits
    got = next(iter(lib.run(feeds).values())).view(bf).astype(np.float32)
    np.testing.assert_array_equal(got, np.arange(1.5, 6.0, 0.5, dtype=np.float32))  # exact in bf16
    with pytest.raises(GuardError, match='input "start" has another value'):
        lib.run([np.array(2.0, bf).view(np.uint16), *feeds[1:]])
