"""sha256 of a file, read in chunks: the cache entries, the cache key's external data and the
artifact's library all use it (like errors and version, any layer may import this module)."""

from __future__ import annotations

import hashlib
import os


def file_sha256(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
