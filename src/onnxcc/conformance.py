"""The ONNX backend node tests, run through onnxcc.

onnx (>= 1.23) ships the node-test generators but no data files: `collect_cases()` builds
the ~1900 `onnx.backend.test.case.test_case.TestCase`s in memory (once, ~3 s, cached),
`run_case(case, executor)` runs one and compares it the way ONNX's backend runner does,
and `python -m onnxcc.conformance --update interp` rewrites the expected-pass list the
test suite checks (tests/conformance/expected_<executor>.txt) plus REPORT.md.

Which op a case belongs to: the op of the node the case was written for. Every generator
calls `expect(node, ...)`, which records the node under the case name; a function-expanded
variant (`<name>_expanded`, `<name>_expanded_ver<N>`) belongs to the same op although its
graph holds the function body. The op is the ONNX op type, prefixed with its domain when
that is not ai.onnx (`ai.onnx.ml.LabelEncoder`), i.e. the IR op name minus "onnx.". When
the generator's record is not available (a future onnx), the rule falls back to the graph:
the single op type if all nodes share one, else the first node that is not a Constant.

What `--update` runs: the cases of the ops onnxcc takes (`supported_ops()`: the registered
`onnx.*` ops, Constant and the importer's converters), plus function-expanded cases of other
ops whose bodies use only those ops. Every executor gets the case's model exactly as it is,
whatever its opset (old opsets are the importer's business, as they are for a user); the
`native` executor goes through the public path `onnxcc run` uses: onnxcc.compile, onnxcc.load,
run.

`--update ort` runs every case through onnxruntime (`ort_executor`) and writes
expected_ort.txt: not a gate, the baseline beside which REPORT_native.md / REPORT.md give a
per-op table over every case, registered op or not.

`--model-sets` runs onnx's own model directories instead (onnxcc.model_sets), through the same
executors and comparison; `--ort` adds onnxruntime's count on the same comparison.

Statuses: pass; fail (ran, wrong count / shape / dtype / values); unsupported (UnsupportedOp or
NotImplementedError anywhere in the cause chain, or inputs the harness cannot pass: sequences,
optionals, dtypes onnxcc's DType lacks); error (anything else, including the per-case time limit).

An executor is `fn(model, inputs: list[np.ndarray]) -> list[np.ndarray]`, the model an
onnx.ModelProto (node cases) or a path (model sets), as a user hands either to onnxcc.
This module sits on top of the compiler (like the CLI): it imports frontend, passes and interp.
"""

from __future__ import annotations

import argparse
import collections
import functools
import hashlib
import os
import pickle
import re
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

Executor = Callable[[object, list], list]

#: where the test suite keeps its expected-pass lists (src/onnxcc/ -> parents[2] = repo root)
EXPECTED_DIR = Path(__file__).resolve().parents[2] / "tests" / "conformance"

#: per-case wall-clock limit in seconds (SIGALRM; only where run from the main thread)
TIME_LIMIT = 20.0
#: cases whose inputs plus expected outputs exceed this many bytes are not run
MAX_CASE_BYTES = 64 << 20
#: ops whose results are random: run and reported, but never put in an expected-pass list
NONDETERMINISTIC_OPS = frozenset({"Bernoulli", "Multinomial", "RandomNormal", "RandomNormalLike",
                                  "RandomUniform", "RandomUniformLike"})
#: Training-mode Dropout cases with a nonzero ratio: their expected values come from numpy's
#: global RNG, which no implementation reproduces (onnxruntime fails them too), so `run_case`
#: checks what is deterministic instead (`check_random_mask`).
RANDOM_MASK_CASES = frozenset({"test_training_dropout", "test_training_dropout_default",
                               "test_training_dropout_default_mask", "test_training_dropout_mask"})
#: ONNX's backend-runner defaults (every node case carries these today)
DEFAULT_RTOL, DEFAULT_ATOL = 1e-3, 1e-7

_EXPANDED = re.compile(r"_expanded(_ver\d+)?$")


@dataclass(frozen=True)
class CaseResult:
    name: str
    op: str
    status: str  # 'pass' | 'fail' | 'unsupported' | 'error'
    detail: str = ""
    max_abs_err: float | None = None
    seconds: float = 0.0


class NotRunnable(Exception):
    """The harness cannot hand this case to an executor (sequence inputs, exotic dtypes...)."""


class BackendUnavailable(Exception):
    """The executor's backend is missing (e.g. the native compiler is not built yet)."""


class CaseTimeout(BaseException):
    """Raised by the per-case alarm; a BaseException so `except Exception` in onnxcc cannot eat it."""


# ---- collecting cases -------------------------------------------------------------------------

@functools.lru_cache(maxsize=1)
def _all_cases() -> tuple:
    """Every node case, sorted by name. Generating them takes ~3 s, so they are pickled (with
    the op each was written for) once per onnx / numpy / Python version under the onnxcc cache
    directory (ONNXCC_CACHE_DIR, else ~/.cache/onnxcc); ONNXCC_CONFORMANCE_CACHE=0 turns it off."""
    path = _cache_file()
    if path is not None and path.is_file():
        try:
            with open(path, "rb") as f:
                fmt, cases, ops = pickle.load(f)
            if fmt == _CACHE_FORMAT:
                _CASE_OPS.update(ops)
                return cases
        except Exception:  # a stale or torn file: rebuild it
            pass
    cases = _generate_cases()
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            with open(tmp, "wb") as f:
                pickle.dump((_CACHE_FORMAT, cases, dict(_CASE_OPS)), f, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, path)
        except OSError:
            pass
    return cases


#: bump when what the cache file holds changes
_CACHE_FORMAT = 1
#: case name -> op key, from onnx's generator records (filled by `_all_cases`)
_CASE_OPS: dict[str, str] = {}


def _cache_file() -> Path | None:
    if os.environ.get("ONNXCC_CONFORMANCE_CACHE", "1").lower() in ("0", "no", "off", "false"):
        return None
    import onnx

    from onnxcc.runtime.cache import default_root

    where = Path(onnx.__file__).resolve().parent
    tag = f"onnx{onnx.__version__}-np{np.__version__}-py{sys.version_info[0]}{sys.version_info[1]}"
    key = hashlib.sha256(f"{tag}|{where}|{_CACHE_FORMAT}".encode()).hexdigest()[:12]
    return default_root() / "conformance" / f"cases-{tag}-{key}.pkl"


def _generate_cases() -> tuple:
    from onnx.backend.test.case import node

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        cases = list(node.collect_testcases(None))
    seen, out = set(), []
    for c in cases:  # collect_testcases appends to a module-level list: guard against repeats
        if c.name not in seen:
            seen.add(c.name)
            out.append(c)
    # every generator calls expect(node, ...), which records the node under the case name
    records = getattr(node, "_existing_names", {})
    for c in out:
        rec = records.get(base_name(c.name))
        if rec is not None:
            _CASE_OPS[c.name] = _op_key(rec.op_type, rec.domain)
    return tuple(sorted(out, key=lambda c: c.name))


@functools.lru_cache(maxsize=1)
def _by_name() -> dict:
    return {c.name: c for c in _all_cases()}


def _op_key(op_type: str, domain: str) -> str:
    return op_type if domain in ("", "ai.onnx") else f"{domain}.{op_type}"


def case_op(case) -> str:
    """The op a case was written for (see the module docstring for the rule)."""
    _all_cases()
    op = _CASE_OPS.get(case.name)
    if op is not None:
        return op
    nodes = list(case.model.graph.node)
    kinds = {_op_key(n.op_type, n.domain) for n in nodes}
    if len(kinds) == 1:
        return kinds.pop()
    for n in nodes:
        if n.op_type != "Constant":
            return _op_key(n.op_type, n.domain)
    return _op_key(nodes[0].op_type, nodes[0].domain) if nodes else "?"


def base_name(name: str) -> str:
    """`test_softmax_axis_0_expanded_ver18` -> `test_softmax_axis_0`."""
    return _EXPANDED.sub("", name)


def is_expanded(case) -> bool:
    return bool(_EXPANDED.search(case.name))


def ops_used(case) -> set[str]:
    """Every op type in the case's graph, subgraphs included."""
    out: set[str] = set()

    def walk(g):
        for n in g.node:
            out.add(_op_key(n.op_type, n.domain))
            for a in n.attribute:
                if a.HasField("g"):
                    walk(a.g)
                for sg in a.graphs:
                    walk(sg)

    walk(case.model.graph)
    return out


def collect_cases(ops: Iterable[str] | None = None, *, names: Iterable[str] | None = None,
                  with_expanded_bodies: bool = False) -> list:
    """The node cases (sorted by name) for `ops` (op keys as `case_op` gives them; None: all).

    With `with_expanded_bodies`, also the function-expanded cases of other ops whose graphs
    use only ops in `ops` (they test those ops through another op's function body).
    `names` restricts to those case names.
    """
    cases = list(_all_cases())
    if names is not None:
        want = set(names)
        cases = [c for c in cases if c.name in want]
    if ops is None:
        return cases
    ops = set(ops)
    return [c for c in cases if case_op(c) in ops
            or (with_expanded_bodies and is_expanded(c) and ops_used(c) <= ops)]


def get_case(name: str):
    """One case by name; KeyError if the installed onnx has no such case."""
    return _by_name()[name]


def supported_ops() -> set[str]:
    """Op keys onnxcc takes: `onnxcc.ops.registered_ops()` minus the "onnx." prefix, plus the ops
    the importer itself rewrites (Constant -> cc.const, the converters in frontend/onnx_ops.py,
    the sequence and optional ops of frontend/sequences.py, Scatter through the version converter)."""
    from onnxcc.ops import registered_ops

    out = {"Constant", "Scatter"}  # Scatter: the version converter rewrites it (ScatterElements)
    try:
        from onnxcc.frontend.onnx_ops import CONVERTERS
        from onnxcc.frontend.sequences import SEQUENCE_OPS  # resolved while importing

        out |= set(CONVERTERS) | set(SEQUENCE_OPS)
    except ImportError:
        pass
    for n in registered_ops():
        if n.startswith("onnx."):
            out.add(n[len("onnx."):])
        elif not n.startswith(("cc.", "test.")) and n not in ("return", "yield"):
            out.add(n)  # another domain, e.g. com.microsoft.Gelu: op keys keep the domain
    return out


# ---- inputs and comparison --------------------------------------------------------------------

def _as_array(x, what: str) -> np.ndarray:
    from onnx import TensorProto, numpy_helper

    if isinstance(x, TensorProto):
        return numpy_helper.to_array(x)
    if isinstance(x, (list, tuple)):  # a sequence: passed as a list, as a user does
        return [_as_array(e, f"{what} element {k}") for k, e in enumerate(x)]
    if x is None:  # an absent optional
        return None
    if isinstance(x, dict):
        raise NotRunnable(f"{what} is a map")
    return np.asarray(x)


@functools.lru_cache(maxsize=1)
def _supported_elem_types() -> frozenset:
    """ONNX elem types onnxcc's DType covers."""
    from onnx import TensorProto as T

    table = {"f16": T.FLOAT16, "bf16": T.BFLOAT16, "f32": T.FLOAT, "f64": T.DOUBLE, "i8": T.INT8,
             "i16": T.INT16, "i32": T.INT32, "i64": T.INT64, "u8": T.UINT8, "u16": T.UINT16,
             "u32": T.UINT32, "u64": T.UINT64, "bool": T.BOOL, "f8e4m3fn": T.FLOAT8E4M3FN,
             "f8e4m3fnuz": T.FLOAT8E4M3FNUZ, "f8e5m2": T.FLOAT8E5M2, "f8e5m2fnuz": T.FLOAT8E5M2FNUZ,
             "f8e8m0": T.FLOAT8E8M0, "f4e2m1": T.FLOAT4E2M1, "i4": T.INT4, "u4": T.UINT4, "i2": T.INT2,
             "u2": T.UINT2, "str": T.STRING}
    try:
        from onnxcc.ir import DType

        return frozenset(table[d.value] for d in DType if d.value in table)
    except ImportError:  # pragma: no cover
        return frozenset(table.values())


def check_io_types(case) -> None:
    """NotRunnable unless every graph input and output of the case (or model) is a tensor of a
    dtype onnxcc has."""
    from onnx import TensorProto

    ok = _supported_elem_types()
    model = getattr(case, "model", case)
    for kind, vis in (("input", model.graph.input), ("output", model.graph.output)):
        for vi in vis:
            t = vi.type
            # sequences and optionals of tensors go through as lists and None
            while t.WhichOneof("value") in ("sequence_type", "optional_type"):
                t = getattr(t, t.WhichOneof("value")).elem_type
            which = t.WhichOneof("value")
            if which != "tensor_type":
                raise NotRunnable(f"{kind} {vi.name!r} is a {which or 'value without a type'}")
            et = t.tensor_type.elem_type
            if et not in ok:
                raise NotRunnable(f"{kind} {vi.name!r} has dtype {TensorProto.DataType.Name(et).lower()}")


def case_arrays(case) -> tuple[list, list]:
    """(inputs, expected outputs) of the case's first data set as numpy arrays (a sequence a
    list of them, an absent optional None)."""
    if not case.data_sets:
        raise NotRunnable("case has no data set")
    ins, outs = case.data_sets[0]
    return ([_as_array(x, f"input {i}") for i, x in enumerate(ins)],
            [_as_array(x, f"output {i}") for i, x in enumerate(outs)])


def _exact(dt: np.dtype) -> bool:
    return dt.kind in "biuUSO" or dt == np.bool_


def _is_ml_float(dt: np.dtype) -> bool:
    """bfloat16, float8_* and friends from ml_dtypes (numpy sees them as kind 'V')."""
    return dt.kind == "V" and dt.names is None


def compare(expected: list[np.ndarray], got: list, rtol: float = DEFAULT_RTOL,
            atol: float = DEFAULT_ATOL) -> tuple[bool, str, float | None]:
    """ONNX's backend rule: same count, shape and dtype; assert_allclose(rtol, atol) with NaNs equal;
    exact for bool / int / strings. Returns (ok, detail, max_abs_err over float outputs)."""
    if len(got) != len(expected):
        return False, f"expected {len(expected)} outputs, got {len(got)}", None
    flat = _flatten_pairs(expected, got)
    if isinstance(flat, str):
        return False, flat, None
    worst: float | None = None
    for i, (e, g) in enumerate(flat):
        g = np.asarray(g)
        if g.shape != e.shape:
            return False, f"output {i}: shape {g.shape} != expected {e.shape}", worst
        if g.dtype != e.dtype:
            return False, f"output {i}: dtype {g.dtype} != expected {e.dtype}", worst
        r = rtol
        if _is_ml_float(e.dtype):
            if e.dtype.name == "bfloat16":
                r = max(rtol, 2 ** -6)  # two bf16 ulps, as ONNX's runner allows
            e, g = e.astype(np.float32), g.astype(np.float32)
        if _exact(e.dtype):
            if not np.array_equal(e, g):
                bad = int(np.sum(e != g))
                return False, f"output {i}: {bad} of {e.size} elements differ (exact compare)", worst
            continue
        err = _max_abs_err(e, g)
        if err is not None:
            worst = err if worst is None else max(worst, err)
        try:
            np.testing.assert_allclose(g, e, rtol=r, atol=atol, equal_nan=True)
        except AssertionError as ex:
            return False, f"output {i}: not close (rtol={r:g}, atol={atol:g}): {_assert_summary(ex)}", worst
    return True, "", worst


def check_random_mask(inputs: list, expected: list, got: list, rtol: float = DEFAULT_RTOL,
                      atol: float = DEFAULT_ATOL) -> tuple[bool, str, float | None]:
    """Dropout(x, ratio, training_mode=true) -> y [, mask], judged without the RNG's values:
    same shapes and dtypes as expected, y = x / (1 - ratio) where the mask keeps and 0 where
    it drops, and the kept fraction within 4 standard deviations (+1) of 1 - ratio."""
    if len(got) != len(expected):
        return False, f"expected {len(expected)} outputs, got {len(got)}", None
    got = [np.asarray(g) for g in got]
    for i, (e, g) in enumerate(zip(expected, got)):
        if g.shape != e.shape or g.dtype != e.dtype:
            return False, f"output {i}: {g.dtype}{list(g.shape)} != expected {e.dtype}{list(e.shape)}", None
    x, ratio = np.asarray(inputs[0], dtype=np.float64), float(np.asarray(inputs[1]).reshape(-1)[0])
    y = got[0].astype(np.float64)
    keep = got[1] if len(got) > 1 else y != 0
    want = np.where(keep, x / (1.0 - ratio), 0.0)
    err = _max_abs_err(want, y)
    if not np.allclose(y, want, rtol=rtol, atol=atol):
        return False, f"output 0 is not x / (1 - ratio) where kept and 0 elsewhere (max error {err})", err
    n, p = keep.size, 1.0 - ratio
    kept = int(np.count_nonzero(keep))
    if abs(kept - n * p) > 4 * np.sqrt(n * p * (1 - p)) + 1:
        return False, f"kept {kept} of {n} elements; keep probability {p} expects about {n * p:g}", err
    return True, "", err


def _flatten_pairs(expected: list, got: list) -> list | str:
    """(expected, got) tensor pairs with sequences (lists) and absent optionals (None)
    matched structurally; a message where the structure differs."""
    out: list = []
    for i, (e, g) in enumerate(zip(expected, got)):
        if e is None or g is None:
            if (e is None) != (g is None):
                return f"output {i}: expected {'None' if e is None else 'a value'}, got " \
                       f"{'None' if g is None else 'a value'}"
        elif isinstance(e, list):
            if not isinstance(g, (list, tuple)):
                return f"output {i}: expected a sequence, got {type(g).__name__}"
            if len(g) != len(e):
                return f"output {i}: expected a sequence of {len(e)}, got {len(g)}"
            out += list(zip(e, g))
        elif isinstance(g, (list, tuple)):
            return f"output {i}: expected a tensor, got a sequence"
        else:
            out.append((e, g))
    return out


def _leaves(xs: list) -> list[np.ndarray]:
    return [a for x in xs if x is not None for a in (x if isinstance(x, list) else [x])]


def _input_names(model) -> list[str]:
    """The model's graph inputs, in order (a path is read without its external data)."""
    if isinstance(model, (str, Path)):
        import onnx

        model = onnx.load(str(model), load_external_data=False)
    return [vi.name for vi in model.graph.input]


def input_structure(model, inputs: list) -> dict[str, str]:
    """The structure spec of each sequence / optional input, read off the values given (what
    a user passes to `compile(..., input_structure=...)`)."""
    from onnxcc.io_structure import spec_of

    if isinstance(model, (str, Path)):  # the model sets hand the executor a path
        import onnx

        model = onnx.load(str(model), load_external_data=False)
    out = {}
    for vi, x in zip(model.graph.input, inputs):
        kind = vi.type.WhichOneof("value")
        if kind in ("sequence_type", "optional_type"):
            out[vi.name] = spec_of(x, kind == "optional_type")
    return out


def _assert_summary(ex: AssertionError) -> str:
    """numpy's assert_allclose message without the header and the array dumps."""
    keep = []
    for ln in str(ex).splitlines():
        ln = ln.strip()
        if ln.startswith(("ACTUAL", "DESIRED", "x:", "y:", "First ", "Mismatch at")):
            break
        if ln and not ln.startswith("Not equal to tolerance"):
            keep.append(ln.rstrip(":"))
    return "; ".join(keep)


def _max_abs_err(e: np.ndarray, g: np.ndarray) -> float | None:
    if e.size == 0:
        return 0.0
    with np.errstate(all="ignore"):
        ef, gf = e.astype(np.float64), g.astype(np.float64)
        same = (ef == gf) | (np.isnan(ef) & np.isnan(gf))
        d = np.where(same, 0.0, np.abs(ef - gf))
    d = d[~np.isnan(d)]
    return float(d.max()) if d.size else float("nan")


def opset_of(model) -> int:
    """The model's ai.onnx opset (0 when it imports none)."""
    v = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    return v[0] if v else 0


# ---- executors --------------------------------------------------------------------------------

def interp_executor(model, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Import, run the default graph pipeline (when there is one), interpret with numpy."""
    from onnxcc.errors import DimDependentError, ValueDependentError
    from onnxcc.frontend import load_onnx
    from onnxcc.interp import run

    structure = input_structure(model, inputs)
    values: dict = {}
    dims: dict = {}
    for attempt in range(3):  # a sequence's structure hangs on input values or dims: fold those given
        try:
            module = load_onnx(model, structure=structure, values=values, dims=dims)
            break
        except ValueDependentError as e:
            if attempt == 2:
                raise
            given = dict(zip(e.all_inputs, inputs))
            values.update({n: np.asarray(given[n]).reshape(-1).tolist() for n in e.inputs if n in given})
        except DimDependentError as e:
            if attempt == 2:
                raise
            given = dict(zip(e.all_inputs, inputs))
            dims.update({s: int(np.shape(given[n])[a]) for n, a, s in e.dims if n in given})
    params = [p.name for p in module.main.params]
    if len(inputs) < len(params) and not module.attrs.get("input_structure"):
        # the rest have defaults (initializers), which the importer keeps as weights
        from onnxcc.frontend.onnx_import import DEFAULT_PREFIX

        inputs = list(inputs) + [module.weights[DEFAULT_PREFIX + n] for n in params[len(inputs):]]
    try:
        from onnxcc.passes.pipelines import DEFAULT_GRAPH_PIPELINE
    except ImportError:
        DEFAULT_GRAPH_PIPELINE = None
    if DEFAULT_GRAPH_PIPELINE:
        from onnxcc.passes import run_pipeline

        run_pipeline(module, DEFAULT_GRAPH_PIPELINE)
    from onnxcc.io_structure import flatten_inputs, group_outputs, structure_of

    structure = structure_of(module.attrs)
    if structure is None:
        return run(module, inputs)

    outs = run(module, flatten_inputs(structure, inputs))
    return list(group_outputs(structure, dict(zip(module.main.attrs["outputs"], outs))).values())


def compiled_executor(model, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Compile with the native backend into a temporary directory, load it, run it.

    `onnxcc.compile(model, out_dir, name=...)` builds libNAME.so + NAME.h + NAME.json and
    `onnxcc.load(out_dir).run(list of arrays)` returns {output name: array} in output order.
    """
    import tempfile

    import onnxcc

    compile_, load = getattr(onnxcc, "compile", None), getattr(onnxcc, "load", None)
    if compile_ is None or load is None:
        raise BackendUnavailable("native backend not built yet")
    from onnxcc.compiler import CompileOptions
    from onnxcc.compiler.value_versions import build_for_inputs

    with tempfile.TemporaryDirectory(prefix="onnxcc-conf-") as d:
        # as `onnxcc run --inputs` does: when shapes depend on input values, value versions
        # for the case's values
        structure = input_structure(model, inputs)
        build_for_inputs(lambda o: compile_(model, d, **{**o.__dict__, "name": "conf_case"}),
                         CompileOptions(input_structure=structure),
                         lambda names: dict(zip(names, inputs)) if len(names) == len(inputs) else None)
        lib = load(d)
        names = _input_names(model)
        if len(inputs) < len(names):  # the rest have defaults (initializers): by name, as a user would
            feeds: list | dict = dict(zip(names, inputs))
        else:
            feeds = inputs
        if getattr(lib, "structure", None) is not None:
            # sequences (lists) and optionals (None) through the loader, as a user passes them
            outs = lib.run(feeds)
            return [_copy_item(o) for o in (outs.values() if isinstance(outs, dict) else outs)]
        # the runtime passes bf16 as its uint16 bits; the cases hold ml_dtypes.bfloat16 arrays
        bf16 = next((x.dtype for x in inputs if x.dtype.name == "bfloat16"), None)
        outs = lib.run({k: x.view(np.uint16) if x.dtype.name == "bfloat16" else x for k, x in feeds.items()}
                       if isinstance(feeds, dict) else
                       [x.view(np.uint16) if x.dtype.name == "bfloat16" else x for x in inputs])
        outs = list(outs.values()) if isinstance(outs, dict) else list(outs)
        sigs = getattr(lib, "outputs", [{}] * len(outs))
        res = []
        for sig, o in zip(sigs, outs):
            if sig.get("dtype") == "bf16" and o.dtype == np.uint16:
                o = o.view(bf16 if bf16 is not None else _bfloat16())
            res.append(np.array(o, copy=True))
        return res


def _copy_item(x):
    if x is None:
        return None
    if isinstance(x, list):
        return [np.array(e, copy=True) for e in x]
    return np.array(x, copy=True)


def _bfloat16() -> np.dtype:
    import ml_dtypes  # onnx depends on it

    return np.dtype(ml_dtypes.bfloat16)


def ort_executor(model, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """onnxruntime on the case as it is: the baseline the reports compare with (never a gate)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 4
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {i.name: x for i, x in zip(sess.get_inputs(), inputs)})


EXECUTORS: dict[str, Executor] = {"interp": interp_executor, "native": compiled_executor, "ort": ort_executor}
BASELINE = "ort"
"""the executor whose expected list (every case, `--update ort`) is the per-op baseline in reports"""


# ---- running one case -------------------------------------------------------------------------

def classify(e: BaseException) -> str:
    """'unsupported' when anything in the cause chain says so, else 'error'."""
    from onnxcc.errors import UnsupportedOp

    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, (UnsupportedOp, NotImplementedError, BackendUnavailable, NotRunnable)):
            return "unsupported"
        e = e.__cause__ or getattr(e, "cause", None)
    return "error"


def one_line(e: BaseException, limit: int = 300) -> str:
    s = " ".join(str(e).split()) or type(e).__name__
    if not isinstance(e, Exception) or type(e).__name__ not in s:
        s = f"{type(e).__name__}: {s}"
    return s if len(s) <= limit else s[: limit - 3] + "..."


class Alarm:
    """A per-case wall-clock limit via SIGALRM (a no-op off the main thread or without SIGALRM)."""

    def __init__(self, seconds: float | None):
        self.seconds = seconds
        self.armed = False

    def _fire(self, signum, frame):
        raise CaseTimeout(f"timed out after {self.seconds:g} s")

    def __enter__(self):
        if (self.seconds and hasattr(signal, "setitimer")
                and threading.current_thread() is threading.main_thread()):
            self.prev = signal.signal(signal.SIGALRM, self._fire)
            self.outer, _ = signal.setitimer(signal.ITIMER_REAL, self.seconds)  # e.g. pytest-timeout's
            self.t0 = time.monotonic()
            self.armed = True
        return self

    def __exit__(self, *exc):
        if self.armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.prev)
            if self.outer > 0:  # give an enclosing alarm back what is left of it
                signal.setitimer(signal.ITIMER_REAL, max(self.outer - (time.monotonic() - self.t0), 1e-3))
        return False


def run_case(case, executor: Executor, *, time_limit: float | None = TIME_LIMIT,
             max_bytes: int = MAX_CASE_BYTES) -> CaseResult:
    """Run one case through `executor` and compare; never raises (but KeyboardInterrupt).

    The executor gets the case's model as it is, whatever its opset: what a user hands onnxcc."""
    op = case_op(case)
    t0 = time.perf_counter()

    def result(status, detail="", err=None):
        return CaseResult(case.name, op, status, detail, err, round(time.perf_counter() - t0, 4))

    try:
        check_io_types(case)
        inputs, expected = case_arrays(case)
        model = case.model
    except NotRunnable as e:
        return result("unsupported", str(e))
    except Exception as e:  # a malformed case: report, do not stop the run
        return result("error", f"harness: {one_line(e)}")
    size = sum(a.nbytes for a in _leaves(inputs)) + sum(a.nbytes for a in _leaves(expected))
    if size > max_bytes:
        return result("unsupported", f"case too large to run ({size} bytes)")
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"), Alarm(time_limit):
            warnings.simplefilter("ignore")
            got = executor(_copy_model(model), [_copy_item(a) for a in inputs])
    except KeyboardInterrupt:
        raise
    except CaseTimeout as e:
        return result("error", str(e))
    except BaseException as e:
        return result(classify(e), one_line(e))
    try:
        tol = (case.rtol or DEFAULT_RTOL, case.atol if case.atol is not None else DEFAULT_ATOL)
        if case.name in RANDOM_MASK_CASES:
            ok, detail, err = check_random_mask(inputs, expected, list(got), *tol)
        else:
            ok, detail, err = compare(expected, list(got), *tol)
    except Exception as e:
        return result("error", f"comparing: {one_line(e)}")
    return result("pass" if ok else "fail", detail, err)


def _copy_model(model):
    """A private copy, so an executor that edits its model cannot change the cached case."""
    out = type(model)()
    out.CopyFrom(model)
    return out


def run_cases(cases, executor: Executor, *, progress=None, **kw) -> list[CaseResult]:
    out = []
    for i, c in enumerate(cases):
        out.append(run_case(c, executor, **kw))
        if progress:
            progress(i + 1, len(cases), out[-1])
    return out


# ---- expected-pass files ----------------------------------------------------------------------

def expected_path(executor: str, directory: Path | None = None) -> Path:
    return Path(directory or EXPECTED_DIR) / f"expected_{executor}.txt"


def report_path(executor: str, directory: Path | None = None) -> Path:
    """REPORT.md for the interpreter, REPORT_<executor>.md for the others."""
    name = "REPORT.md" if executor == "interp" else f"REPORT_{executor}.md"
    return Path(directory or EXPECTED_DIR) / name


def header(executor: str) -> str:
    import onnx

    if executor == BASELINE:
        role = ["# ONNX backend node cases that onnxruntime passes in this harness (every case run):",
                "# the baseline of the reports' per-op tables, not a gate.",
                f"# Regenerate: python -m onnxcc.conformance --update {executor}"]
    else:
        role = [f"# ONNX backend node cases that pass through onnxcc's {executor!r} executor.",
                "# A regression on any listed case fails tests/conformance/test_conformance.py.",
                f"# Regenerate (after an op or importer change): python -m onnxcc.conformance --update {executor}",
                "# (runs every case of the registered ops; also rewrites the per-op report, REPORT*.md)."]
    return "\n".join([
        *role,
        "# Format: one case name per line, sorted; the comment after it is the case's op.",
        f"# onnx {onnx.__version__}",
    ])


def read_expected(path: Path) -> tuple[list[tuple[str, str]], str | None]:
    """([(case name, op)], onnx version in the header or None)."""
    entries, version = [], None
    if not Path(path).exists():
        return entries, version
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        s = line.strip()
        if not s:
            continue
        if s.startswith("#"):
            m = re.fullmatch(r"#\s*onnx\s+(\S+)", s)
            if m:
                version = m.group(1)
            continue
        name, _, op = s.partition("#")
        entries.append((name.strip(), op.strip()))
    return entries, version


def write_expected(path: Path, executor: str, results: list[CaseResult]) -> list[str]:
    passed = sorted((r.name, r.op) for r in results
                    if r.status == "pass" and r.op not in NONDETERMINISTIC_OPS)
    body = [f"{n}  # {op}" for n, op in passed]  # unaligned: a new long name must not touch every line
    Path(path).write_text(header(executor) + "\n" + "".join(ln + "\n" for ln in body), encoding="utf-8")
    return [n for n, _ in passed]


# ---- reporting --------------------------------------------------------------------------------

STATUSES = ("pass", "fail", "unsupported", "error")


def reason_key(r: CaseResult) -> str:
    """A failure detail with the case-specific bits (numbers, quoted names) blurred, for grouping."""
    s = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", r.detail)
    s = re.sub(r"has dtype \w+", "has dtype …", s)
    s = re.sub(r"\b[A-Za-z]+(_\d+)+\b", "…", s)  # node names (Cast_19, Mul_52_16)
    s = re.sub(r"\(\d+(, ?\d+)*,?\)", "(…)", s)
    s = re.sub(r"(?<![\w.])-?\d+(\.\d+)?(e[-+]?\d+)?(?!\w)", "N", s)
    return f"{r.status}: {s[:160]}"


def summarize(results: list[CaseResult]) -> dict[str, collections.Counter]:
    table: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for r in results:
        table[r.op][r.status] += 1
    return dict(sorted(table.items()))


def failure_groups(results: list[CaseResult]) -> dict[str, list[tuple[str, int, CaseResult]]]:
    """op -> [(reason key, count, first example)] for non-passing results, most common first."""
    by_op: dict[str, dict[str, list[CaseResult]]] = collections.defaultdict(dict)
    for r in results:
        if r.status != "pass":
            by_op[r.op].setdefault(reason_key(r), []).append(r)
    return {op: sorted(((k, len(v), v[0]) for k, v in groups.items()), key=lambda t: -t[1])
            for op, groups in sorted(by_op.items())}


def format_table(results: list[CaseResult], markdown: bool = False) -> str:
    table = summarize(results)
    rows = [(op, sum(c.values()), *(c[s] for s in STATUSES)) for op, c in table.items()]
    tot = ["total", len(results), *(sum(r[i + 2] for r in rows) for i in range(len(STATUSES)))]
    head = ["op", "cases", *STATUSES]
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(str(x) for x in r) + " |" for r in rows]
        lines.append("| " + " | ".join(f"**{x}**" for x in tot) + " |")
        return "\n".join(lines)
    w = max([len(r[0]) for r in rows] + [5])
    fmt = f"{{:<{w}}} " + " ".join("{:>11}" for _ in head[1:])
    return "\n".join([fmt.format(*head)] + [fmt.format(*r) for r in rows] + [fmt.format(*tot)])


def top_reasons(results: list[CaseResult], n: int = 25) -> list[tuple[str, int, CaseResult]]:
    groups: dict[str, list[CaseResult]] = collections.defaultdict(list)
    for r in results:
        if r.status != "pass":
            groups[reason_key(r)].append(r)
    return sorted(((k, len(v), v[0]) for k, v in groups.items()), key=lambda t: -t[1])[:n]


def format_report(executor: str, results: list[CaseResult], seconds: float,
                  not_run: dict[str, int] | None = None) -> str:
    """REPORT.md: the per-op table, the top failure reasons, failures by op, and (`not_run`:
    op -> number of cases) the ops whose cases were not selected."""
    import onnx

    counts = collections.Counter(r.status for r in results)
    out = [f"# ONNX backend conformance: `{executor}` executor", "",
           f"Generated by `python -m onnxcc.conformance --update {executor}` (onnx {onnx.__version__}); "
           "do not edit by hand.", "",
           f"{len(results)} cases run in {seconds:.1f} s: " + ", ".join(f"{counts[s]} {s}" for s in STATUSES)
           + ". Cases are those of the ops onnxcc takes (registered ops, Constant, importer converters), "
           "plus function-expanded cases of other ops whose bodies use only those ops; every case runs "
           "as it is, whatever its opset. Nondeterministic ops ("
           + ", ".join(sorted(NONDETERMINISTIC_OPS)) + ") are run but never listed as expected; training-mode "
           "Dropout cases are checked for y = x * mask / (1 - ratio) and the mask's density, not numpy's draws.", "",
           "## Per op", "", format_table(results, markdown=True), "",
           "## Top failure reasons", "", "| count | reason | example |", "|---|---|---|"]
    for key, cnt, ex in top_reasons(results):
        out.append(f"| {cnt} | {_md(key)} | `{ex.name}` |")
    reasons = {reason_key(r) for r in results if r.status != "pass"}
    if len(reasons) == 1 and not counts["pass"]:  # e.g. the backend is not built: say it once
        return "\n".join(out[:5] + [f"Every case: {_md(reasons.pop())}."]) + "\n"
    out += ["", "## Failures by op", ""]
    for op, groups in failure_groups(results).items():
        out.append(f"- **{op}**")
        for _key, cnt, ex in groups[:4]:
            out.append(f"  - {cnt}x `{ex.name}`: {ex.status}: {_md(ex.detail[:240])}")
    baseline = {n for n, _ in read_expected(expected_path(BASELINE))[0]} if executor != BASELINE else set()
    if baseline and not_run is not None:
        out += ["", "## Every case, per op, beside onnxruntime", "", all_ops_table(results, not_run, baseline)]
    if not_run:
        out += ["", "## Ops not run (not registered), by number of cases", "",
                ", ".join(f"{op} ({n})" for op, n in sorted(not_run.items(), key=lambda t: (-t[1], t[0])))]
    return "\n".join(out) + "\n"


def all_ops_table(results: list[CaseResult], not_run: dict[str, int], baseline: set[str]) -> str:
    """Markdown: per op over every node case (run or not), onnxcc's passes beside the baseline's
    (`expected_ort.txt`: the cases onnxruntime passes in this harness)."""
    ops: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0, 0])
    for c in collect_cases():
        row = ops[case_op(c)]
        row[0] += 1
        row[2] += c.name in baseline
    for r in results:
        ops[r.op][1] += r.status == "pass" and r.op not in NONDETERMINISTIC_OPS
    lines = ["| op | cases | onnxcc pass | onnxruntime pass |", "|---|---|---|---|"]
    lines += [f"| {op} | {a} | {b} | {c} |" for op, (a, b, c) in sorted(ops.items())]
    tot = [sum(v[i] for v in ops.values()) for i in range(3)]
    lines.append(f"| **total** | **{tot[0]}** | **{tot[1]}** | **{tot[2]}** |")
    return "\n".join(lines)


def _md(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


# ---- command line -----------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m onnxcc.conformance",
                                description="Run the ONNX backend node tests through onnxcc.")
    p.add_argument("--update", metavar="EXECUTOR", choices=sorted(EXECUTORS),
                   help="run the registered ops' cases, rewrite expected_EXECUTOR.txt and REPORT.md")
    p.add_argument("--executor", "-e", choices=sorted(EXECUTORS), default="interp")
    p.add_argument("--ops", help="comma-separated op keys (default: the registered ops)")
    p.add_argument("--all", action="store_true", help="every case, registered op or not")
    p.add_argument("--case", "-k", help="regex over case names")
    p.add_argument("--time-limit", type=float, default=TIME_LIMIT, help="seconds per case")
    p.add_argument("--dir", type=Path, default=EXPECTED_DIR, help="where expected_*.txt and REPORT.md live")
    p.add_argument("--failures", action="store_true", help="print every non-passing case")
    p.add_argument("-q", "--quiet", action="store_true")
    p.add_argument("--model-sets", nargs="?", const="all", metavar="SET,...",
                   help="run onnx's model sets instead (onnxcc.model_sets; default: all of them)")
    p.add_argument("--ort", action="store_true", help="with --model-sets: also onnxruntime's pass count")
    a = p.parse_args(argv)
    if a.model_sets:
        from onnxcc.model_sets import main_model_sets

        return main_model_sets(a)
    executor = a.update or a.executor
    if a.update and (a.ops or a.case or a.all):
        p.error("--update runs the default selection: it does not take --ops, --case or --all")

    if a.all or executor == BASELINE:  # the baseline covers every case
        cases = collect_cases()
    elif a.ops:
        cases = collect_cases(s.strip() for s in a.ops.split(",") if s.strip())
    else:
        cases = collect_cases(supported_ops(), with_expanded_bodies=True)
    if a.case:
        rx = re.compile(a.case)
        cases = [c for c in cases if rx.search(c.name)]

    def progress(i, n, r):
        if not a.quiet and (i % 100 == 0 or i == n):
            print(f"  {i}/{n}", file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    results = run_cases(cases, EXECUTORS[executor], progress=progress, time_limit=a.time_limit)
    seconds = time.perf_counter() - t0
    print(format_table(results))
    print("\ntop failure reasons:")
    for key, cnt, ex in top_reasons(results, 15):
        print(f"  {cnt:4d}  {key}   (e.g. {ex.name})")
    if a.failures:
        print()
        for r in results:
            if r.status != "pass":
                print(f"{r.status:11s} {r.name}: {r.detail}")
    if a.update:
        path = expected_path(executor, a.dir)
        names = write_expected(path, executor, results)
        ran = {r.name for r in results}
        not_run = collections.Counter(case_op(c) for c in collect_cases() if c.name not in ran)
        report = report_path(executor, a.dir)
        report.write_text(format_report(executor, results, seconds, dict(not_run)), encoding="utf-8")
        print(f"\nwrote {path} ({len(names)} cases) and {report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
