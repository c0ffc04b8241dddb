"""The on-disk artifact cache: one directory per key, validated before every use.

A key is the sha256 of a JSON document naming everything that changes the build (model
content hash, onnxcc version, target triple, CPU and features, every compile flag, the
guard of a JIT-requested version). An entry holds the artifact files plus MANIFEST.json
listing each file's sha256 and size and the key document itself. `lookup` re-hashes the
files: a truncated, corrupt or foreign entry (wrong key inside) is removed and reported
as a miss, so it gets rebuilt and is never loaded. Entries are built in a temporary
directory and renamed into place, so readers never see a half-written one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..digest import file_sha256
from ..errors import OnnxccError

MANIFEST = "MANIFEST.json"


def default_root() -> Path:
    env = os.environ.get("ONNXCC_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "onnxcc"


def make_key(doc: dict) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()



class ArtifactCache:
    def __init__(self, root: str | os.PathLike | None = None):
        self.root = Path(root) if root is not None else default_root()
        #: what happened, for tests and logs: list of (event, key, detail)
        self.events: list[tuple[str, str, str]] = []

    def entry(self, key: str) -> Path:
        return self.root / key[:2] / key

    def lookup(self, key: str, doc: dict | None = None) -> Path | None:
        """The entry's directory if present and intact, else None (a damaged one is removed)."""
        path = self.entry(key)
        if not path.exists():
            self.events.append(("miss", key, "absent"))
            return None
        problem = self.validate(path, key, doc)
        if problem:
            self.events.append(("corrupt", key, problem))
            shutil.rmtree(path, ignore_errors=True)
            return None
        self.events.append(("hit", key, ""))
        try:  # last use, for `onnxcc cache prune` (least recently used first)
            os.utime(path / MANIFEST)
        except OSError:
            pass
        return path

    @staticmethod
    def validate(path: Path, key: str, doc: dict | None) -> str:
        mf = path / MANIFEST
        try:
            manifest = json.loads(mf.read_text())
        except (OSError, ValueError) as e:
            return f"manifest unreadable ({type(e).__name__})"
        if manifest.get("key") != key:
            return "manifest belongs to another key"
        if doc is not None and make_key(manifest.get("doc", {})) != key:
            return "key document does not match"
        for name, info in manifest.get("files", {}).items():
            f = path / name
            if not f.is_file():
                return f"{name} missing"
            if f.stat().st_size != info.get("size"):
                return f"{name} has the wrong size"
            if file_sha256(f) != info.get("sha256"):
                return f"{name} checksum mismatch"
        if not manifest.get("files"):
            return "manifest lists no files"
        return ""

    def store(self, key: str, doc: dict, build: Callable[[Path], None], about: dict | None = None) -> Path:
        """Run `build(tmpdir)`, write the manifest, and move the result into place.
        `about`: facts for `onnxcc cache list` that are not part of the key (the model's path)."""
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=self.root))
        try:
            build(tmp)
            files = {p.name: {"sha256": file_sha256(p), "size": p.stat().st_size}
                     for p in sorted(tmp.iterdir()) if p.is_file()}
            (tmp / MANIFEST).write_text(json.dumps({"key": key, "doc": doc, "files": files, "about": about or {}},
                                                   indent=1, sort_keys=True, default=str))
            dest = self.entry(key)
            dest.parent.mkdir(parents=True, exist_ok=True)
            if dest.exists():
                shutil.rmtree(dest, ignore_errors=True)
            try:
                os.replace(tmp, dest)
            except OSError:
                # another process stored the same key first; theirs is as good as ours
                if self.validate(dest, key, doc):
                    raise
            self.events.append(("store", key, ""))
            return dest
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)


# ---- listing, pruning, clearing (`onnxcc cache`) ---------------------------------------------

@dataclass
class Entry:
    """One cache entry as `onnxcc cache list` shows it."""

    key: str
    path: Path
    size: int            # bytes on disk, every file of the entry
    last_used: float     # the manifest's mtime: written at store, touched at every hit
    manifest: dict       # {} when unreadable (then `problem` says why)
    problem: str = ""    # "" for an intact-looking entry; a leftover build dir or a bad manifest

    @property
    def model(self) -> str:
        return str(self.manifest.get("about", {}).get("model") or self.artifact.get("name") or "?")

    @property
    def artifact(self) -> dict:
        """The entry's NAME.json ({} when absent or unreadable)."""
        for name in self.manifest.get("files", {}):
            if name.endswith(".json"):
                try:
                    return json.loads((self.path / name).read_text())
                except (OSError, ValueError):
                    return {}
        return {}


def _tree_size(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total


def list_entries(root: Path) -> list[Entry]:
    """Every entry under root, least recently used first; leftover `.build-*` directories
    (a build killed before its rename) are listed too, with a problem, so prune and clear
    reclaim them."""
    out: list[Entry] = []
    if not root.is_dir():
        return out
    for d in sorted(root.iterdir()):
        if d.name.startswith(".build-") and d.is_dir():
            out.append(Entry(d.name, d, _tree_size(d), d.stat().st_mtime, {}, "unfinished build"))
            continue
        if not (d.is_dir() and len(d.name) == 2):
            continue
        for e in sorted(d.iterdir()):
            if not e.is_dir():
                continue
            mf = e / MANIFEST
            try:
                manifest, problem, used = json.loads(mf.read_text()), "", mf.stat().st_mtime
            except (OSError, ValueError) as exc:
                manifest, problem, used = {}, f"manifest unreadable ({type(exc).__name__})", e.stat().st_mtime
            out.append(Entry(e.name, e, _tree_size(e), used, manifest, problem))
    out.sort(key=lambda x: x.last_used)
    return out


def find_entry(root: Path, ref: str) -> Entry:
    """The entry named by a key, a unique key prefix (4+ characters) or its directory."""
    entries = list_entries(root)
    p = Path(ref)
    if p.is_dir():
        for e in entries:
            if e.path.resolve() == p.resolve():
                return e
    ref = ref.strip().lower()
    if len(ref) < 4:
        raise OnnxccError(f"cache entry {ref!r}: give at least 4 characters of the key (`onnxcc cache list`)")
    hits = [e for e in entries if e.key.startswith(ref)]
    if not hits:
        raise OnnxccError(f"cache entry {ref!r}: no entry in {root} has this key (`onnxcc cache list`)")
    if len(hits) > 1:
        raise OnnxccError(f"cache entry {ref!r}: {len(hits)} entries start with it; give more characters")
    return hits[0]


def remove_entry(e: Entry) -> None:
    shutil.rmtree(e.path, ignore_errors=True)
    parent = e.path.parent
    if parent.name != e.path.name and len(parent.name) == 2:
        try:
            parent.rmdir()  # the two-character fan-out directory, when now empty
        except OSError:
            pass


def prune(root: Path, max_bytes: int) -> list[Entry]:
    """Remove entries, least recently used first (unfinished builds before all), until the
    cache holds at most max_bytes. Returns the removed entries."""
    entries = list_entries(root)
    entries.sort(key=lambda e: (not e.problem, e.last_used))
    total = sum(e.size for e in entries)
    removed = []
    for e in entries:
        if total <= max_bytes:
            break
        remove_entry(e)
        total -= e.size
        removed.append(e)
    return removed
