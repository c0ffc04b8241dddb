"""The ONNX backend node tests through onnxcc (see onnxcc.conformance).

Every case listed in expected_<executor>.txt must still pass: a regression fails the build.
By default only a fast subset runs (the first listed case of each op; for the native
executor, of at most 15 ops spread over the list, since each case compiles); `-m slow` runs
the whole list. Regenerate the lists with `python -m onnxcc.conformance --update interp` (or
`python tests/conformance/update_expected.py interp`) after an op or importer change.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import onnx
import pytest

from onnxcc import conformance as conf

HERE = Path(__file__).resolve().parent
EXECUTORS = ("interp", "native")


def _entries(executor: str) -> list[tuple[str, str]]:
    return conf.read_expected(HERE / f"expected_{executor}.txt")[0]


#: the fast subset's size cap per executor (a native case compiles and links with cc: ~0.7 s each)
FAST_MAX = {"interp": None, "native": 15}


def _fast(entries: list[tuple[str, str]], limit: int | None = None) -> list[str]:
    """The first listed case of each op (the list is sorted by case name); with `limit`, that of
    every k-th op only, spread evenly over the ops, at most `limit` cases."""
    seen, out = set(), []
    for name, op in entries:
        if op not in seen:
            seen.add(op)
            out.append(name)
    if limit and len(out) > limit:
        step = len(out) / limit
        out = [out[int(i * step)] for i in range(limit)]
    return out


def _params(executor: str, fast: bool) -> list:
    entries = _entries(executor)
    # an empty list would turn every gate into nothing: it is a failure of the existence test,
    # and here one param that fails loudly rather than a silent skip
    if not entries:
        return [pytest.param(None, id="no-expected-cases")]
    return _fast(entries, FAST_MAX[executor]) if fast else [n for n, _ in entries]


def _check(name: str | None, executor: str) -> None:
    assert name is not None, f"expected_{executor}.txt lists no cases: the conformance gate tests nothing"
    try:
        case = conf.get_case(name)
    except KeyError:
        pytest.fail(f"{name}: not in the installed onnx {onnx.__version__} (the list is stale: regenerate it)")
    r = conf.run_case(case, conf.EXECUTORS[executor])
    assert r.status == "pass", f"{name} ({r.op}) regressed: {r.status}: {r.detail}"


@pytest.mark.parametrize("name", _params("interp", fast=True))
def test_onnx_conformance_interp_fast(name):
    _check(name, "interp")


@pytest.mark.slow
@pytest.mark.parametrize("name", _params("interp", fast=False))
def test_onnx_conformance_interp_full(name):
    _check(name, "interp")


@pytest.mark.parametrize("name", _params("native", fast=True))
def test_onnx_conformance_native_fast(name):
    _check(name, "native")


@pytest.mark.slow
@pytest.mark.parametrize("name", _params("native", fast=False))
def test_onnx_conformance_native_full(name):
    _check(name, "native")


@pytest.mark.parametrize("executor", EXECUTORS)
def test_onnx_conformance_expected_cases_exist(executor):
    path = HERE / f"expected_{executor}.txt"
    assert path.exists(), f"{path} is missing: python -m onnxcc.conformance --update {executor}"
    entries, version = conf.read_expected(path)
    assert version, f"{path}: header has no '# onnx <version>' line"
    assert [n for n, _ in entries] == sorted({n for n, _ in entries}), f"{path}: not sorted or has duplicates"
    assert entries, f"{path.name} lists no cases: python -m onnxcc.conformance --update {executor}"
    names = {c.name: c for c in conf.collect_cases()}
    missing = [n for n, _ in entries if n not in names]
    wrong_op = [(n, op, conf.case_op(names[n])) for n, op in entries
                if n in names and conf.case_op(names[n]) != op]
    # the test extra pins onnx, so a list made with another version is stale, not a reason to skip
    assert version == onnx.__version__, (f"{path.name} was made with onnx {version}, installed is "
                                         f"{onnx.__version__}: regenerate it or fix the pin in pyproject.toml")
    assert not missing, f"{path.name}: cases not in onnx {onnx.__version__}: {missing[:10]}"
    assert not wrong_op, f"{path.name}: op annotations out of date (name, listed, actual): {wrong_op[:10]}"


# ---- the harness itself -----------------------------------------------------------------------

def test_conformance_case_op_rule():
    assert conf.case_op(conf.get_case("test_softmax_axis_0")) == "Softmax"
    expanded = conf.get_case("test_softmax_axis_0_expanded")
    assert conf.is_expanded(expanded) and conf.case_op(expanded) == "Softmax"
    assert "ReduceMax" in conf.ops_used(expanded)
    name = "test_layer_normalization_2d_axis0"
    assert conf.base_name(name + "_expanded_ver18") == name
    relu = conf.collect_cases({"Relu"})
    assert relu and all(conf.case_op(c) == "Relu" for c in relu)


def test_conformance_compare_rules():
    f = np.array([1.0, np.nan, 3.0], np.float32)
    assert conf.compare([f], [f.copy()])[0]  # NaNs compare equal
    ok, detail, err = conf.compare([f], [f + np.float32(1e-2)])
    assert not ok and "not close" in detail and err == pytest.approx(1e-2, rel=1e-3)
    assert not conf.compare([f], [f.astype(np.float64)])[0]  # dtype must match
    assert not conf.compare([f], [f[:2]])[0]  # shape must match
    assert not conf.compare([f], [])[0]  # output count must match
    i = np.array([1, 2], np.int64)
    assert conf.compare([i], [i.copy()])[0]
    assert "exact" in conf.compare([i], [i + 1])[1]


def test_conformance_random_mask_rule():
    # training Dropout cases are judged by y = x * mask / (1 - ratio) and the mask's density
    rng = np.random.default_rng(0)
    x = rng.uniform(1, 2, (20, 20)).astype(np.float32)
    mask = rng.uniform(size=x.shape) >= 0.75
    y = np.where(mask, x * 4, 0).astype(np.float32)
    ins, want = [x, np.array(0.75, np.float32), np.array(True)], [y, mask]
    assert conf.check_random_mask(ins, want, [y, mask])[0]
    assert conf.check_random_mask(ins, want[:1], [y])[0]  # no mask output: the zeros are the drops
    assert not conf.check_random_mask(ins, want, [np.where(mask, x * 2, 0).astype(np.float32), mask])[0]
    assert not conf.check_random_mask(ins, want, [x, np.ones_like(mask)])[0]  # nothing dropped
    assert not conf.check_random_mask(ins, want, [y.astype(np.float64), mask])[0]


def test_conformance_run_case_statuses():
    from onnxcc.errors import UnsupportedOp

    case = conf.get_case("test_relu")
    _, (want,) = conf.case_arrays(case)
    assert conf.run_case(case, lambda m, xs: [want.copy()]).status == "pass"
    assert conf.run_case(case, lambda m, xs: [want + 1]).status == "fail"

    def unsupported(m, xs):
        raise UnsupportedOp("Relu", "", "n0")

    def broken(m, xs):
        raise ValueError("boom")

    def slow(m, xs):
        time.sleep(5)

    assert conf.run_case(case, unsupported).status == "unsupported"
    r = conf.run_case(case, broken)
    assert r.status == "error" and "boom" in r.detail
    t0 = time.perf_counter()
    r = conf.run_case(case, slow, time_limit=0.2)
    assert r.status == "error" and "timed out" in r.detail and time.perf_counter() - t0 < 3


def test_conformance_sequences_and_optionals_go_through():
    """A sequence is a list, an absent optional None, compared element by element."""
    case = conf.get_case("test_identity_sequence")
    assert conf.run_case(case, lambda m, xs: xs).status == "pass"
    r = conf.run_case(case, lambda m, xs: [xs[0][:1]])
    assert r.status == "fail" and "sequence of 2, got 1" in r.detail
    assert conf.compare([None], [None])[0]
    assert "expected None" in conf.compare([None], [np.zeros(1)])[1]
    assert conf.input_structure(case.model, conf.case_arrays(case)[0]) == {"x": "seq:2:ranks=4,4"}


def test_conformance_expected_file_round_trip(tmp_path):
    results = [conf.CaseResult("test_b", "Add", "pass"), conf.CaseResult("test_a", "Mul", "pass"),
               conf.CaseResult("test_c", "Add", "fail", "x"),
               conf.CaseResult("test_bernoulli", "Bernoulli", "pass")]
    path = tmp_path / "expected_interp.txt"
    assert conf.write_expected(path, "interp", results) == ["test_a", "test_b"]
    entries, version = conf.read_expected(path)
    assert entries == [("test_a", "Mul"), ("test_b", "Add")] and version == onnx.__version__
    report = conf.format_report("interp", results, 1.0)
    assert "| Add | 2 | 1 | 1 | 0 | 0 |" in report


def test_conformance_case_cache_location(monkeypatch, tmp_path):
    monkeypatch.setenv("ONNXCC_CONFORMANCE_CACHE", "0")
    assert conf._cache_file() is None
    monkeypatch.setenv("ONNXCC_CONFORMANCE_CACHE", "1")
    monkeypatch.setenv("ONNXCC_CACHE_DIR", str(tmp_path))
    path = conf._cache_file()
    assert path.parent == tmp_path / "conformance" and onnx.__version__ in path.name


def test_conformance_all_ops_table_covers_every_case():
    # the report's table beside onnxruntime counts every node case once, run or not
    cases = conf.collect_cases()
    a, b = cases[0], cases[1]
    results = [conf.CaseResult(a.name, conf.case_op(a), "pass", ""),
               conf.CaseResult(b.name, conf.case_op(b), "fail", "x")]
    not_run = {}
    for c in cases[2:]:
        not_run[conf.case_op(c)] = not_run.get(conf.case_op(c), 0) + 1
    table = conf.all_ops_table(results, not_run, baseline={a.name, b.name})
    assert table.splitlines()[-1] == f"| **total** | **{len(cases)}** | **1** | **2** |"
    row = next(ln for ln in table.splitlines() if ln.startswith(f"| {conf.case_op(a)} |"))
    assert int(row.split("|")[3]) >= 1
