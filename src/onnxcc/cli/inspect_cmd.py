"""`onnxcc inspect DIR`: what an artifact holds, read from its NAME.json."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..errors import OnnxccError


def read_metadata(path: Path) -> dict:
    if path.is_dir():
        found = sorted(p for p in path.glob("*.json") if p.name != "MANIFEST.json")
        if not found:
            raise OnnxccError(f"{path}: no NAME.json here (is it an onnxcc artifact directory?)")
        path = found[0]
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise OnnxccError(f"{path}: cannot read artifact metadata: {e}") from e


def _shape(t: dict) -> str:
    return f"{t['dtype']}[{', '.join(str(d) for d in t['shape'])}]"


@click.command("inspect")
@click.argument("artifact", type=click.Path(exists=True, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="print the raw metadata")
def inspect(artifact: Path, as_json: bool) -> None:
    """Print an artifact's inputs, outputs, symbols, constraints and versions."""
    meta = read_metadata(artifact)
    if as_json:
        click.echo(json.dumps(meta, indent=2))
        return
    click.echo(f"artifact {meta.get('name')}  target {meta.get('target')} ({meta.get('triple', '')}"
               f"{', ' + _cpu(meta) if _cpu(meta) else ''})  onnxcc {meta.get('onnxcc_version', '?')}")
    for kind in ("inputs", "outputs"):
        for t in meta.get(kind, []):
            click.echo(f"  {kind[:-1]:6} {t['name']}: {_shape(t)}")
    for s in meta.get("symbols", []):
        extra = f" multiple_of {s['multiple_of']}" if s.get("multiple_of", 1) != 1 else ""
        origin = f"  ({s['origin']})" if s.get("origin") else ""
        click.echo(f"  sym {s['name']} in [{s['lo']}, {s['hi']}]{extra}{origin}")
    for c in meta.get("constraints", []):
        click.echo(f"  constraint {c['text']}" + (f"  ({c['origin']})" if c.get("origin") else ""))
    for v in meta.get("versions", []):
        subs = ", ".join(f"{k}={x}" for k, x in v.get("subs", {}).items()) or "none"
        info = v.get("info", {})
        kernels = info.get("kernels_after", info.get("kernels", "?"))
        fused = f" (fused from {info['kernels_before']})" if "kernels_before" in info else ""
        click.echo(f"  version {v['index']} [{v['kind']}] {v['symbol']}: guard {v['guard']}; subs {subs}; "
                   f"{kernels} kernels{fused}")
        # one line per memory figure: the expressions are long when sizes are symbolic
        click.echo(f"      workspace {v['workspace_bytes']} bytes")
        if "arena_bytes" in info:
            click.echo(f"      arena {info['arena_bytes']}; peak live {info.get('peak_live_bytes', '?')}; "
                       f"sum {info.get('total_bytes', '?')}")
    for d in meta.get("dropped_versions", []) or meta.get("metadata", {}).get("dropped_versions", []):
        click.echo(f"  dropped {d}")
    if "compile_seconds" in meta:
        click.echo("  compile: " + ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in meta["compile_seconds"].items()))



def _cpu(meta: dict) -> str:
    return meta.get("arch") or meta.get("cpu") or meta.get("metadata", {}).get("cpu", "")
