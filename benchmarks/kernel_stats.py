"""Kernel counts before/after fusion and workspace figures per sample model and version.

    .venv/bin/python benchmarks/kernel_stats.py [--json out.json] [--check] [MODEL ...]

For every natively compiled sample model (models/*.onnx) and every version the compile
driver makes, prints: computes before and after `kernel.fuse`, the fused groups, and the
memory plan: arena bytes, the peak of simultaneously live bytes (the lower bound) and the
sum of all temp buffers, symbolically and evaluated at each of the model's test dim
settings (`onnxcc.testing.SAMPLE_MODELS`) with the arena / peak ratio, plus the worst ratio
over the issue's benchmark shapes (`GRID`). `--check` also builds each library (fusion
on) and compares it with onnxruntime at every test setting.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from onnxcc.compiler import CompileOptions, graph_stage, load_module
from onnxcc.ir import evaluate
from onnxcc.kernel.control import has_control, optimize_nested
from onnxcc.kernel.fuse import count_kernels, fuse
from onnxcc.kernel.plan_memory import plan
from onnxcc.passes.lower import lower_function
from onnxcc.testing import MODELS_DIR, SAMPLE_MODELS, ort_run, random_inputs

NATIVE = ["mlp", "gelu_layernorm", "transformer", "convnet", "if_model", "loop_model", "scan_model"]

#: the benchmark shapes of issue 5 (sequence models: batch 1 and 4, seq 17 ... 512)
GRID = {
    "mlp": [{"batch": b} for b in (1, 4, 64, 1000)],
    "gelu_layernorm": [{"batch": b, "seq": s} for b in (1, 4) for s in (17, 64, 128, 200, 512)],
    "transformer": [{"batch": b, "seq": s} for b in (1, 4) for s in (17, 64, 128, 200, 512)],
    "convnet": [{"batch": b, "H": h, "W": h} for b in (1, 4) for h in (8, 32, 64, 224)],
}


def model_stats(name: str, check: bool = False) -> dict:
    path = MODELS_DIR / f"{name}.onnx"
    module = load_module(path)
    graph_stage(module, CompileOptions())
    out = {"model": name, "versions": []}
    for k, vname in enumerate(module.dispatch["main"]):
        f = module.functions[vname]
        prog = lower_function(module, f, f"{name}_v{k}")
        before = count_kernels(prog.body)
        rep = fuse(prog, module.symbols)
        if has_control(prog):  # as the driver does: fuse inside If / Loop / Scan bodies too
            optimize_nested(prog, module.symbols)
        mp = plan(prog, module.symbols)
        v = {"function": vname, "kernels_before": before, "kernels_after": count_kernels(prog.body),
             "arena_bytes": str(mp.workspace_bytes), "peak_live_bytes": str(mp.peak_live_bytes),
             "total_bytes": str(mp.total_bytes), "groups": [list(g.origin or g.members) for g in rep.groups],
             "at": []}
        subs = {str(s): int(x) for s, x in f.subs.items()}
        worst = 1.0
        shapes = SAMPLE_MODELS[name] + [g for g in GRID.get(name, []) if g not in SAMPLE_MODELS[name]]
        for dims in shapes:
            env = {**dims, **subs}
            if any(dims.get(s, x) != x for s, x in subs.items()):
                continue  # this version's guard excludes the setting
            a, p, t = (evaluate(x, env) for x in (mp.workspace_bytes, mp.peak_live_bytes, mp.total_bytes))
            worst = max(worst, a / p if p else 1.0)
            if dims in SAMPLE_MODELS[name]:
                v["at"].append({"dims": dims, "arena": a, "peak": p, "sum": t,
                                "arena/peak": round(a / p, 3) if p else 1.0})
        v["worst_arena_over_peak"] = round(worst, 4)
        out["versions"].append(v)
    if check:
        _check(name)
    return out


def _check(name: str) -> None:
    """Build the library (fusion on) and compare with onnxruntime at every test setting."""
    import tempfile

    import onnxcc

    path = MODELS_DIR / f"{name}.onnx"
    with tempfile.TemporaryDirectory(prefix="onnxcc-stats-") as d:
        onnxcc.compile(path, d)
        model = onnxcc.load(d)
        for k, dims in enumerate(SAMPLE_MODELS[name]):
            feeds = random_inputs(path, dims, seed=k)
            want = ort_run(path, feeds)
            got = model.run(feeds)
            for out, w in want.items():
                np.testing.assert_allclose(got[out], w, rtol=1e-4, atol=1e-5, err_msg=f"{name} {out} at {dims}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=NATIVE)
    ap.add_argument("--json", default=None, help="also write the figures here")
    ap.add_argument("--check", action="store_true", help="build each library and compare it with onnxruntime")
    args = ap.parse_args(argv)
    results = []
    for name in args.models:
        r = model_stats(name, args.check)
        results.append(r)
        print(f"{name}")
        for v in r["versions"]:
            print(f"  @{v['function']}: kernels {v['kernels_before']} -> {v['kernels_after']}; "
                  f"arena {v['arena_bytes']}; peak {v['peak_live_bytes']}; sum {v['total_bytes']}")
            for a in v["at"]:
                print(f"      at {a['dims']}: arena {a['arena']}, peak {a['peak']}, sum {a['sum']} "
                      f"(arena/peak {a['arena/peak']})")
            print(f"      worst arena/peak over the sample and benchmark shapes: {v['worst_arena_over_peak']}")
        if args.check:
            print("  numerics vs onnxruntime: ok")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
