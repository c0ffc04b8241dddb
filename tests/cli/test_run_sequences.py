"""`onnxcc run --inputs` with a sequence input: element K of input NAME is the .npz key NAME.K,
the build takes the sequence's length from the file, outputs are written the same way."""

from __future__ import annotations

import numpy as np
import onnx
from click.testing import CliRunner
from onnx import TensorProto, helper

from onnxcc.cli import main


def test_run_takes_sequence_elements_as_npz_keys(tmp_path):
    nodes = [helper.make_node("ConcatFromSequence", ["s"], ["cat"], axis=0),
             helper.make_node("SequenceInsert", ["s", "cat"], ["s2"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, ["n"])],
                          [helper.make_tensor_value_info("cat", TensorProto.FLOAT, None),
                           helper.make_tensor_sequence_value_info("s2", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    model = tmp_path / "seq.onnx"
    onnx.save(m, model)
    a, b = np.arange(3, dtype=np.float32), np.arange(2, dtype=np.float32) + 10
    np.savez(tmp_path / "in.npz", **{"s.0": a, "s.1": b})
    env = {"ONNXCC_CACHE_DIR": str(tmp_path / "cache")}
    r = CliRunner().invoke(main, ["run", str(model), "--inputs", str(tmp_path / "in.npz"), "--outputs",
                                  str(tmp_path / "out.npz"), "--check"], env=env)
    assert r.exit_code == 0, r.output
    assert "s2.2: max abs diff vs onnxruntime 0 (ok" in r.output
    with np.load(tmp_path / "out.npz") as z:
        assert sorted(z.files) == ["cat", "s2.0", "s2.1", "s2.2"]
        np.testing.assert_array_equal(z["cat"], np.concatenate([a, b]))
        np.testing.assert_array_equal(z["s2.2"], np.concatenate([a, b]))


def test_compile_takes_the_structure_as_a_flag(tmp_path):
    g = helper.make_graph([helper.make_node("SequenceLength", ["s"], ["n"])], "g",
                          [helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("n", TensorProto.INT64, [])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, tmp_path / "len.onnx")
    r = CliRunner().invoke(main, ["compile", str(tmp_path / "len.onnx"), "-o", str(tmp_path / "out"),
                                  "--input-structure", "s=seq:3"])
    assert r.exit_code == 0, r.output
    assert "input s: seq:3" in (tmp_path / "out" / "len.h").read_text()
    r = CliRunner().invoke(main, ["compile", str(tmp_path / "len.onnx"), "-o", str(tmp_path / "bad"),
                                  "--input-structure", "s=three"])
    assert r.exit_code != 0 and "seq:N" in r.output
