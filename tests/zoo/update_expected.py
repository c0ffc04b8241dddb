"""Rewrite tests/zoo/expected.json from what onnxcc does on each zoo model today.

    python tests/zoo/update_expected.py [NAME ...]
    python tests/zoo/update_expected.py --shard K/N     # every N-th model from the K-th (0-based);
                                                      # writes expected.shardK.json to merge by hand

A model is "pass" when `onnxcc run` matches onnxruntime at all three dim settings (the
tolerances of test_zoo.py); otherwise the first 120 characters of its one-line refusal are
recorded ("error: ..."), or "WRONG: ..." / "CRASH: ..." for results or exits that must
never be accepted: those make the script exit 1 and are never written as expected.
Prints a table and the counts.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
from test_zoo import ATOL, EXPECTED, HERE, MANIFEST, RTOL, make_inputs, reference

from onnxcc.cli import main as cli


def status(entry: dict) -> tuple[str, float]:
    model = str(HERE / entry["file"])
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        env = {"ONNXCC_CACHE_DIR": f"{d}/cache"}
        for k, dims in enumerate(entry["dims"]):
            feeds = make_inputs(entry, dims, seed=k)
            np.savez(f"{d}/in.npz", **feeds)
            r = CliRunner().invoke(cli, ["run", model, "--inputs", f"{d}/in.npz", "--outputs", f"{d}/out.npz"],
                                   env=env)
            if r.exit_code in (1, 3) and r.stderr.startswith("error: "):
                return r.stderr.strip().splitlines()[0][:120], time.perf_counter() - t0
            if r.exit_code != 0:
                return f"CRASH: exit {r.exit_code}: {r.stderr.strip()[-200:]}", time.perf_counter() - t0
            got, want = np.load(f"{d}/out.npz"), reference(entry, model, feeds)
            for name, w in want.items():
                if got[name].shape != w.shape or not np.allclose(got[name], w, rtol=RTOL, atol=ATOL):
                    err = float(np.max(np.abs(got[name] - w))) if got[name].shape == w.shape else "shape"
                    return f"WRONG: output {name} at {dims}: max abs err {err}", time.perf_counter() - t0
    return "pass", time.perf_counter() - t0


def main(names: list[str]) -> int:
    shard = None
    if names[:1] == ["--shard"]:
        k, n = (int(x) for x in names[1].split("/"))
        shard, names = (k, n), [e["name"] for i, e in enumerate(MANIFEST) if i % n == k]
    expected = dict(EXPECTED) if names and shard is None else {}
    bad = 0
    for e in MANIFEST:
        if names and e["name"] not in names:
            continue
        s, secs = status(e)
        print(f"{e['name']:32s} {secs:6.1f}s  {s}", flush=True)
        if s.startswith(("WRONG", "CRASH")):
            bad += 1
            continue
        expected[e["name"]] = s
    out = HERE / ("expected.json" if shard is None else f"expected.shard{shard[0]}.json")
    out.write_text(json.dumps(dict(sorted(expected.items())), indent=1) + "\n")
    n_pass = sum(v == "pass" for v in expected.values())
    print(f"{n_pass} of {len(expected)} pass; {bad} wrong or crashing (not written)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
