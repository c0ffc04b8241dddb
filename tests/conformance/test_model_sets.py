"""onnx's own model sets (backend/test/data/{pytorch-converted,pytorch-operator,simple}: opset
6-12 models with test data sets) through the user path: `onnxcc.compile` + `onnxcc.load` +
run (the conformance `native` executor) and `onnxcc run` on the command line. A handful by
default (each compiles); `python -m onnxcc.conformance --model-sets -e native --ort` runs them
all and prints onnxruntime's count beside."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import numpy_helper

from onnxcc import conformance as conf
from onnxcc import model_sets as ms
from onnxcc.cli import main

#: old-opset models that exercise the importer's opset rules and the converter:
#: PRelu-6 per-channel slope, BatchNormalization-6, Softmax-6 / LogSoftmax-6 (2-D coercion),
#: Pad-2 and Split-2 attributes, Squeeze-1 / Unsqueeze-1, Add-6, Reshape-5 from Constant (opset 9)
HANDFUL = ["pytorch-converted/test_PReLU_2d_multiparam", "pytorch-converted/test_BatchNorm2d_eval",
           "pytorch-converted/test_log_softmax_dim3", "pytorch-converted/test_ConstantPad2d",
           "pytorch-converted/test_GLU_dim", "pytorch-converted/test_AvgPool1d",
           "pytorch-operator/test_operator_add_broadcast", "pytorch-converted/test_PixelShuffle"]


def _dirs():
    return {f"{s}/{d.name}": (s, d) for s, d in ms.model_set_dirs()}


@pytest.mark.parametrize("name", HANDFUL)
def test_model_set_native(name):
    dirs = _dirs()
    if name not in dirs:
        pytest.skip(f"{name}: not in the installed onnx {onnx.__version__}")
    r = ms.run_model_dir(*dirs[name], conf.compiled_executor)
    assert r.status == "pass", f"{name}: {r.status}: {r.detail}"


@pytest.mark.parametrize("executor", ["interp", "native"])
def test_model_set_string_models_pass(executor):
    # the StringNormalizer models of the `simple` set, through both executors (string tensors)
    dirs = _dirs()
    name = "simple/test_strnorm_model_monday_casesensintive_lower"
    if name not in dirs:
        pytest.skip(f"{name}: not in the installed onnx {onnx.__version__}")
    r = ms.run_model_dir(*dirs[name], conf.EXECUTORS[executor])
    assert r.status == "pass", r.detail


def test_model_sets_interp_all_pytorch_converted():
    # the whole set through the numpy interpreter (fast): at least what onnxruntime passes (59)
    results = ms.run_model_sets(conf.interp_executor, ["pytorch-converted"])
    if not results:
        pytest.skip("the installed onnx ships no pytorch-converted models")
    bad = [f"{r.name}: {r.status}: {r.detail}" for r in results if r.status != "pass"]
    assert len(results) - len(bad) >= 59, bad


def test_onnxcc_run_cli_on_an_opset6_model(tmp_path):
    dirs = _dirs()
    name = "pytorch-converted/test_PReLU_1d_multiparam"
    if name not in dirs:
        pytest.skip(f"{name}: not in the installed onnx {onnx.__version__}")
    d = dirs[name][1]
    model = onnx.load(str(d / "model.onnx"))
    assert conf.opset_of(model) < 13
    inits = {t.name for t in model.graph.initializer}
    (name_in,) = [vi.name for vi in model.graph.input if vi.name not in inits]
    x = numpy_helper.to_array(onnx.load_tensor(str(d / "test_data_set_0" / "input_0.pb")))
    want = numpy_helper.to_array(onnx.load_tensor(str(d / "test_data_set_0" / "output_0.pb")))
    np.savez(tmp_path / "in.npz", **{name_in: x})
    r = CliRunner().invoke(main, ["run", str(d / "model.onnx"), "--inputs", str(tmp_path / "in.npz"),
                                  "--outputs", str(tmp_path / "out.npz"), "--cache-dir", str(tmp_path / "c")])
    assert r.exit_code == 0, r.output
    with np.load(tmp_path / "out.npz") as z:
        (got,) = [z[k] for k in z.files]
    np.testing.assert_allclose(got, want, rtol=conf.DEFAULT_RTOL, atol=conf.DEFAULT_ATOL)
