"""A load-independent estimate of a model call's time at 2 (or N) threads, region by region.

On a machine shared with other jobs a 2-thread wall clock moves by +-30% per row, too much to
judge a change to how one kernel splits. This runs the model at ONE thread with the runtime's
region profile on (`ONNXCC_REGION_PROFILE`, codegen/c/runtime/onnxcc_rt.c): every parallel
loop is cut into the chunks the pool would deal at N threads and each chunk is timed by the
thread's CPU clock; the work between parallel loops (kernels that run serially, the call's
own overhead) is the CPU time between them. The library is built with
`ONNXCC_PROFILE_SERIAL=1` (codegen/cpu/emit.py): each compute that runs serially runs as a
region of its own named `ser.OUT`, counted serially, with the span it would have if split.
The N-thread time is then replayed: per region, the chunks claimed in order by whichever
thread is free first (the caller at 0, a worker
`--wake-us` later), the region's span the last finish, plus a dispatch cost per region
(`--dispatch-us`, measured by `--measure-dispatch` on this machine's pool);

    predicted = serial time + sum over regions (replayed span + dispatch)

Printed: the 1-thread CPU time, the prediction, the ideal (CPU / N), and the losses by place:
the serial stretches (named by the parallel loops around them) and the regions whose span
exceeds their share of the work (uneven or few chunks) or whose dispatch costs more than
half their work. Regions are named by their body functions (`nm` on the library).

    python benchmarks/region_profile.py mnasnet0_5_ts13 [--row 1] [--runs 7] [--json out.json]
    python benchmarks/region_profile.py convnets:mobile --shape 1x3x112x112
    python benchmarks/region_profile.py model.onnx --shape x=1x3x64x64
    python benchmarks/region_profile.py --measure-dispatch    # the pool's per-region cost here

Zoo names take the rows of tests/zoo/zoo.json (`--row`, default all). The profiled calls run
in a child process (the profile is written when it exits). Compare two trees by running the
tool with each on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ZOO = ROOT / "tests" / "zoo"
sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(ZOO))

DISPATCH_US = 0.5
"""the caller's cost per parallel loop on 2 threads whose worker spins (publish, retire, wait):
median of `--measure-dispatch` on this machine (Zen 4, 2 cores), quiet"""
WAKE_US = 0.5
"""how long after the caller a spinning worker claims its first chunk (`--measure-dispatch`)"""


# ---- the model and its inputs --------------------------------------------------------------
def _inputs(spec: str, shapes: list[str], rows: list[int] | None) -> tuple[Path, list[tuple[str, dict]]]:
    """(onnx path, [(label, feeds)]) for a zoo name, `convnets:NET` or an .onnx file."""
    import numpy as np

    if spec.startswith("convnets:"):
        import onnx
        from convnets import NETS

        path = Path(tempfile.mkdtemp(prefix="region_profile_")) / "model.onnx"
        onnx.save(NETS[spec.split(":", 1)[1]](), path)
        spec = str(path)
    if spec.endswith(".onnx"):
        import onnx

        m = onnx.load(spec)
        names = [i.name for i in m.graph.input if i.name not in {t.name for t in m.graph.initializer}]
        feeds = {}
        for k, s in enumerate(shapes):
            name, dims = s.split("=", 1) if "=" in s else (names[k], s)
            feeds[name] = np.random.default_rng(k).standard_normal([int(d) for d in dims.split("x")]).astype(
                np.float32)
        return Path(spec), [(",".join(f"{n}={v.shape}" for n, v in feeds.items()), feeds)]
    from test_zoo import MANIFEST, make_inputs

    entry = next(e for e in MANIFEST if e["name"] == spec)
    out = []
    for k, dims in enumerate(entry["dims"]):
        if rows is None or k in rows:
            out.append((",".join(f"{n}={v}" for n, v in dims.items()), make_inputs(entry, dims, seed=k)))
    return ZOO / entry["file"], out


# ---- the child: profiled calls -------------------------------------------------------------
def _child(lib_dir: str, feeds_file: str, runs: int, warmup: int) -> None:
    """Run each feed set `warmup + runs` times at one thread (the profile env already set),
    printing the thread-CPU stamps of the measured calls as JSON."""
    import numpy as np

    import onnxcc

    lib = onnxcc.load(Path(lib_dir))
    data = np.load(feeds_file, allow_pickle=True)
    sets = data["sets"].tolist()
    stamps = []
    for feeds in sets:
        for _ in range(warmup):
            lib.run(feeds)
        calls = []
        for _ in range(runs):
            t0 = time.thread_time_ns()
            lib.run(feeds)
            calls.append((t0, time.thread_time_ns()))
        stamps.append(calls)
    print(json.dumps(stamps))


def _profile(lib_dir: Path, sets: list[dict], runs: int, warmup: int, threads: int) -> tuple[float, list]:
    """(clock cost ns, per feed set: per call [(kind, ...)]) from a child process."""
    import numpy as np

    with tempfile.TemporaryDirectory() as tmp:
        feeds_file, prof = Path(tmp) / "feeds.npz", Path(tmp) / "profile.txt"
        arr = np.empty(len(sets), dtype=object)
        arr[:] = sets
        np.savez(feeds_file, sets=arr)
        env = dict(os.environ, ONNXCC_NUM_THREADS="1", ONNXCC_REGION_PROFILE=str(prof),
                   ONNXCC_REGION_PROFILE_THREADS=str(threads))
        out = subprocess.run([sys.executable, __file__, "--child", str(lib_dir), str(feeds_file), str(runs),
                              str(warmup)], env=env, check=True, capture_output=True, text=True).stdout
        stamps = json.loads(out.strip().splitlines()[-1])
        lines = prof.read_text().splitlines() if prof.exists() else []
    clock_ns = float(lines[0].split()[2]) if lines and lines[0].startswith("H ") else 0.0
    regions = []
    for ln in lines:
        if ln.startswith("R "):
            f = ln.split()
            regions.append({"lib": f[1], "off": int(f[2], 16), "n": int(f[3]), "t0": int(f[4]), "t1": int(f[5]),
                            "chunks": [max(0.0, int(v) - clock_ns) for v in f[6:-1]], "t2": int(f[-1][1:])})
    calls = []
    for set_stamps in stamps:
        per_set = []
        for a, z in set_stamps:
            per_set.append(((a, z), [r for r in regions if a <= r["t0"] <= z]))
        calls.append(per_set)
    return clock_ns, calls


# ---- names and the replay ------------------------------------------------------------------
def _symbols(lib: str) -> list[tuple[int, str]]:
    if lib == "?" or not shutil.which("nm"):
        return []
    out = subprocess.run(["nm", "-C", "--defined-only", lib], capture_output=True, text=True).stdout
    syms = []
    for ln in out.splitlines():
        f = ln.split(maxsplit=2)
        if len(f) == 3 and f[1] in "tTwW":
            syms.append((int(f[0], 16), f[2]))
    return sorted(syms)


def _namer(lib_dir: Path):
    """offset -> body function name; the loader ran a private copy of the library, removed
    when the child exited, so the symbols are read from the artifact's own file of that name."""
    cache: dict[str, list[tuple[int, str]]] = {}

    def name(lib: str, off: int) -> str:
        if lib not in cache:
            own = Path(lib_dir) / Path(lib).name
            cache[lib] = _symbols(str(own) if own.exists() else lib)
        syms = cache[lib]
        best = "?"
        for a, s in syms:
            if a > off:
                break
            best = s
        return re.sub(r"^(\w+?_v\d+)\.", "", best) if best != "?" else f"{Path(lib).name}+{off:#x}"

    return name


def replay(chunks: list[float], threads: int, wake_ns: float) -> float:
    """The span of one parallel loop: chunks claimed in order by the thread free first (the
    caller from 0, workers from `wake_ns`); the last finish."""
    if len(chunks) <= 1 or threads == 1:
        return sum(chunks)
    free = [0.0] + [wake_ns] * (threads - 1)
    used = [False] * threads
    for c in chunks:
        i = min(range(threads), key=lambda t: free[t])
        free[i] += c
        used[i] = True
    return max(f for f, u in zip(free, used, strict=True) if u)


def analyse(call: tuple, threads: int, dispatch_ns: float, wake_ns: float, name) -> dict:
    """One profiled call -> its serial stretches, regions and the replayed N-thread time."""
    (a, z), regions = call
    serial, items = [], []
    prev_end, prev_name = a, "<call start>"
    for r in regions:
        label = name(r["lib"], r["off"])
        serial.append({"between": f"{prev_name} .. {label}", "ns": r["t0"] - prev_end})
        work = sum(r["chunks"])
        split = replay(r["chunks"], threads, wake_ns) + (dispatch_ns if r["n"] > 1 else 0.0)
        if label.startswith("ser."):  # runs serially in a normal build (emit.PROFILE_SERIAL_ENV)
            items.append({"name": label, "n": r["n"], "chunks": len(r["chunks"]), "work": work, "span": work,
                          "loss": 0.0, "serial": True, "if_split": split})
        else:
            items.append({"name": label, "n": r["n"], "chunks": len(r["chunks"]), "work": work, "span": split,
                          "loss": split - (work / threads if r["n"] > 1 else work), "serial": False})
        prev_end, prev_name = r["t2"], label
    serial.append({"between": f"{prev_name} .. <call end>", "ns": z - prev_end})
    gap_ns = sum(s["ns"] for s in serial)
    region_work = sum(i["work"] for i in items)
    return {"cpu": gap_ns + region_work, "serial": gap_ns + sum(i["work"] for i in items if i["serial"]),
            "region_work": region_work, "predicted": gap_ns + sum(i["span"] for i in items), "regions": items,
            "gaps": serial, "n_regions": sum(1 for i in items if i["n"] > 1 and not i["serial"])}


def _median_call(calls: list[dict]) -> dict:
    """Per-position medians over the calls (each call runs the same regions in order)."""
    shape = [len(c["regions"]) for c in calls]
    calls = [c for c in calls if len(c["regions"]) == statistics.mode(shape)]
    out = dict(calls[0])
    for k in ("cpu", "serial", "region_work", "predicted"):
        out[k] = statistics.median(c[k] for c in calls)
    out["regions"] = [dict(r, **{k: statistics.median(c["regions"][i][k] for c in calls)
                                 for k in ("work", "span", "loss", "if_split") if k in r})
                      for i, r in enumerate(calls[0]["regions"])]
    out["gaps"] = [dict(g, ns=statistics.median(c["gaps"][i]["ns"] for c in calls))
                   for i, g in enumerate(calls[0]["gaps"])]
    return out


def report(label: str, m: dict, threads: int, top: int) -> None:
    us = 1e-3
    print(f"  {label}: 1-thread CPU {m['cpu'] * us:8.1f} us   predicted {threads}-thread {m['predicted'] * us:8.1f} us"
          f"   ideal {m['cpu'] / threads * us:8.1f} us   serial {m['serial'] * us:7.1f} us"
          f"   {m['n_regions']} parallel regions")
    gaps = sorted(m["gaps"], key=lambda g: -g["ns"])[:top]
    print("    serial stretches (us):")
    for g in gaps:
        print(f"      {g['ns'] * us:8.1f}  {g['between']}")
    ser = sorted((r for r in m["regions"] if r["serial"]), key=lambda r: -r["work"])
    if ser:
        print(f"    serial computes (us; {sum(r['work'] for r in ser) * us:.1f} in all): time  if split  items")
        for r in ser[:top]:
            print(f"      {r['work'] * us:7.1f} {r['if_split'] * us:7.1f}  {r['n']:6d}  {r['name']}")
    print("    parallel regions by loss over work/threads (us): loss  span  work  items/chunks")
    for r in sorted((r for r in m["regions"] if not r["serial"]), key=lambda r: -r["loss"])[:top]:
        print(f"      {r['loss'] * us:7.1f} {r['span'] * us:7.1f} {r['work'] * us:7.1f}  {r['n']:6d}/{r['chunks']:<3d}"
              f" {r['name']}")


# ---- the pool's own cost -------------------------------------------------------------------
_DISPATCH_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "onnxcc_rt.h"
static long long now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000000000LL + t.tv_nsec; }
static volatile long long t_call, first_worker;
static __thread int is_caller;
static void spin(long long ns) { long long e = now() + ns; while (now() < e) {} }
static void body(int64_t b, int64_t e, void *ctx) {
  long long us = (long long)(size_t)ctx;
  if (!is_caller && first_worker == 0) first_worker = now() - t_call;
  if (us) spin(us * (e - b));
}
static int cmp(const void *a, const void *b) {
  long long x = *(long long *)a, y = *(long long *)b;
  return (x > y) - (x < y);
}
int main(void) {
  enum { R = 4000 };
  static long long empty[R], wake[R], full[R];
  is_caller = 1;
  int w = 0;
  for (int i = 0; i < R; i++) {
    spin(3000); /* the caller's serial work between two loops: the worker spins meanwhile */
    long long t = now(); t_call = t; first_worker = 0;
    onnxcc_parallel_for(2, body, (void *)0);
    empty[i] = now() - t;
    spin(3000);
    t = now(); t_call = t; first_worker = 0;
    onnxcc_parallel_for(2, body, (void *)2000); /* 2 us chunks: the worker takes one */
    if (first_worker > 0) full[w] = now() - t, wake[w++] = first_worker; /* else the other core was busy */
  }
  qsort(empty, R, sizeof *empty, cmp);
  qsort(wake, w, sizeof *wake, cmp);
  qsort(full, w, sizeof *full, cmp);
  printf("%.2f %.2f %.2f\n", empty[R / 2] / 1e3, w ? wake[w / 2] / 1e3 : -1.0, w ? full[w / 2] / 1e3 : -1.0);
  return 0;
}
"""


def measure_dispatch(threads: int) -> tuple[float, float, float]:
    """(median us of an empty 2-item loop, median us until the worker claims a chunk, median
    us of a loop of two 2 us chunks where the worker took one: on a loaded machine the other
    core is often someone else's) on the runtime's pool, compiled here with the library's
    runtime source."""
    rt = ROOT / "src" / "onnxcc" / "codegen" / "c" / "runtime"
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = Path(tmp) / "d.c", Path(tmp) / "d"
        src.write_text(_DISPATCH_C)
        subprocess.run([os.environ.get("CC", "cc"), "-O2", "-pthread", f"-I{rt}", str(src), str(rt / "onnxcc_rt.c"),
                        "-o", str(exe), "-lm"], check=True)
        out = subprocess.run([str(exe)], env=dict(os.environ, ONNXCC_NUM_THREADS=str(threads)), check=True,
                             capture_output=True, text=True).stdout
    d, w, f = (float(v) for v in out.split())
    return d, w, f


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", help="zoo name, convnets:NET or an .onnx file")
    ap.add_argument("--shape", action="append", default=[], help="[name=]AxBxC... input shape (onnx / convnets)")
    ap.add_argument("--row", action="append", type=int, help="zoo rows to profile (default all)")
    ap.add_argument("--threads", type=int, default=2, help="the thread count replayed")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--dispatch-us", type=float, default=DISPATCH_US)
    ap.add_argument("--wake-us", type=float, default=WAKE_US)
    ap.add_argument("--top", type=int, default=8)
    ap.add_argument("--lib", type=Path, help="a compiled library directory to use instead of compiling")
    ap.add_argument("--no-serial-regions", dest="serial_regions", action="store_false",
                    help="build as usual: the serial computes stay in the stretches between regions")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--measure-dispatch", action="store_true")
    args = ap.parse_args()
    if args.measure_dispatch:
        d, w, f = measure_dispatch(args.threads)
        print(f"empty {args.threads}-thread loop: {d:.2f} us; worker's first claim after {w:.2f} us; two 2 us "
              f"chunks: {f:.2f} us, so dispatch = {f - max(2.0, w + 2.0):.2f} us beyond the replayed span "
              f"(load {os.getloadavg()[0]:.2f})")
        return 0
    if not args.model:
        ap.error("a model is needed")
    import onnxcc

    path, sets = _inputs(args.model, args.shape, args.row)
    with tempfile.TemporaryDirectory() as tmp:
        lib_dir = args.lib or Path(tmp) / "lib"
        if args.lib is None:
            if args.serial_regions:  # the serial computes as `ser.` regions (codegen/cpu/emit.py)
                os.environ["ONNXCC_PROFILE_SERIAL"] = "1"
            onnxcc.compile(path, lib_dir)
            os.environ.pop("ONNXCC_PROFILE_SERIAL", None)
        _clock, calls = _profile(lib_dir, [f for _, f in sets], args.runs, args.warmup, args.threads)
        name = _namer(lib_dir)  # while the library is still there
        medians = [_median_call([analyse(c, args.threads, args.dispatch_us * 1e3, args.wake_us * 1e3, name)
                                 for c in per_set]) for per_set in calls]
    results = []
    print(f"{args.model} ({args.threads} threads replayed; dispatch {args.dispatch_us} us, wake {args.wake_us} us;"
          f" load {os.getloadavg()[0]:.2f})")
    for (label, _), m in zip(sets, medians, strict=True):
        report(label, m, args.threads, args.top)
        results.append(dict(m, label=label))
    if args.json:
        args.json.write_text(json.dumps({"model": args.model, "threads": args.threads, "rows": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
