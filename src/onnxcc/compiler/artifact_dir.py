"""Writing an artifact directory atomically: build beside it, then swap it in.

`compile -o DIR` builds into a fresh `.DIR.build-XXXX` directory next to DIR and, once the
library, header and metadata are all written, exchanges it with DIR (Linux renameat2
RENAME_EXCHANGE: readers see the old artifact or the new one, never a mix) and removes the
old one. Where the exchange is not available, two renames: DIR is then briefly absent, never
half-written. An interrupted or failed compile removes its temporary directory and leaves
DIR as it was.

DIR is swapped whole only when it is new, empty or holds nothing but an earlier artifact's
files; a directory with other things in it (the user's own files) keeps them: the new
artifact's files are renamed into it one by one, the metadata last, and the loader's build-id
and checksum checks refuse a library whose metadata did not follow.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

#: names an artifact directory may hold besides NAME.json (NAME is the artifact's name)
_ARTIFACT_FILES = ("lib{n}.so", "{n}.h", "{n}.json", "{n}_dispatch.c", "{n}.map", "{n}.ptx", "{n}.pc",
                   "{n}Config.cmake", "{n}ConfigVersion.cmake")

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _libc():
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


_LIBC = _libc()


def exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step (renameat2 RENAME_EXCHANGE); False where unsupported."""
    fn = getattr(_LIBC, "renameat2", None) if _LIBC is not None else None
    if fn is None:
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    rc = fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (22, 38, 95):  # EINVAL, ENOSYS, EOPNOTSUPP: the file system or kernel cannot
        return False
    raise OSError(err, os.strerror(err), str(b))


def is_replaceable(d: Path) -> bool:
    """True when d is absent, empty, or holds only an onnxcc artifact's files."""
    if not d.exists():
        return True
    if not d.is_dir():
        return False
    entries = list(d.iterdir())
    if not entries:
        return True
    names = set()
    for meta in d.glob("*.json"):
        try:
            m = json.loads(meta.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(m, dict) and "error_codes" in m and isinstance(m.get("name"), str):
            names.add(m["name"])
    if not names:
        return False
    allowed = {pat.format(n=n) for n in names for pat in _ARTIFACT_FILES}
    return all(p.is_file() and not p.is_symlink() and p.name in allowed for p in entries)


def build_in_place(out: Path, build: Callable[[Path], None], metadata_last: str = ".json") -> None:
    """Run build(tmp) on a temporary directory beside `out`, then put its files at `out`."""
    out = Path(out)
    if out.is_symlink():  # build where the link points; the link itself stays
        out = Path(os.path.realpath(out))
    parent = out.absolute().parent
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.build-", dir=parent))
    try:
        build(tmp)
        swap_into_place(tmp, out, metadata_last)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def swap_into_place(tmp: Path, out: Path, metadata_last: str = ".json") -> None:
    """Make the finished build `tmp` the contents of `out` (see the module docstring)."""
    # mkdtemp makes 0700: a directory that replaces another keeps its mode (a private cache
    # entry stays private); a new artifact directory is an ordinary one
    os.chmod(tmp, stat.S_IMODE(out.stat().st_mode) if out.is_dir() else 0o777 & ~_umask())
    if not out.exists():
        try:
            os.rename(tmp, out)
            return
        except OSError:
            if not out.exists():
                raise
    if is_replaceable(out):
        if exchange(tmp, out):
            shutil.rmtree(tmp, ignore_errors=True)  # tmp now holds the old artifact
            return
        old = tmp.with_name(tmp.name + ".old")
        os.rename(out, old)
        os.rename(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
        return
    files = sorted(tmp.iterdir(), key=lambda p: p.name.endswith(metadata_last))
    for f in files:
        os.replace(f, out / f.name)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
