"""onnx's own model sets through onnxcc, the way onnx's backend runner runs them.

onnx ships model directories under onnx/backend/test/data: pytorch-converted, pytorch-operator
and simple (opset 6-12 models: model.onnx + test_data_set_N/{input,output}_K.pb). Each model
is handed to an executor of onnxcc.conformance by its path, as a user hands it to onnxcc (no
upgrade on the harness side), every data set compared with onnx's runner rule (rtol 1e-3,
atol 1e-7). `python -m onnxcc.conformance --model-sets -e native --ort` prints the status of
every model with its reason and, with --ort, onnxruntime's pass count on the same comparison.
"""

from __future__ import annotations

import collections
import re
import time
import warnings
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from onnxcc import conformance as conf


def ort_executor(model, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """onnxruntime on the same model (the reference figure for `--model-sets --ort`)."""
    import onnxruntime as ort

    data = model.SerializeToString() if hasattr(model, "SerializeToString") else str(model)
    opts = ort.SessionOptions()
    opts.log_severity_level = 3  # its "opset 6 is only legacy-supported" warnings, once per model
    sess = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
    return sess.run(None, {i.name: x for i, x in zip(sess.get_inputs(), inputs)})


#: the model directories onnx ships under onnx/backend/test/data
MODEL_SETS = ("pytorch-converted", "pytorch-operator", "simple")


def model_set_dirs(sets: Iterable[str] = MODEL_SETS) -> list[tuple[str, Path]]:
    """(set, model directory) for every model of the installed onnx's sets, sorted."""
    import onnx

    root = Path(onnx.__file__).resolve().parent / "backend" / "test" / "data"
    return [(s, d) for s in sets for d in sorted((root / s).glob("*")) if (d / "model.onnx").is_file()]


def _data_sets(d: Path, model) -> list[tuple[list[np.ndarray], list[np.ndarray]]]:
    """Each test_data_set_N as (inputs in graph-input order, expected outputs)."""
    from onnx import numpy_helper

    inits = {t.name for t in model.graph.initializer}
    names = [vi.name for vi in model.graph.input if vi.name not in inits]
    out = []
    for ds in sorted(d.glob("test_data_set_*")):
        ins, outs = _tensors(ds, "input"), _tensors(ds, "output")
        # named inputs go by name (a data set may list them in another order), else by position
        if all(t.name in names for t in ins) and len({t.name for t in ins}) == len(ins):
            ins = sorted(ins, key=lambda t: names.index(t.name))
        out.append(([numpy_helper.to_array(t) for t in ins], [numpy_helper.to_array(t) for t in outs]))
    return out


def _tensors(ds: Path, kind: str) -> list:
    from onnx import TensorProto

    out = []
    for f in sorted(ds.glob(f"{kind}_*.pb"), key=lambda p: int(p.stem.split("_")[-1])):
        t = TensorProto()
        t.ParseFromString(f.read_bytes())
        out.append(t)
    return out


def run_model_dir(set_name: str, d: Path, executor: conf.Executor, *,
                  time_limit: float | None = conf.TIME_LIMIT, check_types: bool = True) -> conf.CaseResult:
    """One model of a set through `executor` (given the model's path, as a user would give it),
    every data set compared with onnx's runner tolerances; never raises (but KeyboardInterrupt).
    With `check_types`, a model with I/O dtypes onnxcc lacks is 'unsupported' without a run."""
    import onnx

    t0 = time.perf_counter()
    name = f"{set_name}/{d.name}"

    def result(status, detail="", err=None):
        return conf.CaseResult(name, set_name, status, detail, err, round(time.perf_counter() - t0, 4))

    try:
        model = onnx.load(str(d / "model.onnx"))
        if check_types:
            conf.check_io_types(model)
        sets = _data_sets(d, model)
    except conf.NotRunnable as e:
        return result("unsupported", str(e))
    except Exception as e:
        return result("error", f"harness: {conf.one_line(e)}")
    if not sets:
        return result("unsupported", "no test_data_set_*")
    worst = None
    for k, (inputs, expected) in enumerate(sets):
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"), conf.Alarm(time_limit):
                warnings.simplefilter("ignore")
                got = executor(str(d / "model.onnx"), [a.copy() for a in inputs])
        except KeyboardInterrupt:
            raise
        except conf.CaseTimeout as e:
            return result("error", str(e))
        except BaseException as e:
            return result(conf.classify(e), conf.one_line(e))
        ok, detail, err = conf.compare(expected, list(got))
        if err is not None:
            worst = err if worst is None else max(worst, err)
        if not ok:
            return result("fail", f"data set {k}: {detail}", worst)
    return result("pass", "", worst)


def run_model_sets(executor: conf.Executor, sets: Iterable[str] = MODEL_SETS,
                   **kw) -> list[conf.CaseResult]:
    return [run_model_dir(s, d, executor, **kw) for s, d in model_set_dirs(sets)]


def main_model_sets(a) -> int:
    """`python -m onnxcc.conformance --model-sets [SET,...] [-e EXECUTOR] [--ort] [-k REGEX]`."""
    sets = [s.strip() for s in a.model_sets.split(",") if s.strip()]
    if sets == ["all"]:
        sets = list(MODEL_SETS)
    rx = re.compile(a.case) if a.case else None
    dirs = [(s, d) for s, d in model_set_dirs(sets) if rx is None or rx.search(d.name)]
    results = [run_model_dir(s, d, conf.EXECUTORS[a.executor], time_limit=a.time_limit) for s, d in dirs]
    for r in results:
        print(f"{r.status:11s} {r.name}" + (f": {r.detail}" if r.detail else ""))
    print()
    print(conf.format_table(results))
    if a.ort:
        ref = collections.Counter()
        for s, d in dirs:
            if run_model_dir(s, d, ort_executor, time_limit=a.time_limit, check_types=False).status == "pass":
                ref[s] += 1
        mine = collections.Counter(r.op for r in results if r.status == "pass")
        print("\npasses, onnxcc vs onnxruntime (same comparison):")
        for s in sets:
            n = sum(1 for t, _ in dirs if t == s)
            print(f"  {s:20s} onnxcc {mine[s]:3d}   onnxruntime {ref[s]:3d}   of {n}")
    return 0
