"""The fuzzing campaigns: mutants through `onnxcc ir`, and through compile + run (checked
against onnxruntime where onnxruntime accepts the mutant). Each mutant runs in a forked child
with a time limit; the outcome per mutant is one of

  ok        the command succeeded (compile + run: the outputs match onnxruntime's, or
            onnxruntime refused the mutant)
  refused   a user error, unsupported op or usage error with exactly one `error: ...` line
  internal  exit 70, an exception the CLI did not turn into a message, or a refusal that is
            not one line (findings)
  crash     the child died of a signal (finding)
  hang      no answer within the time limit (finding)
  wrong     compile + run gave outputs that differ from onnxruntime's (finding)

    python tests/reliability/campaign.py ir 1000        # counts per mutation kind
    python tests/reliability/campaign.py run 200
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from mutator import in_child, mutants

FINDINGS = ("internal", "crash", "hang", "wrong")
ALL_MODELS = ["if_model.onnx", "loop_model.onnx", "scan_model.onnx", "gelu_layernorm.onnx", "mlp.onnx",
              "convnet.onnx", "transformer.onnx"]
SMALL_MODELS = ["if_model.onnx", "loop_model.onnx", "scan_model.onnx", "gelu_layernorm.onnx", "mlp.onnx"]


def _cli(args: list[str]) -> dict:
    from click.testing import CliRunner

    from onnxcc.cli import main

    res = CliRunner().invoke(main, args, catch_exceptions=True)
    err = res.stderr.strip()
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        e = res.exception
        return {"outcome": "internal", "detail": f"uncaught {type(e).__name__}: {e}"[:400]}
    return _classify(res.exit_code, err)


def _classify(code: int, err: str) -> dict:
    lines = err.splitlines()
    if code == 0:
        return {"outcome": "ok"}
    if code == 70:
        return {"outcome": "internal", "detail": err[:400]}
    if code in (1, 3) and len(lines) == 1 and "shape rule failed" in lines[0]:
        return {"outcome": "internal", "detail": lines[0][:400]}  # a Python error inside an op's rule
    if code in (1, 2, 3) and len(lines) == 1 and lines[0].startswith("error:"):
        return {"outcome": "refused", "detail": lines[0][:300]}
    if code == 2 and lines:  # click's usage errors (not expected here)
        return {"outcome": "refused", "detail": lines[-1][:300]}
    return {"outcome": "internal", "detail": f"exit {code}, {len(lines)} lines: {err[:400]}"}


def ir_one(path: str) -> dict:
    return _cli(["ir", path])


def run_one(path: str, out_dir: str) -> dict:
    """Compile and run the mutant (onnxcc's library API, as `onnxcc run` does); compare with ORT."""
    import onnxcc
    from onnxcc.errors import OnnxccError

    try:
        onnxcc.compile(path, out_dir, name="mut")
        cm = onnxcc.load(out_dir)
        feeds = _feeds(cm)
        outs = cm.run(feeds)
    except OnnxccError as e:
        msg = str(e).strip()
        if "\n" in msg or not msg:
            return {"outcome": "internal", "detail": f"refusal not one line: {msg[:300]!r}"}
        internal = ((type(e).__name__ == "PassError" and not isinstance(getattr(e, "cause", None), OnnxccError))
                    or "shape rule failed" in msg)
        return {"outcome": "internal" if internal else "refused", "detail": msg[:300]}
    except Exception as e:
        return {"outcome": "internal", "detail": f"{type(e).__name__}: {e}"[:400]}
    want, oracle = _ort_outputs(path, feeds, out_dir), "onnxruntime"
    if isinstance(want, str):  # no onnxruntime answer: onnxcc's numpy interpreter is the oracle
        why = want
        try:
            from onnxcc.frontend import load_onnx
            from onnxcc.interp import run as interp_run

            got = interp_run(load_onnx(path), [feeds[t["name"]] for t in cm.inputs])
            want, oracle = dict(zip(outs, got)), "the interpreter"
        except Exception:
            return {"outcome": "ok", "detail": f"{why}; no oracle"}
    for k, w in want.items():
        g = outs.get(k)
        if g is None or g.shape != w.shape:
            return {"outcome": "wrong", "detail": f"{k}: shape {None if g is None else g.shape} vs {w.shape} "
                                                  f"from {oracle}"}
        if g.dtype.kind in "fc":
            # normwise: float noise (a different summation order over hundreds of terms) is not
            # a wrong result; garbage, a wrong element or a NaN where ORT has a number is
            g64, w64 = g.astype(np.float64), w.astype(np.float64)
            finite = np.isfinite(w64)
            scale = max(1.0, float(np.max(np.abs(w64[finite]))) if finite.any() else 1.0)
            same_nonfinite = np.array_equal(np.isnan(g64), np.isnan(w64)) and np.array_equal(
                g64[~finite & ~np.isnan(w64)], w64[~finite & ~np.isnan(w64)])
            err = float(np.max(np.abs(g64[finite] - w64[finite]))) if finite.any() else 0.0
            ok = same_nonfinite and err <= 1e-3 * scale
        else:
            ok = np.array_equal(g, w)
        if not ok:
            return {"outcome": "wrong", "detail": f"{k}: values differ from {oracle}'s"}
    return {"outcome": "ok", "detail": f"checked against {oracle}"}


def _ort_outputs(path: str, feeds: dict, out_dir: str) -> dict | str:
    """onnxruntime's outputs, from a forked child of its own (onnxruntime itself crashes on some
    mutants: that is not onnxcc's finding); a string says why there are none."""
    npz = out_dir + ".ort.npz"

    def run() -> dict:
        try:
            from onnxcc.testing import ort_run

            np.savez(npz, **ort_run(path, feeds))
            return {"outcome": "ok"}
        except Exception as e:
            return {"outcome": "refused", "detail": type(e).__name__}

    res = in_child(run, 300)
    if res["outcome"] != "ok":
        verb = {"refused": "refuses", "crash": "crashes on", "hang": "hangs on"}.get(res["outcome"], "fails on")
        return f"onnxruntime {verb} the mutant"
    with np.load(npz) as z:
        return {k: z[k] for k in z.files}


def _feeds(cm) -> dict:
    """Inputs with every symbol 3 (seeded values)."""
    import sympy

    from onnxcc.ir import parse_dim
    from onnxcc.runtime.loader import DTYPES

    rng = np.random.default_rng(0)
    feeds = {}
    for t in cm.inputs:
        shape = []
        for d in t["shape"]:
            e = sympy.sympify(parse_dim(str(d)))
            e = e.subs({s: 3 for s in e.free_symbols})
            shape.append(max(0, int(e)))
        dt = np.dtype(DTYPES[t["dtype"]][0])
        if dt.kind == "f":
            feeds[t["name"]] = rng.standard_normal(shape).astype(dt)
        elif dt.kind == "b":
            feeds[t["name"]] = rng.random(shape) < 0.5
        else:
            feeds[t["name"]] = rng.integers(0, 3, shape).astype(dt)
    return feeds


def _preload() -> None:
    """Import what the children use once, in the parent: each fork then starts warm."""
    import click.testing  # noqa: F401

    import onnxcc.cli
    import onnxcc.compiler.pipeline
    import onnxcc.testing  # noqa: F401


def campaign(mode: str, n: int, seed: int = 17, models=None, timeout: float = 120.0, log=None):
    """Run n mutants; returns (counts: {kind: Counter(outcome)}, findings: [(model, kind, seed, detail)])."""
    models = models or (ALL_MODELS if mode == "ir" else SMALL_MODELS)
    counts: dict[str, Counter] = defaultdict(Counter)
    findings = []
    os.environ.setdefault("ONNXCC_JOBS", "1")
    _preload()
    with tempfile.TemporaryDirectory(prefix="onnxcc-fuzz-") as tmp:
        os.environ["ONNXCC_CACHE_DIR"] = os.path.join(tmp, "cache")
        for k, (name, kind, s, data) in enumerate(mutants(models, n, seed)):
            path = os.path.join(tmp, f"m{k}.onnx")
            with open(path, "wb") as f:
                f.write(data)
            if mode == "ir":
                res = in_child(lambda p=path: ir_one(p), timeout)
            else:
                res = in_child(lambda p=path, k=k: run_one(p, os.path.join(tmp, f"a{k}")), timeout)
            counts[kind][res["outcome"]] += 1
            if res["outcome"] in FINDINGS or res["outcome"] == "exception":
                findings.append((name, kind, s, f'{res["outcome"]}: {res.get("detail", "")}'))
            if log is not None:
                log(f'{k} {name} {kind} {s} {res["outcome"]} {res.get("detail", "")}')
            os.unlink(path)
    return counts, findings


def report(counts) -> str:
    outcomes = ("ok", "refused", *FINDINGS, "exception")
    lines = [f"{'kind':14s}" + "".join(f"{o:>10s}" for o in outcomes)]
    total = Counter()
    for kind in sorted(counts):
        total.update(counts[kind])
        lines.append(f"{kind:14s}" + "".join(f"{counts[kind][o]:10d}" for o in outcomes))
    lines.append(f"{'total':14s}" + "".join(f"{total[o]:10d}" for o in outcomes))
    return "\n".join(lines)


if __name__ == "__main__":
    mode, n = sys.argv[1], int(sys.argv[2])
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 17
    counts, findings = campaign(mode, n, seed, log=lambda s: print(s, flush=True) if "-v" in sys.argv else None)
    print(report(counts))
    for f in findings:
        print("FINDING", *f)
