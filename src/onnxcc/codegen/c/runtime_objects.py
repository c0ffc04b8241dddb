"""The C runtime's sources compiled once per (sources, compiler, flags), not once per build.

Every libNAME.so links the same runtime (`onnxcc_rt.c`, `onnxcc_layout.c`, the CUDA loader):
compiled with the library, they cost about 0.4 CPU seconds of each build's link, as much as
the whole LLVM side of a small model. Their objects are kept in the artifact cache's
directory (`runtime-objects/`, a name the cache's entry listing skips) under a key made of
every runtime source and header, the compiler command and its binary, and the flags; a key
names exactly one object, so a stale one is never picked up. Where the directory cannot be
written, the caller compiles the sources with the library as before.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
from pathlib import Path

from ...cache_dir import default_root

_SUBDIR = "runtime-objects"


def _compiler_identity(cc: str) -> str:
    """The compiler command and, for its binary, path, size and mtime: an upgraded compiler
    makes new objects."""
    words = shlex.split(cc)
    exe = shutil.which(words[0]) if words else None
    if exe is None:
        return cc
    st = os.stat(exe)
    return f"{cc}\0{os.path.realpath(exe)}\0{st.st_size}\0{st.st_mtime_ns}"


def _key(source: Path, headers: list[Path], cc: str, flags: list[str]) -> str:
    h = hashlib.sha256()
    for f in [source, *headers]:
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    h.update(_compiler_identity(cc).encode() + b"\0" + "\0".join(flags).encode())
    return h.hexdigest()[:24]


def runtime_objects(sources: list[Path], cc: str, flags: list[str]) -> list[Path] | None:
    """An object for each runtime source compiled with `cc -c FLAGS`, from the cache or
    compiled into it now; None where the cache cannot be used or a compile fails (the caller
    then compiles the sources itself and reports any error with the library's link)."""
    if not sources:
        return []
    headers = sorted(sources[0].parent.glob("*.h"))
    root = default_root() / _SUBDIR
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    out = []
    for src in sources:
        obj = root / f"{src.stem}-{_key(src, headers, cc, flags)}.o"
        if not obj.is_file():
            tmp = root / f".{obj.name}.{os.getpid()}.tmp"
            cmd = [*shlex.split(cc), *flags, f"-I{src.parent}", "-c", str(src), "-o", str(tmp)]
            try:
                ok = subprocess.run(cmd, capture_output=True).returncode == 0
                if ok:
                    os.replace(tmp, obj)  # whole or not at all: a concurrent build sees one or the other
            except OSError:
                ok = False
            finally:
                tmp.unlink(missing_ok=True)
            if not ok:
                return None
        out.append(obj)
    return out
