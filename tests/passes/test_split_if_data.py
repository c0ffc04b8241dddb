"""An If whose branches differ in rank on a condition computed from a small int64 input (a
voice-activity model's scalar sample rate `sr` picks the branch): the importer types it as
one branch for now, split-if reads the input into a symbol at dispatch and splits on the
condition over it, so one library serves every value (issue 15)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto as T
from onnx import helper as h

from onnxcc import parse_ir, print_ir
from onnxcc.cli import main
from onnxcc.errors import UnsupportedOp
from onnxcc.frontend import load_onnx
from onnxcc.passes import run_pipeline
from onnxcc.testing import ort_run


def _vad() -> onnx.ModelProto:
    """y = ReduceSum(b) * sr, b = Unsqueeze(x, 1) (rank 3) if sr == 16000 else ReduceSum(x, 1) (rank 1)."""
    then_g = h.make_graph([h.make_node("Unsqueeze", ["x", "ax1"], ["t"])], "then", [],
                          [h.make_tensor_value_info("t", T.FLOAT, None)])
    else_g = h.make_graph([h.make_node("ReduceSum", ["x", "ax1"], ["e"], keepdims=0)], "else", [],
                          [h.make_tensor_value_info("e", T.FLOAT, None)])
    nodes = [h.make_node("Equal", ["sr", "k16"], ["is16"]),
             h.make_node("If", ["is16"], ["b"], name="pick", then_branch=then_g, else_branch=else_g),
             h.make_node("Cast", ["sr"], ["srf"], to=T.FLOAT),
             h.make_node("ReduceSum", ["b"], ["s"], keepdims=0),
             h.make_node("Mul", ["s", "srf"], ["y"])]
    inits = [h.make_tensor("ax1", T.INT64, [1], [1]), h.make_tensor("k16", T.INT64, [], [16000])]
    g = h.make_graph(nodes, "vad", [h.make_tensor_value_info("x", T.FLOAT, ["B", "S"]),
                                    h.make_tensor_value_info("sr", T.INT64, [])],
                     [h.make_tensor_value_info("y", T.FLOAT, [])], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_import_types_the_if_as_a_branch_and_split_if_splits_on_the_read_value():
    mod = load_onnx(_vad())
    assert [o.attrs.get("typed_as") for o in mod.functions["main"].walk() if o.name == "onnx.If"] == [0]
    run_pipeline(mod, "split-if")
    funcs = mod.functions
    assert list(funcs) == ["main", "main.if_sr_016000"]
    assert str(funcs["main.if_sr_016000"].guard) == "Eq(sr_0, 16000)"
    assert str(funcs["main"].guard) == "Ne(sr_0, 16000)"
    assert funcs["main"].attrs["value_symbols"] == ["sr_0=sr[0]"]
    assert not any(o.name == "onnx.If" for f in funcs.values() for o in f.walk())
    # the then_branch version has rank 3 inside, the generic one rank 1; both return a scalar
    text = print_ir(mod)
    assert "onnx.Unsqueeze" in text and "(f32[B, 1, S])" in text
    assert parse_ir(text) is not None  # the split module prints and parses back


def test_textual_if_on_data_without_the_importers_typing_is_refused():
    text = """module @m {
  sym n in [1, 100]
  func @main(%x: f32[n], %c: bool[], %ax: i64[1]) -> (f32[n]) {
    %0 = onnx.If(%c, %x, %ax) (
      ^(%a: f32[n], %a1: i64[1]) {
        %t = onnx.Unsqueeze(%a, %a1) : (f32[1, n])
        yield %t
      },
      ^(%b: f32[n], %b1: i64[1]) {
        yield %b
      }
    ) : (f32[n])
    return %0
  }
}
"""
    with pytest.raises(UnsupportedOp, match="rank 2 in then_branch and 1 in else_branch, and the condition "
                                            "depends on data"):
        run_pipeline(parse_ir(text), "split-if")


@pytest.fixture(scope="module")
def vad_file(tmp_path_factory):
    d = tmp_path_factory.mktemp("vad")
    onnx.save(_vad(), str(d / "vad.onnx"))
    return d


def _run(d, tmp_path, sr: int, *extra: str):
    x = np.random.default_rng(sr % 97).standard_normal((2, 7)).astype(np.float32)
    feeds = {"x": x, "sr": np.array(sr, np.int64)}
    np.savez(tmp_path / "in.npz", **feeds)
    r = CliRunner().invoke(main, ["run", str(d / "vad.onnx"), "--inputs", str(tmp_path / "in.npz"),
                                  "--outputs", str(tmp_path / "out.npz"), "--cache-dir", str(d / "cache"),
                                  *extra])
    return r, feeds


@pytest.mark.parametrize("sr", [16000, 8000, 44100])
def test_every_value_through_onnxcc_run_matches_onnxruntime(vad_file, tmp_path, sr):
    r, feeds = _run(vad_file, tmp_path, sr, "--check")
    assert r.exit_code == 0, r.output
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["y"], ort_run(_vad(), feeds)["y"], rtol=1e-5)


def test_a_value_outside_the_symbols_range_is_refused_by_name(vad_file, tmp_path):
    r, _ = _run(vad_file, tmp_path, 0)
    assert r.exit_code == 1
    assert 'input "sr" element 0: sr_0 = 0, out of range [1, 2147483647]' in r.output


def _flag() -> onnx.ModelProto:
    """The same If on a bool input: no symbol can hold it, so value versions must."""
    m = _vad()
    g = m.graph
    del g.node[0]  # the Equal: the If reads the bool input itself
    g.node[0].input[0] = "flag"
    del g.node[1:]
    g.node.append(h.make_node("ReduceSum", ["b"], ["y"], keepdims=0))
    g.input[1].CopyFrom(h.make_tensor_value_info("flag", T.BOOL, []))
    return m


def test_if_on_a_bool_input_is_named_and_built_for_its_value(tmp_path):
    from onnxcc.compiler import compile_model
    from onnxcc.errors import ValueDependentError

    m = _flag()
    with pytest.raises(ValueDependentError, match='input "flag"'):
        compile_model(m, tmp_path / "a", emit="lib")
    onnx.save(m, str(tmp_path / "flag.onnx"))
    for flag in (True, False):
        feeds = {"x": np.random.default_rng(1).standard_normal((2, 5)).astype(np.float32), "flag": np.array(flag)}
        np.savez(tmp_path / "in.npz", **feeds)
        r = CliRunner().invoke(main, ["run", str(tmp_path / "flag.onnx"), "--inputs", str(tmp_path / "in.npz"),
                                      "--outputs", str(tmp_path / "out.npz"), "--cache-dir", str(tmp_path / "c")])
        assert r.exit_code == 0, r.output
        np.testing.assert_allclose(np.load(tmp_path / "out.npz")["y"], ort_run(m, feeds)["y"], rtol=1e-5)


def test_a_target_whose_dispatcher_cannot_read_inputs_refuses_at_split_if():
    """CUDA's inputs are device memory: the If is refused by split-if, naming it and the
    input, not when the dispatcher is generated (after the whole compile)."""
    from onnxcc.passes.split_if import SplitIfPass

    mod = load_onnx(_vad())
    with pytest.raises(UnsupportedOp, match=r"'pick'.* computed from the value of input \"sr\".*--target cpu"):
        run_pipeline(mod, [SplitIfPass(read_inputs=False)])
    assert "sr_0" not in print_ir(mod)  # nothing was read into a symbol


def test_cuda_compile_refuses_the_data_if_early(tmp_path):
    from onnxcc.compiler import CompileOptions, compile_model

    onnx.save(_vad(), tmp_path / "vad.onnx")
    with pytest.raises(UnsupportedOp, match=r"'pick'.*device memory"):
        compile_model(tmp_path / "vad.onnx", tmp_path / "out", CompileOptions(target="cuda"), emit="ir")
