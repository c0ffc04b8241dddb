"""Regression tests for what the fuzzer found (issue 17), each once an internal error."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

import onnxcc
from onnxcc.cli import main
from onnxcc.errors import RuntimeCallError
from onnxcc.testing_c import save_graph

vi = helper.make_tensor_value_info


def _save(path, nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return save_graph(g, path)


def _ir(path) -> tuple[int, list[str]]:
    res = CliRunner().invoke(main, ["ir", str(path)])
    return res.exit_code, res.stderr.strip().splitlines()


def test_scan_num_scan_inputs_huge(tmp_path):
    """ir seed 18, scan_model attr_value 18000379: num_scan_inputs 2**40 was a MemoryError."""
    body = helper.make_graph([helper.make_node("Add", ["s", "xi"], ["s2"]),
                              helper.make_node("Identity", ["s2"], ["o"])],
                             "body", [vi("s", TensorProto.FLOAT, [2]), vi("xi", TensorProto.FLOAT, [2])],
                             [vi("s2", TensorProto.FLOAT, [2]), vi("o", TensorProto.FLOAT, [2])])
    node = helper.make_node("Scan", ["s0", "xs"], ["sN", "os"], name="scan", body=body, num_scan_inputs=2**40)
    p = _save(tmp_path / "m.onnx", [node], [vi("s0", TensorProto.FLOAT, [2]), vi("xs", TensorProto.FLOAT, [3, 2])],
              [vi("sN", TensorProto.FLOAT, [2]), vi("os", TensorProto.FLOAT, [3, 2])])
    code, err = _ir(p)
    assert code == 1 and len(err) == 1, err
    assert 'node "scan" (Scan): num_scan_inputs 1099511627776 out of range [1, 2]' in err[0]


def test_split_num_outputs_not_the_output_count(tmp_path):
    """num_outputs 2**40 on a one-output Split was `shape rule failed: MemoryError`."""
    p = _save(tmp_path / "m.onnx", [helper.make_node("Split", ["x"], ["y"], name="sp", num_outputs=2**40)],
              [vi("x", TensorProto.FLOAT, [4])], [vi("y", TensorProto.FLOAT, None)])
    code, err = _ir(p)
    assert code == 1 and len(err) == 1, err
    assert "num_outputs is 1099511627776, but the node has 1 outputs" in err[0] and "shape rule failed" not in err[0]


def test_output_too_big_to_allocate(tmp_path):
    """ConstantOfShape([2**40]): the loader's np.empty raised MemoryError (exit 70 from `run`)."""
    s = numpy_helper.from_array(np.array([2**40], np.int64), "s")
    p = _save(tmp_path / "m.onnx", [helper.make_node("ConstantOfShape", ["s"], ["y"])], [],
              [vi("y", TensorProto.FLOAT, None)], [s])
    onnxcc.compile(p, tmp_path / "art", name="big")
    cm = onnxcc.load(tmp_path / "art")
    with pytest.raises(RuntimeCallError, match=r'output "y" of shape \[1099511627776\] \(4398046511104 bytes\) '
                                               r"cannot be allocated"):
        cm.run({})
    res = CliRunner().invoke(main, ["run", str(tmp_path / "art"), "--random", ""])
    assert res.exit_code == 1 and res.stderr.strip().splitlines()[-1].startswith("error: output \"y\""), res.stderr
