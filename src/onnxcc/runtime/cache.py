"""The on-disk artifact cache: one directory per key, validated before every use.

A key is the sha256 of a JSON document naming everything that changes the build (model
content hash, onnxcc version, target triple, CPU and features, every compile flag, the
guard of a JIT-requested version). An entry holds the artifact files plus MANIFEST.json
listing each file's sha256 and size and the key document itself. `lookup` re-hashes the
files: a truncated, corrupt or foreign entry (wrong key inside) is removed and reported
as a miss, so it gets rebuilt and is never loaded. Entries are built in a temporary
directory and renamed into place, so readers never see a half-written one.

The cache never makes a build fail: a root that is not a usable directory (a file, one we
cannot write, one owned by another user or writable by everyone: another user could plant
a library we would load) is bypassed with a one-line warning on stderr (`problem()`,
`warn`), and the caller builds without it. Directories it creates are private (0700). An
entry path that is a file, or an entry holding a file its manifest does not list, is
removed and rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..cache_dir import default_root
from ..digest import file_sha256
from ..errors import OnnxccError

MANIFEST = "MANIFEST.json"


class CacheUnusable(OSError):
    """The cache directory cannot be used; the message says why (one line)."""


def warn(msg: str) -> None:
    """One line on stderr: the cache is bypassed or repaired, the build goes on."""
    print(f"warning: {msg}", file=sys.stderr)


def _private_mkdir(path: Path) -> None:
    """mkdir -p, each directory it creates 0700."""
    missing = []
    p = path
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            d.mkdir(mode=0o700)
        except FileExistsError:
            pass


def make_key(doc: dict) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()



class ArtifactCache:
    def __init__(self, root: str | os.PathLike | None = None):
        self.root = Path(root) if root is not None else default_root()
        #: what happened, for tests and logs: list of (event, key, detail)
        self.events: list[tuple[str, str, str]] = []

    def entry(self, key: str) -> Path:
        return self.root / key[:2] / key

    def _refusal_path(self, key: str) -> Path:
        # beside the entries (list_entries reads only two-letter directories)
        return self.root / "refusals" / f"{key}.json"

    def refusal(self, key: str) -> dict | None:
        """The refusal recorded for this key (a build that failed the same way whenever it is
        tried: the key covers the model, the options and onnxcc's own source), or None."""
        try:
            rec = json.loads(self._refusal_path(key).read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(rec, dict):
            return None
        self.events.append(("refused", key, str(rec.get("message", ""))))
        return rec

    def record_refusal(self, key: str, record: dict) -> None:
        """Remember that this key's build is refused (written whole by a rename; a cache that
        cannot be written just does not remember)."""
        path = self._refusal_path(key)
        try:
            _private_mkdir(path.parent)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(record))
            os.replace(tmp, path)
        except OSError:
            return
        self.events.append(("record-refusal", key, str(record.get("message", ""))))

    def problem(self) -> str:
        """Why this cache cannot be used (one line), or "" when it can; creates the root (0700)."""
        root = self.root
        try:
            if root.exists() and not root.is_dir():
                return f"cache directory {root} is not a directory"
            _private_mkdir(root)
            st = root.stat()
        except OSError as e:
            return f"cache directory {root} cannot be created: {e.strerror or e}"
        if st.st_uid != os.geteuid():
            return f"cache directory {root} is owned by another user (uid {st.st_uid})"
        if st.st_mode & stat.S_IWOTH:
            return f"cache directory {root} is writable by every user"
        if not os.access(root, os.W_OK | os.X_OK):
            return f"cache directory {root} is not writable"
        return ""

    def lookup(self, key: str, doc: dict | None = None) -> Path | None:
        """The entry's directory if present and intact, else None (a damaged one is removed)."""
        path = self.entry(key)
        try:
            if not path.exists():
                self.events.append(("miss", key, "absent"))
                return None
            problem = self.validate(path, key, doc)
        except OSError as e:
            problem = f"unreadable ({e.strerror or e})"
        if problem:
            self.events.append(("corrupt", key, problem))
            _remove(path)
            return None
        self.events.append(("hit", key, ""))
        try:  # last use, for `onnxcc cache prune` (least recently used first)
            os.utime(path / MANIFEST)
        except OSError:
            pass
        return path

    @staticmethod
    def validate(path: Path, key: str, doc: dict | None) -> str:
        if not path.is_dir():
            return "entry is not a directory"
        st = path.stat()
        if st.st_uid != os.geteuid() or st.st_mode & stat.S_IWOTH:
            return "entry is owned by another user or writable by every user"
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
        listed = set(manifest["files"]) | {MANIFEST}
        extra = sorted(p.name for p in path.iterdir() if p.name not in listed)
        if extra:
            return f"unlisted file {extra[0]} in the entry"
        return ""

    def store(self, key: str, doc: dict, build: Callable[[Path], None], about: dict | None = None) -> Path:
        """Run `build(tmpdir)`, write the manifest, and move the result into place.
        `about`: facts for `onnxcc cache list` that are not part of the key (the model's path).

        An OSError of the cache itself before the build raises CacheUnusable (the caller
        builds without the cache); one after the build keeps the built artifact, moved to a
        private directory outside the cache, with a warning. Errors of `build` propagate."""
        try:
            _private_mkdir(self.root)
            tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=self.root))
        except OSError as e:
            raise CacheUnusable(f"cache directory {self.root} cannot be written: {e.strerror or e}") from None
        try:
            build(tmp)
            try:
                return self._commit(tmp, key, doc, about or {})
            except OSError as e:
                out = Path(tempfile.mkdtemp(prefix="onnxcc-nocache-"))
                for p in tmp.iterdir():
                    shutil.move(str(p), str(out / p.name))
                (out / MANIFEST).unlink(missing_ok=True)
                warn(f"cache {self.root}: cannot store the build ({e.strerror or e}); it is in {out}")
                self.events.append(("bypass", key, str(e)))
                return out
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)

    def _commit(self, tmp: Path, key: str, doc: dict, about: dict) -> Path:
        files = {p.name: {"sha256": file_sha256(p), "size": p.stat().st_size}
                 for p in sorted(tmp.iterdir()) if p.is_file()}
        for p in tmp.iterdir():  # what the manifest does not list would make the entry invalid
            if p.name not in files:
                _remove(p)
        (tmp / MANIFEST).write_text(json.dumps({"key": key, "doc": doc, "files": files, "about": about}, indent=1,
                                               sort_keys=True, default=str))
        dest = self.entry(key)
        if dest.parent.exists() and not dest.parent.is_dir():
            dest.parent.unlink()
        _private_mkdir(dest.parent)
        if dest.exists() or dest.is_symlink():
            _remove(dest)
        try:
            os.replace(tmp, dest)
        except OSError:
            # another process stored the same key first; theirs is as good as ours
            if self.validate(dest, key, doc):
                raise
        self.events.append(("store", key, ""))
        return dest


def _remove(path: Path) -> None:
    """Remove a file, link or directory tree; quietly if it is already gone."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            path.unlink()
        except FileNotFoundError:
            pass


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
