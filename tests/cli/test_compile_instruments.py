"""`onnxcc compile` instruments cover the whole build: graph and kernel passes print, dump
(one numbering across the build) and time like one pipeline (compiler/pipeline.py)."""

from __future__ import annotations

import re

from click.testing import CliRunner

from onnxcc.cli import main
from onnxcc.ir.parser import parse_module
from onnxcc.testing import MODELS_DIR

MLP = str(MODELS_DIR / "mlp.onnx")
HEADER = re.compile(r"^// -----// IR Dump After (\S+) //----- //$", re.M)
CPU_RECIPE = ["split-if", "broadcast-versions", "shape-inference", "qdq-fuse", "canonicalize", "fold-conv-affine",
              "nhwc-region", "qnhwc-region", "value-symbols", "prune-symbols", "specialize", "attention-chain",
              "lower-to-kernel",
              "fold-consts", "fuse", "schedule", "plan-memory", "reserve-scratch"]


def _run(*args):
    return CliRunner().invoke(main, list(args))


def test_print_ir_after_all_shows_graph_and_kernel_passes_in_recipe_order(tmp_path):
    r = _run("compile", MLP, "-o", str(tmp_path / "a"), "--emit", "kernel", "--print-ir-after-all")
    assert r.exit_code == 0, r.output
    assert HEADER.findall(r.stderr) == CPU_RECIPE
    dumps = dict(zip(HEADER.findall(r.stderr), HEADER.split(r.stderr)[2::2], strict=True))
    assert "func @main(%x: f32[batch, 64])" in dumps["canonicalize"]  # graph IR
    assert "func @main.generic(" in dumps["specialize"]
    for name in ("fuse", "schedule", "plan-memory"):  # kernel IR, one program per version
        assert "kernel mlp_v0(batch) {" in dumps[name], name
    # fusion is visible in the text: fewer computes after fuse than after lowering
    assert dumps["fuse"].count(" = ") < dumps["lower-to-kernel"].count(" = ")
    # memory figures appear once plan-memory has run
    assert "arena" not in dumps["fuse"] and "// kernels 8 -> 4, arena" in dumps["plan-memory"]


def test_print_ir_after_one_kernel_pass_and_unknown_pass(tmp_path):
    r = _run("compile", MLP, "-o", str(tmp_path / "a"), "--print-ir-after", "fuse")
    assert r.exit_code == 0, r.output
    assert HEADER.findall(r.stderr) == ["fuse"]
    assert (tmp_path / "a" / "libmlp.so").is_file()
    r = _run("compile", MLP, "-o", str(tmp_path / "b"), "--print-ir-after", "fusion")
    assert r.exit_code != 0 and "unknown pass 'fusion'" in r.output


def test_dump_dir_numbers_every_pass_of_the_build_in_one_sequence(tmp_path):
    dumps = tmp_path / "dumps"
    r = _run("compile", MLP, "-o", str(tmp_path / "a"), "--specialize", "batch=1", "--bucket", "batch=8",
             "--dump-dir", str(dumps))
    assert r.exit_code == 0, r.output
    files = sorted(p.name for p in dumps.iterdir())
    names = [*CPU_RECIPE[:11], "bucketize", *CPU_RECIPE[11:]]
    graph = {"split-if", "broadcast-versions", "shape-inference", "qdq-fuse", "canonicalize", "fold-conv-affine",
             "nhwc-region", "qnhwc-region", "value-symbols", "prune-symbols", "specialize", "bucketize",
             "attention-chain"}
    assert files == [f"{i:03d}_{n}{'.onnxir' if n in graph else '.kir'}" for i, n in enumerate(names)]
    # graph dumps parse back; the last one holds the bucket and exact versions
    last_graph = parse_module((dumps / "011_bucketize.onnxir").read_text())
    assert len(last_graph.dispatch["main"]) == 3
    kir = (dumps / f"{len(names) - 1:03d}_reserve-scratch.kir").read_text()
    assert kir.count("// version ") == 3 and "kernel mlp_v2(batch)" in kir


def test_time_passes_lists_every_pass_and_build_step(tmp_path):
    r = _run("compile", MLP, "-o", str(tmp_path / "a"), "--time-passes")
    assert r.exit_code == 0, r.output
    assert "pass execution timing" in r.stderr
    listed = re.findall(r"^\s+[\d.]+ ms\s+[\d.]+%\s+(\S+)$", r.stderr, re.M)
    assert listed == ["import", *CPU_RECIPE, "llvm", "codegen", "link"]


def test_cuda_recipe_has_no_schedule_and_ptx_is_a_cuda_stop_point(tmp_path):
    r = _run("compile", MLP, "--target", "cuda", "--emit", "kernel", "--print-ir-after-all")
    assert r.exit_code == 0, r.output
    # no schedules on the grid, and attention keeps its score buffer (no fused_attention)
    assert HEADER.findall(r.stderr) == [n for n in CPU_RECIPE if n not in ("schedule", "attention-chain")]
    r = _run("compile", MLP, "--emit", "ptx")
    assert r.exit_code != 0 and "--emit ptx needs --target cuda" in r.output
