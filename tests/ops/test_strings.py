"""String tensors (ops/strings.py, ops/strings_sized.py, ops/strings_regex.py) through the
user's path (onnxcc.compile + onnxcc.load, numpy object arrays of str in and out) and the
numpy interpreter, against onnxruntime; string results compared exactly. Also: the str
dtype's text round trip (graph IR and the kernel's CallStmt), the RE2 -> POSIX translation,
and the clear refusals (patterns, non-ASCII text where only ASCII rules exist, StringSplit
without maxsplit, bad inputs)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as h

import onnxcc
from onnxcc.errors import GuardError, OnnxccError, RuntimeCallError, UnsupportedOp
from onnxcc.frontend import load_onnx
from onnxcc.interp import run as interp_run
from onnxcc.ir import DType, parse_module
from onnxcc.kernel import CallStmt, KernelProgram, SymRef
from onnxcc.kernel.parser import parse_program
from onnxcc.ops.strings_regex import PatternError, translate
from onnxcc.passes import run_pipeline
from onnxcc.testing import ort_run

OPSET = [h.make_opsetid("", 20), h.make_opsetid("ai.onnx.ml", 2)]


def _model(nodes, inputs, outputs, inits=()) -> onnx.ModelProto:
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                     [h.make_tensor_value_info(n, t, None) for n, t in outputs], initializer=list(inits))
    m = h.make_model(g, opset_imports=OPSET)
    m.ir_version = 9
    return m


def _strs(*xs) -> np.ndarray:
    return np.array(xs, dtype=object)


def _interp(m: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    mod = load_onnx(m)
    run_pipeline(mod, "shape-inference,canonicalize")
    return interp_run(mod, [feeds[i.name] for i in m.graph.input])


def _native(m: onnx.ModelProto, tmp_path, name: str = "strs"):
    onnxcc.compile(m, tmp_path / name, name=name)
    return onnxcc.load(tmp_path / name)


def _same(got, want) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.tolist() == want.tolist()


def _check_all(m, feeds, tmp_path, name="strs", oracle=None):
    """native and interpreter results equal onnxruntime's (or `oracle`'s), output by output."""
    want = (oracle or ort_run)(m, feeds)
    outs = [o.name for o in m.graph.output]
    lib = _native(m, tmp_path, name)
    got = lib.run(feeds)
    for k, o in enumerate(outs):
        _same(got[o], want[o])
        _same(_interp(m, feeds)[k], want[o])
    return lib


# ---- ops that move elements, Equal and StringConcat ----------------------------------------------

def _onnx_reference(m, feeds) -> dict:
    from onnx.reference import ReferenceEvaluator

    outs = [o.name for o in m.graph.output]
    return dict(zip(outs, ReferenceEvaluator(m).run(None, feeds), strict=True))


def test_concat_equal_and_shape_ops_match_the_onnx_reference(tmp_path):
    # the onnx reference as the oracle here: onnxruntime 1.32 answers '' for some elements of a
    # Gather that reads a Transpose of strings (its own bug; Transpose alone and Gather alone agree)
    ints = [h.make_tensor("idx", TP.INT64, [2], [2, 0]), h.make_tensor("shape", TP.INT64, [1], [8]),
            h.make_tensor("st", TP.INT64, [1], [1]), h.make_tensor("en", TP.INT64, [1], [3]),
            h.make_tensor("ax", TP.INT64, [1], [1])]
    nodes = [h.make_node("StringConcat", ["a", "b"], ["c"]),
             h.make_node("Transpose", ["c"], ["t"], perm=[1, 0]),
             h.make_node("Gather", ["t", "idx"], ["g"], axis=0),
             h.make_node("Slice", ["c", "st", "en", "ax"], ["s"]),
             h.make_node("Concat", ["g", "s"], ["cc"], axis=0),
             h.make_node("Reshape", ["cc", "shape"], ["f"]),
             h.make_node("Identity", ["f"], ["y"]),
             h.make_node("Equal", ["a", "b"], ["eq"])]
    m = _model(nodes, [("a", TP.STRING, [2, 3]), ("b", TP.STRING, [3])], [("y", TP.STRING), ("eq", TP.BOOL)],
               ints)
    feeds = {"a": _strs("x", "é", "", "q", "ab", "ü").reshape(2, 3), "b": _strs("x", "-", "ü")}
    lib = _check_all(m, feeds, tmp_path, oracle=_onnx_reference)
    # str inputs also as numpy 'U' arrays; outputs are object arrays of str
    got = lib.run({"a": feeds["a"].astype(str), "b": feeds["b"].astype(str)})
    assert got["y"].dtype == object and all(isinstance(s, str) for s in got["y"].tolist())


def test_more_ops_that_move_elements_take_strings(tmp_path):
    ints = [h.make_tensor("sh", TP.INT64, [3], [2, 2, 3]), h.make_tensor("rep", TP.INT64, [2], [1, 2]),
            h.make_tensor("ax0", TP.INT64, [1], [0]), h.make_tensor("gi", TP.INT64, [2, 3], [1, 0, 1, 0, 1, 0]),
            h.make_tensor("gn", TP.INT64, [2, 1], [1, 0]), h.make_tensor("spl", TP.INT64, [2], [1, 2])]
    nodes = [h.make_node("Expand", ["a", "sh"], ["e"]), h.make_node("Tile", ["a", "rep"], ["t"]),
             h.make_node("Split", ["a", "spl"], ["s1", "s2"], axis=1),
             h.make_node("Unsqueeze", ["a", "ax0"], ["u"]), h.make_node("Squeeze", ["u", "ax0"], ["q"]),
             h.make_node("Flatten", ["e"], ["f"], axis=2),
             h.make_node("GatherElements", ["a", "gi"], ["ge"], axis=0),
             h.make_node("GatherND", ["a", "gn"], ["gnd"]), h.make_node("Where", ["c", "a", "b"], ["w"]),
             h.make_node("Shape", ["a"], ["shp"]), h.make_node("Size", ["a"], ["sz"])]
    outs = [(n, TP.STRING) for n in ("e", "t", "s1", "s2", "q", "f", "ge", "gnd", "w")] + [("shp", TP.INT64),
                                                                                          ("sz", TP.INT64)]
    m = _model(nodes, [("a", TP.STRING, [2, 3]), ("b", TP.STRING, [3]), ("c", TP.BOOL, [2, 3])], outs, ints)
    feeds = {"a": _strs("x", "\u00e9", "", "q", "ab", "\u00fc").reshape(2, 3), "b": _strs("1", "2", "3"),
             "c": np.array([[1, 0, 1], [0, 1, 1]], bool)}
    _check_all(m, feeds, tmp_path, oracle=_onnx_reference)


def test_string_concat_broadcasts_symbolic_shapes(tmp_path):
    m = _model([h.make_node("StringConcat", ["a", "b"], ["y"])],
               [("a", TP.STRING, ["N", 1]), ("b", TP.STRING, ["M"])], [("y", TP.STRING)])
    lib = _native(m, tmp_path)
    for n, k in ((1, 1), (3, 2), (2, 4)):
        a = np.array([[f"r{i}"] for i in range(n)], dtype=object)
        b = np.array([f"c{j}" for j in range(k)], dtype=object)
        _same(lib.run({"a": a, "b": b})["y"], ort_run(m, {"a": a, "b": b})["y"])


# ---- LabelEncoder with string tables -------------------------------------------------------------

def test_label_encoder_string_tables_match_onnxruntime(tmp_path):
    nodes = [h.make_node("LabelEncoder", ["x"], ["y1"], domain="ai.onnx.ml", keys_strings=["a", "bb", "é"],
                         values_int64s=[1, 2, 3], default_int64=-7),
             h.make_node("LabelEncoder", ["x"], ["y2"], domain="ai.onnx.ml", keys_strings=["a", "é"],
                         values_strings=["A", "E"], default_string="?"),
             h.make_node("LabelEncoder", ["z"], ["y3"], domain="ai.onnx.ml", keys_int64s=[5, -1],
                         values_strings=["five", "minus one"]),
             h.make_node("LabelEncoder", ["x"], ["y4"], domain="ai.onnx.ml", keys_strings=["bb"],
                         values_floats=[0.5], default_float=2.5)]
    m = _model(nodes, [("x", TP.STRING, ["N"]), ("z", TP.INT64, ["K"])],
               [("y1", TP.INT64), ("y2", TP.STRING), ("y3", TP.STRING), ("y4", TP.FLOAT)])
    _check_all(m, {"x": _strs("a", "bb", "c", "é", ""), "z": np.array([5, 0, -1], np.int64)}, tmp_path)


def test_label_encoder_large_vocabulary_binary_search(tmp_path):
    rng = np.random.default_rng(3)
    keys = [f"w{k}" for k in rng.permutation(500)] + ["", "\u00e9t\u00e9", "Z", "zz"]
    m = _model([h.make_node("LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml", keys_strings=keys,
                            values_int64s=list(range(len(keys))), default_int64=-1)],
               [("x", TP.STRING, ["N"])], [("y", TP.INT64)])
    x = np.array([*rng.choice(keys, 40).tolist(), "w500", "w", "\u00e9", "zzz"], dtype=object)
    _check_all(m, {"x": x}, tmp_path)


def test_category_mapper_both_ways_matches_onnxruntime(tmp_path):
    cats = dict(cats_int64s=[1, 2, 30], cats_strings=["one", "two", "thirty"])
    nodes = [h.make_node("CategoryMapper", ["x"], ["n"], domain="ai.onnx.ml", default_int64=-5, **cats),
             h.make_node("CategoryMapper", ["z"], ["s"], domain="ai.onnx.ml", default_string="none", **cats)]
    m = _model(nodes, [("x", TP.STRING, ["N"]), ("z", TP.INT64, [2, "K"])], [("n", TP.INT64), ("s", TP.STRING)])
    _check_all(m, {"x": _strs("two", "", "thirty", "One"), "z": np.array([[1, 30, 4], [2, 2, 0]], np.int64)},
               tmp_path)


# ---- RegexFullMatch --------------------------------------------------------------------------------

@pytest.mark.parametrize("pattern", [r"[a-z]+\d*", r"(\W|^)[\w.\-]{0,25}@(yahoo|gmail)\.com(\W|$)",
                                     r"a.c|x(?:yz)+", r"\bword\b.*?", r"[^0-9]{2,}"])
def test_regex_full_match_matches_onnxruntime(pattern, tmp_path):
    m = _model([h.make_node("RegexFullMatch", ["x"], ["y"], pattern=pattern)], [("x", TP.STRING, ["N"])],
               [("y", TP.BOOL)])
    x = _strs("abc123", "abc", "a-c", "xyzyz", "word", "word here", "ab", "12", "", "me@gmail.com",
              " me@yahoo.com", "abc1x")
    _check_all(m, {"x": x}, tmp_path)


def test_regex_refuses_non_ascii_where_posix_reads_bytes(tmp_path):
    m = _model([h.make_node("RegexFullMatch", ["x"], ["y"], pattern="a.c")], [("x", TP.STRING, ["N"])],
               [("y", TP.BOOL)])
    lib = _native(m, tmp_path)
    _same(lib.run({"x": _strs("abc", "ac")})["y"], np.array([True, False]))
    with pytest.raises(RuntimeCallError, match="element 1 holds a non-ASCII character"):
        lib.run({"x": _strs("abc", "aéc")})


@pytest.mark.parametrize("pattern,why", [(r"a(?=b)", "lookaround"), (r"(?i)abc", "flags"), (r"\p{L}", r"\\p"),
                                         (r"(a)\1", r"\\1"), ("é", "non-ASCII"), (r"[[:alpha:]]", "POSIX class")])
def test_regex_patterns_outside_the_subset_are_refused(pattern, why, tmp_path):
    with pytest.raises(PatternError, match=why):
        translate(pattern)
    m = _model([h.make_node("RegexFullMatch", ["x"], ["y"], pattern=pattern)], [("x", TP.STRING, ["N"])],
               [("y", TP.BOOL)])
    with pytest.raises(UnsupportedOp, match=r"RegexFullMatch.*pattern"):
        onnxcc.compile(m, tmp_path / "r", name="r")


def test_regex_translation_forms():
    t = translate(r"[\w.\-]+@x\.com")
    assert t.posix == r"^([0-9A-Za-z_.-]+@x\.com)$" and not t.byte_sensitive
    assert translate(r"a+?b{2,}?").posix == "^(a+b{2,})$"  # laziness never changes a full match
    assert translate(r"[^a]").byte_sensitive and translate("a.").byte_sensitive


# ---- StringNormalizer and StringSplit (run-time sized results) -----------------------------------

# locale "C": onnxruntime builds the default en_US.UTF-8 only where that locale is installed
@pytest.mark.parametrize("attrs", [dict(case_change_action="UPPER", stopwords=["the", "Is"], is_case_sensitive=0),
                                   dict(case_change_action="LOWER", stopwords=["The"], is_case_sensitive=1),
                                   dict(case_change_action="NONE")])
def test_string_normalizer_matches_onnxruntime(attrs, tmp_path):
    m = _model([h.make_node("StringNormalizer", ["x"], ["y"], locale="C", **attrs)], [("x", TP.STRING, [1, "C"])],
               [("y", TP.STRING)])
    lib = _native(m, tmp_path)
    for x in (_strs("The", "cat", "is", "HERE").reshape(1, 4), _strs("the", "is").reshape(1, 2)):
        want = ort_run(m, {"x": x})["y"]
        _same(lib.run({"x": x})["y"], want)
        _same(_interp(m, {"x": x})[0], want)


def test_string_normalizer_refuses_non_ascii_case_change(tmp_path):
    m = _model([h.make_node("StringNormalizer", ["x"], ["y"], case_change_action="UPPER")],
               [("x", TP.STRING, ["C"])], [("y", TP.STRING)])
    lib = _native(m, tmp_path)
    _same(lib.run({"x": _strs("ab", "c")})["y"], _strs("AB", "C"))
    with pytest.raises(RuntimeCallError, match="non-ASCII"):
        lib.run({"x": _strs("ab", "é")})


def test_string_split_with_maxsplit_matches_onnxruntime(tmp_path):
    m = _model([h.make_node("StringSplit", ["x"], ["y", "n"], delimiter="-", maxsplit=2)],
               [("x", TP.STRING, ["N"])], [("y", TP.STRING), ("n", TP.INT64)])
    lib = _native(m, tmp_path)
    for x in (_strs("a-b-c-d", "", "x", "--"), _strs("a", "b"), _strs("")):
        want = ort_run(m, {"x": x})
        got = lib.run({"x": x})
        _same(got["y"], want["y"])
        _same(got["n"], want["n"])


def test_string_split_without_maxsplit_matches_onnxruntime_up_to_its_cap(tmp_path):
    m = _model([h.make_node("StringSplit", ["x"], ["y", "n"])], [("x", TP.STRING, ["N"])],
               [("y", TP.STRING), ("n", TP.INT64)])
    lib = _native(m, tmp_path)
    x = _strs(" a  b ", "c", "", "d e   f ")
    want = ort_run(m, {"x": x})
    for got in (lib.run({"x": x}), dict(zip(("y", "n"), _interp(m, {"x": x}), strict=True))):
        _same(got["y"], want["y"])
        _same(got["n"], want["n"])
    # tabs and newlines: the spec splits there, onnxruntime does not; refused natively
    with pytest.raises(RuntimeCallError, match="whitespace other than spaces"):
        lib.run({"x": _strs("a\tb")})
    # more substrings than the build allocates for: an error naming the way out, never a cut
    many = _strs(" ".join("w" * 40))
    with pytest.raises(RuntimeCallError, match=r"splits into 40 substrings, more than the 32 .* --dim splits=1:N"):
        lib.run({"x": many})
    wide = onnxcc.compile(m, tmp_path / "wide", name="wide", dims={"splits": (1, 64)})
    assert wide is not None
    _same(onnxcc.load(tmp_path / "wide").run({"x": many})["y"], ort_run(m, {"x": many})["y"])


# ---- text forms, refusals, bad input -------------------------------------------------------------

def test_str_dtype_prints_and_parses_back():
    text = '''module @t {
  func @main(%x: str[2]) -> (str[2]) {
    %0 = cc.const() {value = dense<str[2]: ["a \\\\ \\" b", "\\n"]>} : (str[2])
    %1 = onnx.StringConcat(%x, %0) : (str[2])
    return %1
  }
}'''
    mod = parse_module(text)
    once = str(mod)
    assert str(parse_module(once)) == once
    const = next(op for op in mod.main.body.walk() if op.name == "cc.const")
    assert const.attrs["value"].tolist() == ['a \\ " b', "\n"] and const.result.type.dtype is DType.string


def test_call_stmt_prints_parses_and_verifies():
    p = KernelProgram.new("k", ["n"])
    p.input("a", DType.string, ["n"])
    p.input("b", DType.string, ["n"])
    p.output("y", DType.string, ["n"])
    p.body.append(CallStmt("onnxcc_str_concat", (SymRef("n"),), ("a", "b", "y"), ("y",)))
    p.verify()
    text = str(p)
    assert "call onnxcc_str_concat(n; a, b, y) -> y" in text
    assert str(parse_program(text)) == text
    bad = KernelProgram.new("k", ["n"])
    bad.input("a", DType.string, ["n"])
    bad.body.append(CallStmt("f", (SymRef("n"),), ("a",), ("a",)))
    with pytest.raises(OnnxccError, match="writes input buffer a"):
        bad.verify()


def test_ops_without_a_string_lowering_refuse_strings(tmp_path):
    m = _model([h.make_node("ReduceMax", ["x"], ["y"], keepdims=0)], [("x", TP.STRING, [3])],
               [("y", TP.STRING)])
    with pytest.raises(UnsupportedOp, match="string values are not supported by this op"):
        onnxcc.compile(m, tmp_path / "rm", name="rm")


def test_jit_and_cuda_refuse_strings(tmp_path):
    from onnxcc.testing import jit_compile

    m = _model([h.make_node("StringConcat", ["a", "a"], ["y"])], [("a", TP.STRING, ["N"])], [("y", TP.STRING)])
    with pytest.raises(OnnxccError, match="in-process JIT does not run string tensors"):
        jit_compile(m)
    with pytest.raises(OnnxccError, match="string tensors are not supported by the CUDA backend"):
        onnxcc.compile(m, tmp_path / "cu", name="cu", target="cuda")


def test_cast_strings_and_numbers_match_onnxruntime(tmp_path):
    nodes = [h.make_node("Cast", ["s"], ["f"], to=TP.FLOAT), h.make_node("Cast", ["s"], ["d"], to=TP.DOUBLE),
             h.make_node("Cast", ["s"], ["h"], to=TP.FLOAT16), h.make_node("Cast", ["i"], ["is"], to=TP.STRING),
             h.make_node("Cast", ["si"], ["i8"], to=TP.INT8), h.make_node("Cast", ["si"], ["i64"], to=TP.INT64)]
    m = _model(nodes, [("s", TP.STRING, ["N"]), ("i", TP.INT64, ["K"]), ("si", TP.STRING, ["M"])],
               [("f", TP.FLOAT), ("d", TP.DOUBLE), ("h", TP.FLOAT16), ("is", TP.STRING), ("i8", TP.INT8),
                ("i64", TP.INT64)])
    feeds = {"s": _strs("3.14", "-1e-5", "1E8", "INF", "-inf", "+INF", "100.5", ".5", "7.", "1e39"),
             "i": np.array([0, -12, 2**62], np.int64), "si": _strs("-12", "+7", "127")}
    lib = _check_all(m, feeds, tmp_path)
    # text the spec leaves undefined, and values outside the target: errors, never a guess
    with pytest.raises(RuntimeCallError, match="element 1 is not a number literal"):
        lib.run({**feeds, "s": _strs("1", " 2")})
    with pytest.raises(RuntimeCallError, match=r"element 0 is not an integer literal in \[-128, 127\]"):
        lib.run({**feeds, "si": _strs("300")})


@pytest.mark.parametrize("elem,why", [(TP.FLOAT, "casts from f32 to strings"), (TP.BOOL, "casts from bool")])
def test_cast_of_floats_and_bools_to_strings_is_refused(elem, why, tmp_path):
    m = _model([h.make_node("Cast", ["x"], ["y"], to=TP.STRING)], [("x", elem, [2])], [("y", TP.STRING)])
    with pytest.raises(OnnxccError, match=why):
        _interp(m, {"x": np.zeros(2, np.float32 if elem == TP.FLOAT else bool)})
    with pytest.raises(UnsupportedOp, match=why):
        onnxcc.compile(m, tmp_path / "c", name="c")


def test_bad_string_inputs_are_clear_errors(tmp_path):
    m = _model([h.make_node("StringConcat", ["a", "a"], ["y"])], [("a", TP.STRING, ["N"])], [("y", TP.STRING)])
    lib = _native(m, tmp_path)
    with pytest.raises(GuardError, match="expected strings"):
        lib.run({"a": np.zeros(2, np.float32)})
    with pytest.raises(GuardError, match="element 1: holds a NUL character"):
        lib.run({"a": _strs("a", "b\0c")})
    with pytest.raises(GuardError, match="element 0: expected a str, got int"):
        lib.run({"a": _strs(3)})
    _same(lib.run({"a": np.array([b"x", "\u00e9".encode()], dtype=object)})["y"], _strs("xx", "éé"))
