"""Replay a trace of observed dim values against four compile policies, measuring each.

    results = simulate("models/transformer.onnx", read_trace("trace.txt"), "seq", buckets=[32, 128, 512])

Policies (which version serves a request of true length v):
  specialise  an exact version per distinct value (`--specialize seq=v`), compiled on first use
  bucket      the smallest bucket >= v (values above the last bucket: the generic version)
  pad-to-max  one bucket at the largest value of the trace
  symbolic    the generic version for everything

For each: compiles (versions built, each on its first request), cache hit rate (requests
that found their version built), wasted FLOPs (padding, from the IR cost model) and wall
time = compile + run, both MEASURED here:
  - compile: artifacts are built with onnxcc's compiler (the caller's flags, no 0/1 or
    divisibility versions): the generic alone, and each policy's versions (in chunks)
    beside it; a version's compile time = (artifact time - generic-alone time) / versions
    in the artifact, the generic's own = the generic-alone time. Chunks build in parallel
    processes (`jobs`); each build is timed inside its own process.
  - run: each distinct value is run on its policy's version `repeats` times after a warm-up
    call (median), then multiplied by its count in the trace.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from .compiler import CompileOptions, compile_model, load_module, narrow_dims
from .errors import OnnxccError
from .passes.bucket_choice import BucketChoice, assign, choose_buckets, cost_function, read_trace

POLICIES = ("specialise", "bucket", "pad-to-max", "symbolic")


@dataclass
class PolicyResult:
    name: str
    label: str
    compiles: int
    requests: int
    wasted_flops: float
    executed_flops: float
    compile_s: float
    run_s: float
    #: version key -> (compile seconds, {value: median run seconds})
    detail: dict = field(default_factory=dict)

    @property
    def hit_rate(self) -> float:
        return (self.requests - self.compiles) / self.requests if self.requests else 0.0

    @property
    def waste(self) -> float:
        return self.wasted_flops / self.executed_flops if self.executed_flops else 0.0

    @property
    def total_s(self) -> float:
        return self.compile_s + self.run_s


# ---- auto buckets (also used by the compile flags) ---------------------------------------------


def prepared_module(model, options: CompileOptions):
    """The model after the graph pipeline (no versions): what the cost model reads."""
    from .passes import run_pipeline
    from .passes.pipelines import DEFAULT_GRAPH_PIPELINE

    m = load_module(model)
    narrow_dims(m, options.dims)
    run_pipeline(m, DEFAULT_GRAPH_PIPELINE)
    return m


def auto_buckets(model, options: CompileOptions, symbol: str, trace, k: int,
                 fixed: dict[str, int] | None = None) -> BucketChoice:
    """Buckets for `symbol` minimising the expected padded cost of `trace` (a path or pairs)."""
    m = prepared_module(model, options)
    if symbol not in m.symbols:
        known = ", ".join(s.name for s in m.symbols) or "none"
        raise OnnxccError(f"--bucket {symbol}=auto: the model has no symbol {symbol!r} (symbols: {known})")
    pairs = read_trace(trace) if isinstance(trace, (str, Path)) else list(trace)
    return choose_buckets(m.main, symbol, pairs, k, fixed)


# ---- building --------------------------------------------------------------------------------


_WARM: set = set()


def _warm_up(model: str, options: CompileOptions) -> None:
    """An untimed run through the front half of the compiler once per process: first-time
    imports are not compile time."""
    key = (model, os.getpid())
    if key not in _WARM:
        with tempfile.TemporaryDirectory(prefix="onnxcc-warm-") as d:
            compile_model(model, d, options, emit="llvm")
        _WARM.add(key)


def _build(model: str, out: str, options: CompileOptions) -> float:
    """Compile one artifact; returns the wall seconds it took (run in a worker process)."""
    _warm_up(model, replace(options, specialize={}, buckets={}))
    t0 = time.perf_counter()
    compile_model(model, out, options)
    return time.perf_counter() - t0


def _base_options(options: CompileOptions) -> CompileOptions:
    return replace(options, specialize={}, specialize_one=False, divisible=1, buckets={}, name="sim")


def _chunks(xs: list, n: int) -> list[list]:
    return [xs[i:i + n] for i in range(0, len(xs), n)] or [[]]


class _Builder:
    """Plans every artifact the policies need, builds them (in parallel), loads them."""

    def __init__(self, model: str, options: CompileOptions, workdir: Path, jobs: int):
        self.model, self.base, self.workdir, self.jobs = model, _base_options(options), workdir, jobs
        self.plans: dict[str, CompileOptions] = {}
        self.seconds: dict[str, float] = {}

    def add(self, tag: str, **changes) -> str:
        self.plans[tag] = replace(self.base, **changes)
        return tag

    def build_all(self) -> None:
        tags = list(self.plans)
        if self.jobs <= 1:
            for t in tags:
                self.seconds[t] = _build(self.model, str(self.workdir / t), self.plans[t])
            return
        with ProcessPoolExecutor(max_workers=self.jobs) as pool:
            futs = {t: pool.submit(_build, self.model, str(self.workdir / t), self.plans[t]) for t in tags}
            for t, f in futs.items():
                self.seconds[t] = f.result()

    def load(self, tag: str):
        from .runtime import load

        return load(self.workdir / tag)


# ---- running ---------------------------------------------------------------------------------


def _feeds(model, symbol: str, value: int, fixed: dict[str, int], rng) -> list[np.ndarray]:
    import sympy

    from .runtime.loader import DTYPES

    env = {sympy.Symbol(k, integer=True, positive=True): v for k, v in {**fixed, symbol: value}.items()}
    out = []
    for t in model.inputs:
        shape = []
        for d in t["shape"]:
            e = sympy.sympify(d, locals={str(s): s for s in env}).subs(env)
            if not e.is_Integer:
                raise OnnxccError(f'input "{t["name"]}" dim {d}: give the other symbols a value with --set')
            shape.append(int(e))
        dt = np.dtype(DTYPES[t["dtype"]][0])
        out.append((rng.standard_normal(shape) * 0.5).astype(dt) if dt.kind == "f"
                   else rng.integers(0, 4, size=shape).astype(dt))
    return out


def _time_run(model, ins: list[np.ndarray], repeats: int, want_version: int | None) -> float:
    outs = [np.empty(model.output_shape(ins, k), dtype=np.dtype(_np_dtype(t["dtype"])))
            for k, t in enumerate(model.outputs)]
    rc = model.run_raw(ins, outs)  # warm-up (and a check)
    if rc != 0:
        raise OnnxccError(f"simulate: run failed: {model.last_error}")
    if want_version is not None and model.last_version != want_version:
        raise OnnxccError(f"simulate: expected version {want_version}, ran {model.last_version}: "
                          f"{model.version_info(model.last_version)}")
    times = []
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        model.run_raw(ins, outs)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _np_dtype(name: str):
    from .runtime.loader import DTYPES

    return DTYPES[name][0]


def _version_index(model, kind: str, value: int | None, symbol: str) -> int:
    for v in model.meta["versions"]:
        if kind == "generic" and v["kind"] == "generic":
            return v["index"]
        if kind == "bucket" and v["kind"] == "bucket" and v["info"].get("bucket") == value:
            return v["index"]
        if kind == "exact" and v["kind"] == "exact" and v["subs"].get(symbol) == value:
            return v["index"]
    raise OnnxccError(f"simulate: no {kind} version for {symbol} = {value} in {model.name}")


# ---- the simulation ----------------------------------------------------------------------------


def simulate(model, trace: list[tuple[int, int]], symbol: str, buckets: list[int],
             options: CompileOptions | None = None, fixed: dict[str, int] | None = None, repeats: int = 3,
             jobs: int = 1, chunk: int = 16, workdir=None, log=None) -> list[PolicyResult]:
    """Run the four policies over `trace` ((value, count) pairs of `symbol`); see the module doc."""
    options = options or CompileOptions()
    model = str(model)
    m = prepared_module(model, options)
    if symbol not in m.symbols:
        raise OnnxccError(f"simulate: the model has no symbol {symbol!r}")
    fixed = {s.name: 1 for s in m.symbols if s.name != symbol} | (fixed or {})
    cost, _ = cost_function(m.main, symbol, fixed)
    values = [v for v, _ in trace]
    vmax = values[-1]
    buckets = sorted(set(buckets))
    say = log or (lambda msg: None)

    tmp = tempfile.TemporaryDirectory(prefix="onnxcc-sim-") if workdir is None else None
    root = Path(workdir or tmp.name)
    root.mkdir(parents=True, exist_ok=True)
    try:
        b = _Builder(model, options, root, jobs)
        b.add("generic")
        spec_chunks = _chunks(values, chunk)
        for i, vs in enumerate(spec_chunks):
            b.add(f"exact{i}", specialize={symbol: vs}, max_versions=len(vs) + 1)
        b.add("bucket", buckets={symbol: buckets})
        b.add("padmax", buckets={symbol: [vmax]})
        say(f"building {len(b.plans)} artifacts ({len(values)} exact versions in {len(spec_chunks)} chunks, "
            f"{len(buckets)} buckets, pad-to-max, generic) with {jobs} job(s)")
        b.build_all()
        t_gen = b.seconds["generic"]

        def per_version(tag: str, n: int) -> float:
            return max(0.0, (b.seconds[tag] - t_gen) / n)

        rng = np.random.default_rng(0)
        feeds = {v: _feeds(b.load("generic"), symbol, v, fixed, rng) for v in values}
        results = []
        # symbolic: one generic version
        gen = b.load("generic")
        gi = _version_index(gen, "generic", None, symbol)
        say("timing the generic version")
        gen_runs = {v: _time_run(gen, feeds[v], repeats, gi) for v in values}
        results.append(_result("symbolic", "symbolic (generic)", trace, cost, {v: "generic" for v in values},
                               {"generic": t_gen}, gen_runs))
        # specialise: an exact version per value
        say("timing the exact versions")
        comp, runs, keys = {}, {}, {}
        for i, vs in enumerate(spec_chunks):
            art = b.load(f"exact{i}")
            for v in vs:
                runs[v] = _time_run(art, feeds[v], repeats, _version_index(art, "exact", v, symbol))
                keys[v], comp[v] = v, per_version(f"exact{i}", len(vs))
        results.append(_result("specialise", "specialise-each-shape", trace, cost, keys, comp, runs))
        # bucket
        say("timing the bucket versions")
        art = b.load("bucket")
        comp = {k: per_version("bucket", len(buckets)) for k in buckets} | {"generic": t_gen}
        keys, runs = {}, {}
        for v in values:
            bk = assign(v, buckets)
            keys[v] = bk if bk is not None else "generic"
            runs[v] = (_time_run(art, feeds[v], repeats, _version_index(art, "bucket", bk, symbol))
                       if bk is not None else gen_runs[v])
        label = f"bucket {','.join(map(str, buckets))}"
        results.append(_result("bucket", label, trace, cost, keys, comp, runs))
        # pad to the maximum
        say("timing pad-to-max")
        art = b.load("padmax")
        vi = _version_index(art, "bucket", vmax, symbol)
        runs = {v: _time_run(art, feeds[v], repeats, vi) for v in values}
        results.append(_result("pad-to-max", f"pad-to-max {vmax}", trace, cost, {v: vmax for v in values},
                               {vmax: per_version("padmax", 1)}, runs))
        return results
    finally:
        if tmp is not None:
            tmp.cleanup()


def _result(name, label, trace, cost, keys: dict, compile_s: dict, runs: dict) -> PolicyResult:
    used = {keys[v] for v, _ in trace}
    wasted = executed = 0.0
    for v, c in trace:
        padded = keys[v] if isinstance(keys[v], int) else v
        executed += c * cost(padded)
        wasted += c * (cost(padded) - cost(v))
    run_s = sum(c * runs[v] for v, c in trace)
    detail = {str(k): compile_s[k] for k in used}
    return PolicyResult(name, label, len(used), sum(c for _, c in trace), wasted, executed,
                        sum(compile_s[k] for k in used), run_s, {"compile": detail,
                                                                  "run": {str(v): runs[v] for v, _ in trace}})


# ---- reporting -------------------------------------------------------------------------------


def format_table(results: list[PolicyResult]) -> str:
    head = (f"{'policy':<28} {'compiles':>8} {'hit rate':>9} {'wasted FLOPs':>22} {'compile s':>10} "
            f"{'run s':>9} {'total s':>9}")
    lines = [head, "-" * len(head)]
    for r in results:
        lines.append(f"{r.label:<28} {r.compiles:>8} {100 * r.hit_rate:>8.1f}% "
                     f"{r.wasted_flops:>12.3e} ({100 * r.waste:>5.1f}%) {r.compile_s:>10.2f} {r.run_s:>9.3f} "
                     f"{r.total_s:>9.2f}")
    return "\n".join(lines)


METHOD_NOTE = ("compile and run times measured on this machine: each version's compile time = (its "
               "artifact's build time - the generic-alone build time) / versions in the artifact (the "
               "generic's = its own build); each distinct value run on its version (median of the repeats "
               "after a warm-up) times its count in the trace; wasted FLOPs from the IR cost model")


def results_json(results: list[PolicyResult]) -> str:
    return json.dumps([{"policy": r.name, "label": r.label, "compiles": r.compiles, "hit_rate": r.hit_rate,
                        "wasted_flops": r.wasted_flops, "executed_flops": r.executed_flops,
                        "waste": r.waste, "compile_s": r.compile_s, "run_s": r.run_s, "total_s": r.total_s}
                       for r in results], indent=2)


def svg_chart(results: list[PolicyResult], title: str = "") -> str:
    """Horizontal bars per policy: compile time, run time, and the run time's padding share.

    A bar more than 3x longer than the next longest is drawn broken (zigzag), its segments
    keeping their shares, so the others stay readable."""
    w, left, right, top, bar, gap = 900, 210, 170, 56, 34, 22
    h = top + len(results) * (bar + gap) + 70
    totals = sorted((r.total_s for r in results), reverse=True) or [1.0]
    span = totals[0] or 1.0
    if len(totals) > 1 and totals[1] > 0 and totals[0] > 3 * totals[1]:
        span = 1.5 * totals[1]
    full = w - left - right

    def esc(s: str) -> str:
        return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
           'font-family="sans-serif" font-size="13">',
           '<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
           'patternTransform="rotate(45)"><rect width="6" height="6" fill="#f2a541"/>'
           '<line x1="0" y1="0" x2="0" y2="6" stroke="#9c4f00" stroke-width="3"/></pattern></defs>',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{left}" y="24" font-size="15" font-weight="bold">'
           f'{esc(title or "policy comparison")}</text>']
    for k, r in enumerate(results):
        y = top + k * (bar + gap)
        broken = r.total_s > span
        scale = (full + 12) / r.total_s if broken else full / span
        cw, rw = r.compile_s * scale, r.run_s * scale
        pw = rw * r.waste
        out.append(f'<text x="{left - 8}" y="{y + bar / 2 + 4}" text-anchor="end">{esc(r.label)}</text>')
        out.append(f'<rect x="{left}" y="{y}" width="{cw:.2f}" height="{bar}" fill="#5b8def">'
                   f'<title>compile {r.compile_s:.2f} s</title></rect>')
        out.append(f'<rect x="{left + cw:.2f}" y="{y}" width="{rw:.2f}" height="{bar}" fill="#f2a541">'
                   f'<title>run {r.run_s:.3f} s</title></rect>')
        if pw > 0:
            out.append(f'<rect x="{left + cw + rw - pw:.2f}" y="{y}" width="{pw:.2f}" height="{bar}" '
                       f'fill="url(#hatch)"><title>padding {100 * r.waste:.1f}% of FLOPs</title></rect>')
        end = left + cw + rw
        if broken:  # a white zigzag across the bar, a little before its end
            x0 = left + full * 0.6
            zig = " ".join(f"{x0 + (4 if i % 2 else -4):.1f},{y - 3 + i * (bar + 6) / 6:.1f}" for i in range(7))
            out.append(f'<polyline points="{zig}" fill="none" stroke="white" stroke-width="5"/>')
        note = f" ({100 * r.waste:.0f}% pad)" if r.waste else ""
        out.append(f'<text x="{end + 6:.2f}" y="{y + bar / 2 + 4}">{r.total_s:.2f} s{note}'
                   f'{" (axis broken)" if broken else ""}</text>')
    ly = h - 34
    legend = [("#5b8def", "compile"), ("#f2a541", "run"), ("url(#hatch)", "run share on padding (by FLOPs)")]
    x = left
    for color, text in legend:
        out.append(f'<rect x="{x}" y="{ly}" width="14" height="14" fill="{color}"/>')
        out.append(f'<text x="{x + 20}" y="{ly + 12}">{esc(text)}</text>')
        x += 40 + 8 * len(text)
    out.append(f'<text x="{left}" y="{h - 8}" font-size="11" fill="#555">wall seconds, measured; full width = '
               f'{span:.2f} s</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def default_jobs() -> int:
    return max(1, min(8, (os.cpu_count() or 2) // 2))
