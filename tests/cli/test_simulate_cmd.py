"""`onnxcc simulate` on a tiny model and a tiny trace (the timing runs on real models belong
in benchmarks/); also `--bucket SYM=auto` on `onnxcc compile`."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from onnxcc.cli import main


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny")
    data = np.random.default_rng(0).standard_normal(64).tolist()
    w = helper.make_tensor("w", TensorProto.FLOAT, [8, 8], data)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="MatMul_1"),
         helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0], name="Transpose_2"),
         helper.make_node("MatMul", ["h", "xt"], ["s"], name="MatMul_3"),
         helper.make_node("Softmax", ["s"], ["p"], axis=-1, name="Softmax_4"),
         helper.make_node("MatMul", ["p", "x"], ["y"], name="MatMul_5")],
        "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["seq", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["seq", 8])], [w])
    path = d / "tiny.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    (d / "trace.txt").write_text("1\n2\n2,3\n3\n5\n# long one\n")
    return d


def test_simulate_reports_four_policies_and_writes_a_chart(tiny):
    chart = tiny / "sim.svg"
    res = CliRunner().invoke(main, ["simulate", str(tiny / "tiny.onnx"), "--trace", str(tiny / "trace.txt"),
                                    "--bucket", "seq=2,4", "--jobs", "1", "--repeats", "1", "--chunk", "4",
                                    "-O", "1", "--chart", str(chart), "--json", str(tiny / "sim.json")])
    assert res.exit_code == 0, res.output
    import json

    rows = {r["policy"]: r for r in json.loads((tiny / "sim.json").read_text())}
    assert set(rows) == {"specialise", "bucket", "pad-to-max", "symbolic"}
    assert rows["specialise"]["compiles"] == 4  # 1, 2, 3, 5
    assert rows["bucket"]["compiles"] == 3  # buckets 2 and 4, and the generic for 5
    assert rows["pad-to-max"]["compiles"] == rows["symbolic"]["compiles"] == 1
    assert rows["symbolic"]["hit_rate"] == pytest.approx(6 / 7)
    assert rows["specialise"]["wasted_flops"] == rows["symbolic"]["wasted_flops"] == 0
    assert 0 < rows["bucket"]["waste"] < rows["pad-to-max"]["waste"]
    for r in rows.values():  # a tiny model's versions compile in milliseconds: >= 0 after subtraction
        assert r["compile_s"] >= 0 and r["run_s"] > 0
    assert rows["symbolic"]["compile_s"] > 0
    assert "specialise-each-shape" in res.output and "pad-to-max 5" in res.output
    assert "measured on this machine" in res.output
    svg = ET.fromstring(chart.read_text())
    assert svg.tag.endswith("svg") and chart.read_text().count("<title>compile") == 4


def compile_ir(tiny, *flags):
    return CliRunner().invoke(main, ["compile", str(tiny / "tiny.onnx"), "--emit", "ir", *flags])


def test_compile_with_auto_buckets_prints_the_choice(tiny):
    res = compile_ir(tiny, "--bucket", "seq=auto", "--trace", str(tiny / "trace.txt"), "--max-buckets", "2")
    assert res.exit_code == 0, res.output
    assert "auto buckets seq = 2,5: expected padding waste" in res.output
    assert "power-of-two buckets 4,8 (same count): waste" in res.output
    assert "@main.seq_b2" in res.output and "@main.seq_b5" in res.output


def test_simulate_needs_a_trace(tiny):
    res = CliRunner().invoke(main, ["simulate", str(tiny / "tiny.onnx")])
    assert res.exit_code == 1 and "simulate needs --trace FILE" in res.output


def test_bucket_flag_errors(tiny):
    res = compile_ir(tiny, "--bucket", "seq=auto")
    assert res.exit_code == 1 and "--bucket seq=auto needs --trace FILE" in res.output
    res = compile_ir(tiny, "--bucket", "seq=a,b")
    assert res.exit_code == 1 and "expected SYM=B1,B2" in res.output
