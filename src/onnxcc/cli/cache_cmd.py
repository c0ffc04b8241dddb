"""`onnxcc cache list | inspect ENTRY | prune --max-size SIZE | clear`: the artifact cache.

The cache (runtime/cache.py) holds one directory per build key: the artifact files and a
MANIFEST.json (key document, checksums, the model's path). `list` shows each entry's model,
target, versions, size and time since last use; `prune` removes the least recently used
entries until the cache fits; `clear` removes them all.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import click

from ..errors import OnnxccError

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str) -> int:
    """'500M', '1.5G', '64k', '1000', '2GiB', '10MB' -> bytes (binary units)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([kmgt]?)(?:i?b)?\s*", text.lower())
    if not m:
        raise click.BadParameter(f"{text!r}: expected a size like 500M, 1.5G, 64K or a byte count")
    return int(float(m.group(1)) * _UNITS[m.group(2)])


def human_size(n: int) -> str:
    for unit in ("B", "K", "M", "G"):
        if n < 1024 or unit == "G":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024
    return f"{n}G"


def human_age(seconds: float) -> str:
    s = max(0, int(seconds))
    for unit, width in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= width:
            return f"{s // width}{unit}"
    return f"{s}s"


def _root(cache_dir: Path | None) -> Path:
    from ..runtime.cache import default_root

    return cache_dir if cache_dir is not None else default_root()


_cache_dir_option = click.option(
    "--cache-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
    help="the cache (default: $ONNXCC_CACHE_DIR or ~/.cache/onnxcc)")


@click.group("cache")
def cache() -> None:
    """List, inspect, prune and clear the artifact cache (`run MODEL`, Session, InferenceSession)."""


def _target(entry) -> str:
    """`cpu/znver4`, `cuda/sm_90`: the artifact's target and what its backend recorded."""
    art = entry.artifact
    target = art.get("target") or entry.manifest.get("doc", {}).get("options", {}).get("target") or "?"
    detail = art.get("arch") or art.get("metadata", {}).get("cpu") or ""
    return f"{target}/{detail}" if detail else target


@cache.command("list")
@_cache_dir_option
def list_(cache_dir: Path | None) -> None:
    """One line per entry, least recently used first: key, model, target, versions, size, age."""
    from ..runtime.cache import list_entries

    root = _root(cache_dir)
    entries = list_entries(root)
    if not entries:
        click.echo(f"{root}: empty")
        return
    now = time.time()
    rows = [("KEY", "MODEL", "TARGET", "VERSIONS", "SIZE", "USED")]
    for e in entries:
        versions = str(len(e.artifact.get("versions", []))) if e.artifact else "-"
        model = e.model if not e.problem else f"({e.problem})"
        rows.append((e.key[:12], model, _target(e) if not e.problem else "-", versions, human_size(e.size),
                     human_age(now - e.last_used) + " ago"))
    widths = [max(len(r[k]) for r in rows) for k in range(len(rows[0]))]
    for r in rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    click.echo(f"{len(entries)} entr{'y' if len(entries) == 1 else 'ies'}, "
               f"{human_size(sum(e.size for e in entries))} in {root}")


@cache.command("inspect")
@click.argument("entry")
@_cache_dir_option
def inspect_(entry: str, cache_dir: Path | None) -> None:
    """What ENTRY (a key, a unique key prefix, or the entry's directory) was built from and holds."""
    from ..runtime.cache import ArtifactCache, find_entry

    root = _root(cache_dir)
    e = find_entry(root, entry)
    doc = e.manifest.get("doc", {})
    click.echo(f"entry {e.key}\n  path {e.path}")
    click.echo(f"  model {e.model}" + (f"  (sha256 {str(doc['model'])[:16]}...)" if doc.get("model") else ""))
    click.echo(f"  target {_target(e)}  onnxcc {doc.get('onnxcc', '?')}")
    opts = {k: v for k, v in doc.get("options", {}).items() if v not in (None, {}, [], "")}
    if opts:
        click.echo("  options " + ", ".join(f"{k}={v}" for k, v in sorted(opts.items())))
    if doc.get("extra"):
        click.echo(f"  extra {doc['extra']}")
    click.echo(f"  size {human_size(e.size)}; last used {human_age(time.time() - e.last_used)} ago")
    for name, info in sorted(e.manifest.get("files", {}).items()):
        click.echo(f"  file {name}  {info.get('size', '?')} bytes")
    problem = e.problem or ArtifactCache.validate(e.path, e.key, None)
    click.echo(f"  state {'intact' if not problem else 'damaged: ' + problem + ' (rebuilt at next use)'}")
    for v in e.artifact.get("versions", []):
        click.echo(f"  version {v['index']} [{v['kind']}]: guard {v['guard']}")


@cache.command("prune")
@click.option("--max-size", "max_size", required=True, metavar="SIZE",
              help="remove the least recently used entries until the cache holds at most SIZE (500M, 2G, 0)")
@_cache_dir_option
def prune_(max_size: str, cache_dir: Path | None) -> None:
    """Shrink the cache to SIZE, least recently used entries first."""
    from ..runtime.cache import list_entries, prune

    limit = parse_size(max_size)
    root = _root(cache_dir)
    removed = prune(root, limit)
    left = list_entries(root)
    click.echo(f"removed {len(removed)} entr{'y' if len(removed) == 1 else 'ies'} "
               f"({human_size(sum(e.size for e in removed))}); {len(left)} left, "
               f"{human_size(sum(e.size for e in left))}")


@cache.command("clear")
@_cache_dir_option
def clear(cache_dir: Path | None) -> None:
    """Remove every entry, and the compiled LLVM objects kept beside them."""
    from ..codegen.llvm import object_cache
    from ..runtime.cache import list_entries, remove_entry

    root = _root(cache_dir)
    if root.exists() and not root.is_dir():
        raise OnnxccError(f"{root}: not a directory")
    entries = list_entries(root)
    for e in entries:
        remove_entry(e)
    objects = object_cache.prune(0, root)
    click.echo(f"removed {len(entries)} entr{'y' if len(entries) == 1 else 'ies'} "
               f"({human_size(sum(e.size for e in entries))}) and {objects} compiled object"
               f"{'' if objects == 1 else 's'} from {root}")
