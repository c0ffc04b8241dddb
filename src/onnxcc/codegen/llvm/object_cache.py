"""Compiled LLVM objects kept on disk, keyed by what decides their bytes, so a module compiled
once is never optimised and compiled again.

LLVM's optimiser and code generator are most of a build (60-70% of its CPU time), and their
result depends only on the module's IR text, the target machine (triple, CPU, features,
code-generator -O level), the IR pipeline run on it (its -O level and the code in
`target.py` that builds it) and the LLVM build itself. The key hashes all of those, plus
onnxcc's version; it does not hash the model, so a second build of a model, or a new
version of a known one (a JIT session's next shape class, a value-version retry) finds the
parts it shares with an earlier build: a version function that did not change, the weights.

Where: `$ONNXCC_CACHE_DIR/llvm-objects/KEY.o` (cache_dir.py's root; the artifact cache's
listing skips the directory, as it does the C runtime's objects). Each file holds the
object's sha256 and then the object; a file whose bytes do not match is removed and its
module compiled again, so a truncated or damaged file is never linked. Files are written
under a temporary name and renamed, so concurrent builds (the LLVM workers of one build,
or two builds) see a whole file or none. Like the artifact cache it is never used when the
directory is owned by another user or writable by others (they could plant code that
would be linked into a library), and it never makes a build fail: any OSError is a miss.
`ONNXCC_OBJECT_CACHE=0` turns it off; it keeps at most `ONNXCC_OBJECT_CACHE_MB` (default
512) MiB, the least recently used files removed first (a hit refreshes a file's mtime);
`onnxcc cache clear` empties it. A module served from here is not run through LLVM, so LLVM's
own warnings about it (rare: the missed-vectorisation remarks are filtered anyway) appear
only on the build that compiled it.
"""

from __future__ import annotations

import functools
import hashlib
import os
import stat
from pathlib import Path

from ...cache_dir import default_root
from ...version import __version__

_SUBDIR = "llvm-objects"
_DEFAULT_MB = 512


def enabled() -> bool:
    return os.environ.get("ONNXCC_OBJECT_CACHE", "1").strip().lower() not in ("0", "no", "off", "false")


@functools.cache
def _toolchain() -> bytes:
    """What besides the module and the target decides an object's bytes: the LLVM build,
    llvmlite, onnxcc's version and the source of the pipeline builder (target.py)."""
    import llvmlite
    import llvmlite.binding as llvm

    from . import target

    pipeline = Path(target.__file__).read_bytes()
    return "\0".join([".".join(map(str, llvm.llvm_version_info)), llvmlite.__version__, __version__,
                      hashlib.sha256(pipeline).hexdigest()]).encode()


def object_key(text: str, triple: str, cpu: str, features: str, ir_opt: int, cg_opt: int, lsr: bool = True) -> str:
    """The key of the object of IR `text` compiled for (triple, cpu, features) with the IR
    pipeline at -O`ir_opt` and the code generator at -O`cg_opt` (without loop strength
    reduction: `lsr` False); the target as resolved (the host's name and features, not None)."""
    h = hashlib.sha256(_toolchain())
    h.update(f"\0{triple}\0{cpu}\0{features}\0{ir_opt}\0{cg_opt}\0{'' if lsr else 'nolsr'}".encode())
    h.update(text.encode())
    return h.hexdigest()[:40]


def _root() -> Path | None:
    """The directory, created private; None when it cannot be used safely."""
    root = default_root() / _SUBDIR
    try:
        if not root.is_dir():
            root.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            root.mkdir(mode=0o700, exist_ok=True)
        st = root.stat()
    except OSError:
        return None
    if st.st_uid != os.geteuid() or st.st_mode & (stat.S_IWOTH | stat.S_IWGRP) or not os.access(root, os.W_OK):
        return None
    return root


def load(key: str) -> bytes | None:
    """The object stored under `key`, if there is an intact one."""
    root = _root() if enabled() else None
    if root is None:
        return None
    path = root / f"{key}.o"
    try:
        data = path.read_bytes()
    except OSError:
        return None
    digest, obj = data[:32], data[32:]
    if len(data) < 32 or hashlib.sha256(obj).digest() != digest:
        try:
            path.unlink()  # damaged: compiled again and rewritten
        except OSError:
            pass
        return None
    try:
        os.utime(path)  # recently used: pruned last
    except OSError:
        pass
    return obj


def store(key: str, obj: bytes) -> None:
    """Keep `obj` under `key` (whole or not at all); errors are ignored."""
    root = _root() if enabled() else None
    if root is None:
        return
    tmp = root / f".{key}.{os.getpid()}.tmp"
    try:
        tmp.write_bytes(hashlib.sha256(obj).digest() + obj)
        os.replace(tmp, root / f"{key}.o")
    except OSError:
        try:
            tmp.unlink()
        except OSError:
            pass


def prune(max_bytes: int | None = None, cache_root: Path | None = None) -> int:
    """Remove the least recently used objects until the directory holds at most `max_bytes`
    (default `ONNXCC_OBJECT_CACHE_MB` MiB); returns how many were removed. `cache_root`: the
    objects of that cache directory (`onnxcc cache clear --cache-dir`), else this process's."""
    root = cache_root / _SUBDIR if cache_root is not None else _root() if enabled() else None
    if root is None or not root.is_dir():
        return 0
    if max_bytes is None:
        try:
            max_bytes = int(float(os.environ.get("ONNXCC_OBJECT_CACHE_MB", _DEFAULT_MB)) * 2**20)
        except ValueError:
            max_bytes = _DEFAULT_MB * 2**20
    files = []
    try:
        with os.scandir(root) as it:
            for e in it:
                if e.name.endswith(".o") and e.is_file(follow_symlinks=False):
                    st = e.stat(follow_symlinks=False)
                    files.append((st.st_mtime, st.st_size, e.path))
    except OSError:
        return 0
    total = sum(size for _, size, _ in files)
    removed = 0
    for _, size, path in sorted(files):
        if total <= max_bytes:
            break
        try:
            os.unlink(path)
        except OSError:
            continue
        total -= size
        removed += 1
    return removed
