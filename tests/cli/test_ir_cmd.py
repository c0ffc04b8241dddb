"""`onnxcc ir`: pipelines, dump instruments, output, and the CLI's exit codes and messages."""

from __future__ import annotations

import re

from click.testing import CliRunner
from onnx import TensorProto, helper

import onnxcc
from onnxcc.cli import main
from onnxcc.ir.parser import parse_module
from onnxcc.ir.printer import print_module
from onnxcc.passes import PASSES
from onnxcc.passes.pipelines import DEFAULT_GRAPH_PIPELINE
from onnxcc.testing import MODELS_DIR

MLP = str(MODELS_DIR / "mlp.onnx")


def _pipeline() -> str:
    """The default graph pipeline, every pass of it (a pass that fails to load fails the test)."""
    return DEFAULT_GRAPH_PIPELINE


def _run(*args, env=None):
    return CliRunner().invoke(main, list(args), env=env)


def _is_one_error_line(stderr: str, prefix: str = "error: ") -> bool:
    lines = stderr.strip().splitlines()
    return len(lines) == 1 and lines[0].startswith(prefix) and "Traceback" not in stderr


def test_ir_default_pipeline_prints_parseable_ir():
    pipeline = _pipeline()
    args = [MLP] if pipeline == DEFAULT_GRAPH_PIPELINE else [MLP, "-p", pipeline]
    r = _run("ir", *args)
    assert r.exit_code == 0, r.stderr
    assert r.stdout.startswith("module @mlp attributes {opset = 17}")
    assert "?" not in r.stdout
    assert print_module(parse_module(r.stdout)) == r.stdout


def test_ir_empty_pipeline_prints_the_import():
    r = _run("ir", MLP, "-p", "")
    assert r.exit_code == 0, r.stderr
    assert r.stdout == onnxcc.print_ir(onnxcc.load_onnx(MLP))
    assert r.stderr == ""


def test_ir_reads_onnxir_and_writes_output_file(tmp_path):
    src = tmp_path / "mlp.onnxir"
    src.write_text(onnxcc.print_ir(onnxcc.load_onnx(MLP)))
    out = tmp_path / "out.onnxir"
    r = _run("ir", str(src), "-p", "shape-inference", "-o", str(out))
    assert r.exit_code == 0, r.stderr
    assert r.stdout == ""
    assert out.read_text() == src.read_text()


def test_print_ir_after_all_and_after_one_pass():
    pipeline = _pipeline()
    names = pipeline.split(",")
    r = _run("ir", MLP, "-p", pipeline, "--print-ir-after-all")
    assert r.exit_code == 0, r.stderr
    headers = re.findall(r"^// -----// IR Dump After (\S+) //----- //$", r.stderr, re.M)
    assert headers == names
    r = _run("ir", MLP, "-p", pipeline, "--print-ir-after", "shape-inference")
    assert re.findall(r"IR Dump After (\S+)", r.stderr) == ["shape-inference"]
    # a dump is valid IR (the header is a comment)
    parse_module(r.stderr.split("\n", 1)[1])


def test_dump_dir_writes_numbered_parseable_files(tmp_path):
    pipeline = _pipeline()
    r = _run("ir", MLP, "-p", pipeline, "--dump-dir", str(tmp_path / "dumps"))
    assert r.exit_code == 0, r.stderr
    files = sorted(p.name for p in (tmp_path / "dumps").iterdir())
    assert files == [f"{i:03d}_{n}.onnxir" for i, n in enumerate(pipeline.split(","))]
    last = (tmp_path / "dumps" / files[-1]).read_text()
    assert print_module(parse_module(last)) == r.stdout


def test_time_passes_and_no_verify():
    r = _run("ir", MLP, "-p", "shape-inference", "--time-passes", "--no-verify")
    assert r.exit_code == 0, r.stderr
    assert "pass execution timing" in r.stderr and "shape-inference" in r.stderr


# ---- errors and exit codes -----------------------------------------------------------------------

def test_missing_file_is_a_user_error(tmp_path):
    r = _run("ir", str(tmp_path / "nope.onnx"), "-p", "")
    assert r.exit_code == 1
    assert _is_one_error_line(r.stderr) and "nope.onnx: no such file" in r.stderr


def test_garbage_and_truncated_files_are_user_errors(tmp_path):
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x00\xffnot a model at all")
    cut = tmp_path / "cut.onnx"
    cut.write_bytes((MODELS_DIR / "mlp.onnx").read_bytes()[:300])
    for path in (junk, cut):
        r = _run("ir", str(path))
        assert r.exit_code == 1, r.output
        assert _is_one_error_line(r.stderr) and "not a valid ONNX model" in r.stderr


def test_unsupported_op_exits_3_naming_op_domain_and_node(tmp_path):
    node = helper.make_node("Frobnicate", ["x"], ["y"], name="frob_node", domain="com.example")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.example", 1)])
    path = tmp_path / "custom.onnx"
    path.write_bytes(model.SerializeToString())
    r = _run("ir", str(path))
    assert r.exit_code == 3
    assert _is_one_error_line(r.stderr)
    assert r.stderr.strip() == "error: unsupported op Frobnicate (domain com.example) at node 'frob_node'"


def test_old_opset_imports_and_too_new_is_a_user_error(tmp_path):
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])])
    path = tmp_path / "old.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 6)]).SerializeToString())
    r = _run("ir", str(path))
    assert r.exit_code == 0 and "onnx.Relu" in r.stdout
    new = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 999)])
    path.write_bytes(new.SerializeToString())
    r = _run("ir", str(path))
    assert r.exit_code == 1 and _is_one_error_line(r.stderr) and "opset 999 is newer" in r.stderr


def test_unknown_pass_and_bad_suffix_are_user_errors(tmp_path):
    r = _run("ir", MLP, "-p", "shape-inference,no-such-pass")
    assert r.exit_code == 1 and _is_one_error_line(r.stderr) and "no-such-pass" in r.stderr
    r = _run("ir", MLP, "-p", "", "--print-ir-after", "no-such-pass")
    assert r.exit_code == 1 and "no-such-pass" in r.stderr
    r = _run("ir", str(tmp_path / "model.txt"))
    assert r.exit_code == 1 and _is_one_error_line(r.stderr)


def test_parse_error_in_onnxir_is_a_user_error(tmp_path):
    path = tmp_path / "bad.onnxir"
    path.write_text("module @m {\n  func @main( -> () {\n  }\n}\n")
    r = _run("ir", str(path), "-p", "")
    assert r.exit_code == 1 and _is_one_error_line(r.stderr) and "bad.onnxir:2:" in r.stderr


def test_internal_error_exits_70_with_a_hint(monkeypatch):
    def boom(path):
        raise KeyError("something broke")

    monkeypatch.setattr(onnxcc, "load_model", boom)
    r = _run("ir", MLP, "-p", "")
    assert r.exit_code == 70
    lines = r.stderr.strip().splitlines()
    assert lines[0] == "internal error: KeyError: 'something broke'"
    assert "report" in lines[1] and "Traceback" not in r.stderr and len(lines) == 2
    r = _run("ir", MLP, "-p", "", env={"ONNXCC_DEBUG": "1"})
    assert r.exit_code == 70 and "Traceback" in r.stderr and "internal error: KeyError" in r.stderr


def test_a_crashing_pass_is_an_internal_error(monkeypatch):
    from onnxcc.passes.shape_inference import ShapeInferencePass

    def crash(self, module, ctx):
        raise ZeroDivisionError("oops")

    monkeypatch.setattr(ShapeInferencePass, "run", crash)
    assert PASSES["shape-inference"] is ShapeInferencePass
    r = _run("ir", MLP, "-p", "shape-inference")
    assert r.exit_code == 70 and r.stderr.startswith("internal error: pass 'shape-inference' failed")


def test_version_and_help():
    r = _run("--version")
    assert r.exit_code == 0 and "0.1.0" in r.stdout
    r = _run("ir", "--help")
    assert r.exit_code == 0 and "--print-ir-after-all" in r.stdout


def test_ctrl_c_exits_130_with_one_line(monkeypatch):
    def interrupted(path):
        raise KeyboardInterrupt

    monkeypatch.setattr(onnxcc, "load_model", interrupted)
    r = _run("ir", MLP, "-p", "")
    assert r.exit_code == 130 and r.stderr.strip() == "interrupted"
