"""`onnxcc compile` shows progress only on a terminal; `--quiet` silences it; `--version`."""

from __future__ import annotations

import io

from click.testing import CliRunner
from onnx import TensorProto, helper

from onnxcc.cli import main
from onnxcc.cli.progress import Progress
from onnxcc.compiler import CompileOptions, compile_model
from onnxcc.passes import PassContext
from onnxcc.testing_c import save_graph
from onnxcc.version import __version__


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def _relu(path):
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])])
    return save_graph(g, path)


def test_progress_reports_passes_versions_and_steps_on_a_terminal(tmp_path):
    tty = _Tty()
    assert Progress.wanted(False, tty) and not Progress.wanted(True, tty)
    assert not Progress.wanted(False, io.StringIO())
    p = Progress(tty)
    compile_model(_relu(tmp_path / "relu.onnx"), tmp_path / "a", CompileOptions(specialize={"N": [4]}),
                  pass_ctx=PassContext(instruments=[p]))
    p.finish()
    shown = tty.getvalue().split("\r")
    assert any("shape-inference done" in s for s in shown)
    assert any("2 versions: lower-to-kernel done" in s for s in shown)
    assert any("link done in" in s for s in shown)
    assert tty.getvalue().endswith("\r")  # the line is cleared: the summary starts clean


def test_no_progress_when_not_a_terminal_and_quiet_prints_nothing(tmp_path):
    model = str(_relu(tmp_path / "relu.onnx"))
    r = CliRunner().invoke(main, ["compile", model, "-o", str(tmp_path / "a"), "--max-versions", "1"])
    assert r.exit_code == 0 and "\r" not in r.output and r.output.startswith("wrote ")
    r = CliRunner().invoke(main, ["compile", model, "-o", str(tmp_path / "b"), "--max-versions", "1", "-q"])
    assert r.exit_code == 0 and r.output == ""
    assert (tmp_path / "b" / "librelu.so").is_file()


def test_version_flag():
    r = CliRunner().invoke(main, ["--version"])
    assert r.exit_code == 0 and r.output.strip() == f"onnxcc, version {__version__}"
