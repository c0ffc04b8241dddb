"""A model whose symbol meets a broadcast gets a `SYM == 1` version (specialize's 0/1
rule, kind "one"); the linker must accept that kind (regression: abi.VERSION_KINDS lacked
"one", so compiling the dynamo-exported TransformerEncoderLayer failed in validate)."""

from __future__ import annotations

import json

import numpy as np
from onnx import TensorProto as TP
from onnx import helper as oh

import onnxcc
from onnxcc.testing import ort_run


def test_one_version_links_and_runs(tmp_path):
    g = oh.make_graph([oh.make_node("Add", ["x", "b"], ["y"])], "bcast_one",
                      [oh.make_tensor_value_info("x", TP.FLOAT, ["batch", "seq"]),
                       oh.make_tensor_value_info("b", TP.FLOAT, ["batch", 1])],
                      [oh.make_tensor_value_info("y", TP.FLOAT, ["batch", "seq"])])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    m.ir_version = 8
    onnxcc.compile(m, tmp_path)
    meta = json.loads(next(tmp_path.glob("*.json")).read_text())
    assert "one" in {v["kind"] for v in meta["versions"]}
    model = onnxcc.load(tmp_path)
    rng = np.random.default_rng(0)
    for seq in (1, 5):
        feeds = {"x": rng.standard_normal((3, seq)).astype(np.float32),
                 "b": rng.standard_normal((3, 1)).astype(np.float32)}
        np.testing.assert_allclose(model.run(feeds)["y"], ort_run(m, feeds)["y"], rtol=1e-4, atol=1e-5)
