"""`onnxcc run --inputs x.npz` with string tensors: numpy str arrays in, the outputs checked
against onnxruntime (--check compares strings exactly) and saved as numpy str arrays that
read back without pickle."""

from __future__ import annotations

import numpy as np
import onnx
from click.testing import CliRunner
from onnx import TensorProto as TP
from onnx import helper as h

from onnxcc.cli import main


def test_run_strings_from_npz_and_back(tmp_path):
    g = h.make_graph([h.make_node("StringConcat", ["a", "b"], ["y"]), h.make_node("Equal", ["a", "b"], ["eq"])],
                     "g", [h.make_tensor_value_info(n, TP.STRING, ["N"]) for n in "ab"],
                     [h.make_tensor_value_info("y", TP.STRING, None), h.make_tensor_value_info("eq", TP.BOOL, None)])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 20)])
    m.ir_version = 9
    onnx.save(m, str(tmp_path / "sc.onnx"))
    np.savez(tmp_path / "in.npz", a=np.array(["x", "\u00e9", "z"]), b=np.array(["x", "y", "\u00fc"]))
    r = CliRunner().invoke(main, ["run", str(tmp_path / "sc.onnx"), "--inputs", str(tmp_path / "in.npz"),
                                  "--outputs", str(tmp_path / "out.npz"), "--check"],
                           env={"ONNXCC_CACHE_DIR": str(tmp_path / "cache")})
    assert r.exit_code == 0, r.output
    assert "y: strings equal to onnxruntime's" in r.stdout
    with np.load(tmp_path / "out.npz", allow_pickle=False) as z:
        assert z["y"].tolist() == ["xx", "\u00e9y", "z\u00fc"]
        assert z["eq"].tolist() == [True, False, False]
