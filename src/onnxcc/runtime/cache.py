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
from pathlib import Path

from ..digest import file_sha256

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

    def store(self, key: str, doc: dict, build: Callable[[Path], None]) -> Path:
        """Run `build(tmpdir)`, write the manifest, and move the result into place."""
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=self.root))
        try:
            build(tmp)
            files = {p.name: {"sha256": file_sha256(p), "size": p.stat().st_size}
                     for p in sorted(tmp.iterdir()) if p.is_file()}
            (tmp / MANIFEST).write_text(json.dumps({"key": key, "doc": doc, "files": files}, indent=1,
                                                   sort_keys=True, default=str))
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
