"""Specialised versions vs the generic version on the same shapes.

Two libraries per model: generic only, and one with an exact version for every shape below
(plus the default divisibility versions). Each shape runs on both, alternating call by call;
the report gives generic / specialised (above 1: the specialised version is faster) and
which version served the call.

    python benchmarks/versions_speed.py [--threads N] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHAPES = {
    "transformer": [{"batch": 1, "seq": 17}, {"batch": 1, "seq": 64}, {"batch": 4, "seq": 100}],
    "gelu_layernorm": [{"batch": 1, "seq": 17}, {"batch": 4, "seq": 100}],
    "mlp": [{"batch": 1}, {"batch": 64}],
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    os.environ["ONNXCC_NUM_THREADS"] = str(args.threads)

    from compare_ort import bench_pair

    import onnxcc
    from onnxcc.testing import random_inputs

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, shapes in SHAPES.items():
            path = ROOT / "models" / f"{name}.onnx"
            spec: dict[str, list[int]] = {}
            for dims in shapes:
                for k, v in dims.items():
                    spec.setdefault(k, [])
                    if v not in spec[k]:
                        spec[k].append(v)
            onnxcc.compile(path, Path(tmp) / f"{name}_g", specialize_one=False, divisible=0)
            onnxcc.compile(path, Path(tmp) / f"{name}_s", specialize=spec, max_versions=16)
            gen, spc = onnxcc.load(Path(tmp) / f"{name}_g"), onnxcc.load(Path(tmp) / f"{name}_s")
            for dims in shapes:
                feeds = random_inputs(path, dims, seed=0)
                t_gen, t_spc = bench_pair(lambda: gen.run(feeds), lambda: spc.run(feeds), 30)
                spc.run(feeds)
                info = spc.version_info(spc.last_version)
                rows.append({"model": name, "dims": dims, "generic_ms": t_gen * 1e3, "specialised_ms": t_spc * 1e3,
                             "generic_over_specialised": t_gen / t_spc, "version": info})
                shape = ",".join(f"{k}={v}" for k, v in dims.items())
                print(f"{name:15s} {shape:18s} generic {t_gen * 1e3:8.3f} ms  specialised {t_spc * 1e3:8.3f} ms  "
                      f"generic/specialised {t_gen / t_spc:5.2f}  [{info.split(':')[0]}]")
    worst = max(r["generic_over_specialised"] for r in rows)
    print(f"generic is at most {worst:.2f}x the specialised version's time over these shapes")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
