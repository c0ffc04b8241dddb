"""One printer of dims and guards: a guard reads the same in the IR text, the kernel IR,
NAME.h, the dispatcher's messages, NAME.json and `onnxcc inspect`, and the IR's parser
reads it back."""

from __future__ import annotations

import json

import sympy
from click.testing import CliRunner

from onnxcc.cli import main
from onnxcc.codegen.c.abi import ArtifactSpec, TensorSig, VersionSpec
from onnxcc.codegen.c.exprs import text
from onnxcc.codegen.c.link import generate_dispatcher, generate_header, generate_metadata
from onnxcc.ir import DType, SymbolInfo, parse_dim, parse_module, print_bool, print_dim, print_expr, sym
from onnxcc.ir.printer import print_module

SEQ, BATCH = sym("seq"), sym("batch")
GUARD = sympy.And(SEQ <= 64, 16 < SEQ, sympy.Eq(sympy.Mod(BATCH, 8), 0))
WANT = "batch % 8 == 0 & seq <= 64 & seq > 16"  # relations sorted by their text
WORKSPACE = sympy.Max(4 * SEQ, 64) + sympy.floor(SEQ / 2)


def _spec() -> ArtifactSpec:
    return ArtifactSpec(
        name="g",
        inputs=[TensorSig("x", DType.f32, (BATCH, SEQ))],
        outputs=[TensorSig("y", DType.f32, (BATCH, SEQ))],
        symbols=[SymbolInfo("batch", 1, 64, 1, 'input "x" dim 0'), SymbolInfo("seq", 1, 512, 1, 'input "x" dim 1')],
        constraints=[(sympy.Ne(sympy.Mod(SEQ, 7), 0), 'node "r": split')],
        versions=[VersionSpec("g_v0", GUARD, "", {}, WORKSPACE, "bucket"),
                  VersionSpec("g_v1", sympy.true, "", {}, 4 * SEQ, "generic")])


def test_the_printer_and_the_c_side_text_agree():
    assert print_bool(GUARD) == print_expr(GUARD) == text(GUARD) == WANT
    assert print_dim(WORKSPACE) == text(WORKSPACE) == "floor(seq/2) + Max(64, 4*seq)"
    assert parse_dim(text(WORKSPACE)) == WORKSPACE  # what people read parses back
    assert print_expr(SEQ) == "seq" and print_expr(sympy.true) == "true" and print_expr(3) == "3"


def test_the_ir_text_prints_the_guard_the_same_way():
    src = ("module @m {\n  sym batch in [1, 64]\n  sym seq in [1, 512]\n"
           "  func @f(%x: f32[batch, seq]) -> (f32[batch, seq])\n"
           "      guard seq > 16 & batch % 8 == 0 & seq <= 64 {\n    return %x\n  }\n}\n")
    out = print_module(parse_module(src))
    assert f"guard {WANT}" in out
    assert print_module(parse_module(out)) == out


def test_name_h_the_dispatcher_and_inspect_print_the_guard_the_same_way(tmp_path):
    spec = _spec()
    assert f" *   0: bucket, {WANT}\n" in generate_header(spec)
    assert " *   seq % 7 != 0  (node \"r\": split)" in generate_header(spec)
    c = generate_dispatcher(spec)
    assert f"guard {WANT}; subs none; workspace {print_dim(WORKSPACE)} bytes" in c  # NAME_version_info
    assert '"constraint seq %% 7 != 0 does not hold' in c  # printf-escaped, same text
    meta = generate_metadata(spec)
    assert meta["versions"][0]["guard"] == WANT and meta["constraints"][0]["text"] == "seq % 7 != 0"
    (tmp_path / "g.json").write_text(json.dumps(meta))
    r = CliRunner().invoke(main, ["inspect", str(tmp_path / "g.json")])
    assert r.exit_code == 0, r.output
    assert f"guard {WANT};" in r.output and "constraint seq % 7 != 0" in r.output
