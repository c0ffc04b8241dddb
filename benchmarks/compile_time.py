"""Compile time per stage, in CPU seconds, of `onnxcc compile MODEL` with the default flags.

Each model is compiled in a fresh process (so the Python imports count, as on the CLI) whose
`time.perf_counter` reads the CPU seconds of the process and of its waited-for children (the
LLVM workers, the C compiler): `--time-passes` then reports CPU per stage, which a loaded
machine (the 2-core box is shared) inflates far less than wall time. Per model: every stage,
the stages' total, and the whole process (imports included).

    python benchmarks/compile_time.py [--json out.json] MODEL.onnx ...
    python benchmarks/compile_time.py --zoo squeezenet1_1_ts11 mobilenet_v3_small_ts13 [--warm]

The C runtime's objects are cached (codegen/c/runtime_objects.py): the first build on a
machine compiles them once; compile anything first for steady-state figures. LLVM's objects
are cached too (codegen/llvm/object_cache.py): by default each compile here runs with that
cache off (ONNXCC_OBJECT_CACHE=0), the cost of a model never built before; `--warm` also
measures a second compile served from a private object cache (a rebuild, or a known model's
kernels again). The child writes and reads Python bytecode (its own PYTHONPYCACHEPREFIX, made
once before the first model) even where the environment sets PYTHONDONTWRITEBYTECODE, so
the imports cost what they cost an installed package.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# run in the child: perf_counter -> CPU of this process and its reaped children, then the CLI
_CHILD = """
import resource, sys, time
def cpu():
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime
time.perf_counter = cpu
from onnxcc.cli import main
sys.argv[0] = "onnxcc"
try:
    main()
finally:
    print(f"process_cpu {cpu():.3f}", file=sys.stderr)
"""

_STAGE = re.compile(r"^\s*([\d.]+) ms\s+[\d.]+%\s+([\w-]+)\s*$", re.MULTILINE)


_PYC = Path(tempfile.gettempdir()) / "onnxcc-bench-pyc"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPYCACHEPREFIX": str(_PYC), **extra}


def measure(model: Path, **env: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run([sys.executable, "-c", _CHILD, "compile", str(model), "-o", tmp, "--time-passes", "-q"],
                              capture_output=True, text=True, env=_env(**env))
    text = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise SystemExit(f"{model}: compile failed\n{text[-2000:]}")
    out = {name: float(ms) / 1000 for ms, name in _STAGE.findall(text)}
    out["stages"] = sum(out.values())
    m = re.search(r"process_cpu ([\d.]+)", text)
    out["process"] = float(m.group(1)) if m else float("nan")
    return out


def _line(name: str, r: dict[str, float]) -> str:
    stages = "  ".join(f"{k} {v:.2f}" for k, v in r.items() if k not in ("stages", "process") and v >= 0.01)
    return f"{name}: stages {r['stages']:.2f} s CPU, process {r['process']:.2f} s  ({stages})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+", help=".onnx files, or zoo names with --zoo")
    ap.add_argument("--zoo", action="store_true", help="the names are tests/zoo models")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--warm", action="store_true", help="also a second compile served from the LLVM object cache")
    args = ap.parse_args()
    subprocess.run([sys.executable, "-c", "import onnxcc.cli, onnxcc.compiler.pipeline, onnxcc.codegen.cpu.emit"],
                   env=_env(), check=True)  # the bytecode, once
    rows = {}
    for m in args.models:
        path = ROOT / "tests" / "zoo" / "models" / f"{m}.onnx" if args.zoo else Path(m)
        rows[path.stem] = r = {"cold": measure(path, ONNXCC_OBJECT_CACHE="0")}
        print(_line(path.stem, r["cold"]), flush=True)
        if args.warm:
            with tempfile.TemporaryDirectory() as cache:
                measure(path, ONNXCC_CACHE_DIR=cache)
                r["warm"] = measure(path, ONNXCC_CACHE_DIR=cache)
            print(_line(f"{path.stem} (warm object cache)", r["warm"]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
