"""`onnxcc inspect` prints sizes people can read: short formulas with one spelling, a piecewise
plan one line per range, values at representative shapes or `--at`."""

from __future__ import annotations

import json
from pathlib import Path

import sympy
from click.testing import CliRunner

from onnxcc.cli import main
from onnxcc.cli.size_text import lines, parse_size

# the transformer sample's generic version as NAME.json records it (sympy text, 459 characters)
META = Path(__file__).resolve().parents[1] / "data" / "transformer_sizes.json"
B, S = (sympy.Symbol(n, integer=True, positive=True) for n in ("batch", "seq"))
SYMS = {"batch": B, "seq": S}


def _inspect(*args):
    return CliRunner().invoke(main, ["inspect", str(META), *args])


def test_piecewise_plan_is_one_short_line_per_range():
    r = _inspect()
    assert r.exit_code == 0, r.output
    out = r.output.splitlines()
    k = next(i for i, ln in enumerate(out) if ln.strip().startswith("workspace"))
    assert out[k].strip() == "workspace seq <= 65: ~ 7168*batch*seq"
    assert out[k + 1].strip() == "65 < seq <= 256: ~ 32*batch*seq**2 + 2048*batch*seq"
    assert out[k + 2].strip().startswith("otherwise: ")
    assert max(len(ln) for ln in out) < 130
    for bad in ("Piecewise", "Max(", "True", "ceiling"):
        assert bad not in r.output
    # every symbol at its low end, and batch (an input's dim 0) at 1 with seq at 128
    assert "at batch=1, seq=1: workspace 38.0K" in r.output
    assert "at batch=1, seq=128: workspace" in r.output


def test_at_evaluates_at_given_shapes_and_checks_the_names():
    ws = parse_size(json.loads(META.read_text())["versions"][0]["workspace_bytes"], SYMS)
    want = int(ws.subs({B: 2, S: 300}))
    r = _inspect("--at", "batch=2,seq=300")
    assert r.exit_code == 0, r.output
    line = next(ln for ln in r.output.splitlines() if "at batch=2, seq=300" in ln)
    assert f"workspace {want / 2**20:.1f}M" in line
    r = _inspect("--at", "sequence=3")
    assert r.exit_code == 1 and r.output.startswith("error: --at sequence=3: the artifact has no symbol sequence")


def test_formulas_use_one_spelling_and_metadata_is_never_evaluated_as_code():
    e = parse_size("64*ceiling(Max(6*batch, 3*seq)/64) + Min(batch, 2)", SYMS)
    assert lines(e) == ["round_up(Max(6*batch, 3*seq), 64) + Min(2, batch)"]
    assert parse_size("__import__('os').system('true')", SYMS) is None
    assert parse_size("batch.__class__", SYMS) is None
    assert parse_size("nosuch*2", SYMS) is None


def test_version_info_is_a_short_string():
    from onnxcc.codegen.c.abi import VersionSpec
    from onnxcc.codegen.c.ctext import version_info_text

    ws = parse_size(json.loads(META.read_text())["versions"][0]["workspace_bytes"], SYMS)
    long_ = version_info_text(0, VersionSpec("m_v0", workspace_bytes=ws))
    assert len(long_) < 120 and "Piecewise" not in long_ and "symbolic" in long_
    short_ = version_info_text(1, VersionSpec("m_v1", workspace_bytes=768 * B))
    assert short_.endswith("workspace 768*batch bytes")
