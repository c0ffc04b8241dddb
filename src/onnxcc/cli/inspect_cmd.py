"""`onnxcc inspect DIR`: what an artifact holds, read from its NAME.json."""

from __future__ import annotations

import json
from pathlib import Path

import click
import sympy

from ..errors import OnnxccError
from .size_text import evaluate, human_bytes, lines, parse_size


def read_metadata(path: Path) -> dict:
    if path.is_dir():
        found = sorted(p for p in path.glob("*.json") if p.name != "MANIFEST.json")
        if not found:
            raise OnnxccError(f"{path}: no NAME.json here (is it an onnxcc artifact directory?)")
        path = found[0]
    elif path.suffix.lower() in (".onnx", ".onnxir"):
        raise OnnxccError(f"{path}: inspect reads a compiled artifact (a directory holding NAME.json), not a "
                          f"model: compile it with `onnxcc compile {path} -o DIR`, or `onnxcc run {path}` "
                          "prints the directory of its cached build")
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise OnnxccError(f"{path}: cannot read artifact metadata: {e}") from e


def _shape(t: dict) -> str:
    return f"{t['dtype']}[{', '.join(str(d) for d in t['shape'])}]"


@click.command("inspect")
@click.argument("artifact", type=click.Path(exists=True, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="print the raw metadata")
@click.option("--at", "points", multiple=True, metavar="SYM=V,...",
              help="evaluate the sizes at these symbol values (default: every symbol at its low end, and "
                   "at 128); repeatable")
def inspect(artifact: Path, as_json: bool, points: tuple[str, ...]) -> None:
    """Print an artifact's inputs, outputs, symbols, constraints and versions."""
    meta = read_metadata(artifact)
    if as_json:
        click.echo(json.dumps(meta, indent=2))
        return
    syms = {s["name"]: sympy.Symbol(s["name"], integer=True, positive=True) for s in meta.get("symbols", [])}
    envs = _points(meta, syms, points)
    build = f"  build {meta['build_id']}" if meta.get("build_id") else ""
    click.echo(f"artifact {meta.get('name')}  target {meta.get('target')} ({meta.get('triple', '')}"
               f"{', ' + _cpu(meta) if _cpu(meta) else ''})  onnxcc {meta.get('onnxcc_version', '?')}{build}")
    if meta.get("cpu_features"):
        click.echo(f"  cpu features {_features(meta['cpu_features'])}")
    for kind in ("inputs", "outputs"):
        for t in meta.get(kind, []):
            click.echo(f"  {kind[:-1]:6} {t['name']}: {_shape(t)}")
    for s in meta.get("symbols", []):
        extra = f" multiple_of {s['multiple_of']}" if s.get("multiple_of", 1) != 1 else ""
        origin = f"  ({s['origin']})" if s.get("origin") else ""
        click.echo(f"  sym {s['name']} in [{s['lo']}, {s['hi']}]{extra}{origin}")
        bound = meta.get("run_dims", {}).get(s["name"])
        if bound is not None:  # a run-time symbol: what buffers are sized for, when it is known
            when = "bound mid-run (later kernels compute on it)" if s["name"] in meta.get("late_dims", []) \
                else "reported after the run"
            click.echo(f"    run-time: {when}; buffers sized for at most {bound}")
        cap = meta.get("loop_capacity", {})
        if s["name"] in cap.get("symbols", {}):  # codegen/c/capacity.py
            click.echo(f"    loop capacity: set by the dispatcher, {cap['initial']} rows, doubled while a run needs "
                       f"more, up to {cap['limit']}")
    for c in meta.get("constraints", []):
        click.echo(f"  constraint {c['text']}" + (f"  ({c['origin']})" if c.get("origin") else ""))
    for v in meta.get("versions", []):
        _version(v, syms, envs)
    _layout(meta)
    for d in meta.get("dropped_versions", []) or meta.get("metadata", {}).get("dropped_versions", []):
        click.echo(f"  dropped {d}")
    if "compile_seconds" in meta:
        click.echo("  compile: " + ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in meta["compile_seconds"].items()))


def _layout(meta: dict) -> None:
    """The stride and alias guards: which inputs and outputs may come strided, which versions run
    in place."""
    if "strided_inputs" in meta:
        served = list(meta["strided_inputs"])
        rest = [t["name"] for t in meta.get("inputs", []) if t["name"] not in served]
        line = (f"served strided (compacted into scratch first, compact ones read in place): {', '.join(served)}"
                if served else "every input must be compact")
        click.echo("  strides: " + line + (f"; must be compact: {', '.join(rest)}" if served and rest else ""))
    if "strided_outputs" in meta:
        served = list(meta["strided_outputs"])
        rest = [t["name"] for t in meta.get("outputs", []) if t["name"] not in served]
        line = (f"served strided (written compact, scattered after the run; no zero or overlapping strides): "
                f"{', '.join(served)}" if served else "every output must be compact")
        click.echo("  output strides: " + line + (f"; must be compact: {', '.join(rest)}" if served and rest else ""))
    for ip in meta.get("in_place", []):
        click.echo(f"  in place: version {ip['version']} may write {ip['output']} over {ip['input']} "
                   "(exact alias, proved safe)")


def _points(meta: dict, syms: dict, points: tuple[str, ...]) -> list[dict]:
    """The shapes to evaluate sizes at: --at's, else every symbol at its low end and at 128."""
    from .options import parse_assignments

    envs = []
    for p in points:
        given = parse_assignments(p, "--at")
        unknown = sorted(set(given) - set(syms))
        if unknown:
            raise OnnxccError(f"--at {p}: the artifact has no symbol {', '.join(unknown)} "
                              f"(symbols: {', '.join(syms) or 'none'})")
        env = {s["name"]: s["lo"] for s in meta.get("symbols", [])}
        env.update(given)
        envs.append(env)
    if envs or not syms:
        return envs
    lo = {s["name"]: s["lo"] for s in meta.get("symbols", [])}
    # a batch-like symbol (bound by an input's dim 0) stays at its low end, the others go to 128
    mid = {s["name"]: s["lo"] if str(s.get("origin", "")).endswith(" dim 0") and len(syms) > 1
           else min(max(128, s["lo"]), s["hi"]) for s in meta.get("symbols", [])}
    return [lo] + ([mid] if mid != lo else [])


_FIGURES = (("arena", "arena_bytes"), ("peak live", "peak_live_bytes"), ("sum", "total_bytes"))


def _version(v: dict, syms: dict, envs: list[dict]) -> None:
    subs = ", ".join(f"{k}={x}" for k, x in v.get("subs", {}).items())
    info = v.get("info", {})
    kernels = info.get("kernels_after", info.get("kernels", "?"))
    fused = f" (fused from {info['kernels_before']})" if "kernels_before" in info else ""
    cpu = f" cpu {v['cpu']}," if v.get("cpu") else ""
    click.echo(f"  version {v['index']} [{v['kind']}]{cpu} {v['symbol']}: guard {v['guard']}"
               f"{'; subs ' + subs if subs else ''}; {kernels} kernels{fused}")
    ws = parse_size(v["workspace_bytes"], syms)
    ws_lines = lines(ws) if ws is not None else [str(v["workspace_bytes"])]
    pad = " " * len("      workspace ")
    for k, text in enumerate(ws_lines):
        click.echo(("      workspace " if k == 0 else pad) + text + (" bytes" if len(ws_lines) == 1 else ""))
    figures = {label: parse_size(info[key], syms) for label, key in _FIGURES if key in info}
    if figures:
        shown = []
        for label, e in figures.items():
            parts = lines(e) if e is not None else ["?"]
            shown.append(f"{label} {parts[0] if len(parts) == 1 else f'piecewise ({len(parts)} ranges)'}")
        click.echo("      " + "; ".join(shown))
    if all(e is None or not e.free_symbols for e in [ws, *figures.values()]):
        return  # sizes that do not depend on the shapes: the formulas are the numbers
    for env in envs:
        values = {s: env[s.name] for s in syms.values() if s.name in env}
        at = ", ".join(f"{k}={x}" for k, x in env.items())
        row = [f"workspace {human_bytes(evaluate(ws, values)) if ws is not None else '?'}"]
        row += [f"{label} {human_bytes(evaluate(e, values)) if e is not None else '?'}" for label, e in figures.items()]
        click.echo(f"      at {at}: " + "; ".join(row))


def _features(feats: list[str]) -> str:
    """`x86-64-v3 + aes pclmul`: the highest x86-64 level the features cover, then the rest."""
    from ..codegen.cpu.features import CPU_FEATURES

    for level in ("x86-64-v4", "x86-64-v3", "x86-64-v2"):
        if set(CPU_FEATURES[level]) <= set(feats):
            extra = [f for f in feats if f not in CPU_FEATURES[level]]
            return level + (" + " + " ".join(extra) if extra else "")
    return " ".join(feats)


def _cpu(meta: dict) -> str:
    return meta.get("arch") or meta.get("cpu") or meta.get("metadata", {}).get("cpu", "")
