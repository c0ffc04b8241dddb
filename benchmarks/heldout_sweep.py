"""One-thread side-by-side sweep of the held-out exports (tests/data/heldout2, torch_more, hf)
against onnxruntime, at each model's test settings, CPU clock.

Each model is compiled once into ART/STEM (kept, so a slow row can be profiled from it), then
every setting the e2e tests use is timed with `peers.time_row` (alternating rounds, medians).
One JSON line per row is appended to OUT as it is measured, so a long sweep can be read while
it runs and resumed (rows already in OUT are skipped).

    python benchmarks/heldout_sweep.py --out /tmp/sweep.jsonl --art /tmp/sweep_art [--only a,b] [--skip c,d]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

SETS = ("heldout2", "torch_more", "hf")


def _settings(set_name: str, path: Path) -> list[dict]:
    """feeds dicts for each setting the e2e test of that set runs"""
    import onnx

    if set_name == "heldout2":
        from heldout2_inputs import SETTINGS, feeds, model_key

        return [feeds(path, d, k) for k, d in enumerate(SETTINGS[model_key(path.stem)])]
    if set_name == "torch_more":
        from torch_more_inputs import INPUTS

        return INPUTS[path.stem.rsplit("_", 1)[0]]
    import numpy as np

    from onnxcc.testing import input_shapes

    text = [{"B": 1, "T": 1, "D": 1}, {"B": 2, "T": 9, "D": 5}, {"B": 3, "T": 33, "D": 7}]
    image = [{"N": 1, "H": 32, "W": 32}, {"N": 2, "H": 64, "W": 48}, {"N": 1, "H": 96, "W": 64}]
    graph = onnx.load(str(path), load_external_data=False).graph
    if path.stem == "mobilevit_ts17":
        image = [{"N": 1, "H": 64, "W": 64}, {"N": 2, "H": 128, "W": 64}]
    out = []
    for k, dims in enumerate(image if graph.input[0].name == "x" else text):
        rng = np.random.default_rng(k)
        f = {}
        for name, (shape, dt) in input_shapes(path, dims).items():
            f[name] = (rng.integers(1, 100, shape) if np.issubdtype(dt, np.integer)
                       else rng.standard_normal(shape)).astype(dt)
        out.append(f)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--art", type=Path, required=True)
    ap.add_argument("--only", default="")
    ap.add_argument("--skip", default="")
    ap.add_argument("--repeats", type=int, default=12)
    ap.add_argument("--budget", type=float, default=1.5)
    args = ap.parse_args()
    os.environ["ONNXCC_NUM_THREADS"] = "1"
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from peers import make_peers, time_row

    import onnxcc

    done = set()
    if args.out.exists():
        done = {(r["model"], r["setting"]) for r in map(json.loads, args.out.read_text().splitlines())}
    only = set(filter(None, args.only.split(",")))
    skip = set(filter(None, args.skip.split(",")))
    for set_name in SETS:
        for path in sorted((ROOT / "tests" / "data" / set_name).glob("*.onnx")):
            stem = path.stem
            if (only and stem not in only) or stem in skip:
                continue
            try:
                settings = _settings(set_name, path)
            except KeyError:
                continue
            if all((stem, k) in done for k in range(len(settings))):
                continue
            art = args.art / stem
            t0 = time.perf_counter()
            try:
                if not any(art.glob("*.so")):
                    onnxcc.compile(path, art)
                lib = onnxcc.load(art)
                peers = make_peers(path, 1, ["ort"])
            except Exception as ex:  # a model onnxcc or onnxruntime refuses is a row, not a stop
                with args.out.open("a") as fh:
                    fh.write(json.dumps({"model": stem, "setting": -1, "error": str(ex)[:200]}) + "\n")
                continue
            compile_s = time.perf_counter() - t0
            for k, feeds in enumerate(settings):
                if (stem, k) in done:
                    continue
                shapes = {n: list(v.shape) for n, v in feeds.items()}
                try:
                    row = time_row(lambda f: list(lib.run(f).values()), peers, feeds, args.repeats,
                                   args.budget, time.process_time)
                except Exception as ex:
                    row = {"error": str(ex)[:200]}
                row.update(model=stem, set=set_name, setting=k, shapes=shapes, compile_s=round(compile_s, 2))
                with args.out.open("a") as fh:
                    fh.write(json.dumps(row) + "\n")
                print(stem, k, shapes, f"{row.get('onnxcc_ms', 0):.3f} ms vs {row.get('ort_ms', 0):.3f} ms "
                      f"ratio {row.get('ratio', 0):.2f}", flush=True)


if __name__ == "__main__":
    main()
