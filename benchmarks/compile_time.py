"""Compile time per stage, in CPU seconds, of `onnxcc compile MODEL` with the default flags.

Each model is compiled in a fresh process (so the Python imports count, as on the CLI) whose
`time.perf_counter` reads the CPU seconds of the process and of its waited-for children (the
LLVM workers, the C compiler): `--time-passes` then reports CPU per stage, which a loaded
machine (the 2-core box is shared) inflates far less than wall time. Per model: every stage,
the stages' total, and the whole process (imports included).

    python benchmarks/compile_time.py [--json out.json] MODEL.onnx ...
    python benchmarks/compile_time.py --zoo squeezenet1_1_ts11 mobilenet_v3_small_ts13

The C runtime's objects are cached (codegen/c/runtime_objects.py): the first build on a
machine compiles them once; compile anything first for steady-state figures.
"""

from __future__ import annotations

import argparse
import json
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


def measure(model: Path) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run([sys.executable, "-c", _CHILD, "compile", str(model), "-o", tmp, "--time-passes", "-q"],
                              capture_output=True, text=True)
    text = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise SystemExit(f"{model}: compile failed\n{text[-2000:]}")
    out = {name: float(ms) / 1000 for ms, name in _STAGE.findall(text)}
    out["stages"] = sum(out.values())
    out["process"] = float(re.search(r"process_cpu ([\d.]+)", text).group(1))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+", help=".onnx files, or zoo names with --zoo")
    ap.add_argument("--zoo", action="store_true", help="the names are tests/zoo models")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rows = {}
    for m in args.models:
        path = ROOT / "tests" / "zoo" / "models" / f"{m}.onnx" if args.zoo else Path(m)
        rows[path.stem] = r = measure(path)
        stages = "  ".join(f"{k} {v:.2f}" for k, v in r.items() if k not in ("stages", "process") and v >= 0.01)
        print(f"{path.stem}: stages {r['stages']:.2f} s CPU, process {r['process']:.2f} s  ({stages})", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
