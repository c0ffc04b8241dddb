"""A JIT session replaying a stream of calls with varied shapes on the transformer sample.

Shapes are drawn from a skewed distribution (a few hot (batch, seq) classes, a long tail).
Hot classes get an exact version compiled in the background once they reach the threshold;
the report says how many artifacts were compiled, how many calls were served by a
specialised version, and the time spent compiling and running.

    python benchmarks/session_stream.py [--calls 1000] [--threshold 50] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def stream(n: int, seed: int = 0) -> list[tuple[int, int]]:
    rng = np.random.default_rng(seed)
    hot = [(1, 37), (4, 50), (2, 100)]  # not multiples of 16: the divisibility version misses them
    out = []
    for _ in range(n):
        if rng.random() < 0.8:
            out.append(hot[rng.choice(3, p=[0.5, 0.3, 0.2])])
        else:
            out.append((int(rng.integers(1, 5)), int(rng.integers(1, 200))))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--threshold", type=int, default=50)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    from onnxcc.runtime.cache import ArtifactCache
    from onnxcc.session import Session

    calls = stream(args.calls)
    rng = np.random.default_rng(1)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        s = Session(ROOT / "models" / "transformer.onnx", cache=ArtifactCache(tmp), threshold=args.threshold)
        for b, q in calls:
            s.run({"x": rng.standard_normal((b, q, 256)).astype(np.float32)})
        s.wait()
        wall = time.perf_counter() - t0
        st = s.stats
        s.close()
    distinct = len(set(calls))
    report = {"calls": st.calls, "distinct_shapes": distinct, "compiles": st.compiles,
              "specialized": st.specialized, "hits": st.hits, "misses": st.misses,
              "compile_s": round(st.compile_seconds, 2), "run_s": round(st.run_seconds, 2), "wall_s": round(wall, 2)}
    print(f"{st.calls} calls over {distinct} distinct shapes: {st.compiles} compiles "
          f"(1 base + {len(st.specialized)} specialisations: {st.specialized})")
    print(f"served by a specialised version: {st.hits}, by the generic version: {st.misses}")
    print(f"compile {st.compile_seconds:.2f} s (background), run {st.run_seconds:.2f} s, wall {wall:.2f} s")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
