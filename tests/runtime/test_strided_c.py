"""Strided inputs and in-place calls from C (issue 15, items 5-6): tests/runtime/strided.c
calls two artifacts, built with -fsanitize=address,undefined where the compiler has them,
with strided views (steps, row pitch + byte_offset, negative and zero strides, transposed):
each must give what the compact call gives (float32, relative tolerance 1e-6: the same
kernel runs on the same values, compacted first). A call whose output aliases an input
exactly runs in place where the version was proved safe (and is right); every other
overlap is refused with a message naming both tensors, the memory untouched."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from onnx import TensorProto, helper

from onnxcc.kernel.in_place import in_place_pairs
from onnxcc.testing_c import driver_rows, relu_mul_add_model, run_sanitized_driver, save_graph

HERE = Path(__file__).parent


def sq_model(path: Path) -> Path:
    """y = a + Transpose(a): y[i, j] reads a[j, i] too, so it cannot run in place."""
    vi = helper.make_tensor_value_info
    g = helper.make_graph([helper.make_node("Transpose", ["a"], ["t"], perm=[1, 0]),
                           helper.make_node("Add", ["a", "t"], ["y"])], "sq",
                          [vi("a", TensorProto.FLOAT, [4, 4])], [vi("y", TensorProto.FLOAT, [4, 4])])
    return save_graph(g, path)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("strided")
    models = {"st": relu_mul_add_model(tmp / "st.onnx", "st"), "sq": sq_model(tmp / "sq.onnx")}
    lines, dirs = run_sanitized_driver(tmp, models, HERE / "strided.c")
    st, sq = dirs["st"], dirs["sq"]
    rows = driver_rows(lines, ("rc", "right", "version"))
    return rows, st, sq


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
@pytest.mark.parametrize("case", ["compact", "compact-strides", "step-2", "row-pitch-offset", "negative",
                                  "negative-1d", "transposed", "zero-stride-rows", "zero-stride-1d",
                                  "sq-transposed"])
def test_strided_inputs_match_compact(results, case):
    rc, right, _, msg = results[0][case]
    assert (rc, right) == (0, 1), msg


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_in_place_where_proved(results):
    rows, st, _ = results
    for case in ("in-place", "in-place-offset"):
        rc, right, version, msg = rows[case]
        assert (rc, right, version) == (0, 1, 0), (case, msg)
    meta = json.loads((st / "st.json").read_text())
    assert meta["in_place"] == [{"version": 0, "output": "y", "input": "a"}]
    assert meta["strided_inputs"] == ["a", "b"]
    header = (st / "st.h").read_text()
    assert 'version 0: "y" over "a"' in header and "Served strided: a, b" in header


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_other_overlaps_stay_refused(results):
    rows, _, sq = results
    for case in ("partial-overlap", "strided-alias", "output-over-smaller-input"):
        rc, right, _, msg = rows[case]
        assert rc == 1 and right == 1, (case, msg)
        assert msg.startswith('output "y" overlaps input "'), (case, msg)
    rc, untouched, _, msg = rows["sq-in-place"]
    assert (rc, untouched) == (1, 1)
    assert msg.startswith('output "y" overlaps input "a" in memory; in-place calls are not supported by the '
                          "version this call runs"), msg
    assert json.loads((sq / "sq.json").read_text())["in_place"] == []


def test_in_place_proof_on_programs():
    """The proof itself, on kernel programs: own-index reads pass; a shifted read, a read
    after the write, a reduction and a second writer do not."""
    from onnxcc.ir import DType
    from onnxcc.kernel import KernelProgram

    def prog(build):
        p = KernelProgram.new("p", ["N"])
        import sympy
        n = sympy.Symbol("N", integer=True, positive=True)
        x = p.input("in0", DType.f32, (n, 4))
        y = p.output("out0", DType.f32, (n, 4))
        build(p, x, y)
        return p

    assert in_place_pairs(prog(lambda p, x, y: p.compute(y, lambda i, j: x[i, j] * 2.0 + x[i, j]))) == [(0, 0)]
    assert in_place_pairs(prog(lambda p, x, y: p.compute(y, lambda i, j: x[i, (j + 1) % 4]))) == []

    def later_read(p, x, y):
        p.compute(y, lambda i, j: x[i, j] + 1.0)
        t = p.temp("t", DType.f32, x.shape)
        p.compute(t, lambda i, j: x[i, j])
    assert in_place_pairs(prog(later_read)) == []

    def earlier_read(p, x, y):
        t = p.temp("t", DType.f32, x.shape)
        p.compute(t, lambda i, j: x[i, 3 - j])
        p.compute(y, lambda i, j: x[i, j] + t[i, j])
    assert in_place_pairs(prog(earlier_read)) == [(0, 0)]

    def two_writers(p, x, y):
        p.compute(y, lambda i, j: x[i, j])
        p.compute(y, lambda i, j: y[i, j] + 1.0)
    assert in_place_pairs(prog(two_writers)) == []

    from onnxcc.kernel import Var, rsum

    k = Var("k")
    # a reduction in the writer: it may keep partial results in the output while reading
    assert in_place_pairs(prog(lambda p, x, y: p.compute(y, lambda i, j: x[i, j] + rsum([(k, 4)], x[i, k])))) == []

    def through_view(p, x, y):
        v = p.view("v", x, x.shape)
        p.compute(y, lambda i, j: v[i, j])
    assert in_place_pairs(prog(through_view)) == []
