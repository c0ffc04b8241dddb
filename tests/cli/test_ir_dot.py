"""`onnxcc ir --format dot`: Graphviz text with types on the edges and big constants elided."""

from __future__ import annotations

import re
import shutil
import subprocess

from click.testing import CliRunner

from onnxcc.cli import main
from onnxcc.testing import MODELS_DIR


def _dot(model: str, *args) -> str:
    r = CliRunner().invoke(main, ["ir", str(MODELS_DIR / model), "--format", "dot", *args])
    assert r.exit_code == 0, r.output
    return r.output


def test_mlp_as_dot():
    out = _dot("mlp.onnx")
    assert out.startswith('digraph "mlp" {') and out.rstrip().endswith("}")
    assert out.count("{") == out.count("}")
    assert '[label="f32[batch, 64]"]' in out  # the input's edge into the first MatMul
    assert re.search(r'n\d+ \[label="MatMul  \(MatMul_1\)"\]', out)
    assert 'label="const fc2.bias <64 values>\\nf32[64]"' in out  # an inline constant, elided
    assert "0.0663" not in out and max(len(ln) for ln in out.splitlines()) < 200
    assert 'label="y\\nf32[batch, 10]"' in out  # the graph output by its ONNX name


def test_regions_are_nested_clusters_and_versions_carry_guards():
    out = _dot("if_model.onnx")
    assert "subgraph cluster_" in out and "region 0" in out and "region 1" in out
    if shutil.which("dot"):
        subprocess.run(["dot", "-Tsvg"], input=out, text=True, check=True, capture_output=True)


def test_versions_carry_their_guards():
    out = _dot("mlp.onnx", "-p", "shape-inference,canonicalize,specialize{exact=batch:1}")
    assert "guard batch == 1" in out
