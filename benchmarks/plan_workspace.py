"""Memory plans of the model zoo (tests/zoo): per model the plan-memory stage's CPU seconds,
the proofs its plans made (`Prover.le` calls) and each version's workspace (its text and its
bytes with every symbol at 1, 16, 128, 640, 4096, clipped to its range); `--compare` tables
two such runs, e.g. a main tree's against a branch's.

    PYTHONPATH=/path/to/before/src python benchmarks/plan_workspace.py --json before.json [NAME ...]
    python benchmarks/plan_workspace.py --json after.json [NAME ...]
    python benchmarks/plan_workspace.py --compare before.json after.json

Each model is built to the kernel stage (`--emit kernel`: no LLVM) with the default flags.
The proofs and the workspaces do not depend on the machine's speed or load (the plan's
budgets count proofs); the seconds do.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ZOO = ROOT / "tests" / "zoo"
sys.path.insert(0, str(ZOO))

POINTS = (1, 16, 128, 640, 4096)


def _plans(names: list[str]) -> dict:
    import sympy
    from test_zoo import EXPECTED, MANIFEST

    from onnxcc.compiler import compile_model
    from onnxcc.ir import Prover, evaluate, print_dim
    from onnxcc.passes import PassContext
    from onnxcc.passes.base import Instrument

    proofs = [0]
    le = Prover.le

    def counted(self, a, b):
        proofs[0] += 1
        return le(self, a, b)

    Prover.le = counted  # type: ignore[method-assign]

    class Capture(Instrument):
        def __init__(self) -> None:
            self.seconds, self.proofs, self.versions = 0.0, 0, []

        def before(self, pass_, module, index) -> None:
            self.t0, proofs[0] = time.process_time(), 0

        def after(self, pass_, module, index, changed) -> None:
            if pass_.name != "plan-memory":
                return
            self.seconds, self.proofs = time.process_time() - self.t0, proofs[0]
            table = module.graph.symbols
            for v in module.versions:
                ws = v.plan.workspace_bytes
                syms = sorted(str(s) for s in sympy.sympify(ws).free_symbols)
                values = {}
                for x in POINTS:
                    env = {}
                    for s in syms:
                        info = table.infos.get(s)
                        env[s] = min(max(x, info.lo), info.hi) if info is not None else x
                    values[x] = int(evaluate(ws, env))
                self.versions.append({"name": v.program.name, "workspace": print_dim(ws), "bytes": values,
                                      "proofs_cut": v.plan.proofs_cut})

    entries = [e for e in MANIFEST if (e["name"] in names if names else EXPECTED[e["name"]] == "pass")]
    out = {}
    for e in entries:
        cap = Capture()
        with tempfile.TemporaryDirectory() as tmp:
            compile_model(ZOO / e["file"], tmp, emit="kernel", pass_ctx=PassContext(instruments=[cap]))
        out[e["name"]] = {"seconds": cap.seconds, "proofs": cap.proofs, "versions": cap.versions}
        print(f"{e['name']}: plan-memory {cap.seconds:.2f} s CPU, {cap.proofs} proofs, workspace at 128: "
              + ", ".join(str(v["bytes"][128]) for v in cap.versions), flush=True)
    return out


def _compare(before: dict, after: dict) -> None:
    same = []
    print("| model | plan-memory s | proofs | version: bytes at 1 / 16 / 128 / 640 / 4096 (before -> after) |")
    print("|---|---|---|---|")
    for name, b in before.items():
        a = after.get(name)
        if a is None:
            continue
        pairs = list(zip(b["versions"], a["versions"]))
        if len(b["versions"]) == len(a["versions"]) and all(x["workspace"] == y["workspace"] for x, y in pairs):
            same.append(name)
            continue
        cells = []
        for x, y in pairs:
            if x["workspace"] == y["workspace"]:
                cells.append(f"{x['name']}: same")
            else:
                cells.append(f"{x['name']}: " + " / ".join(
                    f"{x['bytes'][k]}" + ("" if x["bytes"][k] == y["bytes"][k] else f" -> {y['bytes'][k]}")
                    for k in x["bytes"]) + ("" if x["bytes"] != y["bytes"] else " (text differs, values equal)"))
        print(f"| {name} | {b['seconds']:.2f} -> {a['seconds']:.2f} | {b['proofs']} -> {a['proofs']} | "
              f"{'; '.join(cells)} |")
    print(f"\nthe same workspace text in every version ({len(same)}): {', '.join(same)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help="zoo model names (default: every passing model)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    args = ap.parse_args()
    if args.compare:
        _compare(*(json.loads(p.read_text()) for p in args.compare))
        return
    out = _plans(args.names)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
